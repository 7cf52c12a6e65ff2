"""The fixed budgets the cells are compared at, and each seed's outcome there (one job: per-seed observations).

Every factorial cell of a seed trains on the same batches, so epoch k is the same number of updates and of
target tokens in every cell: an epoch is a fixed training budget. The report compares the cells at the last
epoch, at an earlier epoch (``analysis.report.budget_epoch``; default three quarters of the training), at
equal training CPU time (each seed's scores interpolated linearly between its checkpoints' cumulative
training CPU-seconds, at the largest time every finished seed reached), and by the epochs and CPU time each
seed needs to reach ``target_fraction`` of the best seed-mean BLEU. Equal cost is CPU time, not wall-clock:
the same work took up to 37% more wall-clock in one seed than in another of the same run, from what
else ran on the machine at the time; the report shows that spread beside the CPU time (``cost_spread``).

A seed's outcome at a budget is ``ok``, ``diverged`` or ``stopped`` (left out of the fits, counted in the
failure rates), ``not reached`` (finished without reaching the BLEU target) or ``missing`` (not
trained or scored that far yet). A finished seed's fate at an epoch budget (``seed_fates``) is judged against
what trains: it did not train when its BLEU or validation NLL is far from the best run's at the same epoch
(``failure_rule``); it stays in the fits (a failed cell is a result of the design) and counts as failed in the
failure rates. A split is observed only at the budgets its scored epochs (``eval.splits.{split}.epochs``) allow:
``scored_budgets``.

Runs may train different numbers of epochs. A comparison is made at epochs every run it compares has: the last
epoch budget is the last epoch common to its runs, and the earlier, CPU-time and target budgets lie within the
shortest run's training. ``budgets`` therefore takes the shortest training's last epoch and, as ``later``, the
last epochs of the longer ones, each a budget of its own (kind ``longer``) at which the runs that train that
far are observed (``length_rule`` says so in words).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from ...config.settings import ReportSettings
from ...records import RunStatus
from ..aggregate import COST
from ..intervals import LEVEL, t_quantile

# A seed's outcome at a budget: a checkpoint's status (lnrepro.records.RunStatus), or the budget's own.
OK, DIVERGED, STOPPED = RunStatus.OK.value, RunStatus.DIVERGED.value, RunStatus.STOPPED.value
NOT_REACHED, MISSING = "not reached", "missing"
FAILED = (DIVERGED, STOPPED)
# The cost equal-cost budgets compare: the training updates' CPU-seconds, cumulative at each checkpoint (the
# epoch manifests' cpu_s, aggregate's train_cpu_s).
TO_TARGET = ("epochs_to_target", "cpu_s_to_target")
OBS_COLUMNS = ["run", "seed", "budget", "metric", "value", "outcome"]


@dataclass(frozen=True)
class Budget:
    """One budget: ``kind`` last | early | longer (an epoch) | cpu (training CPU time) | target (time to a BLEU)."""

    label: str
    kind: str
    epoch: int | None = None
    cpu_s: float | None = None


def epoch_label(epoch: int) -> str:
    """An epoch budget's label: "epoch 20"."""
    return f"epoch {epoch}"


def epoch_at(fraction: float, epochs: int) -> int:
    """The epoch at ``fraction`` of the training, rounded half up, at least the first."""
    return max(1, math.floor(fraction * epochs + 0.5))


def three_quarters(epochs: int) -> int:
    """The epoch at three quarters of the training, rounded half up (15 of 20, 5 of 6)."""
    return epoch_at(0.75, epochs)


def metric_columns(split: str) -> tuple[str, str]:
    """The two scores compared at every budget: validation loss (base 2, as the paper plots it) and BLEU."""
    return f"{split}_loss_base2", f"{split}_bleu_tok"


def _outcome(status: str) -> str:
    return status if status in (OK, *FAILED) else MISSING


def best_bleu(epochs: pd.DataFrame, split: str) -> float:
    """The best seed-mean tokenized BLEU any run reaches at any epoch (NaN when nothing is scored)."""
    ok = epochs[epochs["status"] == OK]
    return float(ok.groupby(["run", "epoch"])[f"{split}_bleu_tok"].mean().max()) if len(ok) else math.nan


