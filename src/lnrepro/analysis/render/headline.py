"""The Answer's first paragraph (one job: three to five sentences a researcher can quote, from computed tables).

Which question leads is the design's, read from what the study selects: a study that separates the factors (a
one-factor-at-a-time path between Figure 4's arms is selected) answers how much faster Pre-LN without warm-up
trains and how the gap splits; a study of the pair alone whose end-point test decides (equivalent or different)
answers whether the pair ends as good, then its tuned grids and the runs judged against a named reference
(``analysis.report.failure_reference``). Both end with where the curves stand at the last epoch. Every number is
a cell of the Answer's, the equivalence, the tuned or the fates tables; each sentence carries at most one
interval and no parentheses inside parentheses.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pandas as pd

from ..aggregate import ANNEALED, CONVERGED, IMPROVING, UNDETERMINED, WORSENING
from ..numbers import sig, signed
from ..stats import equivalence as eq
from ..pair import FIGURE4
from ..stats.budget import epoch_label
from ..sections.answer import REACHED, Answer, annealed_at, level_text, main_path, middle_fraction
from ..sections.tuned import BRACKETED, EDGE_DOWN, EDGE_UP, NOT_SCORED, ONE_VALUE

if TYPE_CHECKING:
    from ...config.settings import Experiment
    from ..build import ReportData

MOST = 5  # sentences at most


def arm(experiment: Experiment, run: str) -> str:
    """A Figure 4 arm in words: "Pre-LN without warm-up"."""
    r = experiment.runs[run]
    return f"{level_text('norm', r.model.norm)} {'with' if r.schedule.warmup else 'without'} warm-up"


def _interval(lo: float, hi: float, seeds: str, what: str = "95% interval") -> str:
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return f"no interval, {seeds}"
    return f"{what} {sig(lo)} to {sig(hi)}, {seeds}"


def _seeds(n: int) -> str:
    return f"{n} seed{'s' if n != 1 else ''}"


# --- how much faster, and how the gap splits


def speed(data: ReportData) -> str:
    """The times fewer epochs Pre-LN without warm-up needs at the middle target of validation BLEU, with its
    interval, and the range over the other targets reached."""
    a, e, split = data.answer, data.experiment, data.agg.split
    t = a.time_to_quality
    ratios = t[(t["pair"] == FIGURE4) & (t["arm"] == "ratio")]
    mid = middle_fraction(a.settings)
    head = ratios[(ratios["metric"] == f"{split}_bleu_tok") & (ratios["fraction"] == mid)]
    fast, slow = arm(e, a.pair.to_run), arm(e, a.pair.from_run)
    if head.empty or head.iloc[0]["status"] != REACHED or not head.iloc[0]["epochs"] > 0:
        return (f"Whether {fast} trains faster than {slow} cannot be read from these runs: an arm does not reach "
                "the middle quality target with every seed.")
    r = head.iloc[0]
    of = "lower" if r["target_of"] == "lower" else "higher"
    target = f"{mid:.0%} of the {of} arm's final validation BLEU, {sig(r['target'])} BLEU"
    seeds = _seeds(int(r["n_seeds"]))
    others = ratios[(ratios.index != head.index[0]) & (ratios["status"] == REACHED) & (ratios["epochs"] > 0)]
    missed = len(ratios) - len(others) - 1
    if r["epochs_high"] < 1:
        times = _interval(1 / r["epochs_high"], 1 / r["epochs_low"], seeds)
        rest = ""
        if len(others):
            lo, hi = (1 / others["epochs"]).min(), (1 / others["epochs"]).max()
            span = sig(lo) if sig(lo) == sig(hi) else f"{sig(lo)} to {sig(hi)}"
            rest = f", and {span} times fewer at the {len(others)} other targets of validation BLEU and loss"
        unreached = f"; {missed} target{'s' if missed != 1 else ''} not reached by every seed" if missed else ""
        return (f"Yes: {fast} needs {sig(1 / r['epochs'])} times fewer epochs than {slow} to reach {target} "
                f"({times}){rest}{unreached}.")
    return (f"Not clearly: to reach {target}, {fast} needs {sig(r['epochs'])} of the epochs {slow} needs "
            f"({_interval(r['epochs_low'], r['epochs_high'], seeds)}), a ratio whose interval does not lie below 1.")


def _step_words(a: Answer, experiment: Experiment, factor: str) -> tuple[str, str]:
    """A step in words, as a noun and as the change made first: ("dropping warm-up", "warm-up dropped")."""
    lo, hi = (experiment.runs[r].factors[factor] for r in (a.pair.from_run, a.pair.to_run))
    if factor == "warmup":
        return ("dropping warm-up", "warm-up dropped") if lo else ("adding warm-up", "warm-up added")
    if factor == "norm":
        return "the norm position", "the norm position changed"
    return f"the {level_text(factor, hi)}", f"the {level_text(factor, hi)} taken"


def _listed(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + f" and {parts[-1]}"


def _contrast(a: Answer) -> str | None:
    """The order that changes the main path's first two factors the other way round, when selected."""
    main = main_path(a)
    if main is None:
        return None
    f = main.split(">")
    if len(f) < 2:
        return None
    other = ">".join([f[1], f[0], *f[2:]])
    return other if other in a.paths else None


