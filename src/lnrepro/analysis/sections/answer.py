"""The report's answer to its question (one job: time to quality, the decomposition of Figure 4's gap, the end
point): does Pre-LN without warm-up train faster than Post-LN with warm-up, and because of what?

Every number is computed from aggregate's per (run, seed, epoch) table and the experiment; the rules' parameters
are ``analysis.report``'s (``quality_fractions``, ``useful_fraction``, ``convergence_window``, ``convergence_tolerance``,
``sign_horizon``), and every number about the preset (warm-up length, decay epoch) is the config's.

- **Pairs.** Figure 4's pair (``comparisons.figure4``: the low arm, Post-LN with warm-up and isqrt decay, and the
  high arm, Pre-LN without warm-up with the step decay), and every single-factor pair on a one-factor-at-a-time
  path from one to the other (the edges of the factorial cube between them whose cells are selected).
- **Time to quality** (``tables/time_to_quality.csv``). A pair's quality is the validation BLEU, or the
  validation loss's drop below the pair's start (the higher of the two arms' first-checkpoint seed means). Its
  targets are ``quality_fractions`` of the lower arm's final seed mean; when the lower arm's final quality is
  below ``useful_fraction`` of the higher arm's (a failed arm), of the higher arm's instead. Each seed's epoch,
  updates, training CPU time (the report's cost, ``aggregate.COST``) and wall-clock at a target are interpolated
  linearly between its two scored checkpoints
  around the first crossing; a target already met at the first scored checkpoint gives that checkpoint, marked
  ``censored`` (an upper bound). An arm reaches a target when every one of its seeds does, else "not reached"
  with its best seed-mean value. Seed means carry 95% t intervals; the ratio (to over from) is the geometric
  mean over the seeds both arms share of the per-seed ratios, with its t interval on the log scale.
- **Decomposition** (``tables/decomposition.csv``). At every scored epoch, Figure 4's change from the low to the
  high arm split along each order of the factors (``path`` ``norm>warmup>decay`` and the others): each step
  changes one factor, its change the difference of the seed means of its two cells with a 95% Welch interval
  (per-cell variances). The steps of a path add up to the gap (``tables/gap.csv``, with its own Welch interval).
- **End point** (``tables/endpoint.csv``, ``tables/endpoint_gap.csv``). Per run and metric, the per-epoch slope
  over the last ``convergence_window`` scored epochs, fitted per seed (least squares), its seed mean with a t interval,
  and the same relative to the last value. The validation loss is ``converged`` only when the relative slope's
  interval lies within +- ``convergence_tolerance``; a run whose learning rate a step decay cut before the window's
  end is ``annealed`` instead (its curve is flat because its step is a tenth, not because it has converged).
  The final gap of a pair could still change sign when it is smaller in size than ``sign_horizon`` epochs of
  either arm's present slope (seed means).

Runs may train different numbers of epochs: a pair is compared at the epochs both its runs have (time to quality,
the decomposition and the gap up to the last epoch they share, ``Experiment.common_last``, which is also where
the final gap is taken), and the end-point table reads each run at its own last scored epochs.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ...config.settings import Experiment, ReportSettings
from ..aggregate import (ANNEALED, CONVERGED, IMPROVING, STATUS_MISSING, UNDETERMINED, WORSENING, slope_fit,
                         slope_label, step_cuts)
from ..numbers import interval, sig
from ..pair import FACTORS, FIGURE4, Pair, figure4_pair, seed_values
from ..stats.budget import COST, LEVEL, OK, mean_interval
from ..stats.effects import welch
from ..tables import grid_of

MEASURES = ("epochs", "updates", COST, "train_wall_s")  # what a time to quality is counted in
# their epoch-table columns (every measure but the epochs is a column of its own name)
MEASURE_COLUMNS = {m: "epoch" if m == "epochs" else m for m in MEASURES}
METRICS = ("bleu_tok", "loss_base2")
TTQ_COLUMNS = ["pair", "factor", "metric", "fraction", "target", "target_of", "arm", "run", "status", "n_seeds", "n_reached",
               "censored", "best", *(f"{m}{s}" for m in MEASURES for s in ("", "_low", "_high"))]
DECOMPOSITION_COLUMNS = ["epoch", "metric", "path", "step", "factor", "from_run", "to_run", "change", "ci_low",
                         "ci_high", "seeds"]
GAP_COLUMNS = ["epoch", "metric", "from_run", "to_run", "from_mean", "to_mean", "change", "ci_low", "ci_high",
               "seeds"]
ENDPOINT_COLUMNS = ["run", "metric", "epochs", "n_seeds", "last", "slope", "slope_low", "slope_high", "rel_slope",
                    "rel_low", "rel_high", "annealed", "state"]
ENDPOINT_GAP_COLUMNS = ["pair", "metric", "epoch", "gap", "ci_low", "ci_high", "slope_from", "slope_to", "horizon",
                        "could_change", "could_change_sign"]
REACHED, NOT_REACHED = "reached", "not reached"

# A factor's change along a path, in words (the low arm's level -> the high arm's).
_LEVEL_TEXT = {"norm": {"post": "Post-LN", "pre": "Pre-LN"}, "warmup": {True: "warm-up", False: "no warm-up"},
               "decay": {"isqrt": "isqrt decay", "step": "step decay", "constant": "constant"}}


FACTOR_WORDS = {"norm": "the norm position", "warmup": "warm-up", "decay": "the decay"}


def level_text(factor: str, level: Any) -> str:
    return _LEVEL_TEXT.get(factor, {}).get(level, f"{factor} {level}")


def step_text(factor: str, a: Any, b: Any) -> str:
    """"warm-up -> no warm-up"."""
    return f"{level_text(factor, a)} -> {level_text(factor, b)}"


@dataclass
class Answer:
    """The Answer section's tables (each written to report/tables/) and what it needs besides them."""

    pair: Pair | None  # Figure 4's pair, None when not configured or not selected
    note: str  # why there is no pair
    cube: dict[tuple, str]  # factor levels (in FACTORS order) -> the selected run of that cell
    pairs: list[Pair]
    paths: dict[str, list[Pair]]  # path name (norm>warmup>decay) -> its steps
    time_to_quality: pd.DataFrame
    decomposition: pd.DataFrame
    gap: pd.DataFrame
    endpoint: pd.DataFrame
    endpoint_gap: pd.DataFrame
    settings: ReportSettings
    notes: list[str] = field(default_factory=list)  # cells of the cube not selected, ...
    not_run: str = ""  # which of the Answer's planned trainings have no record yet ("" when all have one)

    def tables(self) -> dict[str, pd.DataFrame]:
        return {"time_to_quality": self.time_to_quality, "decomposition": self.decomposition, "gap": self.gap,
                "endpoint": self.endpoint, "endpoint_gap": self.endpoint_gap}


