"""Each published claim against what this experiment measured (one job: the claims table and its sentences).

The published numbers live in ``published.yaml`` beside this module, each with its source (loaded by
``lnrepro.paper.published``). A claim's ``measure`` says how its value is computed from the report's tables
(``MEASURES``); its status is one of ``STATUSES``:

- not measured: no selected run is the claim's setup (or the stage that measures it has not run; a cell no
  selected run is says "not run" in the note);
- not measured at this scale: an absolute number where the dataset or model size is not the paper's (the
  measured value is still shown beside it);
- reproduced: the measured 95% interval contains the published value (within its stated precision) and
  excludes the competing prediction where there is one, or, for a directional claim, excludes zero on the
  claimed side;
- not reproduced: the interval excludes the published value, or lies on the other side of zero;
- inconclusive: otherwise, and always when there is no interval (one seed), or when the measurement cannot
  resolve the claim's tolerance (``Measured.unresolved`` says why: a step of the measure coarser than the
  tolerance's width, a crossing at the first scored checkpoint, which bounds the value from one side only);
- reference, not compared: another paper's number (kind ``reference``) where no run has every setting of its
  setup (``measure.settings``), shown beside ours with the settings that differ; on a run that has them it is
  judged as an absolute number.

Where the paper states a direction (``direction: {than, side, words}`` in published.yaml: the epoch ratio below
1, Pre-LN's exponent below 0), the ``direction`` column adds the directional reading: reproduced in direction
(the interval lies on the claimed side of ``than``) and stronger, weaker or as strong as published (the interval
beyond, short of, or overlapping the published value's tolerance), or against the published direction.

The epoch-ratio claim is measured on interpolated epochs (``lnrepro.analysis.sections.answer.crossing``: each seed's
BLEU interpolated linearly between its scored checkpoints), because whole epochs move the ratio in steps of
1/k, coarser than the claim's tolerance; the whole-checkpoint ratio stays in the note.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import pandas as pd

from ...config.settings import Experiment
from ...errors import LnReproError
from ...paper import PUBLISHED, SIZE_KEYS, published
from ..numbers import norm_label, sig
from ..stats import effects as ef
from ..stats.budget import OK, epoch_at, mean_interval
from ..tables import grid_of

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"
NOT_AT_SCALE, NOT_MEASURED = "not measured at this scale", "not measured"
REFERENCE = "reference, not compared"
STATUSES = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, NOT_AT_SCALE, NOT_MEASURED, REFERENCE)
CLAIM_COLUMNS = ["id", "claim", "source", "kind", "published", "measured", "ci_low", "ci_high", "n_seeds",
                 "measured_as", "scale", "status", "direction", "note"]


@dataclass(frozen=True)
class Measured:
    """A claim's measured value with its 95% interval (NaN: none), or, with value NaN, why there is none."""

    value: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan
    n_seeds: int = 0
    measured_as: str = ""
    scale: str = ""
    at_scale: bool = True  # the paper's dataset and model size
    meets_setup: bool = True  # the run has every setting the claim names
    note: str = ""
    resolution: float = 0.0  # the measure's step (0: continuous); coarser than the tolerance's width: unresolved
    unresolved: str = ""  # why the measurement cannot resolve the claim (the status is then inconclusive)
    run: str = ""  # the run measured, where there is one


@dataclass(frozen=True)
class Evidence:
    """The tables the measures read."""

    experiment: Experiment
    epochs: pd.DataFrame  # aggregate's per (run, seed, epoch)
    cells: pd.DataFrame  # budget.cell_table
    fits: Mapping[tuple[str, str], ef.Fit]  # (metric, budget label) -> fit
    last: str  # the last-epoch budget's label: the last epoch every selected run has
    gradinit: pd.DataFrame | None = None  # analysis/gradinit.csv (None: the stage has not run)
    gradinit_fit: pd.DataFrame | None = None  # analysis/gradinit_fit.csv
    fit_last: str = ""  # the factorial fit's last-epoch budget (its cells' common last epoch); "": ``last``

    @property
    def fit_budget(self) -> str:
        """The budget the claims read the factorial fit at."""
        return self.fit_last or self.last


def _levels(cell: Mapping[str, Any]) -> str:
    """A cell in words: "Post-LN, warm-up, isqrt decay"."""
    return f"{norm_label(cell['norm'])}, {'warm-up' if cell['warmup'] else 'no warm-up'}, {cell['decay']} decay"