def split(data: ReportData, epoch: int, last: bool) -> str:
    """Figure 4's validation-BLEU gap at ``epoch`` with its interval, and its steps along the main order and the
    order that swaps its first two factors: the split is not unique when the two give a factor other steps."""
    a, e, metric = data.answer, data.experiment, f"{data.agg.split}_bleu_tok"
    g = a.gap[(a.gap["metric"] == metric) & (a.gap["epoch"] == epoch)]
    d = a.decomposition[(a.decomposition["metric"] == metric) & (a.decomposition["epoch"] == epoch)]
    main = main_path(a)
    if g.empty or main is None or d.empty:
        return ""
    gap = g.iloc[0]
    when = f"At epoch {epoch}, the last," if last else f"At epoch {epoch}"
    seeds = gap["seeds"].replace("/", " and ") + " seeds"
    ahead = "ahead" if gap["change"] >= 0 else "behind"
    head = (f"{when} {arm(e, a.pair.to_run)} is {sig(abs(gap['change']))} BLEU {ahead} "
            f"({_interval(gap['ci_low'], gap['ci_high'], seeds)})")

    def steps(path: str, only: list[str] | None = None) -> str:
        rows = d[d["path"] == path].sort_values("step", kind="stable")
        parts = [f"{'it gives' if i == 0 else _step_words(a, e, r.factor)[0]} {signed(r.change)}"
                 for i, r in enumerate(rows.itertuples()) if only is None or r.factor in only]
        return f"with {_step_words(a, e, path.split('>')[0])[1]} first, {_listed(parts)}"

    said = f"{head}: {steps(main)}"
    other = _contrast(a)
    if other is None:
        return said + "."
    swapped = other.split(">")[:2]
    by = d.set_index(["path", "factor"])["change"]
    if all(sig(by[(main, f)]) == sig(by[(other, f)]) for f in swapped):
        return said + "; in the other order the steps are the same."
    return f"{said}; {steps(other, swapped)}, so the split is not unique."


def splits(data: ReportData) -> list[str]:
    """The gap's split at the epoch where it is largest and at the last epoch."""
    a, metric = data.answer, f"{data.agg.split}_bleu_tok"
    g = a.gap[(a.gap["metric"] == metric) & a.gap["change"].notna()]
    if g.empty:
        return []
    big, last = int(g.loc[g["change"].abs().idxmax(), "epoch"]), int(g["epoch"].max())
    return [s for s in (split(data, ep, ep == last) for ep in dict.fromkeys((big, last))) if s]


# --- where the pair ends


_STATE_WORDS = {CONVERGED: "converged", ANNEALED: "annealed by its step decay", IMPROVING: "still improving",
                WORSENING: "getting worse", UNDETERMINED: "not shown converged"}


def curves(data: ReportData) -> str:
    """Each arm's validation loss at its last epochs: its state and its slope in % an epoch, the low arm's with
    its interval."""
    a, e = data.answer, data.experiment
    end = a.endpoint[(a.endpoint["metric"] == f"{data.agg.split}_loss_base2") & (a.endpoint["n_seeds"] > 0)]
    end = end.set_index("run")
    if a.pair.from_run not in end.index or a.pair.to_run not in end.index:
        return ""

    lo, hi = end.loc[a.pair.from_run], end.loc[a.pair.to_run]
    n = _seeds(int(lo["n_seeds"]))
    v, v_lo, v_hi = (100 * lo[c] for c in ("rel_slope", "rel_low", "rel_high"))
    if v_hi < 0:
        lo_slope = f"falls {sig(-v)}% an epoch ({_interval(-v_hi, -v_lo, n)})"
    elif v_lo > 0:
        lo_slope = f"rises {sig(v)}% an epoch ({_interval(v_lo, v_hi, n)})"
    else:
        lo_slope = f"changes {signed(v)}% an epoch ({_interval(v_lo, v_hi, n)})"
    w = 100 * hi["rel_slope"]
    hi_slope = f"{'falls' if w < 0 else 'rises'} {sig(abs(w))}% an epoch"
    def who(run: str, r: pd.Series) -> str:
        """The arm, and when a step decay cut its learning rate and its state does not say so, when."""
        cut = annealed_at(e, run, e.last_of(run))
        if not r["annealed"] or r["state"] == ANNEALED or cut is None:
            return arm(e, run)
        return f"{arm(e, run)}, its learning rate cut x{e.runs[run].schedule.decay_factor:g} at epoch {cut},"

    def state(r: pd.Series) -> str:
        return _STATE_WORDS.get(r["state"], r["state"])

    last = e.last_of(a.pair.from_run)
    same = last == e.last_of(a.pair.to_run)
    at = f"At epoch {last}, the last," if same else f"At their last epochs, {last} and {e.last_of(a.pair.to_run)},"
    return (f"{at} {who(a.pair.from_run, lo)} is {state(lo)}: its validation loss {lo_slope}; "
            f"{who(a.pair.to_run, hi)} is {state(hi)}, its loss {hi_slope}.")


