"""IWSLT14 De->En prepared exactly as fairseq's ``examples/translation/prepare-iwslt14.sh`` (minus BPE).

Recipe (fairseq, examples/translation/prepare-iwslt14.sh), reproduced step by step:

- train (``de-en/train.tags.de-en.{de,en}``): ``grep -v`` the lines containing ``<url>``, ``<talkid>`` or
  ``<keywords>``; delete the tags ``<title>``, ``</title>``, ``<description>``, ``</description>`` (keep their
  text); every other line is kept as it is (also other metadata lines such as ``<speaker>...``: fairseq keeps
  them, we count them in stats.json); Moses-tokenize; ``clean-corpus-n.perl -ratio 1.5 ... 1 175``; lowercase;
- valid = every 23rd cleaned line (lines 23, 46, ...; ``awk 'NR%23 == 0'``), train = the others;
- test = dev2010, TEDX.dev2012, tst2010, tst2011, tst2012 concatenated in that order; from each XML file the
  lines containing ``<seg id``, with the seg tags and the whitespace next to them removed and ``’`` replaced
  by ``'``, then tokenized and lowercased (no cleaning).

Besides fairseq's files we write the untokenized references of valid and test (``{valid,test}.raw.{de,en}``):
for valid the filtered training line each valid pair came from (provenance is kept through cleaning), for test
the segment text; both with surrounding whitespace stripped and nothing else changed (``’`` stays).
"""

from __future__ import annotations

import re
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

from ..errors import LnReproError
from ..paths import DOWNLOADS
from . import text as T
from .download import Download, file_digests
from .prepared import check_counts, write_prepared

LANGS = ("de", "en")
PAIR = "de-en"
TRAIN_FILE = "train.tags.de-en.{lang}"
# Test sets in fairseq's concatenation order (``cat`` in prepare-iwslt14.sh).
TEST_SETS = ("IWSLT14.TED.dev2010", "IWSLT14.TEDX.dev2012", "IWSLT14.TED.tst2010",
             "IWSLT14.TED.tst2011", "IWSLT14.TED.tst2012")
XML_FILE = "{name}.de-en.{lang}.xml"
DROP_MARKERS = ("<url>", "<talkid>", "<keywords>")  # grep -v, in the script's order
STRIP_TAGS = ("<title>", "</title>", "<description>", "</description>")  # sed s/TAG//g
CLEAN = {"min_len": 1, "max_len": 175, "ratio": 1.5}
VALID_EVERY = 23
KEY = "defaults.data.iwslt14"  # the config section, named in messages

# sed's \s (GNU sed, C locale): ASCII whitespace only, hence re.ASCII.
_SEG_OPEN = re.compile(r'<seg id="[0-9]*">\s*', re.ASCII)
_SEG_CLOSE = re.compile(r"\s*</seg>\s*", re.ASCII)
_TAG = re.compile(r"</?([A-Za-z][\w:.-]*)[^<>]*>")