def cell_runs(experiment: Experiment, cell: Mapping[str, Any]) -> list[str]:
    """The selected runs with the cell's factor levels: runs of their own first, then grid runs (select order)."""
    runs = [r for r in experiment.select if experiment.runs[r].factors == dict(cell)]
    return sorted(runs, key=lambda r: bool(grid_of(experiment, r)))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return list(a) == list(b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=1e-9)
    return a == b


def _differences(experiment: Experiment, run: str, settings: Mapping[str, Any]) -> list[str]:
    """The claim's settings ``run`` does not have, as "key value (claim: value)"."""
    flat = experiment.runs[run].flat()
    return [f"{k} {flat.get(k)!r} (claim: {v!r})" for k, v in settings.items() if not _same(flat.get(k), v)]


def scale_of(experiment: Experiment, run: str) -> tuple[str, bool]:
    """Where ``run`` was measured, in words, and whether that is the paper's dataset and model size."""
    paper = published()["paper"]["scale"]
    m = experiment.runs[run].model
    size = {k: getattr(m, k) for k in SIZE_KEYS}
    text = (f"{experiment.data.dataset}, {size['encoder_layers']}+{size['decoder_layers']} layers, d_model "
            f"{size['d_model']}, FFN {size['ffn_dim']}, {size['heads']} heads")
    return text, experiment.data.dataset == paper["dataset"] and size == paper["model"]


def _unscored(ev: Evidence, run: str, split: str, epoch: int) -> str:
    """Why ``run`` has no score of ``split`` at ``epoch`` by the configuration (``eval.splits``), else ""."""
    if split not in ev.experiment.eval.splits:
        return f"{split} is not scored (eval.splits.{split}.epochs)"
    scored = ev.experiment.scored(run, split)
    if epoch not in scored:
        return (f"{split} is not scored at epoch {epoch}, which this claim needs (eval.splits.{split}.epochs: "
                f"{', '.join(map(str, scored))}{_of_run(ev, run)})")
    return ""


def _of_run(ev: Evidence, run: str) -> str:
    """" in run X's 30 epochs" where the selected runs differ in length, else ""."""
    x = ev.experiment
    return f" in {run}'s {x.last_of(run)} epochs" if len(x.lengths) > 1 else ""


def _cell_value(ev: Evidence, run: str, metric: str) -> pd.Series | None:
    """The last epoch's row of the cell table for ``run`` and ``metric``."""
    c = ev.cells
    row = c[(c["budget"] == ev.last) & (c["metric"] == metric) & (c["run"] == run)]
    return row.iloc[0] if len(row) else None


def _measure_cell(ev: Evidence, m: Mapping[str, Any]) -> Measured:
    """A cell's metric at the last epoch every selected run has: seed mean and t interval."""
    runs = cell_runs(ev.experiment, m["cell"])
    if not runs:
        return Measured(note=f"not run: no selected run is {_levels(m['cell'])}")
    settings = m.get("settings", {})
    meeting = [r for r in runs if not _differences(ev.experiment, r, settings)]
    run = (meeting or runs)[0]
    metric = f"{m['split']}_{m['metric']}"
    scale, at_scale = scale_of(ev.experiment, run)
    notes = [] if meeting else [f"settings differ: {'; '.join(_differences(ev.experiment, run, settings))}"]
    unscored = _unscored(ev, run, m["split"], ev.experiment.common_last(ev.experiment.select))
    if unscored:
        return Measured(scale=scale, at_scale=at_scale, meets_setup=bool(meeting), note="; ".join([*notes, unscored]),
                        run=run)
    row = _cell_value(ev, run, metric)
    if row is None or row["n"] == 0:
        left = f"{int(row['n_left_out'])} failed, {int(row['n_missing'])} missing" if row is not None else "not scored"
        return Measured(scale=scale, at_scale=at_scale, meets_setup=bool(meeting),
                        note="; ".join([*notes, f"{run}: no finished seed ({left})"]), run=run)
    if row["n_left_out"]:
        notes.append(f"{int(row['n_left_out'])} seed(s) diverged or stopped, left out")
    return Measured(row["mean"], row["ci_low"], row["ci_high"], int(row["n"]), f"{run}, {metric} at {ev.last}",
                    scale, at_scale, bool(meeting), "; ".join(notes), run=run)


def _first_epoch(g: pd.DataFrame, col: str, target: float) -> float:
    hit = g[(g["status"] == OK) & (g[col] >= target)]
    return float(hit["epoch"].min()) if len(hit) else math.nan


