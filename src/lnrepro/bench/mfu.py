"""Model FLOP utilization: the training step's model FLOP/s over the matmul peak measured in the same run.

The peak is what this machine gives one large square matmul (``lnrepro.host.matmul``, the one every job's host
record times) at the bench's thread count, not a datasheet number: the ceiling the training step could reach with its matmuls alone. It is timed inside every round of
the training pair (project, reference, peak), so numerator and denominator see the same machine load and
MFU is taken per repetition. Model FLOPs are ``Transformer.flops_per_batch`` on the unpadded tokens
(batches.Batch.flops), the same count for project and reference since both have the same shape.
"""

from __future__ import annotations

from .timing import summary


def add_mfu(rows: list[dict]) -> dict[str, dict]:
    """Add model FLOP/s and MFU per implementation to every training row; return the peaks per precision.

    A row's ``seconds["peak"]`` are the matmul timings of its rounds; MFU is the median over repetitions of
    (the round's batch's model FLOPs / step seconds) / (matmul FLOPs / matmul seconds) of the same round.
    """
    for row in rows:
        peak = [row["peak_flops"] / s for s in row["seconds"]["peak"]]
        row["mfu"] = {"peak_flop_per_s": summary(peak)}
        for impl in ("project", "reference"):
            achieved = {kind: [f / s for f, s in zip(row["flops"][kind], row["seconds"][impl])]
                        for kind in ("unpadded", "padded")}
            row["mfu"][impl] = {
                "model_flop_per_s": summary(achieved["unpadded"])["median"],
                "mfu": summary([a / p for a, p in zip(achieved["unpadded"], peak)])["median"],
                "mfu_padded_flops": summary([a / p for a, p in zip(achieved["padded"], peak)])["median"],
            }
    peaks: dict[str, list[float]] = {}
    for row in rows:
        peaks.setdefault(row["precision"], []).extend(row["mfu"]["peak_flop_per_s"]["values"])
    return {p: {"n": rows[0]["peak_n"], **summary(v)} for p, v in peaks.items()}
