"""Whether Figure 4's arms end as good as each other (one job: the equivalence tests at the last epoch).

For ``comparisons.figure4``'s runs (``pair.figure4_pair``: the first, Post-LN with warm-up, is arm a; the
second, Pre-LN without warm-up, arm b), per metric of ``analysis.report.equivalence_margins`` (tokenized BLEU,
validation NLL in bits) on every split scored at the last epoch (the headline split first):

- **Resolution first.** The seeds per arm, their pooled standard deviation s (``n_a + n_b - 2`` degrees of
  freedom), and the half-width the 90% interval of the difference is expected to have with these seeds,
  ``t(0.95, n_a + n_b - 2) * s * sqrt(1/n_a + 1/n_b)``; the interval must lie within the margin for the two
  one-sided tests to reject, so the margin can establish as equivalent only a true difference below ``margin -
  half-width`` ("none" when the half-width reaches the margin).
- **The test.** The difference of the seed means, b minus a (Pre minus Post), its 90% and 95% Welch intervals
  and the two one-sided tests against +-margin (statsmodels ``ttost_ind``, ``usevar="unequal"``: its p-value is
  below 0.05 exactly when the 90% Welch interval lies within the margin). The verdict: ``equivalent`` (TOST p <
  0.05), ``different`` (the 95% interval excludes 0 and the 90% interval is not within the margin), else
  ``undetermined with these seeds``.
- **An arm that failed or is missing is not tested**: a seed that diverged, stopped or did not train at the last
  epoch (``budget.seed_fates``, the failure rule), or an arm without a finished seed, makes the row ``not
  tested`` with the reason.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import pandas as pd

from ...config.settings import Experiment
from ..pair import Pair, figure4_pair, seed_values
from ..numbers import norm_label, sig, signed
from .budget import DID_NOT_TRAIN, FAILED, LEVEL, epoch_label, t_quantile
from .effects import welch

ALPHA = 0.05  # the two one-sided tests' level: equivalent when both reject at 5% (the 90% interval within the margin)
EQUIVALENT, DIFFERENT, UNDETERMINED, NOT_TESTED = ("equivalent", "different", "undetermined with these seeds",
                                                   "not tested")
NONE = "none"  # largest_equivalent when the expected half-width reaches the margin
COLUMNS = ["metric", "epoch", "run_a", "run_b", "difference_of", "n_a", "n_b", "mean_a", "mean_b", "sd_a", "sd_b",
           "pooled_sd", "margin", "half_width_90", "largest_equivalent", "difference", "ci90_low", "ci90_high",
           "ci95_low", "ci95_high", "df", "tost_p", "verdict", "note"]


def pooled_sd(a: Sequence[float], b: Sequence[float]) -> float:
    """The two arms' pooled seed standard deviation (NaN without a degree of freedom)."""
    na, nb = len(a), len(b)
    if not na or not nb or na + nb <= 2:
        return math.nan
    va = pd.Series(a, dtype=float).var(ddof=1) if na > 1 else 0.0
    vb = pd.Series(b, dtype=float).var(ddof=1) if nb > 1 else 0.0
    return math.sqrt(((na - 1) * va + (nb - 1) * vb) / (na + nb - 2))


def expected_half_width(sd: float, n_a: int, n_b: int) -> float:
    """The half-width of the 90% interval of a difference of means with ``n_a`` and ``n_b`` seeds of standard
    deviation ``sd`` (t with n_a + n_b - 2 degrees of freedom)."""
    if not (n_a and n_b) or math.isnan(sd):
        return math.nan
    return t_quantile(n_a + n_b - 2, 1 - 2 * ALPHA) * sd * math.sqrt(1 / n_a + 1 / n_b)


def largest_equivalent(margin: float, half_width: float) -> float | str:
    """The largest true difference the margin could still establish as equivalent: margin minus the expected
    half-width, or "none" when the half-width reaches the margin (NaN without a half-width)."""
    if math.isnan(half_width):
        return math.nan
    return margin - half_width if half_width < margin else NONE


def verdict(ci90: tuple[float, float], ci95: tuple[float, float], p: float, margin: float) -> str:
    """equivalent (TOST p < ALPHA), different (the 95% interval excludes 0 and the 90% one is not within the
    margin), else undetermined with these seeds."""
    if p < ALPHA:
        return EQUIVALENT
    within = -margin < ci90[0] and ci90[1] < margin
    if (ci95[0] > 0 or ci95[1] < 0) and not within:
        return DIFFERENT
    return UNDETERMINED