def budgets(epochs: pd.DataFrame, n_epochs: int, settings: ReportSettings, later: Sequence[int] = ()
            ) -> list[Budget]:
    """The last epoch ``n_epochs`` (every compared run's), the last epochs of longer trainings (``later``: each
    a budget of the runs that train so far), the earlier epoch (left out when it is not before the last),
    equal training CPU time (the smallest at epoch ``n_epochs`` of the seeds that finished it; left out before any
    did, or where no checkpoint records its CPU time) and the time to the BLEU target (within ``n_epochs``)."""
    out = [Budget(epoch_label(n_epochs), "last", epoch=n_epochs)]
    out += [Budget(epoch_label(e), "longer", epoch=e) for e in later if e > n_epochs]
    early = settings.budget_epoch or three_quarters(n_epochs)
    if early < n_epochs:
        out.append(Budget(epoch_label(early), "early", epoch=early))
    done = epochs[(epochs["epoch"] == n_epochs) & (epochs["status"] == OK)][COST].dropna()
    if len(done):
        cpu = float(done.min())
        out.append(Budget(f"training CPU {cpu:.0f} s", "cpu", cpu_s=cpu))
    out.append(Budget(f"{settings.target_fraction:.0%} of the best BLEU", "target"))
    return out


def scored_budgets(budget_list: Iterable[Budget], scored: Sequence[int], n_epochs: int) -> list[Budget]:
    """The budgets a split scored at epochs ``scored`` can be observed at: an epoch budget at a scored epoch, the
    CPU-time budget only when every epoch is scored (it interpolates between consecutive checkpoints), the
    BLEU target at the scored epochs."""
    every = set(scored) >= set(range(1, n_epochs + 1))
    return [b for b in budget_list
            if b.kind == "target" or (b.kind == "cpu" and every) or (b.epoch is not None and b.epoch in scored)]


def _at_cost(g: pd.DataFrame, cost: float, cols: Sequence[str]) -> tuple[list[float], str]:
    """A seed's ``cols`` at training CPU time ``cost``, interpolated between its scored checkpoints."""
    ok = g[g["status"] == OK].dropna(subset=[COST])
    if len(ok) and ok[COST].min() <= cost <= ok[COST].max():
        return [float(np.interp(cost, ok[COST], ok[c])) for c in cols], OK
    failed = g[g["status"].isin(FAILED)]
    return [math.nan] * len(cols), str(failed["status"].iloc[0]) if len(failed) else MISSING


def _to_target(g: pd.DataFrame, bleu_col: str, target: float, n_epochs: int) -> tuple[list[float], str]:
    """A seed's first epoch (and its training CPU time) with BLEU >= ``target``, up to epoch ``n_epochs``."""
    g = g[g["epoch"] <= n_epochs]
    hit = g[(g["status"] == OK) & (g[bleu_col] >= target)]
    if len(hit):
        first = hit.iloc[0]
        return [float(first["epoch"]), float(first[COST])], OK
    failed = g[g["status"].isin(FAILED)]
    if len(failed):
        return [math.nan] * 2, str(failed["status"].iloc[0])
    last = g[g["epoch"] == n_epochs]
    return [math.nan] * 2, NOT_REACHED if len(last) and last["status"].iloc[0] == OK else MISSING


def observations(epochs: pd.DataFrame, budget_list: Iterable[Budget], split: str, target: float,
                 n_epochs: int) -> pd.DataFrame:
    """One row per (run, seed, budget, metric): the value (NaN unless ok) and the seed's outcome there.
    Epoch and CPU-time budgets observe the loss and BLEU of ``split``; the target budget the epochs and
    training CPU time to ``target`` BLEU."""
    cols = list(metric_columns(split))
    rows = []
    for (run, seed), g in epochs.sort_values("epoch", kind="stable").groupby(["run", "seed"], sort=False):
        for b in budget_list:
            names = TO_TARGET if b.kind == "target" else cols
            if b.kind == "target":
                values, outcome = _to_target(g, cols[1], target, n_epochs)
            elif b.kind == "cpu":
                values, outcome = _at_cost(g, b.cpu_s, cols)
            else:
                at = g[g["epoch"] == b.epoch]
                outcome = _outcome(str(at["status"].iloc[0])) if len(at) else MISSING
                values = [float(at[c].iloc[0]) if outcome == OK else math.nan for c in cols]
            rows += [{"run": run, "seed": seed, "budget": b.label, "metric": m, "value": v, "outcome": outcome}
                     for m, v in zip(names, values)]
    return pd.DataFrame(rows, columns=OBS_COLUMNS)


# A BLEU is bounded by [0, 100]: its interval is a t interval of logit((BLEU + 0.5) / 101) over seeds,
# transformed back and clipped to the bounds (the 0.5 keeps a seed at 0 BLEU finite, as an empirical logit).
BLEU_BOUNDS = (0.0, 100.0)
_LOGIT_OFFSET = 0.5


