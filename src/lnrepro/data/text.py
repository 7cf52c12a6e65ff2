"""The text pipeline of fairseq's IWSLT recipe around its tokenizer: clean-corpus-n, lowercasing, line handling.

fairseq's ``examples/translation/prepare-iwslt14.sh`` runs three Moses scripts:
``tokenizer/tokenizer.perl -threads 8 -l $l`` (escaping on, no aggressive hyphen splitting),
``training/clean-corpus-n.perl -ratio 1.5 CORPUS de en OUT 1 175`` and ``tokenizer/lowercase.perl``.
The tokenizer is lnrepro.data.moses; clean-corpus-n and lowercase.perl are re-implemented here line for line.

Lines are split on ``"\\n"`` only (as Perl's ``<STDIN>`` does), never with ``str.splitlines()``, which also
breaks on U+2028, U+0085, form feeds, ... and would shift the alignment of the two sides.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import LnReproError

# Characters Python's str.splitlines() breaks on; prepared files are read back with it (lnrepro.io.read_lines),
# so raw (untokenized) reference lines must not contain them. Tokenized lines never do: the tokenizer turns
# every whitespace run into one space and deletes ASCII control characters.
_LINE_BREAKS = {ord(c): " " for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}


def lowercase(lines: list[str]) -> list[str]:
    """lowercase.perl: Perl's ``lc`` on every line (full Unicode lowercase mapping, as str.lower())."""
    return [line.lower() for line in lines]


def split_lines(text: str) -> list[str]:
    """Lines of a text as Perl/grep/sed see them: split on "\\n" only; a final newline ends the last line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def raw_reference(text: str) -> str:
    """An untokenized reference line: surrounding whitespace stripped, line-break characters made spaces.

    Nothing else is changed: raw text is for detokenized scoring (sacreBLEU tokenizes it itself). Characters
    such as U+2028 inside a sentence would otherwise split it in two when the file is read back with
    str.splitlines().
    """
    return text.translate(_LINE_BREAKS).strip()


@dataclass
class CleanResult:
    """Output of :func:`clean_corpus`: the kept (normalized) line pairs and where each came from."""

    src: list[str]
    tgt: list[str]
    kept: list[int]  # 0-based index into the input of every kept pair, in order (line provenance)
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> number of pairs dropped


def _normalize_for_clean(line: str, factored: bool) -> str:
    # clean-corpus-n.perl: s/\|//g unless factored; s/\s+/ /g; s/^ //; s/ $//
    if not factored:
        line = line.replace("|", "")
    line = re.sub(r"\s+", " ", line)
    if line.startswith(" "):
        line = line[1:]
    if line.endswith(" "):
        line = line[:-1]
    return line


def clean_corpus(src: list[str], tgt: list[str], min_len: int = 1, max_len: int = 175, ratio: float = 1.5,
                 max_word_length: int = 1000) -> CleanResult:
    """Moses ``clean-corpus-n.perl -ratio RATIO corpus src tgt out MIN MAX`` on two parallel line lists.

    Exactly as the Perl script (mosesdecoder scripts/training/clean-corpus-n.perl): a pair is dropped when
    either side is empty after whitespace normalization, has more than ``max_len`` or fewer than ``min_len``
    words (words = the pieces of the space-separated line), when one side has more than ``ratio`` times the
    words of the other, or when a word is longer than ``max_word_length`` characters. Kept lines are written
    normalized: whitespace runs become one space, leading/trailing space removed, and ``|`` deleted unless the
    first pair contains one ("factored" corpus; after Moses escaping ``|`` is ``&#124;``, so a no-op here).
    Reasons are counted in the order the script tests them.
    """
    if len(src) != len(tgt):
        raise LnReproError(
            f"clean-corpus: the two sides have {len(src)} and {len(tgt)} lines; a parallel corpus must be aligned"
        )
    factored = bool(src) and ("|" in src[0] or "|" in tgt[0])
    long_word = re.compile(r"[^\s|]{%d}" % (max_word_length + 1))
    reasons = ("empty", "too_long", "too_short", "ratio", "word_too_long")
    dropped = dict.fromkeys(reasons, 0)
    out_src: list[str] = []
    out_tgt: list[str] = []
    kept: list[int] = []
    for i, (f, e) in enumerate(zip(src, tgt)):
        f = _normalize_for_clean(f, factored)
        e = _normalize_for_clean(e, factored)
        if f == "" or e == "":
            dropped["empty"] += 1
            continue
        fc, ec = len(f.split(" ")), len(e.split(" "))
        if ec > max_len or fc > max_len:
            dropped["too_long"] += 1
        elif ec < min_len or fc < min_len:
            dropped["too_short"] += 1
        elif ec / fc > ratio or fc / ec > ratio:
            dropped["ratio"] += 1
        elif long_word.search(e) or long_word.search(f):
            dropped["word_too_long"] += 1
        else:
            out_src.append(f)
            out_tgt.append(e)
            kept.append(i)
    return CleanResult(out_src, out_tgt, kept, dropped)
