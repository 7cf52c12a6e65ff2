"""A deterministic, German-like -> English-like synthetic parallel corpus for the offline demo.

Why synthetic: the demo preset must run offline in minutes, yet a Transformer should have something real
to learn. The grammar below has the structure that makes De->En translation non-trivial:

* German articles, possessives and adjectives inflected for gender, case (nom/acc/dat/gen) and number
  (der/den/dem/des, ein/einen/einem/eines, mein/meinen/..., weak/mixed/strong adjective endings),
  dative plural -n, genitive -s/-es, and the contractions im/am/beim/zum/vom;
* compound nouns built from parts ("Küchen" + "Tisch" = "Küchentisch" = "kitchen table"), so BPE has
  sub-words to discover;
* verb-second main clauses, the sentence bracket (finite auxiliary/modal early, participle/infinitive or
  separable prefix at the end: "Der Hund hat die Katze gesehen", "Der Mann macht die Tür auf"),
  verb-final subordinate and relative clauses (weil/dass/wenn/obwohl/bevor ... verb at the end),
  subject-verb inversion after a fronted adverb or clause, verb-first questions;
* on the English side normal SVO order with do-support for negation and questions.

Everything is drawn from ``random.Random`` instances seeded with a string derived from the config seed and
the split name (one independent stream per split), so no global state is touched and the same seed gives
byte-identical files on every machine and Python >= 3.2 (string seeds are hashed with SHA-512, not hash()).
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ..paths import DOWNLOADS
from .download import Download
from .prepared import write_prepared

GENERATOR_VERSION = 1  # bump when the grammar changes: the same seed then gives a different corpus

# ----------------------------------------------------------------------------------------------------------
# Lexicon
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Noun:
    de: str  # nominative singular
    gender: str  # "m" | "f" | "n"
    de_pl: str
    en: str
    en_pl: str
    de_gen: str = ""  # genitive singular of masculine/neuter nouns (Hundes, Lehrers); feminine: unchanged

    def form(self, number: str, case: int) -> str:
        """German noun form; case index 0=nom 1=acc 2=dat 3=gen."""
        if number == "pl":
            if case == 2 and not self.de_pl.endswith(("n", "s")):
                return self.de_pl + "n"  # dative plural: den Kindern, den Hunden (not: den Autos, den Frauen)
            return self.de_pl
        if case == 3 and self.gender != "f":
            return self.de_gen
        return self.de


def _n(de: str, g: str, pl: str, gen: str, en: str, en_pl: str) -> Noun:
    return Noun(de, g, pl, en, en_pl, gen)


PEOPLE = [
    _n("Mann", "m", "Männer", "Mannes", "man", "men"),
    _n("Frau", "f", "Frauen", "", "woman", "women"),
    _n("Kind", "n", "Kinder", "Kindes", "child", "children"),
    _n("Lehrer", "m", "Lehrer", "Lehrers", "teacher", "teachers"),
    _n("Lehrerin", "f", "Lehrerinnen", "", "teacher", "teachers"),
    _n("Arzt", "m", "Ärzte", "Arztes", "doctor", "doctors"),
    _n("Ärztin", "f", "Ärztinnen", "", "doctor", "doctors"),
    _n("Mädchen", "n", "Mädchen", "Mädchens", "girl", "girls"),
    _n("Vater", "m", "Väter", "Vaters", "father", "fathers"),
    _n("Mutter", "f", "Mütter", "", "mother", "mothers"),
    _n("Bruder", "m", "Brüder", "Bruders", "brother", "brothers"),
    _n("Schwester", "f", "Schwestern", "", "sister", "sisters"),
    _n("Freund", "m", "Freunde", "Freundes", "friend", "friends"),
    _n("Koch", "m", "Köche", "Kochs", "cook", "cooks"),
    _n("Fahrer", "m", "Fahrer", "Fahrers", "driver", "drivers"),
    _n("Verkäuferin", "f", "Verkäuferinnen", "", "saleswoman", "saleswomen"),
]
ANIMALS = [
    _n("Hund", "m", "Hunde", "Hundes", "dog", "dogs"),
    _n("Katze", "f", "Katzen", "", "cat", "cats"),
    _n("Pferd", "n", "Pferde", "Pferdes", "horse", "horses"),
    _n("Vogel", "m", "Vögel", "Vogels", "bird", "birds"),
    _n("Maus", "f", "Mäuse", "", "mouse", "mice"),
    _n("Kuh", "f", "Kühe", "", "cow", "cows"),
    _n("Schaf", "n", "Schafe", "Schafes", "sheep", "sheep"),
    _n("Fisch", "m", "Fische", "Fisches", "fish", "fish"),
]
FOOD = [
    _n("Apfel", "m", "Äpfel", "Apfels", "apple", "apples"),
    _n("Kuchen", "m", "Kuchen", "Kuchens", "cake", "cakes"),
    _n("Suppe", "f", "Suppen", "", "soup", "soups"),
    _n("Kartoffel", "f", "Kartoffeln", "", "potato", "potatoes"),
    _n("Ei", "n", "Eier", "Eies", "egg", "eggs"),
    _n("Banane", "f", "Bananen", "", "banana", "bananas"),
    _n("Wurst", "f", "Würste", "", "sausage", "sausages"),
    _n("Tomate", "f", "Tomaten", "", "tomato", "tomatoes"),
]
SIMPLE_THINGS = [
    _n("Ball", "m", "Bälle", "Balles", "ball", "balls"),
    _n("Auto", "n", "Autos", "Autos", "car", "cars"),
    _n("Blume", "f", "Blumen", "", "flower", "flowers"),
    _n("Schuh", "m", "Schuhe", "Schuhes", "shoe", "shoes"),
    _n("Hut", "m", "Hüte", "Hutes", "hat", "hats"),
    _n("Brief", "m", "Briefe", "Briefes", "letter", "letters"),
    _n("Zeitung", "f", "Zeitungen", "", "newspaper", "newspapers"),
    _n("Geschichte", "f", "Geschichten", "", "story", "stories"),
]
# Heads and modifiers of compound nouns: the compound takes the head's gender and plural.
COMPOUND_HEADS = [
    _n("Tür", "f", "Türen", "", "door", "doors"),
    _n("Tisch", "m", "Tische", "Tisches", "table", "tables"),
    _n("Fenster", "n", "Fenster", "Fensters", "window", "windows"),
    _n("Lampe", "f", "Lampen", "", "lamp", "lamps"),
    _n("Stuhl", "m", "Stühle", "Stuhls", "chair", "chairs"),
    _n("Uhr", "f", "Uhren", "", "clock", "clocks"),
    _n("Schlüssel", "m", "Schlüssel", "Schlüssels", "key", "keys"),
    _n("Tasche", "f", "Taschen", "", "bag", "bags"),
    _n("Bild", "n", "Bilder", "Bildes", "picture", "pictures"),
    _n("Buch", "n", "Bücher", "Buches", "book", "books"),
    _n("Karte", "f", "Karten", "", "map", "maps"),
]
COMPOUND_MODIFIERS = [
    ("Haus", "house"), ("Garten", "garden"), ("Küchen", "kitchen"), ("Schul", "school"),
    ("Büro", "office"), ("Hotel", "hotel"), ("Stadt", "city"), ("Wasser", "water"),
    ("Nacht", "night"), ("Auto", "car"), ("Zimmer", "room"), ("Holz", "wood"),
]


def _compound(mod: tuple[str, str], head: Noun) -> Noun:
    low = lambda s: s[0].lower() + s[1:] if s else s  # noqa: E731  (Haus + Tür -> Haustür)
    return Noun(
        mod[0] + low(head.de), head.gender, mod[0] + low(head.de_pl),
        f"{mod[1]} {head.en}", f"{mod[1]} {head.en_pl}", mod[0] + low(head.de_gen) if head.de_gen else "",
    )


COMPOUNDS = [_compound(m, h) for m in COMPOUND_MODIFIERS for h in COMPOUND_HEADS]
THINGS = SIMPLE_THINGS + COMPOUND_HEADS + COMPOUNDS
ANIMATE = PEOPLE + ANIMALS
ANY = ANIMATE + THINGS + FOOD
PLACES = [  # nouns for "in/vor/hinter/neben + dative" locations
    _n("Garten", "m", "Gärten", "Gartens", "garden", "gardens"),
    _n("Haus", "n", "Häuser", "Hauses", "house", "houses"),
    _n("Küche", "f", "Küchen", "", "kitchen", "kitchens"),
    _n("Schule", "f", "Schulen", "", "school", "schools"),
    _n("Park", "m", "Parks", "Parks", "park", "parks"),
    _n("Büro", "n", "Büros", "Büros", "office", "offices"),
    _n("Stadt", "f", "Städte", "", "city", "cities"),
    _n("Wald", "m", "Wälder", "Waldes", "forest", "forests"),
    _n("Zimmer", "n", "Zimmer", "Zimmers", "room", "rooms"),
    _n("Bahnhof", "m", "Bahnhöfe", "Bahnhofs", "station", "stations"),
]
NOUN_CLASSES = {
    "animate": ANIMATE, "people": PEOPLE, "thing": THINGS, "food": FOOD, "any": ANY,
    "carry": THINGS + FOOD, "text": [n for n in THINGS if n.en.endswith(("book", "letter", "newspaper", "story", "map"))],
}
NAMES = ["Anna", "Maria", "Peter", "Thomas", "Lena", "Jonas", "Paul", "Laura"]

ADJ_ANIMATE = [("müde", "tired"), ("hungrig", "hungry"), ("jung", "young"), ("schnell", "fast"),
               ("freundlich", "friendly"), ("glücklich", "happy")]
ADJ_THING = [("rot", "red"), ("blau", "blue"), ("grün", "green"), ("neu", "new"), ("leer", "empty"),
             ("kalt", "cold"), ("warm", "warm"), ("billig", "cheap"), ("schwer", "heavy")]
ADJ_ANY = [("groß", "big"), ("klein", "small"), ("alt", "old"), ("schön", "beautiful")]

# Articles and endings indexed [gender or "pl"][case], case 0=nom 1=acc 2=dat 3=gen.
DEF = {"m": ["der", "den", "dem", "des"], "f": ["die", "die", "der", "der"],
       "n": ["das", "das", "dem", "des"], "pl": ["die", "die", "den", "der"]}
EIN_END = {"m": ["", "en", "em", "es"], "f": ["e", "e", "er", "er"], "n": ["", "", "em", "es"],
           "pl": ["e", "e", "en", "er"]}
ADJ_WEAK = {"m": ["e", "en", "en", "en"], "f": ["e", "e", "en", "en"], "n": ["e", "e", "en", "en"],
            "pl": ["en", "en", "en", "en"]}
ADJ_MIXED = {"m": ["er", "en", "en", "en"], "f": ["e", "e", "en", "en"], "n": ["es", "es", "en", "en"],
             "pl": ["en", "en", "en", "en"]}
ADJ_STRONG_PL = ["e", "e", "en", "er"]
POSSESSIVES = [("mein", "my"), ("dein", "your"), ("sein", "his"), ("ihr", "her"), ("unser", "our")]

# Personal pronouns: person index 0=ich 1=du 2=er/sie/es 3=wir 4=ihr 5=sie (verb agreement slots).
SUBJ_PRON = [("ich", "I", 0), ("du", "you", 1), ("er", "he", 2), ("sie", "she", 2), ("es", "it", 2),
             ("wir", "we", 3), ("ihr", "you", 4), ("sie", "they", 5)]
# Object pronouns (third person, plus mich/uns when the subject is not the same person): (acc, dat, en, person)
OBJ_PRON = [("ihn", "ihm", "him", 2), ("sie", "ihr", "her", 2), ("es", "ihm", "it", 2),
            ("sie", "ihnen", "them", 5), ("mich", "mir", "me", 0), ("uns", "uns", "us", 3)]


@dataclass(frozen=True)
class Verb:
    de: tuple[str, ...]  # present forms for ich, du, er, wir, ihr, sie (without a separable prefix)
    inf: str  # infinitive (with the separable prefix: aufmachen)
    part: str  # past participle (aufgemacht)
    en: str  # English base form ("look for")
    en3: str  # third person singular ("looks for")
    en_part: str  # past participle ("looked for")
    frame: str = "intr"  # "intr" | "acc" | "dat" | "dat_acc" | "that"
    obj: str = "any"  # noun class of the (accusative) object
    prefix: str = ""  # separable prefix: "Der Mann macht die Tür auf" / "weil der Mann die Tür aufmacht"
    aux: str = "haben"  # perfect auxiliary: haben | sein


def _v(forms: str, inf: str, part: str, en: str, frame: str = "intr", obj: str = "any",
       prefix: str = "", aux: str = "haben") -> Verb:
    base, en3, en_part = en.split("|")
    return Verb(tuple(forms.split()), inf, part, base, en3, en_part, frame, obj, prefix, aux)


VERBS = [
    # intransitive
    _v("schlafe schläfst schläft schlafen schlaft schlafen", "schlafen", "geschlafen", "sleep|sleeps|slept"),
    _v("lache lachst lacht lachen lacht lachen", "lachen", "gelacht", "laugh|laughs|laughed"),
    _v("arbeite arbeitest arbeitet arbeiten arbeitet arbeiten", "arbeiten", "gearbeitet", "work|works|worked"),
    _v("singe singst singt singen singt singen", "singen", "gesungen", "sing|sings|sung"),
    _v("laufe läufst läuft laufen lauft laufen", "laufen", "gelaufen", "run|runs|run", aux="sein"),
    _v("komme kommst kommt kommen kommt kommen", "kommen", "gekommen", "come|comes|come", aux="sein"),
    _v("warte wartest wartet warten wartet warten", "warten", "gewartet", "wait|waits|waited"),
    _v("spiele spielst spielt spielen spielt spielen", "spielen", "gespielt", "play|plays|played"),
    _v("kaufe kaufst kauft kaufen kauft kaufen", "einkaufen", "eingekauft", "shop|shops|shopped", prefix="ein"),
    _v("stehe stehst steht stehen steht stehen", "aufstehen", "aufgestanden", "get up|gets up|got up",
       prefix="auf", aux="sein"),
    # transitive, accusative object
    _v("sehe siehst sieht sehen seht sehen", "sehen", "gesehen", "see|sees|seen", "acc"),
    _v("kaufe kaufst kauft kaufen kauft kaufen", "kaufen", "gekauft", "buy|buys|bought", "acc", "carry"),
    _v("finde findest findet finden findet finden", "finden", "gefunden", "find|finds|found", "acc"),
    _v("lese liest liest lesen lest lesen", "lesen", "gelesen", "read|reads|read", "acc", "text"),
    _v("esse isst isst essen esst essen", "essen", "gegessen", "eat|eats|eaten", "acc", "food"),
    _v("suche suchst sucht suchen sucht suchen", "suchen", "gesucht", "look for|looks for|looked for", "acc"),
    _v("höre hörst hört hören hört hören", "hören", "gehört", "hear|hears|heard", "acc", "animate"),
    _v("liebe liebst liebt lieben liebt lieben", "lieben", "geliebt", "love|loves|loved", "acc"),
    _v("brauche brauchst braucht brauchen braucht brauchen", "brauchen", "gebraucht", "need|needs|needed",
       "acc", "carry"),
    _v("öffne öffnest öffnet öffnen öffnet öffnen", "öffnen", "geöffnet", "open|opens|opened", "acc", "thing"),
    _v("trage trägst trägt tragen tragt tragen", "tragen", "getragen", "carry|carries|carried", "acc", "carry"),
    _v("wasche wäschst wäscht waschen wascht waschen", "waschen", "gewaschen", "wash|washes|washed", "acc"),
    _v("male malst malt malen malt malen", "malen", "gemalt", "paint|paints|painted", "acc"),
    _v("mache machst macht machen macht machen", "aufmachen", "aufgemacht", "open|opens|opened", "acc",
       "thing", prefix="auf"),
    _v("rufe rufst ruft rufen ruft rufen", "anrufen", "angerufen", "call|calls|called", "acc", "people",
       prefix="an"),
    _v("besuche besuchst besucht besuchen besucht besuchen", "besuchen", "besucht", "visit|visits|visited",
       "acc", "people"),
    _v("vergesse vergisst vergisst vergessen vergesst vergessen", "vergessen", "vergessen",
       "forget|forgets|forgotten", "acc"),
    # dative object
    _v("helfe hilfst hilft helfen helft helfen", "helfen", "geholfen", "help|helps|helped", "dat"),
    _v("folge folgst folgt folgen folgt folgen", "folgen", "gefolgt", "follow|follows|followed", "dat",
       aux="sein"),
    _v("danke dankst dankt danken dankt danken", "danken", "gedankt", "thank|thanks|thanked", "dat"),
    _v("antworte antwortest antwortet antworten antwortet antworten", "antworten", "geantwortet",
       "answer|answers|answered", "dat"),
    # dative + accusative
    _v("gebe gibst gibt geben gebt geben", "geben", "gegeben", "give|gives|given", "dat_acc", "carry"),
    _v("zeige zeigst zeigt zeigen zeigt zeigen", "zeigen", "gezeigt", "show|shows|shown", "dat_acc", "carry"),
    _v("bringe bringst bringt bringen bringt bringen", "bringen", "gebracht", "bring|brings|brought",
       "dat_acc", "carry"),
    _v("schicke schickst schickt schicken schickt schicken", "schicken", "geschickt", "send|sends|sent",
       "dat_acc", "carry"),
    _v("leihe leihst leiht leihen leiht leihen", "leihen", "geliehen", "lend|lends|lent", "dat_acc", "carry"),
    _v("verkaufe verkaufst verkauft verkaufen verkauft verkaufen", "verkaufen", "verkauft",
       "sell|sells|sold", "dat_acc", "carry"),
]
THAT_VERBS = [
    _v("sage sagst sagt sagen sagt sagen", "sagen", "gesagt", "say|says|said", "that"),
    _v("glaube glaubst glaubt glauben glaubt glauben", "glauben", "geglaubt", "believe|believes|believed", "that"),
    _v("weiß weißt weiß wissen wisst wissen", "wissen", "gewusst", "know|knows|known", "that"),
    _v("hoffe hoffst hofft hoffen hofft hoffen", "hoffen", "gehofft", "hope|hopes|hoped", "that"),
    _v("denke denkst denkt denken denkt denken", "denken", "gedacht", "think|thinks|thought", "that"),
]
TRANSITIVE = [v for v in VERBS if v.frame == "acc"]
AUX = {"haben": "habe hast hat haben habt haben".split(), "sein": "bin bist ist sind seid sind".split()}
# German modal forms, English rendering, and whether English treats it as a true modal (no do-support).
MODALS = [("kann kannst kann können könnt können".split(), "can", True),
          ("muss musst muss müssen müsst müssen".split(), "must", True),
          ("soll sollst soll sollen sollt sollen".split(), "should", True),
          ("will willst will wollen wollt wollen".split(), "want to", False)]
ADVERBS = [("heute", "today"), ("jetzt", "now"), ("morgens", "in the morning"), ("abends", "in the evening"),
           ("oft", "often"), ("manchmal", "sometimes"), ("wieder", "again")]
LOC_PREPS = [("in", "in"), ("vor", "in front of"), ("hinter", "behind"), ("neben", "next to")]
SUB_CONJ = [("weil", "because"), ("wenn", "when"), ("obwohl", "although"), ("bevor", "before")]


# ----------------------------------------------------------------------------------------------------------
# Grammar
# ----------------------------------------------------------------------------------------------------------


class NP(NamedTuple):
    de: list[str]
    en: list[str]
    person: int  # verb agreement slot 0..5
    pron: bool  # personal pronoun (placed early in the German middle field)
    indef: bool  # indefinite (ein/bare plural): such objects are not negated with "nicht"


def _a_an(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _adjective(rng: random.Random, pool: list[Noun]) -> tuple[str, str]:
    choices = ADJ_ANY + (ADJ_ANIMATE if pool[0] in ANIMATE else ADJ_THING)
    return rng.choice(choices)


def _noun_np(rng: random.Random, pool: list[Noun], case: int, genitive: bool = True,
             allow_indef: bool = True) -> NP:
    """A German noun phrase in ``case`` with its English translation."""
    noun = rng.choice(pool)
    number = "pl" if rng.random() < 0.3 else "sg"
    key = "pl" if number == "pl" else noun.gender
    r = rng.random()
    kind = "def" if r < 0.5 or not allow_indef and r < 0.75 else ("poss" if r >= 0.75 else "indef")
    adj = _adjective(rng, pool) if rng.random() < 0.3 else None
    de: list[str] = []
    en: list[str] = []
    if kind == "def":
        de.append(DEF[key][case])
        en.append("the")
        adj_end = ADJ_WEAK[key][case]
    elif kind == "poss":
        stem, en_poss = rng.choice(POSSESSIVES)
        de.append(stem + EIN_END[key][case])
        en.append(en_poss)
        adj_end = ADJ_MIXED[key][case]
    elif number == "sg":
        de.append("ein" + EIN_END[key][case])
        adj_end = ADJ_MIXED[key][case]
    else:  # bare plural: strong adjective endings, no English article
        adj_end = ADJ_STRONG_PL[case]
    if adj:
        stem = adj[0][:-1] if adj[0].endswith("e") else adj[0]  # müde -> müd-e, müd-en
        de.append(stem + adj_end)
        en.append(adj[1])
    de.append(noun.form(number, case))
    en.extend((noun.en_pl if number == "pl" else noun.en).split())
    if kind == "indef" and number == "sg":
        en.insert(0, _a_an(en[0]))
    if genitive and rng.random() < 0.06:  # "das Auto des Lehrers" = "the car of the teacher"
        owner = _noun_np(rng, PEOPLE, 3, genitive=False, allow_indef=False)
        de += owner.de
        en += ["of"] + owner.en
    return NP(de, en, 5 if number == "pl" else 2, False, kind == "indef")


def _subject(rng: random.Random) -> NP:
    r = rng.random()
    if r < 0.2:
        de, en, person = rng.choice(SUBJ_PRON)
        return NP([de], [en], person, True, False)
    if r < 0.3:
        name = rng.choice(NAMES)
        return NP([name], [name], 2, False, False)
    return _noun_np(rng, ANIMATE, 0)


def _object(rng: random.Random, cls: str, case: int, subj: NP) -> NP:
    if cls in ("animate", "people", "any") and rng.random() < 0.15:
        acc, dat, en, person = rng.choice(OBJ_PRON)
        if person != subj.person or person in (2, 5):
            return NP([dat if case == 2 else acc], [en], person, True, False)
    return _noun_np(rng, NOUN_CLASSES[cls], case)


def _place(rng: random.Random) -> tuple[list[str], list[str]]:
    """A locative PP: 'im Garten' = 'in the garden', 'neben dem Küchentisch' = 'next to the kitchen table'."""
    prep, en_prep = rng.choice(LOC_PREPS)
    pool = PLACES if prep == "in" or rng.random() < 0.5 else THINGS
    np_ = _noun_np(rng, pool, 2, genitive=False)
    de = list(np_.de)
    if de[0] == "dem" and prep in ("in", "an"):  # in dem -> im
        de = [prep[0] + "m"] + de[1:]
    else:
        de = [prep] + de
    return de, en_prep.split() + np_.en


@dataclass
class Clause:
    subj: NP
    verb: Verb
    tense: str  # "pres" | "perf" | "modal"
    modal: tuple | None
    neg: bool
    objs: list[NP]  # German order: dative before accusative
    adv: tuple[str, str] | None
    pp: tuple[list[str], list[str]] | None
    that: "Clause | None" = None  # complement of sagen/glauben/...: extraposed "dass" clause

    # -- German -------------------------------------------------------------------------------------------
    def finite_de(self) -> str:
        p = self.subj.person
        if self.tense == "perf":
            return AUX[self.verb.aux][p]
        if self.tense == "modal":
            return self.modal[0][p]
        return self.verb.de[p]

    def bracket_de(self) -> list[str]:
        """The right sentence bracket of a main clause: participle, infinitive or separable prefix."""
        if self.tense == "perf":
            return [self.verb.part]
        if self.tense == "modal":
            return [self.verb.inf]
        return [self.verb.prefix] if self.verb.prefix else []

    def middle_de(self, with_adv: bool = True) -> list[str]:
        """The middle field: pronoun objects, time adverb, noun objects, place, 'nicht'."""
        out = [w for o in self.objs if o.pron for w in o.de]
        if self.adv and with_adv:
            out.append(self.adv[0])
        out += [w for o in self.objs if not o.pron for w in o.de]
        if self.pp:
            out += self.pp[0]
        if self.neg:
            out.append("nicht")
        return out

    def tail_de(self) -> list[str]:
        return ([",", "dass"] + self.that.sub_de()) if self.that else []

    def main_de(self) -> list[str]:
        """Verb-second declarative: Der Hund hat heute die Katze gesehen."""
        return self.subj.de + [self.finite_de()] + self.middle_de() + self.bracket_de() + self.tail_de()

    def inverted_de(self, front: list[str] | None = None) -> list[str]:
        """Verb-second after a fronted element (adverb or clause): Heute sieht der Hund die Katze."""
        if front is None:  # front the adverb
            return [self.adv[0], self.finite_de()] + self.subj.de + self.middle_de(False) + self.bracket_de() \
                + self.tail_de()
        return front + [self.finite_de()] + self.subj.de + self.middle_de() + self.bracket_de() + self.tail_de()

    def question_de(self) -> list[str]:
        """Verb-first yes/no question: Hat der Hund die Katze gesehen?"""
        return [self.finite_de()] + self.subj.de + self.middle_de() + self.bracket_de() + self.tail_de()

    def verb_final_de(self) -> list[str]:
        """Verb cluster at the end of a subordinate clause: aufmacht / gesehen hat / sehen kann."""
        fin = self.finite_de()
        if self.tense == "pres":
            return [self.verb.prefix + fin]
        return self.bracket_de() + [fin]

    def sub_de(self, with_subject: bool = True) -> list[str]:
        """Subordinate clause body (after weil/dass/...): subject, middle field, verb last."""
        return (self.subj.de if with_subject else []) + self.middle_de() + self.verb_final_de() + self.tail_de()

    # -- English ------------------------------------------------------------------------------------------
    def _third(self) -> bool:
        return self.subj.person == 2

    def vp_en(self) -> list[str]:
        v, third = self.verb, self._third()
        if self.tense == "perf":
            return ["has" if third else "have"] + (["not"] if self.neg else []) + v.en_part.split()
        if self.tense == "modal":
            _, en_modal, true_modal = self.modal
            if true_modal:
                head = ["cannot"] if (en_modal == "can" and self.neg) else [en_modal] + (["not"] if self.neg else [])
                return head + v.en.split()
            if self.neg:
                return ["does" if third else "do", "not", "want", "to"] + v.en.split()
            return ["wants" if third else "want", "to"] + v.en.split()
        if self.neg:
            return ["does" if third else "do", "not"] + v.en.split()
        return (v.en3 if third else v.en).split()

    def rest_en(self, with_adv: bool = True) -> list[str]:
        out = [w for o in self.objs for w in o.en]  # English order = German order (indirect before direct)
        if self.pp:
            out += self.pp[1]
        if self.adv and with_adv:
            out += self.adv[1].split()
        if self.that:
            out += ["that"] + self.that.main_en()
        return out

    def main_en(self, with_adv: bool = True) -> list[str]:
        return self.subj.en + self.vp_en() + self.rest_en(with_adv)

    def fronted_en(self) -> list[str]:
        return self.adv[1].split() + self.main_en(with_adv=False)

    def question_en(self) -> list[str]:
        v, third = self.verb, self._third()
        if self.tense == "perf":
            return ["has" if third else "have"] + self.subj.en + v.en_part.split() + self.rest_en()
        if self.tense == "modal" and self.modal[2]:
            return [self.modal[1]] + self.subj.en + v.en.split() + self.rest_en()
        head = ["want", "to"] if self.tense == "modal" else []
        return ["does" if third else "do"] + self.subj.en + head + v.en.split() + self.rest_en()


def _clause(rng: random.Random, subj: NP | None = None, allow_that: bool = False, allow_neg: bool = True,
            verbs: list[Verb] | None = None) -> Clause:
    subj = subj or _subject(rng)
    if verbs is None:
        verbs = VERBS + THAT_VERBS if allow_that else VERBS
    verb = rng.choice(verbs)
    r = rng.random()
    tense = "pres" if r < 0.55 else ("perf" if r < 0.8 else "modal")
    modal = rng.choice(MODALS) if tense == "modal" else None
    objs: list[NP] = []
    if verb.frame in ("dat", "dat_acc"):
        objs.append(_object(rng, "animate", 2, subj))
    if verb.frame in ("acc", "dat_acc"):
        objs.append(_object(rng, verb.obj, 1, subj) if verb.frame == "acc" else _noun_np(rng, NOUN_CLASSES[verb.obj], 1))
    that = _clause(rng, allow_that=False) if verb.frame == "that" else None
    adv = rng.choice(ADVERBS) if rng.random() < 0.25 else None
    pp = _place(rng) if verb.frame != "that" and rng.random() < 0.25 else None
    neg = allow_neg and rng.random() < 0.15 and not any(o.indef for o in objs)
    return Clause(subj, verb, tense, modal, neg, objs, adv, pp, that)


def _relative(rng: random.Random, head: NP, head_noun_case_key: str) -> tuple[list[str], list[str]]:
    """Relative clause on a subject NP: ', der die Katze sieht ,' = 'that sees the cat'."""
    verb = rng.choice(TRANSITIVE)
    if rng.random() < 0.5:  # subject relative: the head is the subject of the relative clause
        c = Clause(NP([DEF[head_noun_case_key][0]], ["that"], head.person, False, False), verb,
                   rng.choice(("pres", "perf")), None, False, [_noun_np(rng, NOUN_CLASSES[verb.obj], 1, False)],
                   None, None)
        return [","] + c.sub_de() + [","], c.main_en()
    # object relative: the head is the accusative object of the relative clause
    c = Clause(_noun_np(rng, ANIMATE, 0, False), verb, rng.choice(("pres", "perf")), None, False, [], None, None)
    return [",", DEF[head_noun_case_key][1]] + c.sub_de() + [","], ["that"] + c.main_en()


def _sentence(rng: random.Random) -> tuple[list[str], list[str], str]:
    """One sentence pair as German and English token lists (with punctuation), plus its construction."""
    r = rng.random()
    if r < 0.30:
        c = _clause(rng, allow_that=True)
        return c.main_de() + ["."], c.main_en() + ["."], "main"
    if r < 0.40:
        c = _clause(rng)
        c.adv = c.adv or rng.choice(ADVERBS)
        return c.inverted_de() + ["."], c.fronted_en() + ["."], "fronted_adverb"
    if r < 0.50:
        c = _clause(rng, allow_neg=False)
        return c.question_de() + ["?"], c.question_en() + ["?"], "question"
    if r < 0.70:
        c, s = _clause(rng), _clause(rng)
        conj = rng.choice(SUB_CONJ)
        return (c.main_de() + [",", conj[0]] + s.sub_de() + ["."],
                c.main_en() + [conj[1]] + s.main_en() + ["."], "subordinate")
    if r < 0.80:  # fronted subordinate clause: the main clause inverts (Wenn ..., schläft der Hund.)
        c, s = _clause(rng), _clause(rng)
        conj = rng.choice(SUB_CONJ)
        front = [conj[0]] + s.sub_de() + [","]
        return c.inverted_de(front) + ["."], [conj[1]] + s.main_en() + [","] + c.main_en() + ["."], "fronted_subordinate"
    if r < 0.88:
        c = _clause(rng, verbs=THAT_VERBS)
        return c.main_de() + ["."], c.main_en() + ["."], "that_clause"
    if r < 0.94:  # coordination: both conjuncts verb-second
        c, d = _clause(rng), _clause(rng)
        if rng.random() < 0.5:
            return c.main_de() + ["und"] + d.main_de() + ["."], c.main_en() + ["and"] + d.main_en() + ["."], "coordination"
        return (c.main_de() + [",", "aber"] + d.main_de() + ["."],
                c.main_en() + [",", "but"] + d.main_en() + ["."], "coordination")
    # relative clause on a full-noun subject
    subj = _noun_np(rng, ANIMATE, 0, genitive=False)
    key = "pl" if subj.person == 5 else _gender_of(subj)
    rel_de, rel_en = _relative(rng, subj, key)
    c = _clause(rng, subj=NP(subj.de + rel_de, subj.en + rel_en, subj.person, False, subj.indef))
    return c.main_de() + ["."], c.main_en() + ["."], "relative_clause"


_NOUN_GENDER = {n.de: n.gender for n in ANIMATE}
_NOUN_GENDER.update({n.form("sg", c): n.gender for n in ANIMATE for c in range(4)})


def _gender_of(np_: NP) -> str:
    """Gender of a singular animate noun phrase (its last token is the noun)."""
    return _NOUN_GENDER[np_.de[-1]]


# ----------------------------------------------------------------------------------------------------------
# Rendering and tokenization
# ----------------------------------------------------------------------------------------------------------

_PUNCT = {",", ".", "?", "!"}
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


def render_raw(tokens: list[str]) -> str:
    """Raw sentence text: punctuation attached to the previous word, first letter capitalized."""
    out = ""
    for t in tokens:
        if t in _PUNCT:
            out = out.rstrip(" ") + t + " "
        else:
            out += t + " "
    out = out.strip()
    return out[0].upper() + out[1:]


def tokenize(raw: str) -> list[str]:
    """The synthetic corpus' tokenizer: words and punctuation marks as separate tokens (Unicode-aware)."""
    return _TOKEN_RE.findall(raw)