def is_bleu(metric: str) -> bool:
    """A BLEU column (tokenized or sacreBLEU), bounded by [0, 100]."""
    return metric.endswith("bleu_tok") or metric.endswith("sacrebleu")


def mean_interval(values: Sequence[float], level: float = LEVEL,
                  bounds: tuple[float, float] | None = None, clip: bool = False) -> tuple[float, float, float, float]:
    """(mean, standard deviation, t-interval low, high) of ``values``; no spread or interval (NaN) from
    fewer than two. With ``bounds`` (a BLEU's [0, 100]) the interval is the t interval of the empirical
    logit over the values, transformed back: it lies inside the bounds (the mean and the standard deviation
    stay those of the values); with ``clip`` too, the plain t interval cut at the bounds."""
    v = np.asarray(values, dtype=float)
    if len(v) == 0:
        return (math.nan,) * 4
    mean = float(v.mean())
    if len(v) < 2:
        return mean, math.nan, math.nan, math.nan
    sd = float(v.std(ddof=1))
    q = t_quantile(len(v) - 1, level)
    if bounds is None or clip:
        half = q * sd / math.sqrt(len(v))
        if bounds is None:
            return mean, sd, mean - half, mean + half
        return mean, sd, max(bounds[0], mean - half), min(bounds[1], mean + half)
    lo_b, hi_b = bounds
    width = hi_b - lo_b + 2 * _LOGIT_OFFSET
    p = (np.clip(v, lo_b, hi_b) - lo_b + _LOGIT_OFFSET) / width
    z = np.log(p / (1 - p))
    centre, half = float(z.mean()), q * float(z.std(ddof=1)) / math.sqrt(len(v))

    def back(x: float) -> float:
        return float(min(hi_b, max(lo_b, lo_b - _LOGIT_OFFSET + width / (1 + math.exp(-x)))))

    return mean, sd, back(centre - half), back(centre + half)


def interval_rule(settings: ReportSettings) -> str:
    """The cells' interval rule in words (printed where the cells are shown)."""
    if settings.bleu_interval == "logit":
        return ("95% t interval over seeds; for BLEU (bounded by 0 and 100) the t interval of "
                f"logit((BLEU + {_LOGIT_OFFSET:g}) / {100 + 2 * _LOGIT_OFFSET:g}) transformed back, so it stays "
                "inside [0, 100] (analysis.report.bleu_interval: logit)")
    return ("95% t interval over seeds; for BLEU cut at 0 and 100 (analysis.report.bleu_interval: t)")


def cell_table(obs: pd.DataFrame, runs: Sequence[str], bleu_interval: str = "logit") -> pd.DataFrame:
    """Per (budget, metric, run): finished seeds ``n``, their mean, standard deviation and 95% t interval (a
    cell with fewer than two finished seeds gets none; a BLEU's on the logit scale, or with ``bleu_interval``
    "t" cut at 0 and 100), ``n_left_out`` (diverged, stopped or never reaching the target) and ``n_missing``."""
    cols = ["budget", "metric", "run", "n", "mean", "std", "ci_low", "ci_high", "n_left_out", "n_missing"]
    groups = dict(list(obs.groupby(["budget", "metric", "run"], sort=False)))
    rows = []
    for budget, metric in dict.fromkeys(zip(obs["budget"], obs["metric"])):  # budgets, then metrics, as observed
        bounds = BLEU_BOUNDS if is_bleu(metric) else None
        for run in (r for r in runs if (budget, metric, r) in groups):
            g = groups[(budget, metric, run)]
            ok = g[g["outcome"] == OK]["value"].dropna()
            mean, sd, lo, hi = mean_interval(ok.tolist(), bounds=bounds, clip=bleu_interval != "logit")
            rows.append({"budget": budget, "metric": metric, "run": run, "n": len(ok), "mean": mean, "std": sd,
                         "ci_low": lo, "ci_high": hi,
                         "n_left_out": int(g["outcome"].isin([*FAILED, NOT_REACHED]).sum()),
                         "n_missing": int((g["outcome"] == MISSING).sum())})
    return pd.DataFrame(rows, columns=cols)


TRAINED, DID_NOT_TRAIN = "trained", "did not train"
NO_REFERENCE = "no reference"  # a run judged against a named reference that has no finished seed at that epoch
FATE_COLUMNS = ["budget", "epoch", "run", "seed", "status", "nll", "bleu", "best_nll_run", "best_nll",
                "best_bleu_run", "best_bleu", "reference", "reference_nll", "reference_bleu", "nll_ratio",
                "bleu_fraction", "fate"]