def _measure_epoch_ratio(ev: Evidence, m: Mapping[str, Any]) -> Measured:
    """Per seed trained in both cells: the epoch at which the fast cell's BLEU reaches the slow cell's BLEU at
    ``at`` of its training, interpolated linearly between the fast seed's scored checkpoints
    (``answer.crossing``), over that epoch (the paper's 9/15); mean and t interval over the seeds. A crossing at
    the fast seed's first scored checkpoint bounds the ratio from above only: unresolved (inconclusive). Where
    the two runs differ in length, "its training" is the epochs both have (their common last epoch)."""
    from .answer import MEASURE_COLUMNS, crossing

    fast, slow = (cell_runs(ev.experiment, m[k]) for k in ("fast", "slow"))
    if not fast or not slow:
        return Measured(note=f"needs a selected run for {_levels(m['fast'])} and for {_levels(m['slow'])}")
    fast_run, slow_run = fast[0], slow[0]
    last = ev.experiment.common_last([fast_run, slow_run])
    k = epoch_at(m["at"], last)
    scale, at_scale = scale_of(ev.experiment, fast_run)
    unscored = _unscored(ev, slow_run, m["split"], k)
    if unscored:
        return Measured(scale=scale, at_scale=at_scale, note=unscored)
    col = f"{m['split']}_bleu_tok"
    e = ev.epochs
    ratios, whole, left, censored = [], [], 0, []
    for seed in sorted(set(e.loc[e["run"] == fast_run, "seed"]) & set(e.loc[e["run"] == slow_run, "seed"])):
        ref = e[(e["run"] == slow_run) & (e["seed"] == seed) & (e["epoch"] == k) & (e["status"] == OK)]
        g = e[(e["run"] == fast_run) & (e["seed"] == seed) & (e["epoch"] <= last)]
        curve = g[(g["status"] == OK) & g[col].notna()].sort_values("epoch", kind="stable")
        if not len(ref) or curve.empty:
            left += 1
            continue
        target = float(ref[col].iloc[0])
        # crossing interpolates every measure; a table without one (older results) counts it in epochs
        cols = {**{c: curve.get(c, curve["epoch"]) for c in MEASURE_COLUMNS.values()}, col: curve[col]}
        at, first = crossing(pd.DataFrame(cols), col, target, True)
        if math.isnan(at["epochs"]):
            left += 1
            continue
        ratios.append(at["epochs"] / k)
        whole.append(_first_epoch(g, col, target) / k)
        if first:
            censored.append(seed)
    notes = [f"{left} seed(s) left out (not scored, failed, or never reaching the target)"] if left else []
    scored = [ep for ep in ev.experiment.scored(fast_run, m["split"]) if ep <= last]
    if len(scored) < last:
        notes.append(f"{m['split']} scored at epochs {', '.join(map(str, scored))} only (interpolated between them)")
    if not ratios:
        return Measured(scale=scale, at_scale=at_scale, note="; ".join(notes) or "no seed trained in both cells")
    w_mean, _, w_lo, w_hi = mean_interval(whole)
    notes.append(f"at whole checkpoints {sig(w_mean)}" + ("" if math.isnan(w_lo) else f" [{sig(w_lo)}, {sig(w_hi)}]")
                 + f", in steps of 1/{k}")
    unresolved = (f"seed(s) {', '.join(map(str, censored))} reach the target by the first scored checkpoint: the "
                  "ratio is an upper bound") if censored else ""
    mean, _, lo, hi = mean_interval(ratios)
    what = (f"epochs {fast_run} needs to reach {slow_run}'s {col} at epoch {k} (interpolated between "
            f"checkpoints), over {k}")
    return Measured(mean, lo, hi, len(ratios), what, scale, at_scale, True, "; ".join(notes),
                    unresolved=unresolved, run=fast_run)


def _measure_simple_effect(ev: Evidence, m: Mapping[str, Any]) -> Measured:
    """A factor's effect with other factors held (the warm-up effect for Post-LN), from the factorial fit."""
    metric = f"{m['split']}_{m['metric']}"
    f = ev.fits.get((metric, ev.fit_budget))
    est = ef.simple_effect(f, m["factor"], m["at"]) if f is not None else None
    held = ", ".join(f"{g} {v}" for g, v in m["at"].items())
    if est is None:
        return Measured(note=f"the factorial fit of {metric} at {ev.fit_budget} does not identify "
                             f"{m['factor']} at {held}")
    run = ev.experiment.select[0]
    scale, at_scale = scale_of(ev.experiment, run)
    what = f"{ef.EFFECT_WORDS[m['factor']]} at {held}, {metric} at {ev.fit_budget} (factorial fit)"
    return Measured(*est, f.n_seeds, what, scale, at_scale, True, f.note)


