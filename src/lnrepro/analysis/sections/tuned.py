"""Tuned baselines (one job: select each grid's best run, say whether it brackets, and compare tuned against tuned).

Each grid's best run is the one with the lowest seed-mean validation loss at the last epoch (the selection
never sees the test split). Per axis of a grid (a key it varies), the best run's value is ``bracketed`` when
values on both sides of it were tried, and at an edge of the grid otherwise (``edge: extend upward`` at the
highest value tried, ``edge: extend downward`` at the lowest): the optimum may lie beyond. Two grids
are compared when their bases are the two runs of a configured comparison and they try the same number of
settings (an equal tuning budget for both arms); the comparison is on the test split, as the difference of the two
tuned runs' seed means with Welch's 95% interval, and it enters the confound table as a comparison of its own
(``{comparison}_tuned``).

Extending a grid is a manual act: add a value to its ``values`` and rerun (Snakemake trains only the new runs).
So its history is recorded where the results are published from, the config: ``grids.<name>.extended`` maps an
axis to the values added after the grid's first run, one extension each, in the order they were added
(``GridSettings.extended``, in experiment.json). The brackets table and sentences say per axis how many
extensions were needed; a grid without any is the grid as first planned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import pandas as pd

from ...config.settings import Comparison, Experiment
from ..stats.budget import LEVEL, OK
from ..tables import setting_cell

BRACKET_COLUMNS = ["grid", "axis", "best_run", "best_value", "values", "n_values", "extensions", "extended_with",
                   "position", "selected_by"]
BRACKETED, EDGE_UP, EDGE_DOWN = "bracketed", "edge: extend upward", "edge: extend downward"
ONE_VALUE, UNORDERED, NOT_SCORED = "one value: not tuned", "not ordered", "not scored yet"
TUNED_COLUMNS = ["comparison", "grid_a", "run_a", "grid_b", "run_b", "metric", "mean_a", "mean_b", "difference",
                 "ci_low", "ci_high", "n_a", "n_b"]


@dataclass(frozen=True)
class TunedPair:
    """Two grids whose best runs are compared: the comparison their bases make."""

    comparison: str
    grid_a: str
    grid_b: str


def best_of(cells: pd.DataFrame, grids: Mapping[str, Sequence[str]], budget: str, metric: str) -> dict[str, str]:
    """Grid name -> its run with the lowest seed mean of ``metric`` at ``budget`` (grids with nothing scored
    are left out)."""
    out = {}
    for name, runs in grids.items():
        rows = cells[(cells["budget"] == budget) & (cells["metric"] == metric) & cells["run"].isin(runs)
                     & (cells["n"] > 0)]
        if len(rows):
            out[name] = str(rows.loc[rows["mean"].idxmin(), "run"])
    return out


def grid_table(cells: pd.DataFrame, experiment: Experiment, runs: Sequence[str], varied: Sequence[str],
               budget: str, metrics: Sequence[str], best: str | None) -> pd.DataFrame:
    """One grid as a table: per run, the varied settings, each metric's seed mean, interval and finished
    seeds at ``budget``, and which run was selected."""
    rows = []
    at = cells[cells["budget"] == budget].set_index(["run", "metric"])
    for run in runs:
        row: dict[str, Any] = {"run": run, **{k: setting_cell(experiment.runs[run].flat()[k]) for k in varied}}
        for m in metrics:
            c = at.loc[(run, m)] if (run, m) in at.index else None
            for stat in ("mean", "ci_low", "ci_high", "n"):
                row[f"{m} {stat}"] = c[stat] if c is not None else math.nan
        row["selected"] = "best" if run == best else ""
        rows.append(row)
    return pd.DataFrame(rows)


def _ordered(v: Any) -> tuple[float, ...] | None:
    """A grid value as a sort key: a number, or a list of numbers (decay epochs); None for any other (a switch,
    a name), which has no upward or downward."""
    items = v if isinstance(v, (list, tuple)) else [v]
    if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in items):
        return tuple(float(x) for x in items)
    return None


def bracket_position(values: Sequence[Any], best: Any) -> str:
    """Where ``best`` lies among an axis's ``values``: bracketed, at the highest (extend upward) or the lowest
    (extend downward) value, the axis's only value, or not ordered (values that are not numbers)."""
    if len({repr(v) for v in values}) < 2:
        return ONE_VALUE
    keys = [k for k in map(_ordered, values) if k is not None]
    if len(keys) < len(values):
        return UNORDERED
    here = _ordered(best)
    return EDGE_UP if here == max(keys) else EDGE_DOWN if here == min(keys) else BRACKETED


def bracket_table(experiment: Experiment, best: Mapping[str, str], selected_by: str) -> pd.DataFrame:
    """tables/tuned_brackets.csv: per grid and axis, the best trial's value, whether the grid brackets it, and
    the values added by extensions (in the order they were added)."""
    rows = []
    for name, grid in experiment.grids.items():
        run = best.get(name, "")
        for axis, values in grid.values.items():
            value = experiment.runs[run].flat()[axis] if run else None
            ordered = sorted(values, key=_ordered) if all(_ordered(v) is not None for v in values) else list(values)
            added = grid.extended.get(axis, ())
            rows.append({"grid": name, "axis": axis, "best_run": run,
                         "best_value": setting_cell(value) if run else "",
                         "values": "; ".join(str(setting_cell(v)) for v in ordered), "n_values": len(values),
                         "extensions": len(added), "extended_with": "; ".join(str(setting_cell(v)) for v in added),
                         "position": bracket_position(values, value) if run else NOT_SCORED,
                         "selected_by": selected_by})
    return pd.DataFrame(rows, columns=BRACKET_COLUMNS)