# --- statistics


def ratio_interval(ratios: Sequence[float], level: float = LEVEL) -> tuple[float, float, float]:
    """Geometric mean of positive per-seed ratios with the t interval of their logarithm, exponentiated (a
    ratio's interval stays positive); no interval from fewer than two."""
    r = [v for v in ratios if v > 0 and math.isfinite(v)]
    if not r:
        return (math.nan,) * 3
    mean, _, lo, hi = mean_interval([math.log(v) for v in r], level)
    return math.exp(mean), (math.nan if math.isnan(lo) else math.exp(lo)), (math.nan if math.isnan(hi) else math.exp(hi))


# --- the cells between Figure 4's arms


def _cell_runs(experiment: Experiment, levels: dict[str, Any]) -> list[str]:
    """The selected runs with these factor levels, runs of their own before grid runs (as claims.cell_runs)."""
    runs = [r for r in experiment.select if experiment.runs[r].factors == levels]
    return sorted(runs, key=lambda r: bool(grid_of(experiment, r)))


def _cube(experiment: Experiment, pair: Pair) -> dict[tuple, str]:
    """Every cell between the pair's arms (each differing factor at either arm's level, the others at theirs)
    -> its selected run (a run of its own before a grid run: select order, grid runs last)."""
    a, b = experiment.runs[pair.from_run].factors, experiment.runs[pair.to_run].factors
    out: dict[tuple, str] = {}
    for choice in itertools.product((False, True), repeat=len(pair.factors)):
        levels = dict(a)
        levels.update({f: b[f] for f, flip in zip(pair.factors, choice) if flip})
        key = tuple(levels[f] for f in FACTORS)
        runs = [pair.from_run] if levels == a else [pair.to_run] if levels == b else _cell_runs(experiment, levels)
        if runs:
            out[key] = runs[0]
    return out


def _paths(experiment: Experiment, pair: Pair, cube: dict[tuple, str]) -> tuple[dict[str, list[Pair]], list[str]]:
    """Each order of the pair's differing factors whose cells are all selected -> its single-factor steps."""
    a, b = experiment.runs[pair.from_run].factors, experiment.runs[pair.to_run].factors
    paths, missing = {}, []
    for order in itertools.permutations(pair.factors):
        levels, steps, ok = dict(a), [], True
        for f in order:
            here = cube.get(tuple(levels[g] for g in FACTORS))
            levels[f] = b[f]
            there = cube.get(tuple(levels[g] for g in FACTORS))
            if here is None or there is None:
                ok = False
                break
            steps.append(Pair(f"{here} > {there}", here, there, (f,)))
        name = ">".join(order)
        if ok:
            paths[name] = steps
        else:
            missing.append(name.replace(">", ", then "))
    if not missing:
        return paths, []
    if not paths:
        return paths, ["The gap is not split between the factors: no order of changing them one at a time has all "
                       "its cells selected."]
    return paths, [f"Not split along {len(missing)} of the {len(missing) + len(paths)} orders of the factors, each "
                   "with a cell not selected: " + "; ".join(missing) + "."]


# --- time to quality


def run_seeds(epochs: pd.DataFrame, run: str) -> set[int]:
    """The seeds of ``run`` with a record: a seed whose every checkpoint is missing has not been run (a study
    stored in parts), so it neither reaches nor fails a target; a diverged or failed seed counts."""
    g = epochs[(epochs["run"] == run) & (epochs["status"] != STATUS_MISSING)]
    return {int(s) for s in g["seed"].unique()}


def not_run_sentence(epochs: pd.DataFrame, runs: Sequence[str]) -> str:
    """Which planned seeds of ``runs`` have no record yet, in one sentence ("" when every one has)."""
    planned = {r: {int(s) for s in epochs[epochs["run"] == r]["seed"].unique()} for r in runs}
    missing = {r: sorted(planned[r] - run_seeds(epochs, r)) for r in runs}
    if not any(missing.values()):
        return ""
    n_missing, n_planned = sum(map(len, missing.values())), sum(map(len, planned.values()))
    same = len({tuple(v) for v in missing.values()}) == 1
    what = (f"seed{'s' if len(missing[runs[0]]) > 1 else ''} {' and '.join(map(str, missing[runs[0]]))} of each run"
            if same else f"{n_missing} of them")
    return (f"These records hold {n_planned - n_missing} of the {n_planned} trainings these comparisons plan "
            f"({what} not run yet): every number below is from the seeds that are.")


