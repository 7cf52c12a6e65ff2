"""Preparation: lines/s of the Moses tokenization stage, one process against all cores.

Tokenization (lnrepro.data.moses.tokenize_lines: sacremoses plus fairseq's final-period rule) is what the
IWSLT14 preparation spends its time on, with ``threads`` worker processes. Input: IWSLT14-sized, about 170k
German lines from the synthetic generator (the IWSLT training text itself is not redistributable), written
once to the cache.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..data.synthetic import generate
from ..data.moses import tokenize_lines
from ..io import atomic_write_lines, read_lines
from .corpus import SYNTHETIC_SEED
from .timing import ab, interleave, log

IWSLT14_LINES = 170_000  # the IWSLT14 De-En training side: 174,443 lines before cleaning


def input_lines(n: int, cache: Path) -> list[str]:
    """``n`` raw German sentences of the synthetic generator (cached: generating them takes a while)."""
    path = cache / f"prepare-input-{n}.de"
    if not path.exists():
        log(f"generating {n} synthetic German lines into {path}")
        atomic_write_lines(path, generate(SYNTHETIC_SEED, "train", n)[0])
    return read_lines(path)


def measure_prepare(n: int, reps: int, cache: Path) -> dict:
    """lines/s of tokenize_lines with 1 process and with one per core, interleaved."""
    lines = input_lines(n, cache)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    # warm-up on a slice: builds the tokenizers (regex compilation), not worth a full untimed round
    for threads in (1, cores):
        tokenize_lines(lines[:4000], "de", threads)
    log(f"prepare: Moses tokenization of {len(lines)} lines, 1 process vs {cores}, {reps} repetitions")
    s_one, s_all = interleave([lambda: tokenize_lines(lines, "de", 1), lambda: tokenize_lines(lines, "de", cores)],
                              reps, warmup=0)
    res = ab(len(lines), s_all, len(lines), s_one)
    return {"lines": len(lines), "cores": cores, "seconds": {"one_process": s_one, "all_cores": s_all},
            "lines_per_s": {"one_process": res["b"], "all_cores": res["a"]},
            "speedup": res["ratio"], "speedup_per_rep": res["ratio_per_rep"],
            "mean_words_per_line": sum(len(line.split()) for line in lines) / len(lines)}
