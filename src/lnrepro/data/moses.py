"""tokenizer.perl as fairseq's IWSLT recipe ran it: sacremoses (a port of tokenizer.perl) plus the one rule in
which the tokenizer.perl that fairseq ran differs from sacremoses (:class:`FairseqMosesTokenizer`).

Its own module, imported by the preparations only when they tokenize: importing sacremoses compiles its regular
expressions (about half a second), which every ``snakemake`` start would pay through the dataset registry.
"""

from __future__ import annotations

import multiprocessing
import re
from concurrent.futures import ProcessPoolExecutor

import sacremoses
from sacremoses import MosesTokenizer
from tqdm import tqdm

from ..errors import LnReproError

# The sacremoses version whose output (plus the final-period rule below) was checked against fairseq's
# tokenized dev2010 (887/887 lines per language, tests/test_text.py). Another version may tokenize
# differently, which would silently change the data, so we refuse to run with one.
SACREMOSES_VERSION = "0.2.0"

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
