"""Main effects and interactions of the three factors (one job: the factorial fit).

A least-squares fit of y ~ norm * warmup * decay (statsmodels' formula API) over the seeds that finished, the
seeds as replicates, each factor coded -1 / +1 (sum-to-zero: post / pre, warm-up off / on, isqrt / step). Every
term is reported as 2 beta: for a main effect, the mean at the high level minus the mean at the low level (pre
minus post, warm-up on minus off, step minus isqrt) over the cell means; interactions on the same scale (half
the change of one factor's effect between the other's levels). With all eight cells the model is saturated, so
each estimate is exact in the cell means whatever the seed counts. With fewer cells only the terms the cells
identify are fitted, in hierarchical order (main effects, two-way, three-way: a term is kept when its column is
independent of those before it on the cells with data), and the others are assumed zero.

The 95% interval respects unequal variances (``analysis.report.covariance``, ``COVARIANCES``): by default
("cell") each estimate's variance is the sum over cells of its weight on the cell squared times that cell's
own seed variance over its seeds, statsmodels' HC2 (which in the saturated design is exactly Welch's variance
of a contrast of cell means), with the Welch-Satterthwaite degrees of freedom (each cell's variance rests on its
seeds minus one); "hc3" is HC3 (each cell's variance inflated by n/(n-1) over HC2: x1.5 at three seeds), with
the same degrees of freedom; "pooled" the ordinary OLS interval (one residual variance over every cell, the
residual degrees of freedom), which a failed cell's large seed spread widens everywhere. There is no interval
with one seed or when a fitted cell has fewer than two finished seeds.

``epoch_fits`` fits every scored epoch; ``effects_by_epoch`` tabulates each main effect, interaction and the
simple effects (``SIMPLE``: one factor with another held at a level) against epochs.
"""

from __future__ import annotations

import itertools
import math
import warnings
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ...config.settings import Experiment
from .budget import FAILED, LEVEL, MISSING, NOT_REACHED, OK
from ..pair import FACTORS
from ..tables import grid_of

# Each factor's (low, high) level: coded -1 and +1.
LEVELS: dict[str, tuple[Any, Any]] = {"norm": ("post", "pre"), "warmup": (False, True), "decay": ("isqrt", "step")}
LEVEL_WORDS = {"norm": ("post", "pre"), "warmup": ("off", "on"), "decay": ("isqrt", "step")}
EFFECT_WORDS = {"norm": "pre minus post", "warmup": "warm-up on minus off", "decay": "step minus isqrt"}
# Hierarchical order: main effects, then two-way, then the three-way interaction.
TERMS: tuple[str, ...] = tuple(":".join(c) for k in (1, 2, 3) for c in itertools.combinations(FACTORS, k))
EFFECT_COLUMNS = ["metric", "budget", "effect", "estimate", "ci_low", "ci_high", "df", "covariance", "n_seeds",
                  "n_obs", "n_left_out", "n_missing", "note"]
COVARIANCES = {
    "cell": "each cell's own seed variance (HC2, Welch's variance of a contrast of cell means), "
            "Welch-Satterthwaite degrees of freedom",
    "hc3": "HC3 (each cell's seed variance x n/(n-1) over HC2), Welch-Satterthwaite degrees of freedom",
    "pooled": "ordinary least squares: one residual variance pooled over every cell, its residual degrees of freedom",
}
# The simple effects shown beside the main effects: (factor, the levels held; the other factor averaged). The
# decay within Post-LN with warm-up is the step decay's effect where Post-LN trains (its no-warm-up cells fail).
SIMPLE: tuple[tuple[str, dict[str, Any]], ...] = (
    ("norm", {"warmup": True}), ("norm", {"warmup": False}), ("warmup", {"norm": "post"}), ("warmup", {"norm": "pre"}),
    ("decay", {"norm": "post"}), ("decay", {"norm": "pre"}), ("decay", {"norm": "post", "warmup": True}))
BY_EPOCH_COLUMNS = ["epoch", "metric", "effect", "kind", "factor", "held", "estimate", "ci_low", "ci_high", "df",
                    "covariance", "n_seeds", "n_obs", "note"]


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
    return (pd.DataFrame(rows, columns=["run", *FACTORS]).sort_values("run", key=lambda c: c.map(order), kind="stable")
            .reset_index(drop=True), notes)


