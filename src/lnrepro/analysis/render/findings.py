"""The Findings section's sentences, in the order a reader needs them (one job: sentences from computed tables).

The order: Figure 4's gap (the Answer section above gives the time to quality and its decomposition; this
opens with the gap itself so that the list reads alone), then Figure 4's confounds and the controlled
comparisons that separate them, with their numbers (the simple effects of ``effects.SIMPLE``: one factor with
another held, because a main effect averaged over a cell that did not train answers no question), then stability
and failures (``budget.failure_rule``, ``aggregate.convergence_rule``), then the claims, and last the absolute
numbers of the paper's scale and the references, one sentence each. Every number is a cell of a report table;
every setting named (warm-up length, decay epoch, widths) is read from the experiment, never from the paper.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from .. import aggregate as ag
from ..stats import budget as bu
from ..stats import effects as ef
from ..numbers import interval, norm_label, sig
from ..sections.claims import claim_sentence

if TYPE_CHECKING:
    from ..build import ReportData


@dataclass
class Group:
    """One heading of the Findings and its sentences."""

    heading: str
    sentences: list[str] = field(default_factory=list)


def _ci(v: float, lo: float, hi: float, what: str = "95% interval") -> str:
    if math.isnan(v):
        return "—"
    if math.isnan(lo):
        return f"{sig(v)} (no interval: fewer than two seeds)"
    return f"{sig(v)} ({what} {sig(lo)} to {sig(hi)})"


def schedule_words(data: ReportData, run: str) -> str:
    """A run's schedule from its config: "warm-up over 500 updates, inverse-sqrt decay", "no warm-up, x0.1 at
    the first update of epoch 5"."""
    s = data.experiment.runs[run].schedule
    warm = f"warm-up over {s.warmup_updates} updates" if s.warmup else "no warm-up"
    if s.decay == "step":
        decay = (f"x{s.decay_factor:g} at the first update of epoch "
                 + ", ".join(map(str, s.decay_epochs or ())))
    elif s.decay == "isqrt":
        decay = f"inverse-sqrt decay from update {s.anchor_updates}"
    else:
        decay = f"{s.decay} learning rate"
    return f"{warm}, {decay}"


def _pair_gap(data: ReportData) -> tuple[list[str], int | None]:
    """Figure 4's gap (the second run minus the first) in BLEU and loss at its widest BLEU epoch and at the last
    epoch, each with a Welch interval; and the widest epoch."""
    pair, split, e = data.figure4_runs, data.agg.split, data.agg.epochs
    if len(pair) != 2:
        return ["Figure 4's pair (comparisons.figure4) is not configured or not selected: no gap to report."], None
    low, high = pair
    bleu, loss = f"{split}_bleu_tok", f"{split}_loss_base2"
    ok = e[(e["status"] == bu.OK) & e["run"].isin(pair)]
    means = ok.groupby(["epoch", "run"])[bleu].mean().unstack("run")
    if means.empty or not {low, high} <= set(means.columns):
        return [f"Figure 4's pair ({low}, {high}) has no scored checkpoint of both runs yet."], None
    gap = (means[high] - means[low]).dropna()
    widest, last = int(gap.idxmax()), int(gap.index.max())
    out = []
    for ep in dict.fromkeys((widest, last)):
        at = ok[ok["epoch"] == ep]
        parts = []
        for col, unit in ((bleu, "BLEU"), (loss, "bits of validation loss")):
            d, lo, hi, _ = ef.welch(at.loc[at["run"] == low, col].dropna(), at.loc[at["run"] == high, col].dropna())
            parts.append(f"{_ci(d, lo, hi, '95% Welch interval')} {unit}")
        n = "+".join(str(int((at["run"] == r).sum())) for r in pair)
        which = ("its widest BLEU gap" if ep == widest else "") + (
            (", and " if ep == widest else "") + "the last epoch" if ep == last else "")
        out.append(f"Figure 4's pair, {high} minus {low}, at epoch {ep} ({which}; {n} seeds): {parts[0]}; "
                   f"{parts[1]}.")
    return out, widest