def _seed_curves(epochs: pd.DataFrame, run: str, col: str) -> dict[int, pd.DataFrame]:
    """Per seed of ``run``: its scored checkpoints (status ok, a value of ``col``), by epoch."""
    g = epochs[(epochs["run"] == run) & (epochs["status"] == OK) & epochs[col].notna()]
    g = g.sort_values("epoch", kind="stable")
    return {int(s): d for s, d in g.groupby("seed")}


def crossing(curve: pd.DataFrame, col: str, target: float, higher_better: bool) -> tuple[dict[str, float], bool]:
    """Where a seed's ``col`` first reaches ``target``: each measure interpolated linearly between the two scored
    checkpoints around the crossing (``censored`` True: met at the first one already, which is returned);
    NaN measures when never reached."""
    v = curve[col].to_numpy(dtype=float)
    hit = np.nonzero(v >= target if higher_better else v <= target)[0]
    if len(hit) == 0:
        return {m: math.nan for m in MEASURES}, False
    i = int(hit[0])
    xs = {m: curve[MEASURE_COLUMNS[m]].to_numpy(dtype=float) for m in MEASURES}
    if i == 0:
        return {m: float(xs[m][0]) for m in MEASURES}, True
    t = (target - v[i - 1]) / (v[i] - v[i - 1])
    return {m: float(xs[m][i - 1] + t * (xs[m][i] - xs[m][i - 1])) for m in MEASURES}, False


def _final_means(epochs: pd.DataFrame, run: str, col: str, last: int) -> float:
    g = epochs[(epochs["run"] == run) & (epochs["epoch"] == last) & (epochs["status"] == OK)][col].dropna()
    return float(g.mean()) if len(g) else math.nan


def _first_mean(epochs: pd.DataFrame, run: str, col: str) -> float:
    g = epochs[(epochs["run"] == run) & (epochs["status"] == OK) & epochs[col].notna()]
    if g.empty:
        return math.nan
    first = g["epoch"].min()
    return float(g[g["epoch"] == first][col].mean())


def targets(epochs: pd.DataFrame, pair: Pair, metric: str, last: int, settings: ReportSettings
            ) -> tuple[list[tuple[float, float]], str]:
    """The pair's (fraction, target value) for ``metric`` (a column of the epoch table) and which arm's final
    quality they are fractions of ("lower", or "higher" when the lower arm failed: ``useful_fraction``)."""
    bleu = metric.endswith("bleu_tok")
    start = 0.0 if bleu else max(_first_mean(epochs, r, metric) for r in (pair.from_run, pair.to_run))
    quality = [(v if bleu else start - v) for v in (_final_means(epochs, r, metric, last)
                                                    for r in (pair.from_run, pair.to_run))]
    if any(math.isnan(q) for q in quality) or math.isnan(start):
        return [], ""
    lo, hi = min(quality), max(quality)
    base, which = (lo, "lower") if hi <= 0 or lo >= settings.useful_fraction * hi else (hi, "higher")
    return [(f, f * base if bleu else start - f * base) for f in settings.quality_fractions], which


def _time_rows(epochs: pd.DataFrame, pair: Pair, metric: str, last: int, settings: ReportSettings
               ) -> list[dict[str, Any]]:
    bleu = metric.endswith("bleu_tok")
    rows = []
    tg, of = targets(epochs, pair, metric, last, settings)
    curves = {r: _seed_curves(epochs, r, metric) for r in (pair.from_run, pair.to_run)}
    factor = ", ".join(pair.factors)
    for fraction, target in tg:
        per: dict[str, dict[int, dict[str, float]]] = {}
        arms = []
        for arm, run in (("from", pair.from_run), ("to", pair.to_run)):
            seeds = curves[run]
            n_all = len(run_seeds(epochs, run))
            hits = {s: crossing(c, metric, target, bleu) for s, c in seeds.items()}
            reached = {s: x for s, (x, _) in hits.items() if not math.isnan(x["epochs"])}
            per[run] = reached
            best_by_epoch = epochs[(epochs["run"] == run) & (epochs["status"] == OK)].groupby("epoch")[metric].mean()
            best = float(best_by_epoch.max() if bleu else best_by_epoch.min()) if len(best_by_epoch) else math.nan
            ok = len(reached) == n_all and n_all > 0
            row = {"pair": pair.name, "factor": factor, "metric": metric, "fraction": fraction, "target": target,
                   "target_of": of, "arm": arm, "run": run, "status": REACHED if ok else NOT_REACHED, "n_seeds": n_all,
                   "n_reached": len(reached), "censored": any(c for s, (_, c) in hits.items() if s in reached),
                   "best": best}
            for m in MEASURES:
                mean, _, lo, hi = mean_interval([x[m] for x in reached.values()]) if ok else (math.nan,) * 4
                row.update({m: mean, f"{m}_low": lo, f"{m}_high": hi})
            arms.append(row)
        rows += arms
        both = all(r["status"] == REACHED for r in arms)
        common = sorted(set(per[pair.from_run]) & set(per[pair.to_run])) if both else []
        ratio = {"pair": pair.name, "factor": factor, "metric": metric, "fraction": fraction, "target": target,
                 "target_of": of, "arm": "ratio", "run": f"{pair.to_run} / {pair.from_run}", "status": REACHED if both else NOT_REACHED,
                 "n_seeds": len(common), "n_reached": len(common), "censored": arms[0]["censored"] or arms[1]["censored"],
                 "best": math.nan}
        for m in MEASURES:
            ratio.update(zip((m, f"{m}_low", f"{m}_high"), ratio_interval(
                [per[pair.to_run][s][m] / per[pair.from_run][s][m] for s in common if per[pair.from_run][s][m] > 0])))
        rows.append(ratio)
    return rows


