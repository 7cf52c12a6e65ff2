"""Interleaved timing: the A/B harness every measurement of ``lnrepro bench`` goes through.

Why interleaved: the machines this runs on are shared and their speed drifts by 10-20 % over minutes. Timing
all of A and then all of B would put that drift into the A/B ratio; alternating A, B, A, B, ... exposes both
to the same conditions, and the per-repetition ratios show how stable the comparison is. Medians, not means,
because a disturbance only ever slows a repetition down.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Callable, Sequence


def log(message: str) -> None:
    """Progress on stderr (stdout holds only the result tables)."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def timed(fn: Callable[[], object]) -> tuple[object, float]:
    """(fn(), seconds it took)."""
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def interleave(fns: Sequence[Callable[[], object]], reps: int, warmup: int = 1) -> list[list[float]]:
    """Seconds of each of ``fns`` per repetition: ``warmup`` untimed rounds, then ``reps`` timed rounds,
    each round calling fns[0], fns[1], ... once in that order."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    seconds: list[list[float]] = [[] for _ in fns]
    for _ in range(reps):
        for i, fn in enumerate(fns):
            seconds[i].append(timed(fn)[1])
    return seconds


def summary(values: Sequence[float]) -> dict:
    """Median, min, max and the spread (max - min) / median of one quantity over the repetitions."""
    med = statistics.median(values)
    return {"median": med, "min": min(values), "max": max(values),
            "spread": (max(values) - min(values)) / med if med else 0.0, "values": list(values)}


def rates(work: float | Sequence[float], seconds: Sequence[float]) -> list[float]:
    """Work per second for each repetition (tokens/s, sentences/s, FLOP/s, ...); ``work`` is the same for
    every repetition or one value per repetition."""
    works = [work] * len(seconds) if isinstance(work, (int, float)) else list(work)
    return [w / s for w, s in zip(works, seconds)]


def ab(work_a: float | Sequence[float], seconds_a: Sequence[float], work_b: float | Sequence[float],
       seconds_b: Sequence[float]) -> dict:
    """Rates of A and B and the A/B rate ratio (> 1: A is faster), from interleaved repetitions.

    ``ratio`` is the median of the per-repetition ratios (A and B of one round ran back to back, on the same
    work), ``ratio_per_rep`` their summary: its spread says how far the comparison itself moved while the
    machine's speed drifted.
    """
    ra, rb = rates(work_a, seconds_a), rates(work_b, seconds_b)
    per_rep = summary([x / y for x, y in zip(ra, rb)])
    return {"a": summary(ra), "b": summary(rb), "ratio": per_rep["median"], "ratio_per_rep": per_rep}