def gap_headline(data: ReportData) -> str:
    """Figure 4's gap in BLEU at the last epoch both runs are scored at, one interval: the Figure 4 section's
    finding."""
    pair, split, e = data.figure4_runs, data.agg.split, data.agg.epochs
    if len(pair) != 2:
        return "Figure 4's pair (comparisons.figure4) is not configured or not selected: no gap to report."
    low, high = pair
    bleu = f"{split}_bleu_tok"
    ok = e[(e["status"] == bu.OK) & e["run"].isin(pair) & e[bleu].notna()]
    both = ok.groupby("epoch")["run"].nunique()
    if not (both == 2).any():
        return f"Figure 4's pair, {high} and {low}, has no scored checkpoint of both runs yet."
    last = int(both[both == 2].index.max())
    at = ok[ok["epoch"] == last]
    x, y = (at.loc[at["run"] == r, bleu].astype(float) for r in (low, high))
    d, lo, hi, _ = ef.welch(x, y)
    labels = [norm_label(data.experiment.runs[r].model.norm) for r in (high, low)]
    ci = ", 95% Welch interval" if math.isfinite(lo) else ", no interval with one seed in an arm"
    return (f"At epoch {last}, {labels[0]} reaches {sig(y.mean())} validation BLEU and {labels[1]} {sig(x.mean())}: "
            f"a gap of {'+' if d > 0 else ''}{interval(d, lo, hi)} BLEU{ci}.")


def norm_headline(data: ReportData) -> str:
    """The norm position's simple effects on BLEU with and without warm-up at the fit's last epoch, one interval
    a sentence: the factors section's finding after Figure 4's confounds."""
    t, split = data.study.effects_by_epoch, data.agg.split
    out = []
    for effect, words in (("norm | warm-up on", "With warm-up"), ("norm | warm-up off", "Without warm-up")):
        r = t[(t["epoch"] == data.study.fit_epoch) & (t["metric"] == f"{split}_bleu_tok") & (t["effect"] == effect)]
        if r.empty or pd.isna(r["estimate"].iloc[0]):
            continue
        r = r.iloc[0]
        ci = "95% interval" if math.isfinite(r["ci_low"]) else "no interval with one seed"
        out.append(f"{words}, Pre-LN minus Post-LN is {interval(r['estimate'], r['ci_low'], r['ci_high'])} BLEU at "
                   f"epoch {data.study.fit_epoch}, {ci}, over both decays.")
    return " ".join(out)


def _effect(data: ReportData, epoch: int, metric: str, effect: str) -> str | None:
    t = data.study.effects_by_epoch
    r = t[(t["epoch"] == epoch) & (t["metric"] == metric) & (t["effect"] == effect)]
    if r.empty or pd.isna(r["estimate"].iloc[0]):
        return None
    r = r.iloc[0]
    return _ci(r["estimate"], r["ci_low"], r["ci_high"])


def _controlled(data: ReportData, epochs: list[int]) -> list[str]:
    """The confounds of Figure 4's pair, then the simple effects that separate them, at ``epochs``."""
    pair, split = data.figure4_runs, data.agg.split
    out = []
    fig = next((c for c in data.confounds["comparisons"] if c["name"] == "figure4"), None)
    if fig is not None and len(pair) == 2:
        conf = ", ".join(fig["confounds"]) or "nothing else"
        out.append(f"Figure 4's pair changes the norm position and also {conf}: {pair[0]} has "
                   f"{schedule_words(data, pair[0])}; {pair[1]} has {schedule_words(data, pair[1])}. Its gap "
                   "alone cannot say which of these makes the difference; the cells of the factorial design can.")
    bleu, loss = f"{split}_bleu_tok", f"{split}_loss_base2"
    texts = {
        "norm | warm-up on": "Norm position with warm-up (Pre-LN minus Post-LN, both with warm-up, over both decays)",
        "norm | warm-up off": "Norm position without warm-up (Pre-LN minus Post-LN, neither with warm-up)",
        "warmup | Pre-LN": "Warm-up within Pre-LN (on minus off)",
        "warmup | Post-LN": "Warm-up within Post-LN (on minus off)",
        "decay | Pre-LN": "The step decay within Pre-LN (step minus isqrt)",
        "decay | Post-LN, warm-up on": "The step decay within Post-LN with warm-up (step minus isqrt)",
    }
    for effect, words in texts.items():
        parts = []
        for ep in epochs:
            b, lo = _effect(data, ep, bleu, effect), _effect(data, ep, loss, effect)
            if b is not None and lo is not None:
                parts.append(f"at epoch {ep} {b} BLEU and {lo} bits")
        if parts:
            out.append(f"{words}: {'; '.join(parts)}.")
    if len(out) > 1:
        n = data.study.effects_by_epoch["n_seeds"].min()
        out.append("The main effects (Effects section) average each factor over the other factors' levels, "
                   "the cells that did not train included, so they are not read as an attribution of Figure 4's "
                   f"gap; the intervals above use each cell's own seed variance ({int(n)} seeds or more per cell, "
                   "Welch-Satterthwaite degrees of freedom).")
    return out