class _Archive:
    """Read members of ``de-en.tgz`` (or of a folder where it was extracted) by their name inside ``de-en/``."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.members: dict[str, Any] = {}
        if self.path.is_dir():
            base = self.path / PAIR if (self.path / PAIR).is_dir() else self.path
            self.members = {p.name: p for p in base.iterdir() if p.is_file()}
            self._tar = None
            return
        if not self.path.is_file():
            raise LnReproError(f"IWSLT14 archive {self.path}: file not found; expected de-en.tgz")
        try:
            self._tar = tarfile.open(self.path, "r:*")
            for info in self._tar.getmembers():
                parts = Path(info.name).parts
                if info.isfile() and len(parts) >= 2 and parts[-2] == PAIR:
                    self.members[parts[-1]] = info
        except (tarfile.TarError, OSError, EOFError) as e:
            raise LnReproError(f"IWSLT14 archive {self.path}: not a readable .tgz ({e})") from e

    def read_text(self, name: str) -> str:
        member = self.members.get(name)
        if member is None:
            raise LnReproError(
                f"IWSLT14 archive {self.path}: missing {PAIR}/{name}; expected the official de-en.tgz layout "
                f"({PAIR}/train.tags.de-en.{{de,en}} and the ten IWSLT14.TED*.xml files)"
            )
        if self._tar is None:
            data = Path(member).read_bytes()
        else:
            data = self._tar.extractfile(member).read()
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise LnReproError(f"IWSLT14 archive {self.path}: {PAIR}/{name} is not UTF-8 ({e})") from e

    def close(self) -> None:
        if self._tar is not None:
            self._tar.close()


def filter_train_lines(lines: list[str]) -> tuple[list[str], dict[str, Any]]:
    """The grep/sed part of the train recipe: drop url/talkid/keywords lines, delete title/description tags.

    Returns the kept lines (unstripped, as fed to the tokenizer) and counts: lines in, dropped per marker
    (each line counted under the first marker the pipeline meets), lines whose title/description tags were
    removed, and the kept lines that still hold other markup, per tag name (fairseq keeps and tokenizes them).
    """
    kept: list[str] = []
    dropped = dict.fromkeys(DROP_MARKERS, 0)
    stripped = 0
    other: Counter[str] = Counter()
    for line in lines:
        marker = next((m for m in DROP_MARKERS if m in line), None)
        if marker is not None:
            dropped[marker] += 1
            continue
        new = line
        for tag in STRIP_TAGS:
            new = new.replace(tag, "")
        if new != line:
            stripped += 1
        tags = {m.group(1) for m in _TAG.finditer(new)}
        for name in tags:
            other[name] += 1
        kept.append(new)
    stats = {
        "lines_in": len(lines),
        "dropped": dropped,
        "title_description_lines": stripped,
        "other_tag_lines": sum(1 for line in kept if _TAG.search(line)),
        "other_tags": dict(sorted(other.items())),
        "lines_out": len(kept),
    }
    return kept, stats


def extract_segments(xml: str) -> tuple[list[str], list[str]]:
    """Segments of an IWSLT XML file: (text for the tokenizer, raw reference text).

    ``grep '<seg id'``, then ``sed 's/<seg id="[0-9]*">\\s*//g; s/\\s*<\\/seg>\\s*//g; s/’/'/g'``.
    The raw text is the same segment before the ``’`` replacement, with surrounding whitespace stripped.
    """
    seg_text: list[str] = []
    raw: list[str] = []
    for line in T.split_lines(xml):
        if "<seg id" not in line:
            continue
        line = _SEG_CLOSE.sub("", _SEG_OPEN.sub("", line))
        raw.append(T.raw_reference(line))
        seg_text.append(line.replace("\u2019", "'"))
    return seg_text, raw


def prepare_xml(xml: str, lang: str, threads: int = 1) -> tuple[list[str], list[str]]:
    """One valid/test XML file as fairseq prepares it: (tokenized lowercased lines, raw references)."""
    seg_text, raw = extract_segments(xml)
    from . import moses  # imported on use (lnrepro.data.moses says why)

    return T.lowercase(moses.tokenize_lines(seg_text, lang, threads)), raw


def downloads(section: dict) -> list[Download]:
    """de-en.tgz: from the section's URLs, a local copy (``archive``) or a mirror folder; md5- and size-checked."""
    return [Download(name=section["file"], urls=tuple(section["urls"]), algorithm="md5", checksum=section.get("md5"),
                     checksum_key=f"{KEY}.md5", mirror=section.get("mirror"), mirror_key=f"{KEY}.mirror",
                     size=section.get("size"), archive=section.get("archive"), archive_key=f"{KEY}.archive")]