def failure_rule(settings: ReportSettings) -> str:
    """The failure rule in words (printed where the failures are shown), with the named references."""
    refs = "; ".join(f"{run} against {ref}" for run, ref in settings.failure_reference.items()) or "none named"
    return (f"a seed diverged when its training loss became non-finite (or exceeded the configured bound); a "
            f"finished seed did not train when, at the budget, its tokenized BLEU is below "
            f"{settings.failure_bleu_fraction:g} x the best run's seed-mean BLEU there "
            f"(analysis.report.failure_bleu_fraction) or its validation NLL (bits, without label smoothing) is "
            f"above {settings.failure_nll_ratio:g} x the best run's seed-mean NLL there "
            f"(analysis.report.failure_nll_ratio); the best run: the selected run with the highest seed-mean BLEU "
            f"(for BLEU) or the lowest seed-mean NLL (for NLL) at the same epoch, over its finished seeds. A run "
            f"with a named reference (analysis.report.failure_reference: {refs}) is judged against that run's "
            f"seed means at the same epoch instead, and has no fate ({NO_REFERENCE}) where the reference has no "
            f"finished seed")


def _fate(status: str, frac: float, ratio: float, unjudged: bool, settings: ReportSettings) -> str:
    """A seed's fate from its status and its BLEU fraction and NLL ratio against the run it is judged against
    (``unjudged``: its named reference has no finished seed)."""
    if status in FAILED:
        return status
    if status != OK:
        return MISSING
    if unjudged:
        return NO_REFERENCE
    return DID_NOT_TRAIN if frac < settings.failure_bleu_fraction or ratio > settings.failure_nll_ratio else TRAINED


def seed_fates(epochs: pd.DataFrame, runs: Sequence[str], at: Sequence[tuple[str, int]], split: str,
               settings: ReportSettings) -> pd.DataFrame:
    """tables/seed_fates.csv: per epoch budget of ``at`` (label, epoch), run and seed: its status, NLL and BLEU
    on ``split``, the best run's seed means at that epoch, its named reference's (``failure_reference``), the
    ratios to the run it is judged against, and its ``fate`` (diverged, stopped, ``did not train``, ``trained``,
    ``no reference``, or ``missing``) by ``failure_rule``."""
    nll_col, bleu_col = f"{split}_nll_base2", f"{split}_bleu_tok"
    rows = []
    for label, epoch in at:
        e = epochs[(epochs["epoch"] == epoch) & epochs["run"].isin(runs)]
        ok = e[e["status"] == OK]
        means = ok.groupby("run")[[nll_col, bleu_col]].mean()
        best_nll_run = means[nll_col].idxmin() if means[nll_col].notna().any() else ""
        best_bleu_run = means[bleu_col].idxmax() if means[bleu_col].notna().any() else ""
        best_nll = float(means.loc[best_nll_run, nll_col]) if best_nll_run else math.nan
        best_bleu = float(means.loc[best_bleu_run, bleu_col]) if best_bleu_run else math.nan
        for r in e.sort_values(["run", "seed"], key=lambda c: c.map({x: i for i, x in enumerate(runs)})
                               if c.name == "run" else c).itertuples():
            nll, bleu = float(getattr(r, nll_col)), float(getattr(r, bleu_col))
            ref = settings.failure_reference.get(r.run, "")
            ref_nll, ref_bleu = ((float(means.loc[ref, nll_col]), float(means.loc[ref, bleu_col]))
                                 if ref in means.index else (math.nan, math.nan))
            against_nll, against_bleu = (ref_nll, ref_bleu) if ref else (best_nll, best_bleu)
            ratio = nll / against_nll if against_nll else math.nan
            frac = bleu / against_bleu if against_bleu else math.nan
            unjudged = bool(ref) and math.isnan(ref_nll + ref_bleu)
            rows.append({"budget": label, "epoch": epoch, "run": r.run, "seed": r.seed, "status": r.status,
                         "nll": nll, "bleu": bleu, "best_nll_run": best_nll_run, "best_nll": best_nll,
                         "best_bleu_run": best_bleu_run, "best_bleu": best_bleu, "reference": ref,
                         "reference_nll": ref_nll, "reference_bleu": ref_bleu, "nll_ratio": ratio,
                         "bleu_fraction": frac,
                         "fate": _fate(str(r.status), frac, ratio, unjudged, settings)})
    return pd.DataFrame(rows, columns=FATE_COLUMNS)


