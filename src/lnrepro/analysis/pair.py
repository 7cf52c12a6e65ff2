"""Figure 4's pair: the two selected runs the report compares (``comparisons.figure4``), and the values of a
run's seeds that every contrast between two runs draws from: below the statistics and the sections that test
and describe the pair."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..config.settings import FACTOR_KEYS, Experiment
from .aggregate import STATUS_OK

FACTORS = tuple(FACTOR_KEYS)  # norm, warmup, decay
FIGURE4 = "figure4"


@dataclass(frozen=True)
class Pair:
    """Two selected runs compared: ``name`` (figure4, or "from > to"), the factors that differ."""

    name: str
    from_run: str
    to_run: str
    factors: tuple[str, ...]


def figure4_pair(experiment: Experiment) -> tuple[Pair | None, str]:
    """Figure 4's pair from ``comparisons.figure4`` (its first run is the low arm), or None with why."""
    comparison = experiment.comparisons.get("figure4")
    if comparison is None:
        return None, "the configuration has no comparisons.figure4"
    runs = list(comparison.runs)
    missing = [r for r in runs if r not in experiment.select]
    if len(runs) != 2 or missing:
        return None, (f"the Figure 4 pair (comparisons.figure4: {', '.join(runs)}) is not selected in this "
                      f"experiment ({', '.join(missing)} not in select)" if missing else
                      "comparisons.figure4 does not name two runs")
    a, b = (experiment.runs[r].factors for r in runs)
    return Pair(FIGURE4, runs[0], runs[1], tuple(f for f in FACTORS if a[f] != b[f])), ""


def seed_values(epochs: pd.DataFrame, run: str, epoch: int, col: str) -> list[float]:
    """``run``'s finished seeds' ``col`` at ``epoch`` (the samples of a Welch contrast)."""
    g = epochs[(epochs["run"] == run) & (epochs["epoch"] == epoch) & (epochs["status"] == STATUS_OK)][col].dropna()
    return g.astype(float).tolist()