def _verdict_row(data: ReportData, metric: str) -> pd.Series | None:
    t = data.equivalence
    rows = t[t["metric"] == metric] if len(t) else t
    return rows.iloc[0] if len(rows) else None


def decided(data: ReportData) -> bool:
    """Whether the end-point test of the headline metric decides: equivalent or different."""
    r = _verdict_row(data, f"{data.agg.split}_bleu_tok")
    return r is not None and r["verdict"] in (eq.EQUIVALENT, eq.DIFFERENT)


def _factors(experiment: Experiment, run: str) -> tuple[str, bool, str]:
    """A run's cell of Figure 4's factors: norm position, warm-up, decay."""
    r = experiment.runs[run]
    return r.model.norm, r.schedule.warmup, r.schedule.decay


def rates(data: ReportData) -> str:
    """The learning rates the end-point verdict holds at, as a clause after its epoch: each arm's lr_max and
    whether it is that arm's tuned one (its settings are the best trial's of a grid of the same norm position,
    warm-up and decay on every axis that grid tunes) or an untuned rate, with where the arm's grid puts its best."""
    e, a, b = data.experiment, data.answer, data.study.brackets
    pair = [a.pair.from_run, a.pair.to_run]
    scored = b[~b["position"].isin([ONE_VALUE, NOT_SCORED])] if b is not None and not b.empty else None
    best: dict[str, str] = {}  # pair run -> its arm's grid's best run
    tuned_keys: dict[str, list[str]] = {}
    for run in pair:
        for grid, g in (scored.groupby("grid", sort=False) if scored is not None else ()):
            if _factors(e, g.iloc[0]["best_run"]) == _factors(e, run):
                best[run], tuned_keys[run] = g.iloc[0]["best_run"], list(g["axis"])
                break
    def flat(run: str, key: str) -> object:
        return e.runs[run].flat()[key]
    lr = [e.runs[r].optim.lr_max for r in pair]
    at_best = [r in best and all(flat(r, k) == flat(best[r], k) for k in tuned_keys[r]) for r in pair]
    if all(at_best):
        return f", each arm at its tuned lr_max ({sig(lr[0])} and {sig(lr[1])}),"
    shared = f"a shared lr_max of {sig(lr[0])}" if lr[0] == lr[1] else f"lr_max {sig(lr[0])} and {sig(lr[1])}"
    if not best:
        return f", at {shared}, not tuned,"
    chose = [sig(e.runs[best[r]].optim.lr_max) for r in pair if r in best]
    where = (f"each arm's grid does best at {chose[0]}" if len(set(chose)) == 1 and len(chose) == 2 else
             "; ".join(f"{arm(e, r)}'s grid does best at {sig(e.runs[best[r]].optim.lr_max)}"
                       for r in pair if r in best))
    return f", at {shared}, untuned ({where}),"


def verdict(data: ReportData, metric: str, first: bool) -> str:
    """The end-point test of ``metric`` in words: as good, better or worse, within or outside the pre-stated
    margin, with the 90% interval the test reads."""
    r = _verdict_row(data, metric)
    if r is None:
        return ""
    e, a = data.experiment, data.answer
    fast, slow = arm(e, r["run_b"]), arm(e, r["run_a"])
    unit, words = ("BLEU", "BLEU") if metric.endswith("bleu_tok") else ("bits", "NLL")
    split = "validation" if metric.startswith("valid") else metric.partition("_")[0]
    epoch = int(r["epoch"])
    when = (f"At epoch {epoch}, the last" if epoch == e.common_last([a.pair.from_run, a.pair.to_run]) else
            f"At epoch {epoch}") + rates(data)
    if r["verdict"] == eq.NOT_TESTED:
        return f"No end-point test of {split} {words} at epoch {epoch}: {r['note']}." if first else ""
    seeds = f"{int(r['n_b'])} and {int(r['n_a'])} seeds"
    ci = _interval(r["ci90_low"], r["ci90_high"], seeds, "90% interval")
    margin = f"±{sig(r['margin'])} {unit}"
    diff = r["difference"]
    if r["verdict"] == eq.EQUIVALENT:
        lead = f"{when} {fast} ends as good as {slow}" if first else f"Its {split} {words} is as good"
        return (f"{lead}: the {split} {words} differs by {signed(diff)} {unit} ({ci}), within the pre-stated "
                f"equivalence margin of {margin}.")
    higher_better = metric.endswith("bleu_tok")
    better = (diff > 0) == higher_better
    how = f"{'higher' if diff > 0 else 'lower'} by {sig(abs(diff))} {unit} ({ci})"
    if r["verdict"] == eq.DIFFERENT:
        if first:
            return (f"{when} {fast} ends {'better' if better else 'worse'} than {slow}, not merely as good: its "
                    f"{split} {words} is {how}, not within the pre-stated equivalence margin of {margin} and away "
                    "from 0.")
        return f"Its {split} {words} is {how}, also outside the {margin} margin."
    lead = f"Whether {fast} ends as good as {slow} is undetermined with these seeds" if first else \
        f"Its {split} {words} test is undetermined"
    return f"{lead}: the {split} {words} differs by {signed(diff)} {unit} ({ci}), neither within {margin} nor away from 0."


