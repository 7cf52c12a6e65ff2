"""Main effects and interactions of the three factors (one job: the factorial fit).

An ordinary least-squares fit of y ~ norm * warmup * decay (statsmodels' formula API) over the seeds that
finished, the seeds as replicates, each factor coded -1 / +1 (sum-to-zero: post / pre, warm-up off / on,
isqrt / step). Every term is reported as 2 beta: for a main effect, the mean at the high level minus the mean
at the low level (pre minus post, warm-up on minus off, step minus isqrt) over the cell means; interactions
on the same scale (half the change of one factor's effect between the other's levels). With all eight cells
the model is saturated, so each estimate is exact in the cell means whatever the seed counts. With fewer
cells only the terms the cells identify are fitted, in hierarchical order (main effects, two-way, three-way:
a term is kept when its column is independent of those before it on the cells with data), and the others
are assumed zero. The 95% interval is the fit's t interval; there is none with one seed (no residual degree
of freedom) or when a fitted cell has fewer than two finished seeds.
"""

from __future__ import annotations

import itertools
import math
import warnings
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pandas as pd

from ..config.settings import FACTOR_KEYS, Experiment
from .budget import FAILED, LEVEL, MISSING, NOT_REACHED, OK
from .tables import grid_of

FACTORS: tuple[str, ...] = tuple(FACTOR_KEYS)
# Each factor's (low, high) level: coded -1 and +1.
LEVELS: dict[str, tuple[Any, Any]] = {"norm": ("post", "pre"), "warmup": (False, True), "decay": ("isqrt", "step")}
LEVEL_WORDS = {"norm": ("post", "pre"), "warmup": ("off", "on"), "decay": ("isqrt", "step")}
EFFECT_WORDS = {"norm": "pre minus post", "warmup": "warm-up on minus off", "decay": "step minus isqrt"}
# Hierarchical order: main effects, then two-way, then the three-way interaction.
TERMS: tuple[str, ...] = tuple(":".join(c) for k in (1, 2, 3) for c in itertools.combinations(FACTORS, k))
EFFECT_COLUMNS = ["metric", "budget", "effect", "estimate", "ci_low", "ci_high", "n_seeds", "n_obs", "n_left_out",
                  "n_missing", "note"]


def code(levels: Mapping[str, Any]) -> dict[str, int] | None:
    """The cell's -1/+1 code per factor, None when a level is outside the design (a third norm variant,
    the constant decay)."""
    out = {}
    for f in FACTORS:
        if levels[f] not in LEVELS[f]:
            return None
        out[f] = 1 if levels[f] == LEVELS[f][1] else -1
    return out


def term_value(term: str, codes: Mapping[str, int]) -> int:
    """A term's column at a cell: the product of its factors' codes."""
    return math.prod(codes[f] for f in term.split(":"))


def design(experiment: Experiment) -> tuple[pd.DataFrame, list[str]]:
    """The factorial's runs, one per cell, with their codes; and why each other selected run is not one.

    A cell's run is its first selected run that no grid generated (a grid varies settings the factors do not
    name), else its first grid run."""
    chosen: dict[tuple[int, ...], str] = {}
    notes = []
    ranked = sorted(experiment.select, key=lambda r: bool(grid_of(experiment, r)))  # stable: select order kept
    for run in ranked:
        c = code(experiment.runs[run].factors)
        if c is None:
            notes.append(f"{run}: a level outside the 2x2x2 design ({experiment.runs[run].factors})")
        elif tuple(c.values()) in chosen:
            notes.append(f"{run}: same cell as {chosen[tuple(c.values())]}")
        else:
            chosen[tuple(c.values())] = run
    rows = [{"run": run, **dict(zip(FACTORS, key))} for key, run in chosen.items()]
    order = {r: i for i, r in enumerate(experiment.select)}
    return (pd.DataFrame(rows, columns=["run", *FACTORS]).sort_values("run", key=lambda c: c.map(order))
            .reset_index(drop=True), notes)


def identifiable(cells: pd.DataFrame) -> list[str]:
    """The terms the cells identify, in hierarchical order: each kept when its column raises the rank."""
    cols = [np.ones(len(cells))]
    kept = []
    for term in TERMS:
        col = np.array([term_value(term, row) for row in cells[list(FACTORS)].to_dict("records")], dtype=float)
        if np.linalg.matrix_rank(np.column_stack([*cols, col])) > len(cols):
            cols.append(col)
            kept.append(term)
    return kept


@dataclass
class Fit:
    """One (metric, budget)'s fit: the fitted terms, statsmodels' result, and what the data allowed."""

    metric: str
    budget: str
    terms: list[str]
    result: Any  # statsmodels RegressionResults, None without data
    n_obs: int
    n_seeds: int  # the fewest finished seeds in a fitted cell
    n_left_out: int  # diverged, stopped or never reaching the target, in the design's cells
    n_missing: int
    interval: bool
    note: str

    def estimate(self, weights: Mapping[str, float]) -> tuple[float, float, float] | None:
        """2 x sum(weight x beta) over terms, with its 95% interval (NaN without one); None when a term with
        a nonzero weight is not fitted."""
        if self.result is None or any(w and t not in self.terms for t, w in weights.items()):
            return None
        r = np.array([weights.get(name, 0.0) for name in self.result.params.index], dtype=float)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # no residual degrees of freedom: statsmodels warns, we report none
            test = self.result.t_test(r)
            est = 2 * float(np.squeeze(test.effect))
            if not self.interval:
                return est, math.nan, math.nan
            lo, hi = (2 * float(v) for v in np.squeeze(test.conf_int(alpha=1 - LEVEL)))
        return est, lo, hi


