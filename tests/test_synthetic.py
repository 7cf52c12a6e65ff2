"""Synthetic corpus: determinism, German structure (verb-second / verb-final), file layout, raw vs prepared."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from lnrepro.data import synthetic as syn
from lnrepro.data.prepared import write_prepared
from lnrepro.errors import LnReproError

CFG = {"seed": 7, "train": 300, "valid": 40, "test": 30}
FILES = [f"{s}.{l}" for s in ("train", "valid", "test") for l in ("de", "en")] + [
    f"{s}.raw.{l}" for s in ("valid", "test") for l in ("de", "en")]


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synthetic")
    syn.prepare(CFG, out)
    return out


def test_same_seed_gives_identical_bytes(corpus: Path, tmp_path: Path) -> None:
    stats = syn.prepare(CFG, tmp_path)
    for name in FILES:
        assert (corpus / name).read_bytes() == (tmp_path / name).read_bytes(), name
    first = json.loads((corpus / "stats.json").read_text())
    first.pop("where_ran"), stats.pop("where_ran")
    assert first == stats


def test_different_seed_differs(corpus: Path, tmp_path: Path) -> None:
    syn.prepare({**CFG, "seed": CFG["seed"] + 1}, tmp_path)
    assert (corpus / "train.de").read_bytes() != (tmp_path / "train.de").read_bytes()


def test_splits_use_different_streams() -> None:
    train, _, _ = syn.generate(3, "train", 50)
    valid, _, _ = syn.generate(3, "valid", 50)
    assert train != valid


def test_line_counts_and_stats(corpus: Path) -> None:
    stats = json.loads((corpus / "stats.json").read_text())
    for split in ("train", "valid", "test"):
        de, en = _lines(corpus / f"{split}.de"), _lines(corpus / f"{split}.en")
        assert len(de) == len(en) == CFG[split] == stats["lines"][split]
        assert all(line.strip() for line in de + en)
    for split in ("valid", "test"):
        assert len(_lines(corpus / f"{split}.raw.de")) == CFG[split] == stats["raw_lines"][split]
    assert stats["dataset"] == "synthetic" and stats["seed"] == CFG["seed"]
    assert {"valid_pairs_in_train", "test_pairs_in_train", "test_pairs_in_valid"} <= set(stats["overlap"])
    assert {"host", "device", "slurm_job_id"} == set(stats["where_ran"])


def test_raw_and_prepared_relation(corpus: Path) -> None:
    for split in ("valid", "test"):
        for lang in ("de", "en"):
            raw, prep = _lines(corpus / f"{split}.raw.{lang}"), _lines(corpus / f"{split}.{lang}")
            for r, p in zip(raw, prep):
                assert r[0].isupper() and r[-1] in ".?"
                assert p == " ".join(syn.tokenize(r)).lower() == syn.prepare_line(r)
                assert p == p.lower() and not re.search(r"\w[.,?]", p)  # punctuation split off


def test_tokenizer_splits_punctuation() -> None:
    raw = "Der Hund sieht die Katze, weil sie schläft."
    assert syn.prepare_line(raw) == "der hund sieht die katze , weil sie schläft ."


def _finite_forms() -> set[str]:
    forms = set()
    for v in syn.VERBS + syn.THAT_VERBS:
        forms |= {v.prefix + f for f in v.de}
    for aux in syn.AUX.values():
        forms |= set(aux)
    for m in syn.MODALS:
        forms |= set(m[0])
    return forms


def test_subordinate_clauses_are_verb_final(corpus: Path) -> None:
    """Every weil/dass/wenn/obwohl/bevor clause ends (at the next punctuation) with a finite verb form,
    and English keeps the verb early: 'because' is never directly followed by a clause-final verb slot."""
    finite = _finite_forms()
    conj = {c for c, _ in syn.SUB_CONJ} | {"dass"}
    seen = 0
    for line in _lines(corpus / "train.de"):
        toks = line.split()
        for i, t in enumerate(toks):
            if t in conj:
                j = i + 1
                while toks[j] not in {",", ".", "?"}:
                    j += 1
                assert toks[j - 1] in finite, (line, toks[i:j])
                assert j - i >= 3  # conjunction, subject, ..., verb
                seen += 1
    assert seen > 50


def test_clause_orders() -> None:
    """One clause rendered as main (verb second), question (verb first) and subordinate (verb last)."""
    rng = random.Random(0)
    for _ in range(200):
        c = syn._clause(rng)
        n = len(c.subj.de)
        main, sub, q = c.main_de(), c.sub_de(), c.question_de()
        assert main[n] == c.finite_de()  # verb second (after the whole subject phrase)
        assert q[0] == c.finite_de()
        assert sub[-1].endswith(c.finite_de())  # separable prefix joins: aufmacht
        if c.tense == "perf":
            assert main[-1] == c.verb.part and sub[-2:] == [c.verb.part, c.finite_de()]
            assert c.vp_en()[0] in ("has", "have")  # English: auxiliary and participle stay together
        if c.neg and c.tense == "pres":
            assert c.vp_en()[:2] in (["does", "not"], ["do", "not"])


def test_german_inflection() -> None:
    rng = random.Random(1)
    hund = syn.ANIMALS[0]
    assert (hund.de, hund.form("sg", 3), hund.form("pl", 2)) == ("Hund", "Hundes", "Hunden")
    assert syn.DEF["m"] == ["der", "den", "dem", "des"]
    sg_acc = {"den", "einen"} | {p + "en" for p, _ in syn.POSSESSIVES}
    for _ in range(100):
        np_ = syn._noun_np(rng, [hund], 1, genitive=False)  # accusative masculine
        if np_.person == 2:
            assert np_.de[0] in sg_acc and np_.de[-1] == "Hund", np_
        else:
            assert np_.de[-1] == "Hunde" and np_.de[0] not in sg_acc, np_
    tuer = next(n for n in syn.COMPOUNDS if n.de == "Haustür")
    assert (tuer.gender, tuer.de_pl, tuer.en) == ("f", "Haustüren", "house door")


def _pair(n: int = 2) -> tuple[list[str], list[str]]:
    return [f"de {i}" for i in range(n)], [f"en {i}" for i in range(n)]


def test_write_prepared_checks(tmp_path: Path) -> None:
    good = {s: _pair() for s in ("train", "valid", "test")}
    raw = {s: _pair() for s in ("valid", "test")}
    stats = write_prepared(tmp_path / "ok", good, raw, {"dataset": "x"})
    assert stats["lines"] == {"train": 2, "valid": 2, "test": 2} and stats["dataset"] == "x"
    assert _lines(tmp_path / "ok" / "valid.raw.en") == ["en 0", "en 1"]
    bad_counts = {**good, "train": (["a", "b"], ["a"])}
    with pytest.raises(LnReproError, match="train"):
        write_prepared(tmp_path / "bad1", bad_counts, raw, {})
    for br in ("a\nb", "a\rb", "a\u2028b", "a\x85b"):
        with pytest.raises(LnReproError, match="line-break"):
            write_prepared(tmp_path / "bad2", {**good, "test": (["x", br], ["y", "z"])}, raw, {})
    with pytest.raises(LnReproError, match="raw"):
        write_prepared(tmp_path / "bad3", good, {**raw, "valid": _pair(3)}, {})
    with pytest.raises(LnReproError, match="missing"):
        write_prepared(tmp_path / "bad4", {"train": _pair()}, raw, {})
    assert not (tmp_path / "bad1").exists() and not (tmp_path / "bad2").exists()