def _within(epochs: pd.DataFrame, last: int) -> pd.DataFrame:
    """The epoch table's rows up to epoch ``last``: a comparison's epochs."""
    return epochs[epochs["epoch"] <= last]


def time_to_quality(epochs: pd.DataFrame, experiment: Experiment, pairs: Sequence[Pair], split: str,
                    settings: ReportSettings) -> pd.DataFrame:
    """Each pair's times to its targets, at the epochs both its runs have (up to their common last epoch, whose
    values set the targets)."""
    rows = []
    for p in pairs:
        last = experiment.common_last([p.from_run, p.to_run])
        rows += [r for m in METRICS for r in _time_rows(_within(epochs, last), p, f"{split}_{m}", last, settings)]
    return pd.DataFrame(rows, columns=TTQ_COLUMNS)


# --- the decomposition of Figure 4's gap


def _scored_epochs(epochs: pd.DataFrame, runs: Sequence[str], col: str) -> list[int]:
    g = epochs[epochs["run"].isin(runs) & (epochs["status"] == OK) & epochs[col].notna()]
    return sorted(int(e) for e in g["epoch"].unique())


def decomposition(epochs: pd.DataFrame, experiment: Experiment, paths: dict[str, list[Pair]], split: str
                  ) -> pd.DataFrame:
    """Each path's steps at every scored epoch every run on the paths has (up to their common last epoch)."""
    rows = []
    runs = sorted({r for steps in paths.values() for p in steps for r in (p.from_run, p.to_run)})
    within = _within(epochs, experiment.common_last(runs)) if runs else epochs
    for metric in (f"{split}_{m}" for m in METRICS):
        for ep in _scored_epochs(within, runs, metric):
            for name, steps in paths.items():
                for i, p in enumerate(steps, 1):
                    a, b = seed_values(epochs, p.from_run, ep, metric), seed_values(epochs, p.to_run, ep, metric)
                    d, lo, hi, _ = welch(a, b)
                    f = p.factors[0]
                    rows.append({"epoch": ep, "metric": metric, "path": name, "step": i, "factor": f,
                                 "from_run": p.from_run, "to_run": p.to_run, "change": d, "ci_low": lo, "ci_high": hi,
                                 "seeds": f"{len(a)}/{len(b)}"})
    return pd.DataFrame(rows, columns=DECOMPOSITION_COLUMNS)


def gap_table(epochs: pd.DataFrame, experiment: Experiment, pair: Pair, split: str) -> pd.DataFrame:
    """Figure 4's gap (high arm minus low arm) at every scored epoch both arms have, with its Welch interval."""
    rows = []
    within = _within(epochs, experiment.common_last([pair.from_run, pair.to_run]))
    for metric in (f"{split}_{m}" for m in METRICS):
        for ep in _scored_epochs(within, [pair.from_run, pair.to_run], metric):
            a, b = seed_values(epochs, pair.from_run, ep, metric), seed_values(epochs, pair.to_run, ep, metric)
            d, lo, hi, _ = welch(a, b)
            rows.append({"epoch": ep, "metric": metric, "from_run": pair.from_run, "to_run": pair.to_run,
                         "from_mean": float(np.mean(a)) if a else math.nan,
                         "to_mean": float(np.mean(b)) if b else math.nan, "change": d, "ci_low": lo, "ci_high": hi,
                         "seeds": f"{len(a)}/{len(b)}"})
    return pd.DataFrame(rows, columns=GAP_COLUMNS)


# --- the end point


def annealed_at(experiment: Experiment, run: str, last: int) -> int | None:
    """The first epoch at which a step decay cut ``run``'s learning rate, when at or before ``last``; else None."""
    cuts = step_cuts(experiment, run, last)
    return min(cuts) if cuts else None


def endpoint_table(epochs: pd.DataFrame, experiment: Experiment, runs: Sequence[str], split: str,
                   settings: ReportSettings) -> pd.DataFrame:
    """Per run and metric: the slope per epoch over the run's own last ``convergence_window`` scored epochs (per
    seed, then the seed mean with its t interval), relative to the last value, and the end-point state (validation
    loss: converged, annealed, still falling, rising, undetermined; BLEU: its slope only). Each run is read at its
    own last epochs, whatever the length of the others'."""
    rows = []
    tol = settings.convergence_tolerance
    for run in runs:
        for metric in (f"{split}_{m}" for m in METRICS):
            curves = _seed_curves(epochs, run, metric)
            window = _scored_epochs(epochs, [run], metric)[-settings.convergence_window:]
            slopes, rel, lasts = [], [], []
            for c in curves.values():
                c = c[c["epoch"].isin(window)]
                if len(c) == len(window) and len(window) >= 2:
                    slopes.append(slope_fit(c["epoch"], c[metric])[0])
                    lasts.append(float(c[metric].iloc[-1]))
                    rel.append(slopes[-1] / lasts[-1] if lasts[-1] else math.nan)
            s, _, s_lo, s_hi = mean_interval(slopes)
            r, _, r_lo, r_hi = mean_interval([v for v in rel if math.isfinite(v)])
            cut = annealed_at(experiment, run, window[-1]) if window else None
            state = slope_label(r_lo, r_hi, tol, cut is not None) if metric.endswith("loss_base2") and slopes else ""
            rows.append({"run": run, "metric": metric,
                         "epochs": f"{window[0]}-{window[-1]}" if window else "", "n_seeds": len(slopes),
                         "last": float(np.mean(lasts)) if lasts else math.nan, "slope": s, "slope_low": s_lo,
                         "slope_high": s_hi, "rel_slope": r, "rel_low": r_lo, "rel_high": r_hi,
                         "annealed": cut is not None, "state": state})
    return pd.DataFrame(rows, columns=ENDPOINT_COLUMNS)