def failure_table(fates: pd.DataFrame, runs: Sequence[str], budget: str) -> pd.DataFrame:
    """tables/failures.csv: per run, its seeds' fates at ``budget`` (seed_fates): diverged, stopped, did not
    train (all three count as failed), trained, or none (not there yet, or no reference: ``n_unfinished``);
    ``failure_rate`` = failed / seeds with a fate."""
    at = fates[fates["budget"] == budget]
    rows = []
    for run in runs:
        g = at[at["run"] == run]
        n = {k: int((g["fate"] == k).sum()) for k in (DIVERGED, STOPPED, DID_NOT_TRAIN, TRAINED)}
        n_failed = n[DIVERGED] + n[STOPPED] + n[DID_NOT_TRAIN]
        n_fate = n_failed + n[TRAINED]
        rows.append({"run": run, "budget": budget, "n_seeds": len(g), "n_diverged": n[DIVERGED],
                     "n_stopped": n[STOPPED], "n_did_not_train": n[DID_NOT_TRAIN], "n_failed": n_failed,
                     "n_trained": n[TRAINED], "n_unfinished": len(g) - n_fate,
                     "failure_rate": n_failed / n_fate if n_fate else math.nan})
    return pd.DataFrame(rows, columns=["run", "budget", "n_seeds", "n_diverged", "n_stopped", "n_did_not_train",
                                       "n_failed", "n_trained", "n_unfinished", "failure_rate"])


def _spread(values: pd.Series) -> str:
    """One number when every seed and cell agrees, else "min–max"."""
    v = values.dropna()
    if v.empty:
        return ""
    lo, hi = int(v.min()), int(v.max())
    return f"{lo}" if lo == hi else f"{lo}–{hi}"


def budget_table(prog: pd.DataFrame, budget_list: Iterable[Budget], runs: Sequence[str]) -> pd.DataFrame:
    """Per budget, what it is in updates, target tokens and epochs over the finished seeds of ``runs``
    (one number when every cell and seed has the same), and how it was measured."""
    prog = prog[prog["run"].isin(runs) & (prog["status"] == OK)]
    rows = []
    for b in budget_list:
        at = prog[prog["epoch"] == b.epoch] if b.epoch else prog.iloc[0:0]
        how = {"last": "the last checkpoint", "early": "an earlier checkpoint (analysis.report.budget_epoch)",
               "longer": "the last checkpoint of the runs that train this many epochs (the others end before it)",
               "cpu": "equal training CPU time: each seed's scores interpolated linearly between its "
                      "checkpoints' cumulative CPU-seconds of training (the hardware of 'Where it ran')",
               "target": "epochs and training CPU time to the first checkpoint at the BLEU target"}[b.kind]
        rows.append({"budget": b.label, "epoch": b.epoch, "updates": _spread(at["updates"]),
                     "target_tokens": _spread(at["target_tokens"]),
                     "cpu_s": b.cpu_s if b.cpu_s is not None else math.nan,
                     "same_in_every_cell": bool(at["updates"].nunique() <= 1 and at["target_tokens"].nunique() <= 1)
                     if len(at) else math.nan, "how": how})
    return pd.DataFrame(rows)


def length_rule(lengths: Sequence[int]) -> str:
    """The rule for runs of different lengths in words ("" when every run has the same), printed where budgets
    are compared (Effects, Tuned baselines, Answer)."""
    if len(lengths) < 2:
        return ""
    short = min(lengths)
    return (f"The selected runs train different numbers of epochs ({', '.join(map(str, sorted(lengths)))}), and runs "
            "are compared only at epochs every compared run has: a comparison's last-epoch budget is the last epoch "
            f"common to its runs (the shortest one's last; epoch {short} for all the selected runs), the earlier "
            f"budget, equal CPU time and the time to the BLEU target lie within epoch {short}, and a longer "
            f"training's last epoch is a budget of the runs that reach it. The factorial fit is at the last epoch "
            "common to its cells, each grid at its runs' and each tuned pair at both grids' common last epoch, each "
            "of the Answer's pairs at the last epoch both its runs have; the end-point table reads each run at its "
            "own last epochs.")


__all__ = ["Budget", "COST", "budgets", "epoch_label", "length_rule", "scored_budgets", "observations", "cell_table",
           "failure_table", "budget_table", "mean_interval", "best_bleu", "epoch_at", "three_quarters",
           "metric_columns", "seed_fates", "failure_rule", "NO_REFERENCE", "interval_rule", "is_bleu", "t_quantile"]