def bracket_sentences(brackets: pd.DataFrame) -> list[str]:
    """Per grid: its best trial and, per axis, whether the grid brackets its value and after how many
    extensions (none on any axis: the grid as first planned)."""
    out = []
    for name, g in brackets.groupby("grid", sort=False):
        first = g.iloc[0]
        if first["position"] == NOT_SCORED:
            out.append(f"Grid {name}: no trial scored yet.")
            continue
        words = {BRACKETED: "values on both sides tried (bracketed)", EDGE_UP: "the highest (edge: extend upward)",
                 EDGE_DOWN: "the lowest (edge: extend downward)", ONE_VALUE: "the only one (not tuned)",
                 UNORDERED: "among values without an order (nothing to bracket)"}
        axes = [f"{r.axis} {r.best_value} of {r.n_values} tried ({r.values}): {words[r.position]}" + _after(r)
                for r in g.itertuples()]
        out.append(f"Grid {name}: its best trial {first['best_run']} ({first['selected_by']}): " + "; ".join(axes)
                   + f"; {_bracket_verdict(g['position'])}"
                   + ("" if g["extensions"].any() else "; the grid as first planned (no extension)") + ".")
    return out


def _bracket_verdict(positions: pd.Series) -> str:
    """Whether a grid brackets its optimum: on every axis with an order (the only ones that can bracket)."""
    edges = int(positions.isin([EDGE_UP, EDGE_DOWN]).sum())
    if edges:
        return f"its optimum may lie beyond the grid on {edges} axis{'es' if edges > 1 else ''}"
    if not (positions == BRACKETED).any():
        return "no axis has values on both sides of the best to bracket it"
    return ("it brackets its optimum on every tuned axis" if positions.isin([BRACKETED, ONE_VALUE]).all() else
            "it brackets its optimum on every ordered axis (the others have no order)")
def _after(row: Any) -> str:
    """An axis's extensions, as its sentence says them (nothing when it has none)."""
    n = int(row.extensions)
    return f", after {n} extension{'s' if n > 1 else ''} (added {row.extended_with})" if n else ""


def tuned_pairs(experiment: Experiment) -> list[TunedPair]:
    """The grid pairs whose bases are a configured comparison's two runs, with as many runs each."""
    pairs = []
    for name, comp in experiment.comparisons.items():
        if len(comp.runs) != 2:
            continue
        a, b = ([g for g, s in experiment.grids.items() if s.base == base] for base in comp.runs)
        pairs += [TunedPair(name, ga, gb) for ga in a for gb in b
                  if len(experiment.grids[ga].runs) == len(experiment.grids[gb].runs)]
    return pairs


def tuned_comparisons(experiment: Experiment, pairs: Sequence[TunedPair], best: Mapping[str, str]
                      ) -> dict[str, Comparison]:
    """The tuned pairs as comparisons of their own for the confound analysis (``{comparison}_tuned``)."""
    out = {}
    for p in pairs:
        if p.grid_a in best and p.grid_b in best:
            comp = experiment.comparisons[p.comparison]
            out[f"{p.comparison}_tuned"] = Comparison(
                runs=(best[p.grid_a], best[p.grid_b]), factor=comp.factor,
                claim=f"tuned against tuned ({p.grid_a} vs {p.grid_b}, each grid's best by validation loss): "
                      f"{comp.claim}")
    return out


def _difference(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """mean(b) - mean(a) with Welch's interval (NaN with fewer than two seeds on a side)."""
    from statsmodels.stats.weightstats import CompareMeans, DescrStatsW

    diff = (sum(b) / len(b) - sum(a) / len(a)) if a and b else math.nan
    if len(a) < 2 or len(b) < 2:
        return diff, math.nan, math.nan
    lo, hi = CompareMeans(DescrStatsW(list(b)), DescrStatsW(list(a))).tconfint_diff(alpha=1 - LEVEL, usevar="unequal")
    return diff, float(lo), float(hi)


def tuned_table(obs: pd.DataFrame, pairs: Sequence[TunedPair], best: Mapping[str, str], budget: str,
                metrics: Sequence[str]) -> pd.DataFrame:
    """Per tuned pair and metric (test split): both tuned runs' seed means and b - a with its interval."""
    ok = obs[(obs["budget"] == budget) & (obs["outcome"] == OK)]
    rows = []
    for p in pairs:
        if p.grid_a not in best or p.grid_b not in best:
            continue
        ra, rb = best[p.grid_a], best[p.grid_b]
        for m in metrics:
            a, b = (ok[(ok["run"] == r) & (ok["metric"] == m)]["value"].dropna().tolist() for r in (ra, rb))
            diff, lo, hi = _difference(a, b)
            rows.append({"comparison": p.comparison, "grid_a": p.grid_a, "run_a": ra, "grid_b": p.grid_b, "run_b": rb,
                         "metric": m, "mean_a": sum(a) / len(a) if a else math.nan,
                         "mean_b": sum(b) / len(b) if b else math.nan, "difference": diff, "ci_low": lo,
                         "ci_high": hi, "n_a": len(a), "n_b": len(b)})
    return pd.DataFrame(rows, columns=TUNED_COLUMNS)