def _stability(data: ReportData) -> list[str]:
    s, agg = data.study, data.agg
    out = []
    div = agg.divergence
    n_div, n_fin = int(div["n_diverged"].sum()), int(div["n_finished"].sum())
    out.append(f"Divergence (a non-finite training loss): {n_div} of {n_fin} finished seeds.")
    f = s.failures
    failed = f[f["n_failed"] > 0]
    refs = "".join(f"; {run} against {ref}'s" for run, ref in s.settings.failure_reference.items())
    rule = (f"{s.settings.failure_bleu_fraction:g} x the best run's BLEU or more than "
            f"{s.settings.failure_nll_ratio:g} x its validation NLL{refs}")
    if len(f):
        if failed.empty:
            out.append(f"At {s.last} every seed with a fate trained (none below {rule}).")
        else:
            parts = [f"{r.run} {int(r.n_failed)} of {int(r.n_seeds - r.n_unfinished)}" for r in failed.itertuples()]
            out.append(f"Failed at {s.last} (diverged, or did not train: below {rule}): {'; '.join(parts)}; every "
                       "other seed trained.")
    fates = s.seed_fates[(s.seed_fates["budget"] == s.last)]
    bad, good = fates[fates["fate"] == bu.DID_NOT_TRAIN], fates[fates["fate"] == bu.TRAINED]
    if len(bad) and len(good):
        out.append(f"At {s.last} the seeds that did not train reach {sig(bad['bleu'].min())} to "
                   f"{sig(bad['bleu'].max())} BLEU, the others {sig(good['bleu'].min())} to {sig(good['bleu'].max())}.")
    conv = agg.convergence[agg.convergence["label"].astype(str) != ""]
    if len(conv):
        groups = conv.groupby("label", sort=False)["run"].apply(list).to_dict()
        parts = [f"{label}: {', '.join(runs)}" for label, runs in groups.items()]
        cut = conv[conv["lr_cut"].astype(str) != ""]
        tol = s.settings.convergence_tolerance
        span = f"epochs {conv['epochs'].iloc[0]}" if conv["epochs"].nunique() == 1 else "each run's last scored epochs"
        out.append(f"Convergence over {span} (the validation NLL's slope, converged "
                   f"within +-{tol:.1%} an epoch): {'; '.join(parts)}."
                   + (f" {len(cut)} run(s) had their learning rate cut by the step decay: a flat curve there is "
                      "annealing, not convergence." if len(cut) else ""))
    return out


def _claims(data: ReportData) -> tuple[list[str], list[str]]:
    """The claims' sentences: compared claims, then absolute numbers and references (last, grouped)."""
    first, last = [], []
    for row in data.study.claims.to_dict("records"):
        (last if row["kind"] in ("absolute", "reference") else first).append(claim_sentence(row))
    return first, last


def findings(data: ReportData) -> list[Group]:
    """The Findings, grouped and in order."""
    gap, widest = _pair_gap(data)
    epochs = sorted({e for e in (widest, data.study.fit_epoch) if e is not None})
    scored = set(data.study.effects_by_epoch["epoch"]) if len(data.study.effects_by_epoch) else set()
    first, last = _claims(data)
    labels = {r: norm_label(data.experiment.runs[r].model.norm) for r in data.figure4_runs}
    head = " against ".join(f"{labels[r]} ({r})" for r in data.figure4_runs) or "Figure 4's pair"
    return [
        Group(f"The gap: {head}", gap),
        Group("Figure 4's confounds and the comparisons that separate them",
              _controlled(data, [e for e in epochs if e in scored])),
        Group("Stability and failures", _stability(data)),
        Group("The paper's claims", first),
        Group("Absolute numbers of the paper's scale, and references", last),
    ]


def rules(data: ReportData) -> dict[str, Any]:
    """Every statistical rule of the report in words, as printed beside its tables."""
    s = data.study.settings
    return {"covariance": ef.COVARIANCES[s.covariance], "covariance_key": s.covariance,
            "interval": bu.interval_rule(s), "failure": bu.failure_rule(s),
            "convergence": ag.convergence_rule(s.convergence_window, s.convergence_tolerance)}