# An estimate within this fraction of the largest observation is rounding, not an effect: a cell pair with equal
# values (both decays before the step decay's epoch) fits to about 1e-15 of it, differently on each CPU kind.
ROUNDING = 1e-12

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
    result: Any  # statsmodels RegressionResults (OLS), None without data
    n_obs: int
    n_seeds: int  # the fewest finished seeds in a fitted cell
    n_left_out: int  # diverged, stopped or never reaching the target, in the design's cells
    n_missing: int
    interval: bool
    note: str
    covariance: str = "cell"  # COVARIANCES
    cells: Any = None  # each observation's cell (its run), in the fit's row order

    def estimate_df(self, weights: Mapping[str, float]) -> tuple[float, float, float, float] | None:
        """2 x sum(weight x beta) over terms, its 95% interval and degrees of freedom (NaN without an interval);
        None when a term with a nonzero weight is not fitted."""
        if self.result is None or any(w and t not in self.terms for t, w in weights.items()):
            return None
        r = np.array([weights.get(name, 0.0) for name in self.result.params.index], dtype=float)
        est = 2 * float(r @ self.result.params.to_numpy())
        if abs(est) <= ROUNDING * float(np.abs(self.result.model.endog).max()):
            est = 0.0  # an effect that is zero but for the fit's rounding, which differs between CPU kinds
        if not self.interval:
            return est, math.nan, math.nan, math.nan
        var, df = self._variance(r)
        from .budget import t_quantile

        half = 2 * t_quantile(df, LEVEL) * math.sqrt(var)
        return est, est - half, est + half, df

    def estimate(self, weights: Mapping[str, float]) -> tuple[float, float, float] | None:
        """2 x sum(weight x beta) over terms, with its 95% interval (NaN without one); None when a term with
        a nonzero weight is not fitted."""
        out = self.estimate_df(weights)
        return None if out is None else out[:3]

    def _variance(self, r: np.ndarray) -> tuple[float, float]:
        """Var(r'beta) under ``covariance`` and its degrees of freedom."""
        res = self.result
        if self.covariance == "pooled":
            return float(r @ res.cov_params().to_numpy() @ r), float(res.df_resid)
        x = res.model.exog
        xtx_inv = np.linalg.pinv(x.T @ x)
        a = x @ xtx_inv @ r  # r'beta = a'y
        h = np.einsum("ij,jk,ik->i", x, xtx_inv, x)
        e2 = np.asarray(res.resid, dtype=float) ** 2
        power = 1 if self.covariance == "cell" else 2  # HC2: e^2 / (1 - h); HC3: e^2 / (1 - h)^2
        parts = a ** 2 * e2 / np.clip(1 - h, 1e-12, None) ** power
        cells = pd.Series(parts).groupby(np.asarray(self.cells)).agg(["sum", "size"])
        var = float(cells["sum"].sum())
        den = float(((cells["sum"] ** 2) / (cells["size"] - 1).clip(lower=1)).sum())
        return var, (var ** 2 / den if den > 0 else math.inf)


def fit(obs: pd.DataFrame, cells: pd.DataFrame, metric: str, budget: str, covariance: str = "cell") -> Fit:
    """The fit of one (metric, budget) of the observations (budget.observations) over the design's cells, its
    intervals by ``covariance`` (COVARIANCES)."""
    import statsmodels.formula.api as smf

    obs = obs[obs["run"].isin(cells["run"])]
    data = obs[(obs["outcome"] == OK) & obs["value"].notna()].merge(cells, on="run")
    n_left_out = int(obs["outcome"].isin([*FAILED, NOT_REACHED]).sum())
    n_missing = int((obs["outcome"] == MISSING).sum())
    if data.empty:
        return Fit(metric, budget, [], None, 0, 0, n_left_out, n_missing, False, "no finished seed", covariance)
    present = cells[cells["run"].isin(data["run"])]
    terms = identifiable(present)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = data.reset_index(drop=True)
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
    return Fit(metric, budget, terms, result, len(data), n_seeds, n_left_out, n_missing, interval, "; ".join(notes),
               covariance, data["run"].to_numpy())


def fits(obs: pd.DataFrame, cells: pd.DataFrame, covariance: str = "cell") -> dict[tuple[str, str], Fit]:
    """Every (metric, budget) of the observations, fitted."""
    return {(m, b): fit(g, cells, m, b, covariance) for (b, m), g in obs.groupby(["budget", "metric"], sort=False)}


def effects_table(all_fits: Mapping[tuple[str, str], Fit]) -> pd.DataFrame:
    """tables/effects.csv: one row per (metric, budget, term); a term the cells do not identify is listed
    with no estimate."""
    rows = []
    for f in all_fits.values():
        for term in TERMS:
            est = f.estimate_df({term: 1.0}) if term in f.terms else None
            value, lo, hi, df = est or (math.nan,) * 4
            rows.append({"metric": f.metric, "budget": f.budget, "effect": term, "estimate": value, "ci_low": lo,
                         "ci_high": hi, "df": df, "covariance": f.covariance, "n_seeds": f.n_seeds,
                         "n_obs": f.n_obs, "n_left_out": f.n_left_out,
                         "n_missing": f.n_missing,
                         "note": f.note if est is not None else "not identified by the cells with data"})
    return pd.DataFrame(rows, columns=EFFECT_COLUMNS)