def endpoint_gap_table(epochs: pd.DataFrame, experiment: Experiment, pairs: Sequence[Pair], endpoint: pd.DataFrame,
                       split: str, settings: ReportSettings) -> pd.DataFrame:
    """Per pair and metric: the gap at the last epoch both its runs have (to minus from, Welch interval), each
    arm's present slope, and whether the gap could still change sign: its size is below ``sign_horizon`` epochs
    of the larger of the two arms' slopes (``could_change``: that change, in the metric's unit)."""
    slope = endpoint.set_index(["run", "metric"])["slope"] if len(endpoint) else pd.Series(dtype=float)
    rows = []
    for p in pairs:
        last = experiment.common_last([p.from_run, p.to_run])
        for metric in (f"{split}_{m}" for m in METRICS):
            d, lo, hi, _ = welch(seed_values(epochs, p.from_run, last, metric),
                                 seed_values(epochs, p.to_run, last, metric))
            sa, sb = (float(slope.get((r, metric), math.nan)) for r in (p.from_run, p.to_run))
            change = settings.sign_horizon * max(abs(sa), abs(sb))
            rows.append({"pair": p.name, "metric": metric, "epoch": last, "gap": d, "ci_low": lo, "ci_high": hi,
                         "slope_from": sa, "slope_to": sb, "horizon": settings.sign_horizon, "could_change": change,
                         "could_change_sign": bool(abs(d) < change) if math.isfinite(d) and math.isfinite(change)
                         else math.nan})
    return pd.DataFrame(rows, columns=ENDPOINT_GAP_COLUMNS)


# --- everything at once


def answer(experiment: Experiment, epochs: pd.DataFrame, split: str) -> Answer:
    """The Answer section's tables for ``experiment`` (aggregate's epoch table ``epochs``, headline split)."""
    settings = experiment.analysis.report
    pair, note = figure4_pair(experiment)
    if pair is None:
        empty = {c: pd.DataFrame(columns=cols) for c, cols in (
            ("t", TTQ_COLUMNS), ("d", DECOMPOSITION_COLUMNS), ("g", GAP_COLUMNS), ("e", ENDPOINT_COLUMNS),
            ("eg", ENDPOINT_GAP_COLUMNS))}
        return Answer(None, note, {}, [], {}, empty["t"], empty["d"], empty["g"], empty["e"], empty["eg"], settings)
    cube = _cube(experiment, pair)
    paths, notes = _paths(experiment, pair, cube)
    edges = list(dict.fromkeys(p for steps in paths.values() for p in steps))
    pairs = [pair, *edges]
    runs = list(dict.fromkeys([pair.from_run, pair.to_run, *(r for p in edges for r in (p.from_run, p.to_run))]))
    endpoint = endpoint_table(epochs, experiment, runs, split, settings)
    return Answer(pair, "", cube, pairs, paths, time_to_quality(epochs, experiment, pairs, split, settings),
                  decomposition(epochs, experiment, paths, split), gap_table(epochs, experiment, pair, split), endpoint,
                  endpoint_gap_table(epochs, experiment, pairs, endpoint, split, settings), settings, notes,
                  not_run_sentence(epochs, runs))


# --- the section's sentences and page tables (filled in from the tables above; no new statistics)


def _f(v: float, digits: int = 3) -> str:
    """A number in a sentence: ``digits`` significant digits (``numbers.sig``), "n/a" for none."""
    if not math.isfinite(v):
        return "n/a"
    return sig(v, digits)


def _ci(lo: float, hi: float, n: int | str, what: str = "95% interval") -> str:
    seeds = n if isinstance(n, str) else f"{n} seed{'s' if n != 1 else ''}"
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return f"no interval, {seeds}"
    return f"{what} {_f(lo)} to {_f(hi)}, {seeds}"


def _signed(v: float) -> str:
    return ("+" if v > 0 else "") + _f(v)


def arm_text(experiment: Experiment, run: str) -> str:
    """A run in words, its numbers from the config: "Post-LN with 500 warm-up updates and isqrt decay"."""
    s, norm = experiment.runs[run].schedule, level_text("norm", experiment.runs[run].model.norm)
    warm = f"with {s.warmup_updates} warm-up updates" if s.warmup else "without warm-up"
    if s.decay == "step":
        decay = f"a step decay x{s.decay_factor:g} at the start of epoch {', '.join(map(str, s.decay_epochs or ()))}"
    else:
        decay = f"{s.decay} decay"
    return f"{norm} {warm} and {decay}"