def tuned(data: ReportData) -> str:
    """Each tuned grid's best trial: its value on the tuned axis, whether the grid brackets it, and its
    validation BLEU at the grid's last epoch."""
    e, s = data.experiment, data.study
    b = s.brackets
    if b is None or b.empty:
        return ""
    tuned_axes = b[~b["position"].isin([ONE_VALUE])]
    if tuned_axes.empty or not tuned_axes["best_run"].notna().all():
        return ""
    parts, where = [], []
    cells = s.cells
    for row in tuned_axes.drop_duplicates("grid").itertuples():
        run = row.best_run
        last = e.last_of(run)
        c = cells[(cells["run"] == run) & (cells["metric"] == f"{data.agg.split}_bleu_tok")
                  & (cells["budget"] == epoch_label(last))]
        bleu = f" with {sig(c.iloc[0]['mean'])} validation BLEU at epoch {last}" if len(c) else ""
        key = row.axis.rpartition(".")[2]
        parts.append(f"{arm(e, run)} does best at {key} {row.best_value}{bleu}")
        where.append(row.position)
    n = int(tuned_axes.drop_duplicates("grid")["grid"].map(lambda g: len(e.grids[g].seeds)).min())
    edge = sum(p in (EDGE_UP, EDGE_DOWN) for p in where)
    bracket = ("every grid brackets its best value" if all(p == BRACKETED for p in where) else
               f"{edge} of {len(where)} grids have their best value at an edge, so the optimum may lie beyond")
    return f"Tuned on a grid each, {_seeds(n)} a trial, {_listed(parts)}; {bracket}."


def references(data: ReportData) -> list[str]:
    """Each run judged against a named reference (``analysis.report.failure_reference``): how many of its seeds
    trained by the failure rule, and both runs' validation BLEU at the run's last epoch."""
    e, s = data.experiment, data.study
    out = []
    for run, ref in e.analysis.report.failure_reference.items():
        if run not in e.select or ref not in e.select:
            continue
        last = e.last_of(run)
        f = s.seed_fates[(s.seed_fates["run"] == run) & (s.seed_fates["budget"] == epoch_label(last))]
        if f.empty:
            continue
        trained = int((f["fate"] == "trained").sum())
        c = s.cells[(s.cells["metric"] == f"{data.agg.split}_bleu_tok") & (s.cells["budget"] == epoch_label(last))]
        c = c.set_index("run")["mean"]
        bleu = (f": {sig(c[run])} against {sig(c[ref])} validation BLEU at epoch {last}"
                if run in c.index and ref in c.index else "")
        lr = e.runs[run].optim.lr_max
        same = "at the same lr_max" if lr == e.runs[ref].optim.lr_max else "as its reference"
        out.append(f"At lr_max {sig(lr)}, {arm(e, run)} trained in {trained} of {len(f)} seeds, judged against "
                   f"{arm(e, ref)} {same}{bleu}.")
    return out


def headline(data: ReportData) -> list[str]:
    """The Answer's first paragraph, at most ``MOST`` sentences: speed and the split, or the end-point verdict,
    the tuned grids and the reference runs (module docstring); then where the curves stand."""
    a = data.answer
    if a.pair is None:
        return []
    split_ = data.agg.split
    if not a.paths and decided(data):
        said = [verdict(data, f"{split_}_bleu_tok", True), verdict(data, f"{split_}_nll_base2", False),
                tuned(data), *references(data)]
    else:
        said = [speed(data), *splits(data)]
    said = [s for s in said if s][:MOST - 1]
    return [*said, *[s for s in (curves(data),) if s]]


__all__ = ["headline", "speed", "splits", "split", "curves", "verdict", "decided", "tuned", "references", "arm"]