def compare_arms(a: Sequence[float], b: Sequence[float], margin: float) -> dict[str, Any]:
    """b minus a: the difference of the seed means, its 90% and 95% Welch intervals, Welch's degrees of freedom,
    the two one-sided tests' p-value against +-``margin`` and the verdict (fewer than two seeds on a side: no
    interval, undetermined)."""
    from statsmodels.stats.weightstats import ttost_ind

    diff = sum(b) / len(b) - sum(a) / len(a)
    out: dict[str, Any] = {"difference": diff, "ci90_low": math.nan, "ci90_high": math.nan, "ci95_low": math.nan,
                           "ci95_high": math.nan, "df": math.nan, "tost_p": math.nan, "verdict": UNDETERMINED,
                           "note": ""}
    if len(a) < 2 or len(b) < 2:
        return {**out, "note": "fewer than two seeds in an arm: no interval"}
    if not pooled_sd(a, b) > 0:
        return {**out, "note": "the seeds do not spread at all: no interval"}
    _, lo90, hi90, df = welch(a, b, 1 - 2 * ALPHA)
    _, lo95, hi95, _ = welch(a, b, LEVEL)
    # ttost_ind(x1, x2, low, upp) tests low < mean(x1) - mean(x2) < upp: x1 is arm b
    p = float(ttost_ind(list(b), list(a), -margin, margin, usevar="unequal")[0])
    return {**out, "ci90_low": lo90, "ci90_high": hi90, "ci95_low": lo95, "ci95_high": hi95,
            "df": df, "tost_p": p, "verdict": verdict((lo90, hi90), (lo95, hi95), p, margin)}


def _arm_problem(fates: pd.DataFrame, run: str, values: Sequence[float], epoch: int) -> str:
    """Why an arm is not compared: its seeds that failed at the last epoch, or none finished; "" when fine."""
    failed = fates[(fates["run"] == run) & fates["fate"].isin([*FAILED, DID_NOT_TRAIN])]
    if len(failed):
        counts = failed["fate"].value_counts()
        what = ", ".join(f"{n} {fate}" for fate, n in counts.items())
        n = int((fates["run"] == run).sum())
        return f"{run} failed at epoch {epoch} ({len(failed)} of {n} seeds: {what})"
    return "" if values else f"{run} has no finished seed at epoch {epoch}"


def difference_of(experiment: Experiment, pair: Pair) -> str:
    """"Pre-LN minus Post-LN (preln_nowarmup_step8 - postln_warmup_isqrt)": which way the difference goes."""
    a, b = (norm_label(experiment.runs[r].model.norm) for r in (pair.from_run, pair.to_run))
    return f"{b} minus {a} ({pair.to_run} - {pair.from_run})"


def equivalence(experiment: Experiment, epochs: pd.DataFrame, fates: pd.DataFrame, split: str) -> pd.DataFrame:
    """tables/equivalence.csv: per split scored at the last epoch (``split``, the headline, first) and metric of
    ``analysis.report.equivalence_margins``, Figure 4's arms at the last epoch (``fates``: budget.seed_fates,
    read at that epoch's budget); the last epoch is the last both arms train (runs of different lengths are
    compared at epochs every compared run has); empty when the pair is not configured or selected."""
    pair, _ = figure4_pair(experiment)
    if pair is None:
        return pd.DataFrame(columns=COLUMNS)
    last = experiment.common_last([pair.from_run, pair.to_run])
    margins = experiment.analysis.report.equivalence_margins.to_dict()
    at = fates[fates["budget"] == epoch_label(last)]
    splits = [split, *(s for s in experiment.eval.splits if s != split)]
    rows = []
    for metric, margin in ((f"{sp}_{m}", mg) for sp in splits for m, mg in margins.items()):
        if metric not in epochs.columns:
            continue
        a, b = (seed_values(epochs, r, last, metric) for r in (pair.from_run, pair.to_run))
        sd = pooled_sd(a, b)
        half = expected_half_width(sd, len(a), len(b))
        row: dict[str, Any] = {
            "metric": metric, "epoch": last, "run_a": pair.from_run, "run_b": pair.to_run,
            "difference_of": difference_of(experiment, pair), "n_a": len(a), "n_b": len(b),
            "mean_a": sum(a) / len(a) if a else math.nan, "mean_b": sum(b) / len(b) if b else math.nan,
            "sd_a": pd.Series(a, dtype=float).std(ddof=1) if len(a) > 1 else math.nan,
            "sd_b": pd.Series(b, dtype=float).std(ddof=1) if len(b) > 1 else math.nan,
            "pooled_sd": sd, "margin": margin, "half_width_90": half,
            "largest_equivalent": largest_equivalent(margin, half)}
        problems = [p for p in (_arm_problem(at, r, v, last) for r, v in ((pair.from_run, a), (pair.to_run, b))) if p]
        if problems:
            row.update({k: math.nan for k in ("difference", "ci90_low", "ci90_high", "ci95_low", "ci95_high", "df",
                                              "tost_p")}, verdict=NOT_TESTED, note="; ".join(problems))
        else:
            row.update(compare_arms(a, b, margin))
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


# --- the report's sentences (filled in from the table; no new statistics)


def _words(metric: str) -> str:
    """"validation BLEU", "test NLL"."""
    split, _, kind = metric.partition("_")
    what = "BLEU" if kind == "bleu_tok" else "NLL" if kind == "nll_base2" else kind
    return f"{'validation' if split == 'valid' else split} {what}"