def _gradinit_scale(ev: Evidence) -> tuple[str, bool]:
    """Where the gradient at initialization was measured: the dataset and the analysed width (the depths vary)."""
    from ..stats.gradinit_fit import init_rows

    paper = published()["paper"]["scale"]
    width = {k: int(init_rows(ev.gradinit)[k].iloc[0]) for k in ("d_model", "ffn_dim", "heads")
             if k in ev.gradinit.columns}
    width = width or {k: getattr(ev.experiment.model, k) for k in ("d_model", "ffn_dim", "heads")}
    text = (f"{ev.experiment.data.dataset}, d_model {width['d_model']}, FFN {width['ffn_dim']}, "
            f"{width['heads']} heads, depths {sorted(set(init_rows(ev.gradinit)['depth'].tolist()))}")
    return text, ev.experiment.data.dataset == paper["dataset"] and all(
        width[k] == paper["model"][k] for k in width)


def _measure_gradinit_exponent(ev: Evidence, m: Mapping[str, Any]) -> Measured:
    """Theorem 1's depth exponent b of the last decoder layer's W^2 expected gradient (gradinit_fit.csv)."""
    from ..stats.gradinit_fit import headline

    if ev.gradinit_fit is None or ev.gradinit is None:
        return Measured(note="gradient at initialization not computed (analysis/gradinit_fit.csv absent)")
    row = headline(ev.gradinit_fit)
    row = row[row["norm"] == m["norm"]]  # the fit is over the fresh models only
    if row.empty:
        return Measured(note=f"no gradient-at-initialization fit for norm {m['norm']!r}")
    r = row.iloc[0]
    scale, at_scale = _gradinit_scale(ev)
    return Measured(float(r["b"]), float(r["b_low"]), float(r["b_high"]), len(str(r["seeds"]).split(";")),
                    f"b of value ~ c * L^b, last decoder layer W^2 ({r.get('interval', 'OLS interval')})",
                    scale, at_scale)


def _measure_gradinit_last_layer(ev: Evidence, m: Mapping[str, Any]) -> Measured:
    """Figure 3(c)'s value: the last decoder layer's W^2 expected gradient at init, over depths and seeds."""
    from ..stats.gradinit_fit import HEADLINE, init_rows, last_layer

    if ev.gradinit is None:
        return Measured(note="gradient at initialization not computed (analysis/gradinit.csv absent)")
    g = last_layer(init_rows(ev.gradinit))
    g = g[(g["norm"] == m["norm"]) & (g["stack"] == HEADLINE["stack"]) & (g["param"] == HEADLINE["param"])
          & (g["statistic"] == HEADLINE["statistic"])]
    if g.empty:
        return Measured(note=f"no last-layer W^2 value for norm {m['norm']!r}")
    mean, _, lo, hi = mean_interval(g["value"].tolist())
    scale, at_scale = _gradinit_scale(ev)
    return Measured(mean, lo, hi, int(g["seed"].nunique()),
                    "mean over depths and seeds of the last decoder layer's ||E[dL/dW2]||_F", scale, at_scale)


MEASURES: dict[str, Callable[[Evidence, Mapping[str, Any]], Measured]] = {
    "cell": _measure_cell, "epoch_ratio": _measure_epoch_ratio, "simple_effect": _measure_simple_effect,
    "gradinit_exponent": _measure_gradinit_exponent, "gradinit_last_layer": _measure_gradinit_last_layer,
}


def status(claim: Mapping[str, Any], m: Measured) -> str:
    """The claim's status (see the module docstring); a reference is judged as an absolute number where a run
    has its setup (``measure.settings``), and never compared without one."""
    kind = claim["kind"]
    if kind == "reference" and (not claim.get("measure", {}).get("settings") or not m.meets_setup):
        return REFERENCE
    # the scale first: the setup could not be the paper's
    if kind in ("absolute", "reference") and m.scale and not m.at_scale:
        return NOT_AT_SCALE
    if math.isnan(m.value) or not m.meets_setup:
        return NOT_MEASURED
    if math.isnan(m.ci_low) or math.isnan(m.ci_high) or unresolved(claim, m):
        return INCONCLUSIVE
    if kind == "directional":
        lo, hi = sorted((m.ci_low * claim["side"], m.ci_high * claim["side"]))
        return REPRODUCED if lo > 0 else NOT_REPRODUCED if hi < 0 else INCONCLUSIVE
    value, tol = float(claim["published"]), float(claim.get("tolerance", 0.0))
    if m.ci_high < value - tol or m.ci_low > value + tol:
        return NOT_REPRODUCED
    competing = claim.get("competing")
    if competing is not None and m.ci_low <= float(competing) <= m.ci_high:
        return INCONCLUSIVE
    return REPRODUCED


