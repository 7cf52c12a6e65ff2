"""The text pipeline of fairseq's IWSLT recipe: Moses tokenization, clean-corpus-n, lowercasing.

fairseq's ``examples/translation/prepare-iwslt14.sh`` runs three Moses scripts:
``tokenizer/tokenizer.perl -threads 8 -l $l`` (escaping on, no aggressive hyphen splitting),
``training/clean-corpus-n.perl -ratio 1.5 CORPUS de en OUT 1 175`` and ``tokenizer/lowercase.perl``.
This module reproduces them in Python: tokenization through sacremoses (a port of tokenizer.perl) plus the
one rule in which the tokenizer.perl that fairseq ran differs from sacremoses (see
:class:`FairseqMosesTokenizer`), and clean-corpus-n / lowercase.perl re-implemented line for line.

Lines are split on ``"\\n"`` only (as Perl's ``<STDIN>`` does), never with ``str.splitlines()``, which also
breaks on U+2028, U+0085, form feeds, ... and would shift the alignment of the two sides.
"""

from __future__ import annotations

import multiprocessing
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import sacremoses
from sacremoses import MosesTokenizer
from tqdm import tqdm

from ..errors import LnReproError

# The sacremoses version whose output (plus the final-period rule below) was checked against fairseq's
# tokenized dev2010 (887/887 lines per language, tests/test_text.py). Another version may tokenize
# differently, which would silently change the data, so we refuse to run with one.
SACREMOSES_VERSION = "0.2.0"

# Characters Python's str.splitlines() breaks on; prepared files are read back with it (lnrepro.io.read_lines),
# so raw (untokenized) reference lines must not contain them. Tokenized lines never do: the tokenizer turns
# every whitespace run into one space and deletes ASCII control characters.
_LINE_BREAKS = {ord(c): " " for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}

# Perl's /^\s*$/ on a decoded line: tokenizer.perl prints such lines unchanged instead of tokenizing them.
_BLANK = re.compile(r"^\s*$")
# tokenizer.perl's test for "a token that ends in a period" (sacremoses uses the same regex).
_ENDS_WITH_PERIOD = re.compile(r"^(\S+)\.$")


def check_sacremoses_version() -> None:
    """Stop if the installed sacremoses is not the version the tokenizer rule was verified with."""
    if sacremoses.__version__ != SACREMOSES_VERSION:
        raise LnReproError(
            f"sacremoses {sacremoses.__version__} is installed, but the Moses tokenization of lnrepro was verified "
            f"against fairseq's output with sacremoses=={SACREMOSES_VERSION} (see pyproject.toml); install that "
            "version, since another one can tokenize differently and change the prepared data"
        )


class FairseqMosesTokenizer(MosesTokenizer):
    """sacremoses' MosesTokenizer with the nonbreaking-prefix rule of the tokenizer.perl fairseq used.

    That tokenizer.perl (the Moses master of 2017-2019, the version with ``-threads``, which
    prepare-iwslt14.sh clones) checks the *last* token of a line first: if it ends in a period, the period is
    split off unconditionally ("split last words independently as they are unlikely to be non-breaking
    prefixes"), before any nonbreaking-prefix test. sacremoses 0.2.0 (like later Moses) applies the prefix
    tests to the last token too, so it keeps ``usw.``, ``U.S.``, ``t.`` or ``75.`` whole at the end of a line.
    On fairseq's tokenized dev2010 this is the only difference (4 lines per language).
    """

    def handles_nonbreaking_prefixes(self, text: str) -> str:  # sacremoses' name for this step
        tokens = text.split()
        if tokens:
            match = _ENDS_WITH_PERIOD.search(tokens[-1])
            if match:
                # Splitting first is equivalent to Moses' order of tests: the token before it still sees a
                # next token starting with the same character, and the lone "." matches no rule.
                tokens[-1] = match.group(1) + " ."
        return super().handles_nonbreaking_prefixes(" ".join(tokens))


def make_tokenizer(lang: str) -> FairseqMosesTokenizer:
    """The tokenizer for one language (``tokenizer.perl -l LANG``), after checking the sacremoses version."""
    check_sacremoses_version()
    return FairseqMosesTokenizer(lang=lang)


def tokenize_line(tok: MosesTokenizer, line: str) -> str:
    """tokenizer.perl on one line (without its newline): escaping on, blank lines passed through unchanged."""
    if _BLANK.match(line):
        return line
    return tok.tokenize(line, escape=True, return_str=True)


_WORKER_TOKENIZERS: dict[str, FairseqMosesTokenizer] = {}


def _tokenize_chunk(args: tuple[str, list[str]]) -> list[str]:
    """Worker: tokenize one chunk of lines (one tokenizer per process and language, built on first use)."""
    lang, lines = args
    tok = _WORKER_TOKENIZERS.get(lang)
    if tok is None:
        tok = _WORKER_TOKENIZERS[lang] = make_tokenizer(lang)
    return [tokenize_line(tok, line) for line in lines]


def tokenize_lines(lines: list[str], lang: str, threads: int = 1, desc: str | None = None,
                   chunk_size: int = 2000) -> list[str]:
    """Moses-tokenize ``lines`` in order, with ``threads`` worker processes (1 = in this process).

    sacremoses is pure Python (~50-100 us per line), so the 2 x 174k IWSLT training lines take about a minute
    on one core; the work is split into chunks over a process pool. The output does not depend on ``threads``.
    """
    check_sacremoses_version()
    chunks = [(lang, lines[i:i + chunk_size]) for i in range(0, len(lines), chunk_size)]
    out: list[str] = []
    with tqdm(total=len(lines), desc=desc or f"tokenize {lang}", unit="line", disable=None) as bar:
        if threads <= 1 or len(chunks) <= 1:
            for chunk in chunks:
                out.extend(_tokenize_chunk(chunk))
                bar.update(len(chunk[1]))
        else:
            # fork where there is one: workers start at once and need no importable __main__ (spawn fails for
            # `python - < script`); they run only pure-Python tokenization, so threads of the parent (torch,
            # tqdm's monitor) are not touched in the child.
            method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
            ctx = multiprocessing.get_context(method)
            with ProcessPoolExecutor(max_workers=min(threads, len(chunks)), mp_context=ctx) as pool:
                for chunk, result in zip(chunks, pool.map(_tokenize_chunk, chunks)):
                    out.extend(result)
                    bar.update(len(chunk[1]))
    return out


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