def _unit(metric: str) -> str:
    return "BLEU" if metric.endswith("bleu_tok") else "bits"


def _key(metric: str) -> str:
    return f"analysis.report.equivalence_margins.{metric.partition('_')[2]}"


def _seeds(n: int) -> str:
    return f"{n} seed{'' if n == 1 else 's'}"


def _arms(r: pd.Series) -> tuple[str, str]:
    """The two arms as a sentence names them, b first: the norm labels of ``difference_of``."""
    b, _, a = r["difference_of"].partition(" (")[0].partition(" minus ")
    return b, a


def resolution_sentence(r: pd.Series) -> str:
    """The resolution of one metric's test with these seeds, stated before its result."""
    unit = _unit(r["metric"])
    b, a = _arms(r)
    head = (f"Resolution of the {_words(r['metric'])} test at epoch {int(r['epoch'])}: {_seeds(int(r['n_b']))} of "
            f"{b} and {_seeds(int(r['n_a']))} of {a}")
    if not math.isfinite(r["half_width_90"]):
        return head + ": too few seeds for an interval."
    largest = r["largest_equivalent"]
    can = (f"so the margin ±{sig(r['margin'])} {unit} ({_key(r['metric'])}) can establish equivalence only for a "
           f"true difference under {sig(float(largest))} {unit}" if largest != NONE else
           f"as wide as the margin ±{sig(r['margin'])} {unit} ({_key(r['metric'])}) or wider: with these seeds no "
           "true difference can be established as equivalent (none)")
    return (f"{head}, a pooled seed standard deviation of {sig(r['pooled_sd'])} {unit}; the 90% interval of the "
            f"difference is expected to reach ±{sig(r['half_width_90'])} {unit} around it, {can}.")


def result_sentence(r: pd.Series) -> str:
    """One tested metric's difference, intervals, test and verdict."""
    unit, words = _unit(r["metric"]), _words(r["metric"])
    diff = f"{signed(r['difference'])} {unit}"
    b, a = _arms(r)
    head = f"{words[0].upper()}{words[1:]} at epoch {int(r['epoch'])}, {b} minus {a}: {diff}"
    if not math.isfinite(r["ci90_low"]):
        return f"{head}; {r['note']}, so {r['verdict']}."
    return (f"{head}, 90% Welch interval {sig(r['ci90_low'])} to {sig(r['ci90_high'])}. Its 95% interval runs from "
            f"{sig(r['ci95_low'])} to {sig(r['ci95_high'])}. Two one-sided tests against ±{sig(r['margin'])} {unit} "
            f"give p = {sig(r['tost_p'])}, so {r['verdict']}: equivalent when p < {ALPHA:g}, different when the 95% "
            "interval excludes 0 and the 90% interval is not within the margin.")


def sentences(table: pd.DataFrame, note: str = "") -> list[str]:
    """The end point's sentences: per tested metric its resolution first, then its result; one sentence for the
    metrics not tested, with why; ``note`` (why there is no pair) when the table is empty."""
    if table.empty:
        return [f"No equivalence test of Figure 4's arms: {note}." if note else "No equivalence test."]
    tested = table[table["verdict"] != NOT_TESTED]
    out = [s for _, r in tested.iterrows() for s in (resolution_sentence(r), result_sentence(r))]
    for (epoch, why), g in table[table["verdict"] == NOT_TESTED].groupby(["epoch", "note"], sort=False):
        metrics = [_words(m) for m in g["metric"]]
        listed = metrics[0] if len(metrics) == 1 else ", ".join(metrics[:-1]) + f" and {metrics[-1]}"
        out.append(f"No equivalence test of {listed} at epoch {int(epoch)}: {why}.")
    return out


def view(table: pd.DataFrame) -> pd.DataFrame:
    """tables/equivalence.csv on the page: per metric the resolution (seeds, pooled sd, expected half-width, the
    largest difference the margin can establish), then the difference with its intervals, the test and verdict."""

    def interval(lo: float, hi: float) -> str:
        return f"[{sig(lo)}, {sig(hi)}]" if math.isfinite(lo) else "—"

    return pd.DataFrame([{
        "metric": r.metric, "seeds (b / a)": f"{r.n_b} / {r.n_a}", "pooled sd": sig(r.pooled_sd),
        "margin": f"±{sig(r.margin)}", "expected 90% half-width": sig(r.half_width_90),
        "largest equivalent": (r.largest_equivalent if isinstance(r.largest_equivalent, str)
                               else sig(r.largest_equivalent)),
        "b - a": signed(r.difference) if math.isfinite(r.difference) else "—",
        "90% Welch": interval(r.ci90_low, r.ci90_high), "95% Welch": interval(r.ci95_low, r.ci95_high),
        "TOST p": sig(r.tost_p), "verdict": r.verdict}
        for r in table.itertuples()])