def unresolved(claim: Mapping[str, Any], m: Measured) -> str:
    """Why the measurement cannot resolve the claim's tolerance ("" when it can): a step of the measure wider
    than the tolerance's interval, or the measure's own reason (``Measured.unresolved``)."""
    tol = float(claim.get("tolerance", 0.0) or 0.0)
    if m.resolution and claim["kind"] in ("absolute", "relative") and m.resolution > 2 * tol:
        return (f"the measure moves in steps of {sig(m.resolution)}, coarser than the claim's ± {tol:g}: it cannot "
                "resolve the published value")
    return m.unresolved


def direction_text(claim: Mapping[str, Any], m: Measured) -> str:
    """The directional reading where the paper states a direction (``direction: {than, side, words}``), else ""."""
    d = claim.get("direction")
    if d is None or math.isnan(m.value):
        return ""
    than, side = float(d["than"]), int(d["side"])
    if math.isnan(m.ci_low):
        return f"no interval: direction not resolved ({d['words']})"
    lo, hi = sorted(((m.ci_low - than) * side, (m.ci_high - than) * side))
    if hi < 0:
        return f"against the published direction ({d['words']})"
    if lo <= 0:
        return f"direction not resolved: the interval includes {than:g} ({d['words']})"
    published_strength, tol = (float(claim["published"]) - than) * side, float(claim.get("tolerance", 0.0))
    strength = ("stronger than published" if lo > published_strength + tol else
                "weaker than published" if hi < published_strength - tol else "as strong as published")
    return f"reproduced in direction ({d['words']}), {strength}"


def _published_text(c: Mapping[str, Any]) -> str:
    if "spread" in c:
        return f"{c['published']} ± {c['spread']}"
    if c.get("tolerance"):
        return f"{c['published']} (about: ± {c['tolerance']:g})"
    return str(c["published"])


def measure(claim: Mapping[str, Any], ev: Evidence) -> Measured:
    """The claim's measured value, by its ``measure`` kind (one of MEASURES)."""
    kind = claim["measure"]["kind"]
    if kind not in MEASURES:
        raise LnReproError(f"{PUBLISHED}: claim {claim['id']}: unknown measure kind {kind!r}")
    return MEASURES[kind](ev, claim["measure"])


def claims_table(ev: Evidence) -> pd.DataFrame:
    """tables/claims.csv: every claim of published.yaml, its measured value, interval, scale and status."""
    rows = []
    for c in published()["claims"]:
        m = measure(c, ev)
        why = unresolved(c, m)
        note = "; ".join(x for x in (f"their setup: {c['setup']}" if "setup" in c else "", m.note,
                                     f"inconclusive: {why}" if why else "") if x)
        rows.append({"id": c["id"], "claim": c["claim"], "source": c["source"], "kind": c["kind"],
                     "published": _published_text(c), "measured": m.value, "ci_low": m.ci_low,
                     "ci_high": m.ci_high, "n_seeds": m.n_seeds, "measured_as": m.measured_as, "scale": m.scale,
                     "status": status(c, m), "direction": direction_text(c, m), "note": note})
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


# --- Figure 4's published points, as the figure draws them


def figure4_runs(experiment: Experiment) -> list[str]:
    """The paper's two runs: those of the ``figure4`` comparison (config comparisons.figure4.runs) that are
    selected; none without that comparison."""
    comparison = experiment.comparisons.get("figure4")
    return [r for r in comparison.runs if r in experiment.runs] if comparison else []


@dataclass(frozen=True)
class PaperMark:
    """A published Figure-4 point of one run: ``value`` at ``epoch`` (± ``tolerance``), or, with value None, a
    checkpoint the paper names (drawn as a vertical line)."""

    run: str
    metric: str  # loss_base2 | bleu_tok
    epoch: float
    value: float | None
    tolerance: float
    text: str  # legend entry ("" for the second line of a pair)