def _metric_words(metric: str) -> str:
    return "validation BLEU" if metric.endswith("bleu_tok") else "validation loss"


def _unit(metric: str) -> str:
    return "BLEU" if metric.endswith("bleu_tok") else "bits"


def _ttq(a: Answer, pair: str, metric: str) -> pd.DataFrame:
    t = a.time_to_quality
    return t[(t["pair"] == pair) & (t["metric"] == metric)]


def _middle(fractions: Sequence[float]) -> float:
    return sorted(fractions)[len(fractions) // 2]


def middle_fraction(settings: ReportSettings) -> float:
    """The target the section's first sentences read: the middle of ``quality_fractions``."""
    return _middle(settings.quality_fractions)


def _arm_time(r: pd.Series) -> str:
    if r["status"] != REACHED:
        return (f"does not reach it: {int(r['n_reached'])} of {int(r['n_seeds'])} seeds do, its best seed-mean "
                f"{_f(r['best'])}")
    censored = ", reached by the first scored checkpoint: an upper bound" if r["censored"] else ""
    return (f"needs {_f(r['epochs'])} epochs ({_ci(r['epochs_low'], r['epochs_high'], int(r['n_seeds']))}), "
            f"{_f(r['updates'])} updates, {_f(r[COST])} CPU-seconds of training and {_f(r['train_wall_s'])} s of "
            f"wall-clock{censored}")


def _speed_sentence(a: Answer, experiment: Experiment, metric: str) -> str:
    p, frac = a.pair, _middle(a.settings.quality_fractions)
    t = _ttq(a, FIGURE4, metric)
    rows = t[t["fraction"] == frac].set_index("arm")
    if rows.empty:
        return f"The Figure 4 pair has no scored {_metric_words(metric)} to time yet."
    fr, to, ratio = rows.loc["from"], rows.loc["to"], rows.loc["ratio"]
    bleu = metric.endswith("bleu_tok")
    of = ratio["target_of"] if ratio["target_of"] == "lower" else \
        f"higher (the lower arm ends below {a.settings.useful_fraction:.0%} of it: failed)"
    what = (f"{frac:.0%} of the {of} arm's final {_metric_words(metric)}, {_f(ratio['target'])} BLEU" if bleu else
            f"{frac:.0%} of the {of} arm's drop in {_metric_words(metric)} below the pair's first checkpoint, "
            f"{_f(ratio['target'])} bits")
    # one interval a sentence: each arm's time, then the two ratios
    head = (f"To reach {what}, {arm_text(experiment, p.to_run)} {_arm_time(to)}. "
            f"The other arm, {arm_text(experiment, p.from_run)}, {_arm_time(fr)}.")
    if ratio["status"] != REACHED:
        return head
    e, c = (ratio["epochs"], ratio["epochs_low"], ratio["epochs_high"]), \
        (ratio[COST], ratio[f"{COST}_low"], ratio[f"{COST}_high"])
    return (head + f" The first needs {_f(e[0])} of the second's epochs ({_ci(e[1], e[2], int(ratio['n_seeds']))}, "
            f"per-seed ratios, geometric mean). In training CPU time it needs {_f(c[0])} of the second's "
            f"({_ci(c[1], c[2], int(ratio['n_seeds']))}).")


def _other_targets_sentence(a: Answer, metric_bleu: str, metric_loss: str) -> str:
    """The epoch ratio at the other targets, one sentence (one interval) per target reached, then the targets not
    reached by every seed in one sentence."""
    reached, missed = [], []
    mid = _middle(a.settings.quality_fractions)
    for metric in (metric_bleu, metric_loss):
        t = _ttq(a, FIGURE4, metric)
        r = t[t["arm"] == "ratio"]
        if metric == metric_bleu:
            r = r[r["fraction"] != mid]
        for row in r.itertuples():
            target = f"{row.fraction:.0%} of {_metric_words(metric)}, {_f(row.target)} {_unit(metric)}"
            if row.status == REACHED:
                reached.append(f"At {target}, the epoch ratio of Pre-LN over Post-LN is {_f(row.epochs)} "
                               f"({_ci(row.epochs_low, row.epochs_high, int(row.n_seeds))}).")
            else:
                missed.append(target)
    if missed:
        reached.append("Not reached by every seed: " + "; ".join(missed) + ".")
    return " ".join(reached)


def _gap_sentence(a: Answer, metric: str, experiment: Experiment) -> str:
    g = a.gap[(a.gap["metric"] == metric) & a.gap["change"].notna()]
    if g.empty:  # nothing scored yet, or an arm diverged at every scored epoch
        return (f"No {_metric_words(metric)} gap: an arm has no finished seed at any scored epoch."
                if (a.gap["metric"] == metric).any() else "")
    last = g[g["epoch"] == g["epoch"].max()].iloc[0]
    big = g.loc[g["change"].abs().idxmax()]
    pre, post = (level_text("norm", experiment.runs[x].model.norm) for x in (a.pair.to_run, a.pair.from_run))

    def at(r: pd.Series, lead: str = "At epoch {}") -> str:
        n = r["seeds"].replace("/", " and ")
        return (f"{lead.format(int(r['epoch']))}, {pre} {_f(r['to_mean'])} against {post} {_f(r['from_mean'])} "
                f"({_signed(r['change'])} {_unit(metric)}, {_ci(r['ci_low'], r['ci_high'], n + ' seeds', '95% Welch interval')})")

    spans = math.isfinite(last["ci_low"]) and last["ci_low"] <= 0 <= last["ci_high"]
    tail = ": the interval includes 0" if spans else ""
    # one interval a sentence: the widest epoch, then the last
    if int(big["epoch"]) == int(last["epoch"]):
        return f"The {_metric_words(metric)} gap is largest at the last epoch. {at(last)}{tail}."
    return (f"The {_metric_words(metric)} gap is largest early. {at(big)}. {at(last, 'At the last epoch, {}')}"
            f"{tail}.")


def _upper(text: str) -> str:
    """``text`` starting a sentence: its first letter upper-case, the rest as written ("Post-LN" stays)."""
    return text[:1].upper() + text[1:]


def main_path(a: Answer) -> str | None:
    """The path the section reads first: norm, then warm-up, then decay, when its cells are selected."""
    order = ">".join(f for f in FACTORS if a.pair and f in a.pair.factors)
    return order if order in a.paths else next(iter(a.paths), None)


def _decomposition_sentence(a: Answer, metric: str, epoch: int, experiment: Experiment) -> str:
    d = a.decomposition
    d = d[(d["metric"] == metric) & (d["epoch"] == epoch)]
    path = main_path(a)
    if d.empty or path is None:
        return ""
    lo_f, hi_f = experiment.runs[a.pair.from_run].factors, experiment.runs[a.pair.to_run].factors
    steps = d[d["path"] == path].sort_values("step", kind="stable")
    total = steps["change"].sum()
    parts = [f"{_upper(step_text(r.factor, lo_f[r.factor], hi_f[r.factor]))}: {_signed(r.change)} "
             f"({_ci(r.ci_low, r.ci_high, r.seeds.replace('/', ' and ') + ' seeds', '95% Welch')})."
             for r in steps.itertuples()]
    ranges = []
    if d["path"].nunique() > 1:
        for f in dict.fromkeys(steps["factor"]):
            v = d[d["factor"] == f]["change"]
            ranges.append(f"{level_text(f, lo_f[f])} -> {level_text(f, hi_f[f])} {_signed(v.min())} to "
                          f"{_signed(v.max())}")
    orders = (f" Over the {d['path'].nunique()} orders of the factors, which interact, the steps range: "
              + ", ".join(ranges) + ".") if ranges else ""
    # one interval a sentence: each step its own
    order = ", then ".join(FACTOR_WORDS[f] for f in path.split(">"))
    return (f"At epoch {epoch}, the {_signed(total)} {_unit(metric)} gap in {_metric_words(metric)} splits, changing "
            f"one factor at a time in the order {order}, into these steps. " + " ".join(parts) + orders)


def _endpoint_sentence(a: Answer, experiment: Experiment, metric: str) -> str:
    e = a.endpoint[(a.endpoint["metric"] == metric) & a.endpoint["run"].isin([a.pair.from_run, a.pair.to_run])]
    if e.empty or e["n_seeds"].max() == 0:
        return ""
    tol = a.settings.convergence_tolerance
    same = e["epochs"].nunique() == 1  # runs of different lengths: each over its own last epochs
    parts = []
    for r in (e.set_index("run").loc[x] for x in (a.pair.from_run, a.pair.to_run)):
        run = r.name
        over = "" if same else f" over epochs {r['epochs']}"
        pct = (f"{_signed(100 * r['rel_slope'])}% an epoch ({_ci(100 * r['rel_low'], 100 * r['rel_high'], int(r['n_seeds']))}"
               f"; {_signed(r['slope'])} bits an epoch)")
        state = r["state"]
        if state == ANNEALED or r["annealed"]:
            cut = annealed_at(experiment, run, experiment.last_of(run))
            s = experiment.runs[run].schedule
            how = (f"annealed, not converged: its learning rate was cut x{s.decay_factor:g} at epoch {cut}, so its "
                   "curve flattens because its steps are smaller") if state == ANNEALED else \
                (f"not converged by the rule, and annealed (its learning rate was cut x{s.decay_factor:g} at "
                 f"epoch {cut})")
        else:
            how = {IMPROVING: "still falling, not converged", WORSENING: "rising, not converged",
                   UNDETERMINED: "not shown converged (its interval reaches beyond the tolerance)"}.get(state, state)
        parts.append(f"For {arm_text(experiment, run)}, the validation loss changes {pct}{over}: {how}.")
    span = f"over epochs {e.iloc[0]['epochs']}" if same else "each run over its own last scored epochs"
    # one interval a sentence: each arm its own
    return (f"The end point, as far as these runs go, {span}; converged means the slope's 95% interval lies within "
            f"±{100 * tol:g}% an epoch (analysis.report.convergence_tolerance). " + " ".join(parts))


def _sign_sentence(a: Answer, metric: str) -> str:
    g = a.endpoint_gap[(a.endpoint_gap["pair"] == FIGURE4) & (a.endpoint_gap["metric"] == metric)]
    if g.empty or not math.isfinite(g.iloc[0]["gap"]):
        return ""
    r = g.iloc[0]
    n = int(r["horizon"])
    could = bool(r["could_change_sign"])
    return (f"At epoch {int(r['epoch'])} the {_metric_words(metric)} gap is {_signed(r['gap'])} {_unit(metric)} "
            f"({_ci(r['ci_low'], r['ci_high'], 'Welch')}); {n} more epochs at the larger of the two arms' present "
            f"slopes would change it by {_f(r['could_change'])} {_unit(metric)}, so the final difference "
            + ("could still change sign" if could else "would keep its sign")
            + f" (rule: it could when the gap is smaller than {n} epochs of either arm's slope; "
            "analysis.report.sign_horizon). Where the curves end needs a longer training than this one.")


def _lengths_sentence(a: Answer, experiment: Experiment) -> str:
    """The rule for pairs of runs of different lengths, when the Answer's runs differ in length ("" otherwise)."""
    runs = {r for p in a.pairs for r in (p.from_run, p.to_run)}
    if len({experiment.last_of(r) for r in runs}) < 2:
        return ""
    last = experiment.common_last([a.pair.from_run, a.pair.to_run])
    return ("These runs train different numbers of epochs, so each pair is compared at the epochs both its runs have "
            f"(times to quality, the gap and its decomposition up to the last epoch they share; Figure 4's pair up to "
            f"epoch {last}, where its final gap is taken), and the end point reads each run at its own last epochs.")


def speed_sentences(a: Answer, experiment: Experiment, split: str) -> list[str]:
    """The sentences on speed: time to quality, the gap and its decomposition (the verdict is the headline's,
    ``headline``); where Figure 4's pair is not selected, why."""
    if a.pair is None:
        return [f"No answer for this experiment: {a.note}. The Answer section needs both runs of Figure 4's pair."]
    bleu, loss = f"{split}_bleu_tok", f"{split}_loss_base2"
    out = [a.not_run, _speed_sentence(a, experiment, bleu),
           _lengths_sentence(a, experiment),
           _other_targets_sentence(a, bleu, loss), _gap_sentence(a, bleu, experiment),
           _gap_sentence(a, loss, experiment)]
    g = a.gap[(a.gap["metric"] == bleu) & a.gap["change"].notna()]
    if len(g):
        big, last = int(g.loc[g["change"].abs().idxmax(), "epoch"]), int(g["epoch"].max())
        out += [_decomposition_sentence(a, bleu, ep, experiment) for ep in dict.fromkeys((big, last))]
    return [s for s in out if s]


def end_point_sentences(a: Answer, experiment: Experiment, split: str) -> list[str]:
    """The sentences on where the curves end: each arm's slope, then whether the gap could still change sign."""
    if a.pair is None:
        return []
    loss = f"{split}_loss_base2"
    return [s for s in (_endpoint_sentence(a, experiment, loss), _sign_sentence(a, loss)) if s]


def end_point_headline(a: Answer, split: str) -> str:
    """One sentence on whether Figure 4's arms have stopped changing: the summary's (the section says how)."""
    if a.pair is None:
        return ""
    e = a.endpoint[(a.endpoint["metric"] == f"{split}_loss_base2")
                   & a.endpoint["run"].isin([a.pair.from_run, a.pair.to_run]) & (a.endpoint["n_seeds"] > 0)]
    if e.empty:
        return ""
    done = list(e.loc[e["state"] == CONVERGED, "run"])
    if len(done) == len(e):
        return "Both arms' validation loss has converged by the last epoch, so where the curves end is measured here."
    if not done:
        return "Neither arm's validation loss is shown converged by the last epoch, so where the curves end is open."
    return f"Only {done[0]}'s validation loss is shown converged by the last epoch, so where the curves end is open."


def sentences(a: Answer, experiment: Experiment, split: str) -> list[str]:
    """The Answer's sentences, in reading order (answer.md's): speed, the end point, then the notes."""
    notes = list(a.notes) if a.pair is not None else []
    return [*speed_sentences(a, experiment, split), *end_point_sentences(a, experiment, split), *notes]


def pairs_view(a: Answer, experiment: Experiment) -> pd.DataFrame:
    """Per pair (Figure 4's, then each single-factor step) and metric, at the middle target: each arm's epochs
    to it (mean [95% interval]) or "not reached (best ...)", and the ratio."""
    mid = _middle(a.settings.quality_fractions) if a.settings.quality_fractions else math.nan
    t = a.time_to_quality
    rows = []
    for (pair, metric), g in t[t["fraction"] == mid].groupby(["pair", "metric"], sort=False):
        arms = g.set_index("arm")

        def cell(arm: str) -> str:
            r = arms.loc[arm]
            if r["status"] != REACHED:
                return f"not reached (best {_f(r['best'])})" if arm != "ratio" else "—"
            return f"{'≤' if r['censored'] and arm != 'ratio' else ''}" + interval(r["epochs"], r["epochs_low"],
                                                                               r["epochs_high"])

        fr = arms.loc["from"]
        rows.append({"pair": pair, "changes": arms.loc["ratio", "factor"], "metric": metric,
                     "target": f"{mid:.0%}: {_f(fr['target'])} {_unit(metric)}", "from": arms.loc["from", "run"],
                     "epochs (from)": cell("from"), "to": arms.loc["to", "run"], "epochs (to)": cell("to"),
                     "ratio to/from": cell("ratio")})
    return pd.DataFrame(rows)


def endpoint_view(a: Answer) -> pd.DataFrame:
    """The end-point table on the page: the validation loss's slope per run, in % an epoch, with its state."""
    e = a.endpoint[a.endpoint["metric"].str.endswith("loss_base2")]
    return pd.DataFrame([{"run": r.run, "epochs": r.epochs, "seeds": r.n_seeds, "last loss (bits)": _f(r.last),
                          "slope (% an epoch)": interval(100 * r.rel_slope, 100 * r.rel_low, 100 * r.rel_high),
                          "step-decayed": "annealed" if r.annealed else "", "state": r.state}
                         for r in e.itertuples()])