def fit(obs: pd.DataFrame, cells: pd.DataFrame, metric: str, budget: str) -> Fit:
    """The fit of one (metric, budget) of the observations (budget.observations) over the design's cells."""
    import statsmodels.formula.api as smf

    obs = obs[obs["run"].isin(cells["run"])]
    data = obs[(obs["outcome"] == OK) & obs["value"].notna()].merge(cells, on="run")
    n_left_out = int(obs["outcome"].isin([*FAILED, NOT_REACHED]).sum())
    n_missing = int((obs["outcome"] == MISSING).sum())
    if data.empty:
        return Fit(metric, budget, [], None, 0, 0, n_left_out, n_missing, False, "no finished seed")
    present = cells[cells["run"].isin(data["run"])]
    terms = identifiable(present)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = smf.ols("value ~ " + (" + ".join(terms) or "1"), data=data).fit()
    n_seeds = int(data.groupby("run").size().min())
    notes = []
    if len(present) < 2 ** len(FACTORS):
        missing = [t for t in TERMS if t not in terms]
        notes.append(f"{len(present)} of {2 ** len(FACTORS)} cells with data"
                     + (f"; not identified (assumed zero): {', '.join(missing)}" if missing else ""))
    interval = result.df_resid > 0 and n_seeds >= 2
    if not interval:
        notes.append("one seed: point estimates, no interval exists" if data.groupby("run").size().max() < 2
                     else "no interval: a cell has fewer than two finished seeds")
    return Fit(metric, budget, terms, result, len(data), n_seeds, n_left_out, n_missing, interval, "; ".join(notes))


def fits(obs: pd.DataFrame, cells: pd.DataFrame) -> dict[tuple[str, str], Fit]:
    """Every (metric, budget) of the observations, fitted."""
    return {(m, b): fit(g, cells, m, b) for (b, m), g in obs.groupby(["budget", "metric"], sort=False)}


def effects_table(all_fits: Mapping[tuple[str, str], Fit]) -> pd.DataFrame:
    """tables/effects.csv: one row per (metric, budget, term); a term the cells do not identify is listed
    with no estimate."""
    rows = []
    for f in all_fits.values():
        for term in TERMS:
            est = f.estimate({term: 1.0}) if term in f.terms else None
            value, lo, hi = est or (math.nan,) * 3
            rows.append({"metric": f.metric, "budget": f.budget, "effect": term, "estimate": value, "ci_low": lo,
                         "ci_high": hi, "n_seeds": f.n_seeds, "n_obs": f.n_obs, "n_left_out": f.n_left_out,
                         "n_missing": f.n_missing,
                         "note": f.note if est is not None else "not identified by the cells with data"})
    return pd.DataFrame(rows, columns=EFFECT_COLUMNS)


def simple_effect(f: Fit, factor: str, at: Mapping[str, Any]) -> tuple[float, float, float] | None:
    """The effect of ``factor`` with the factors of ``at`` held at their levels (the others averaged):
    its main effect plus each held factor's code times their interaction."""
    held = code({**{g: LEVELS[g][0] for g in FACTORS}, **at})
    if held is None:
        return None
    weights = {factor: 1.0}
    for g in at:
        weights[":".join(x for x in FACTORS if x in (factor, g))] = float(held[g])
    return f.estimate(weights)


@dataclass(frozen=True)
class Attribution:
    """A two-cell difference split into its main-effect contributions (factor -> (estimate, low, high))."""

    difference: tuple[float, float, float]
    contributions: dict[str, tuple[float, float, float]]
    attributed: list[str]  # the factors whose contribution's interval excludes zero on the difference's side
    n_seeds: int  # the fit's fewest finished seeds in a cell


def attribute(f: Fit, low: Mapping[str, Any], high: Mapping[str, Any]) -> Attribution | None:
    """Cell ``high`` minus cell ``low`` (Figure 4: Pre-LN without warm-up, step, minus Post-LN with warm-up,
    isqrt) from the fit, and each factor's share of it: its main effect times half its change between the two
    cells. None when the fit does not reach both cells."""
    cl, ch = code(low), code(high)
    if cl is None or ch is None:
        return None
    diff = f.estimate({t: (term_value(t, ch) - term_value(t, cl)) / 2 for t in f.terms})
    parts = {g: f.estimate({g: (ch[g] - cl[g]) / 2}) for g in FACTORS if ch[g] != cl[g]}
    if diff is None or any(v is None for v in parts.values()):
        return None
    sign = math.copysign(1.0, diff[0])
    attributed = [g for g, (_, lo, hi) in parts.items() if min(lo * sign, hi * sign) > 0]
    attributed.sort(key=lambda g: -abs(parts[g][0]))
    return Attribution(diff, parts, attributed, f.n_seeds)  # type: ignore[arg-type]