def paper_marks(experiment: Experiment, runs: list[str], split: str) -> tuple[list[PaperMark], str]:
    """The paper's Figure-4 points for ``runs`` (the claims of published.yaml whose source is Figure 4): each
    absolute number as its value at the run's last epoch, the epoch-ratio claim as the two checkpoints it compares.
    Only at the paper's dataset and model size (``claims.scale_of``); elsewhere none, and the note says why."""
    if not runs:
        return [], ""
    off = [text for text, at_scale in (scale_of(experiment, r) for r in runs) if not at_scale]
    paper = published()
    if off:
        scale = paper["paper"]["scale"]
        size = ", ".join(f"{k} {v}" for k, v in scale["model"].items())
        return [], f"paper's points not shown: {off[0]} differs from the paper's {scale['dataset']} ({size})"
    marks: list[PaperMark] = []
    label = {r: norm_label(experiment.runs[r].model.norm) for r in runs}
    for claim in paper["claims"]:
        m = claim["measure"]
        if not claim["source"].startswith("Figure 4") or m.get("split") != split:
            continue
        if m["kind"] == "cell" and claim["kind"] == "absolute":
            for run in [r for r in cell_runs(experiment, m["cell"]) if r in runs][:1]:
                tol = float(claim.get("tolerance", 0.0))
                marks.append(PaperMark(run, m["metric"], experiment.last_of(run), float(claim["published"]), tol,
                                       f"paper, {label[run]}: about {claim['published']} at the end (± {tol:g})"))
        elif m["kind"] == "epoch_ratio":
            fast = [r for r in cell_runs(experiment, m["fast"]) if r in runs][:1]
            slow = [r for r in cell_runs(experiment, m["slow"]) if r in runs][:1]
            if fast and slow:
                k = epoch_at(m["at"], experiment.common_last([fast[0], slow[0]]))  # as the claim is measured
                k_fast = float(claim["published"]) * k
                marks += [PaperMark(fast[0], "bleu_tok", k_fast, None, 0.0,
                                    f"paper: {label[fast[0]]}'s checkpoint {k_fast:g} as good as "
                                    f"{label[slow[0]]}'s {k} (dotted)"),
                          PaperMark(slow[0], "bleu_tok", k, None, 0.0, "")]
    return marks, ""


def interval_text(value: float, lo: float, hi: float, n: int) -> str:
    """"33.1 (95% interval 32.5 to 33.7, 3 seeds)", or the value with why there is no interval."""
    if math.isnan(lo):
        return f"{sig(value)} ({'one seed: no interval exists' if n <= 1 else 'no interval'})"
    return f"{sig(value)} (95% interval {sig(lo)} to {sig(hi)}, {n} seeds)"


def claim_sentence(row: Mapping[str, Any]) -> str:
    """One Findings sentence, filled in from a row of the claims table."""
    head = f"{row['claim'].rstrip('.')} ({row['source']}): published {row['published']}"
    note = f" ({row['note']})" if row["note"] else ""
    if math.isnan(row["measured"]):
        return f"{head}; {row['status']}{note}."
    measured = interval_text(row["measured"], row["ci_low"], row["ci_high"], row["n_seeds"])
    return f"{head}, measured {measured} from {row['measured_as']} ({row['scale']}): {row['status']}{note}."


def _share(factor: str, est: tuple[float, float, float]) -> str:
    v, lo, hi = est
    return f"{factor} {sig(v)}" + ("" if math.isnan(lo) else f" [{sig(lo)}, {sig(hi)}]")


def attribution_sentence(attr: ef.Attribution | None, metric: str, budget: str) -> str:
    """Which factors the factorial fit attributes Figure 4's difference in ``metric`` to, largest first. A
    factor's share is its main effect signed by its change from the Post-LN cell to the Pre-LN cell."""
    fig = published()["figure4"]
    pair = f"{_levels(fig['high'])} minus {_levels(fig['low'])}"
    if attr is None:
        return (f"Figure 4's difference in {metric} at {budget} ({pair}): the cells with data do not identify the "
                "main effects of the factors the pair changes, so the design attributes it to none.")
    head = f"Figure 4's difference in {metric} at {budget} ({pair}) is {interval_text(*attr.difference, attr.n_seeds)}"
    shares = "; ".join(_share(g, est) for g, est in attr.contributions.items())
    if math.isnan(attr.difference[1]):
        verdict = "without intervals the design attributes it to no factor"
    elif attr.attributed:
        verdict = f"the factorial design attributes it to {', then '.join(attr.attributed)}"
    else:
        verdict = "no factor's share excludes zero with its sign: the design attributes it to none"
    return f"{head}; {verdict} (shares, main effect x change: {shares})."
