"""The one writer of ``data/prepared/``: every dataset (iwslt14, multi30k, synthetic) ends here.

Files (docs/outputs.md): ``{train,valid,test}.{de,en}`` (tokenized, lowercased, one sentence per line),
``{valid,test}.raw.{de,en}`` (the untokenized sentences, for detokenized BLEU) and ``stats.json``.
The writer checks the contract downstream stages rely on (parallel line counts, one sentence per line)
so that a dataset module cannot silently produce files the BPE and training stages misread; and
:func:`check_counts` is every dataset's check of its line counts against the config's ``expected_counts``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ..errors import LnReproError
from ..io import atomic_write_json, atomic_write_lines, where_ran

SPLITS = ("train", "valid", "test")
RAW_SPLITS = ("valid", "test")
LANGS = ("de", "en")

# Every character Python's str.splitlines() breaks on. Readers (lnrepro.io.read_lines) use splitlines(),
# so any of these inside a sentence would shift every later line and break the source/target pairing.
LINE_BREAK_CHARS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_LINE_BREAK_TABLE = {ord(c): None for c in LINE_BREAK_CHARS}


def has_line_break(line: str) -> bool:
    """True when ``line`` holds a character that would split it into two lines when read back."""
    return len(line.translate(_LINE_BREAK_TABLE)) != len(line)


def _check_pair(name: str, pair: Any) -> tuple[list[str], list[str]]:
    """Validate one (de lines, en lines) pair and return it as two lists."""
    if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
        raise LnReproError(f"prepared split '{name}': expected a (de_lines, en_lines) pair")
    de, en = list(pair[0]), list(pair[1])
    if len(de) != len(en):
        raise LnReproError(
            f"prepared split '{name}': {len(de)} German lines but {len(en)} English lines; "
            "the two sides of a parallel split must have equal line counts"
        )
    for lang, lines in zip(LANGS, (de, en)):
        for i, line in enumerate(lines):
            if not isinstance(line, str):
                raise LnReproError(f"prepared split '{name}.{lang}' line {i + 1}: expected str, got {type(line).__name__}")
            if has_line_break(line):
                raise LnReproError(
                    f"prepared split '{name}.{lang}' line {i + 1}: contains a line-break character "
                    f"({line!r:.80}); each sentence must be exactly one line"
                )
    return de, en


def check_counts(counts: Mapping[str, int], expected: Mapping[str, int] | None, dataset: str, source: str,
                 reference: str) -> None:
    """Stop, before anything is written, when ``counts`` differ from ``defaults.data.<dataset>.expected_counts``.

    Other counts mean other data (another archive, a changed recipe), so results would not be comparable with
    those the expected counts stand for; ``reference`` names them in the message (e.g. "fairseq's on the
    official de-en.tgz"). No ``expected`` (absent, or ``--no-check-counts``): nothing is checked.
    """
    wrong = {k: (counts.get(k), v) for k, v in (expected or {}).items() if counts.get(k) != v}
    if wrong:
        detail = ", ".join(f"{k}: got {got}, expected {exp}" for k, (got, exp) in wrong.items())
        key = f"defaults.data.{dataset}"
        raise LnReproError(
            f"{dataset} preparation of {source} gave line counts that differ from {reference} ({detail}); results "
            f"on this data would not be comparable. If this data is intended, set {key}.check_counts to false "
            f"(lnrepro prepare --no-check-counts), or {key}.expected_counts to its counts"
        )


def write_prepared(
    out_dir: Path,
    splits: dict[str, tuple[list[str], list[str]]],
    raw: dict[str, tuple[list[str], list[str]]],
    stats: dict,
) -> dict:
    """Write ``out_dir/{split}.{de,en}``, ``{valid,test}.raw.{de,en}`` and ``stats.json`` atomically.

    ``splits`` maps train/valid/test to (German lines, English lines), already tokenized and lowercased;
    ``raw`` maps valid/test to the untokenized lines, parallel to ``splits``. ``stats`` holds whatever the
    dataset wants to record (source, filters, ...); the writer adds ``lines`` (sentences per split),
    ``raw_lines`` and ``where_ran``. Returns the stats as written. Nothing is written unless every check passes.
    """
    out_dir = Path(out_dir)
    missing = [s for s in SPLITS if s not in splits]
    if missing:
        raise LnReproError(f"prepared data: missing split(s) {missing}; expected {list(SPLITS)}")
    missing_raw = [s for s in RAW_SPLITS if s not in raw]
    if missing_raw:
        raise LnReproError(f"prepared data: missing raw split(s) {missing_raw}; expected {list(RAW_SPLITS)}")

    checked = {s: _check_pair(s, splits[s]) for s in SPLITS}
    checked_raw = {s: _check_pair(f"{s}.raw", raw[s]) for s in RAW_SPLITS}
    for s in RAW_SPLITS:
        if len(checked_raw[s][0]) != len(checked[s][0]):
            raise LnReproError(
                f"prepared split '{s}': {len(checked_raw[s][0])} raw lines but {len(checked[s][0])} "
                "tokenized lines; raw text must be parallel to the tokenized text"
            )
    for s in SPLITS:
        if not checked[s][0]:
            raise LnReproError(f"prepared split '{s}' is empty (nothing written to {out_dir}): every split needs at "
                               "least one sentence pair; check the dataset's files and its cleaning settings")

    # Data files first, stats.json last: its presence means the whole folder is complete.
    for s in SPLITS:
        for lang, lines in zip(LANGS, checked[s]):
            atomic_write_lines(out_dir / f"{s}.{lang}", lines)
    for s in RAW_SPLITS:
        for lang, lines in zip(LANGS, checked_raw[s]):
            atomic_write_lines(out_dir / f"{s}.raw.{lang}", lines)

    final = dict(stats)
    final["lines"] = {s: len(checked[s][0]) for s in SPLITS}
    final["raw_lines"] = {s: len(checked_raw[s][0]) for s in RAW_SPLITS}
    final["where_ran"] = where_ran()
    atomic_write_json(out_dir / "stats.json", final)
    return final