def simple_weights(factor: str, at: Mapping[str, Any]) -> dict[str, float] | None:
    """The term weights of ``factor``'s effect with the factors of ``at`` held at their levels (the others
    averaged): its main effect plus each held factor's code times their interaction (and the three-way term
    when two are held); None for a level outside the design."""
    held = code({**{g: LEVELS[g][0] for g in FACTORS}, **at})
    if held is None:
        return None
    weights = {factor: 1.0}
    for k in range(1, len(at) + 1):
        for gs in itertools.combinations(list(at), k):
            weights[":".join(x for x in FACTORS if x in (factor, *gs))] = float(math.prod(held[g] for g in gs))
    return weights


def simple_effect(f: Fit, factor: str, at: Mapping[str, Any]) -> tuple[float, float, float] | None:
    """The effect of ``factor`` with the factors of ``at`` held at their levels (the others averaged)."""
    weights = simple_weights(factor, at)
    return None if weights is None else f.estimate(weights)


def held_words(held: Mapping[str, Any]) -> str:
    """Held levels in words: "warm-up on", "Post-LN, warm-up on"."""
    words = {"norm": lambda v: {"post": "Post-LN", "pre": "Pre-LN"}.get(v, str(v)),
             "warmup": lambda v: "warm-up on" if v else "warm-up off", "decay": lambda v: f"{v} decay"}
    return ", ".join(words[g](v) for g, v in held.items())


def epoch_fits(epochs: pd.DataFrame, cells: pd.DataFrame, split: str, scored: Sequence[int],
               covariance: str = "cell") -> dict[tuple[str, int], Fit]:
    """The factorial fit of the validation loss, NLL and BLEU of ``split`` at every epoch of ``scored``:
    (metric, epoch) -> Fit (budget label "epoch {k}"); a diverged or stopped seed is left out as at a budget."""
    out = {}
    metrics = [f"{split}_loss_base2", f"{split}_nll_base2", f"{split}_bleu_tok"]
    e = epochs[epochs["run"].isin(cells["run"])]
    for k in scored:
        at = e[e["epoch"] == k]
        for m in metrics:
            if m not in at:
                continue
            outcome = at["status"].where(at["status"].isin([OK, *FAILED]), MISSING)
            obs = pd.DataFrame({"run": at["run"], "seed": at["seed"], "budget": f"epoch {k}", "metric": m,
                                "value": at[m].where(outcome == OK), "outcome": outcome})
            out[(m, k)] = fit(obs, cells, m, f"epoch {k}", covariance)
    return out


def effects_by_epoch(all_fits: Mapping[tuple[str, int], Fit]) -> pd.DataFrame:
    """tables/effects_by_epoch.csv: per (epoch, metric), every main effect and interaction and the simple
    effects of ``SIMPLE`` with their 95% intervals and degrees of freedom."""
    rows = []
    for (metric, epoch), f in all_fits.items():
        items = [(t, "main" if ":" not in t else "interaction", t if ":" not in t else "", "", {t: 1.0})
                 for t in TERMS]
        items += [(f"{factor} | {held_words(held)}", "simple", factor, held_words(held),
                   simple_weights(factor, held)) for factor, held in SIMPLE]
        for name, kind, factor, held, weights in items:
            est = f.estimate_df(weights) if weights is not None else None
            value, lo, hi, df = est or (math.nan,) * 4
            rows.append({"epoch": epoch, "metric": metric, "effect": name, "kind": kind, "factor": factor,
                         "held": held, "estimate": value, "ci_low": lo, "ci_high": hi, "df": df,
                         "covariance": f.covariance, "n_seeds": f.n_seeds, "n_obs": f.n_obs,
                         "note": f.note if est is not None else "not identified by the cells with data"})
    return pd.DataFrame(rows, columns=BY_EPOCH_COLUMNS)


def welch(a: Sequence[float], b: Sequence[float], level: float | None = None) -> tuple[float, float, float, float]:
    """mean(b) - mean(a) with its Welch interval (95%, or ``level``) and Welch-Satterthwaite degrees of freedom
    (NaN without two values on each side)."""
    from .budget import LEVEL, t_quantile

    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(x) == 0 or len(y) == 0:
        return (math.nan,) * 4
    diff = float(y.mean() - x.mean())
    if len(x) < 2 or len(y) < 2:
        return diff, math.nan, math.nan, math.nan
    va, vb = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    var = va + vb
    df = var ** 2 / (va ** 2 / (len(x) - 1) + vb ** 2 / (len(y) - 1)) if var > 0 else math.inf
    half = t_quantile(df, level or LEVEL) * math.sqrt(var) if var > 0 else 0.0
    return diff, diff - half, diff + half, float(df)


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