def prepare(settings: dict, out_dir: Path, threads: int = 1, downloads_dir: Path = Path(DOWNLOADS)) -> dict:
    """Prepare ``downloads_dir/<file>`` (de-en.tgz, or a folder it was extracted into) into ``out_dir``.

    ``settings`` is the content part of the config section (data.json): ``file`` names the archive, and
    ``expected_counts`` (keys among into_cleaning, after_cleaning, train, valid, test; absent or null: no
    check) are checked before anything is written. Writes the files of :func:`lnrepro.data.prepared.write_prepared`
    and returns the stats.
    """
    from . import moses  # imported on use (lnrepro.data.moses says why)

    archive = Path(downloads_dir) / settings["file"]
    expected_counts = settings.get("expected_counts")
    arc = _Archive(archive)
    try:
        filtered: dict[str, list[str]] = {}
        filter_stats: dict[str, Any] = {}
        for lang in LANGS:
            lines = T.split_lines(arc.read_text(TRAIN_FILE.format(lang=lang)))
            filtered[lang], filter_stats[lang] = filter_train_lines(lines)
        if len(filtered["de"]) != len(filtered["en"]):
            raise LnReproError(
                f"IWSLT14 archive {archive}: after removing metadata lines train.tags has {len(filtered['de'])} "
                f"German but {len(filtered['en'])} English lines; the two files are not aligned"
            )
        xml = {(name, lang): arc.read_text(XML_FILE.format(name=name, lang=lang))
               for name in TEST_SETS for lang in LANGS}
    finally:
        arc.close()

    # Test: the XML files in fairseq's order (``cat``), each prepared by prepare_xml.
    test_tok: dict[str, list[str]] = {"de": [], "en": []}
    test_raw: dict[str, list[str]] = {"de": [], "en": []}
    test_sets: dict[str, int] = {}
    for name in TEST_SETS:
        by_lang = {lang: prepare_xml(xml[(name, lang)], lang, threads) for lang in LANGS}
        sizes = {lang: len(by_lang[lang][0]) for lang in LANGS}
        if sizes["de"] != sizes["en"]:
            raise LnReproError(
                f"IWSLT14 archive {archive}: {name} has {sizes['de']} German but {sizes['en']} English segments"
            )
        test_sets[name] = sizes["de"]
        for lang in LANGS:
            test_tok[lang] += by_lang[lang][0]
            test_raw[lang] += by_lang[lang][1]
    tok = {lang: moses.tokenize_lines(filtered[lang], lang, threads, desc=f"tokenize train.{lang}") for lang in LANGS}

    cleaned = T.clean_corpus(tok["de"], tok["en"], **CLEAN)
    train_lc = {"de": T.lowercase(cleaned.src), "en": T.lowercase(cleaned.tgt)}
    n = len(cleaned.kept)
    valid_idx = [i for i in range(n) if (i + 1) % VALID_EVERY == 0]
    train_idx = [i for i in range(n) if (i + 1) % VALID_EVERY != 0]
    splits: dict[str, tuple[list[str], list[str]]] = {
        "train": tuple([train_lc[lang][i] for i in train_idx] for lang in LANGS),
        "valid": tuple([train_lc[lang][i] for i in valid_idx] for lang in LANGS),
        "test": (test_tok["de"], test_tok["en"]),
    }
    # Provenance: valid line i is cleaned line valid_idx[i], which is filtered line cleaned.kept[valid_idx[i]].
    raw: dict[str, tuple[list[str], list[str]]] = {
        "valid": tuple([T.raw_reference(filtered[lang][cleaned.kept[i]]) for i in valid_idx] for lang in LANGS),
        "test": (test_raw["de"], test_raw["en"]),
    }

    counts = {
        "into_cleaning": len(tok["de"]),
        "after_cleaning": n,
        "train": len(train_idx),
        "valid": len(valid_idx),
        "test": len(test_tok["de"]),
    }
    check_counts(counts, expected_counts, "iwslt14", str(archive), "fairseq's on the official de-en.tgz")

    stats = {
        "dataset": "iwslt14",
        "recipe": "fairseq examples/translation/prepare-iwslt14.sh (without BPE)",
        "source": {"archive": str(archive), **({"size": archive.stat().st_size, **file_digests(archive)}
                                                if archive.is_file() else {})},
        "tokenizer": {"sacremoses": moses.SACREMOSES_VERSION, "escape": True, "final_period_split": True,
                      "aggressive_dash_splits": False, "lowercase": True},
        "train_filter": filter_stats,
        "cleaning": {**CLEAN, "max_word_length": 1000, "dropped": cleaned.dropped},
        "valid_every": VALID_EVERY,
        "test_sets": test_sets,
        "counts": counts,
        "expected_counts": dict(expected_counts) if expected_counts else None,
        "counts_checked": bool(expected_counts),
    }
    return write_prepared(Path(out_dir), splits, raw, stats)