def prepare_line(raw: str) -> str:
    """Prepared text = tokenized and lowercased raw text (as the real corpora: Moses tokens, lowercase)."""
    return " ".join(tokenize(raw)).lower()


def generate(seed: int, split: str, n: int) -> tuple[list[str], list[str], Counter]:
    """``n`` raw sentence pairs of one split, from that split's own random stream, and construction counts."""
    rng = random.Random(f"lnrepro-synthetic-v{GENERATOR_VERSION}:{seed}:{split}")
    de_raw, en_raw, kinds = [], [], Counter()
    for _ in range(n):
        de, en, kind = _sentence(rng)
        de_raw.append(render_raw(de))
        en_raw.append(render_raw(en))
        kinds[kind] += 1
    return de_raw, en_raw, kinds


def downloads(section: dict) -> list[Download]:
    """Nothing: the corpus is generated."""
    return []


def prepare(settings: dict, out_dir: Path, threads: int = 1, downloads_dir: Path = Path(DOWNLOADS)) -> dict:
    """Generate the synthetic corpus into ``out_dir`` (the prepared-data layout) and return its stats.

    ``settings`` is the config section (data.json): ``seed``, ``train``, ``valid``, ``test`` (sentence pairs).
    ``threads`` and ``downloads_dir`` are unused: generation is fast, and nothing is downloaded.
    Valid and test come from their own random streams of the same grammar; short sentences can repeat across
    splits, so the overlap with train is counted and reported rather than removed (removing it would make the
    held-out splits systematically longer than train).
    """
    seed, sizes = settings["seed"], {s: settings[s] for s in ("train", "valid", "test")}
    splits: dict[str, tuple[list[str], list[str]]] = {}
    raw: dict[str, tuple[list[str], list[str]]] = {}
    constructions: dict[str, dict[str, int]] = {}
    for split, n in sizes.items():
        de_raw, en_raw, kinds = generate(seed, split, n)
        splits[split] = ([prepare_line(x) for x in de_raw], [prepare_line(x) for x in en_raw])
        if split != "train":
            raw[split] = (de_raw, en_raw)
        constructions[split] = dict(sorted(kinds.items()))

    pairs = {s: list(zip(*splits[s])) for s in splits}
    train_set = set(pairs["train"])
    valid_set = set(pairs["valid"])
    overlap = {
        "train_unique_pairs": len(train_set),
        "valid_pairs_in_train": sum(p in train_set for p in pairs["valid"]),
        "test_pairs_in_train": sum(p in train_set for p in pairs["test"]),
        "test_pairs_in_valid": sum(p in valid_set for p in pairs["test"]),
    }
    train_de, train_en = splits["train"]
    stats = {
        "dataset": "synthetic",
        "generator_version": GENERATOR_VERSION,
        "seed": seed,
        "overlap": overlap,
        "constructions": constructions,
        "train_word_types": {"de": len({w for l in train_de for w in l.split()}),
                             "en": len({w for l in train_en for w in l.split()})},
        "train_mean_tokens": {"de": sum(len(l.split()) for l in train_de) / len(train_de),
                              "en": sum(len(l.split()) for l in train_en) / len(train_en)},
    }
    return write_prepared(Path(out_dir), splits, raw, stats)
