"""The report's figures (one job: draw PNGs from the builder's tables, ``build.ReportData``; matplotlib, Agg backend).

Every figure is rendered to bytes and written atomically into report/figures/. Runs keep one colour in
every figure (their position in ``select``); the line style follows the run's ``model.norm`` (Post-LN solid,
Pre-LN dashed, further variants of ``lnrepro.norms.NORMS`` dotted, dash-dotted), so the norm position reads at a
glance; a factorial cell is coloured by its norm position. Curves are seed means with a band from the seed
minimum to maximum; runs with diverged seeds say so in the legend. Figure 4 shows the paper's published points
only at the paper's dataset and model size, and says so when the experiment is another.
"""

from __future__ import annotations

import io
import math
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")  # no display; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FixedFormatter, FixedLocator, MaxNLocator, NullLocator  # noqa: E402

from ...config.settings import Experiment  # noqa: E402
from ...io import atomic_write_bytes  # noqa: E402
from ...norms import NORMS  # noqa: E402
from .. import DEPTH_FIGURES, FIGURES  # noqa: E402
from ..stats.budget import COST, DIVERGED, OK  # noqa: E402
from ..sections.claims import PaperMark  # noqa: E402
from ..stats.effects import LEVEL_WORDS, LEVELS, TERMS  # noqa: E402
from ..stats.gradinit_fit import HEADLINE, headline, init_rows, last_layer, series_label  # noqa: E402
from ..numbers import norm_label, sig  # noqa: E402
from .views import SPLIT_WORDS, names  # noqa: E402

if TYPE_CHECKING:
    from ..build import ReportData

# File names of the figures (workflow/report/<stem>.rst holds each caption).

# Per norm variant, by its position in NORMS (post, pre, then any other): line style, and colour in gradinit.
# Eleven distinct ones, in registration order (post, pre, pre_nofinal, deepnorm, admin, rezero, tfixup, resi_dual,
# b2t, sandwich, dyt), then again; each with the word the report's text uses for it.
_NORM_LINESTYLES: list[tuple[Any, str]] = [("-", "solid"), ("--", "dashed"), (":", "dotted"), ("-.", "dash-dotted"),
                                            ((0, (5, 1, 1, 1, 1, 1)), "dash-dot-dotted"), ((0, (1, 3)), "loosely dotted"),
                                            ((0, (5, 1)), "densely dashed"), ((0, (3, 1, 1, 1)), "densely dash-dotted"),
                                            ((0, (1, 1)), "densely dotted"), ((0, (5, 5)), "loosely dashed"),
                                            ((0, (3, 5, 1, 5)), "loosely dash-dotted")]
_NORM_COLORS = ["tab:red", "tab:blue", "tab:green", "tab:purple", "tab:brown", "tab:olive", "tab:orange", "tab:cyan",
                "tab:pink", "tab:gray", "black"]
_LR_MARKERS = ["o", "s", "^", "D"]  # the depth figure's learning rates, in the rate table's order


def norm_style(norm: str | None) -> dict[str, Any]:
    """Line style and colour of a norm variant; those of the first registered one when ``norm`` is unknown."""
    i = list(NORMS).index(norm) if norm in NORMS else 0
    return {"linestyle": _NORM_LINESTYLES[i % len(_NORM_LINESTYLES)][0], "color": _NORM_COLORS[i % len(_NORM_COLORS)]}


def norm_line_words(norm: str | None) -> str:
    """The word for a variant's line style ("solid", "dashed", ...), as the report's text names it."""
    i = list(NORMS).index(norm) if norm in NORMS else 0
    return _NORM_LINESTYLES[i % len(_NORM_LINESTYLES)][1]


def _save(fig: plt.Figure, path: Path) -> Path:
    buf = io.BytesIO()
    # No "Software"/date metadata: the same tables give the same bytes.
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return Path(path)


def run_styles(runs: list[str], experiment: Experiment | None = None) -> dict[str, dict[str, Any]]:
    """Colour per run (by order: tab10, tab20 beyond ten runs, so no two runs share one), line style per norm
    position (the run's resolved model.norm) and, given the experiment, the run's label in words (the tables'
    ``views.names``)."""
    cmap = plt.get_cmap("tab10" if len(runs) <= 10 else "tab20")  # a colour of its own for up to 20 runs
    words = names(experiment) if experiment is not None else {}
    styles = {}
    for i, run in enumerate(runs):
        norm = experiment.runs[run].model.norm if experiment is not None else None
        styles[run] = {"color": cmap(i % cmap.N), "linestyle": norm_style(norm)["linestyle"],
                       "label": words.get(run, run)}
    return styles


def _line(style: dict[str, Any]) -> dict[str, Any]:
    """A run's style as line keywords: its label is given where the line is drawn."""
    return {k: v for k, v in style.items() if k != "label"}


def _name(styles: dict[str, dict[str, Any]], run: str) -> str:
    return styles.get(run, {}).get("label", run)


def _label(run: str, g: pd.DataFrame) -> str:
    n_div = int((g["n_diverged"] > 0).any() and g["n_diverged"].max())
    return f"{run} (diverged {n_div}/{int(g['n_seeds'].max())} seeds)" if n_div else run


# Axis labels, with units: the losses are base-2 label-smoothed cross-entropies per target token (fairseq's).
_X_LABELS = {"epoch": "epoch (checkpoint)", "updates_mean": "updates (optimizer steps)",
             "train_cpu_s_mean": "training CPU time (s, summed over attempts)"}
_TERM_WORDS = {"norm": "norm", "warmup": "warm-up", "decay": "decay"}


def _metrics(split: str) -> list[tuple[str, str, str]]:
    """The two Figure-4 scores of ``split``: (metric, axis label, unit of a difference)."""
    words = SPLIT_WORDS.get(split, split)
    return [("loss_base2", f"{words} loss (bits per target token)", "bits per target token"),
            ("bleu_tok", f"{words} BLEU (tokenized, 0-100)", "BLEU points")]


def _empty(ax: plt.Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=9, color="dimgray")


def _figure_legend(fig: plt.Figure, axes: Any, ncol: int = 4) -> None:
    """One legend below the panels: every labelled artist once, even those missing from some panels."""
    handles: dict[str, Any] = {}
    for ax in np.ravel(axes):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncol=min(ncol, len(handles)),
                   fontsize=8)


def _curves(ax: plt.Axes, run_epochs: pd.DataFrame, runs: list[str], col: str, x: str,
            styles: dict[str, dict[str, Any]]) -> bool:
    """Per run, the seed mean of ``col`` against ``x`` (a run_epochs column) with a band from the seed minimum to
    maximum, over the checkpoints with a score (a split scored at some epochs only is drawn through those); on
    the epoch axis a cross marks a run's first diverged epoch. True when a value was drawn."""
    drawn = False
    have = {f"{col}_mean", x} <= set(run_epochs.columns)
    for run in runs if have else []:
        g = run_epochs[run_epochs["run"] == run].sort_values("epoch", kind="stable")
        st, scored = styles.get(run, {}), g[g[f"{col}_mean"].notna()]
        ax.plot(scored[x], scored[f"{col}_mean"], marker="o", markersize=3, label=_label(_name(styles, run), g),
                **_line(st))
        ax.fill_between(scored[x], scored[f"{col}_min"], scored[f"{col}_max"], color=st.get("color"), alpha=0.15,
                        linewidth=0)
        div = g[g["status"] == DIVERGED]
        if len(div) and x == "epoch":
            ax.plot([div["epoch"].iloc[0]], [0], marker="x", color=st.get("color"), markersize=9,
                    transform=ax.get_xaxis_transform(), clip_on=False)
        drawn = drawn or bool(g[f"{col}_mean"].notna().any())
    if not drawn:
        _empty(ax, "no scored checkpoints yet")
    if x == "epoch":
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(_X_LABELS[x])
    ax.grid(alpha=0.3)
    return drawn


def _draw_mark(ax: plt.Axes, mark: PaperMark, styles: dict[str, dict[str, Any]], dodge: float) -> None:
    """A paper's point as a star with its stated precision (``dodge`` epochs aside, so that equal published
    values of the two runs do not hide each other), or a named checkpoint as a dotted line."""
    color = styles.get(mark.run, {}).get("color")
    label = mark.text or "_nolegend_"
    if mark.value is None:
        ax.axvline(mark.epoch, color=color, linestyle=":", linewidth=1.5, label=label)
    else:
        ax.errorbar([mark.epoch + dodge], [mark.value], yerr=[mark.tolerance], fmt="*", markersize=12, color=color,
                    markeredgecolor="black", capsize=4, zorder=5, label=label)


def plot_figure4(run_epochs: pd.DataFrame, runs: list[str], split: str, out: Path, *,
                 marks: list[PaperMark] | None = None, note: str = "",
                 styles: dict[str, dict[str, Any]] | None = None) -> Path:
    """The paper's Figure 4: ``split`` loss and BLEU per epoch of ``runs`` (seed mean, band seed min..max), the
    paper's published points where ``marks`` has them, and ``note`` (why they are not shown) on the figure."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), layout="constrained")
    styles = styles or run_styles(runs)
    for ax, (metric, ylabel, _) in zip(axes, _metrics(split)):
        _curves(ax, run_epochs, runs, f"{split}_{metric}", "epoch", styles)
        for mark in marks or []:
            if mark.metric == metric:
                _draw_mark(ax, mark, styles, 0.25 * (runs.index(mark.run) - (len(runs) - 1) / 2))
        ax.set_ylabel(ylabel)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    if not runs:
        note = "no Figure 4 pair: comparisons.figure4 is not configured or its runs are not selected"
    fig.suptitle("Figure 4: " + " vs ".join(_name(styles, r) for r in runs) + (f"\n{note}" if note else ""),
                 fontsize=9)
    return _save(fig, out)


def plot_figure4_time(run_epochs: pd.DataFrame, runs: list[str], split: str, out: Path, *,
                      styles: dict[str, dict[str, Any]] | None = None) -> Path:
    """Figure 4's curves against updates (left) and the CPU-seconds of training (right, the report's equal cost):
    each checkpoint at its seed-mean update count and cumulative training CPU time."""
    fig, axes = plt.subplots(2, 2, figsize=(12, 7.6), layout="constrained")
    styles = styles or run_styles(runs)
    for row, (metric, ylabel, _) in zip(axes, _metrics(split)):
        for ax, x in zip(row, ("updates_mean", f"{COST}_mean")):
            _curves(ax, run_epochs, runs, f"{split}_{metric}", x, styles)
            ax.set_ylabel(ylabel)
    _figure_legend(fig, axes)
    fig.suptitle("Figure 4's checkpoints against updates and against CPU time: equal checkpoints are not equal cost",
                 fontsize=9)
    return _save(fig, out)


def _schedule_panel(experiment: Experiment | None, run: str) -> str:
    """A run's schedule as a panel title: "warm-up, isqrt decay" (the run's name without an experiment)."""
    if experiment is None or run not in experiment.runs:
        return "all runs"
    s = experiment.runs[run].schedule
    return f"{'warm-up' if s.warmup else 'no warm-up'}, {s.decay} decay"


def plot_learning_rates(lrs: pd.DataFrame, out: Path, *, styles: dict[str, dict[str, Any]] | None = None,
                        experiment: Experiment | None = None) -> Path:
    """The learning rate of every update of every run and seed (``lrs``: run, seed, update, lr, from
    train.jsonl), faceted by schedule (warm-up x decay, from ``experiment``; one panel without it), each run in
    its own colour and its norm's line style, labelled once, on a log scale (warm-up's lr 0 of the first update
    is not drawn)."""
    runs = list(dict.fromkeys(lrs["run"]))
    styles = styles or run_styles(runs)
    panels = list(dict.fromkeys(_schedule_panel(experiment, r) for r in runs)) or ["no runs"]
    ncol = min(2, len(panels))
    nrow = math.ceil(len(panels) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(6 * ncol, 3.4 * nrow + 0.8), layout="constrained", squeeze=False,
                             sharex=True)
    for ax, panel in zip(axes.flat, panels):
        for run in [r for r in runs if _schedule_panel(experiment, r) == panel]:
            for i, (_, g) in enumerate(lrs[lrs["run"] == run].groupby("seed", sort=False)):
                g = g[g["lr"] > 0]
                ax.plot(g["update"], g["lr"], linewidth=1.4, label=_name(styles, run) if i == 0 else "_nolegend_",
                        **_line(styles.get(run, {})))
        if lrs.empty:
            _empty(ax, "no learning rates logged (train.jsonl's lrs)")
        else:
            ax.set_yscale("log")
        ax.set_title(panel, fontsize=9)
        ax.set_xlabel("update (optimizer step)")
        ax.set_ylabel("learning rate (log scale)")
        ax.grid(alpha=0.3, which="both")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_axis_off()
    _figure_legend(fig, axes, ncol=2)
    return _save(fig, out)


def _level(factor: str, code: int) -> Any:
    """A factor's level from its -1/+1 code in the design table."""
    return LEVELS[factor][0 if code < 0 else 1]


def _cell_label(cell: Any) -> str:
    """A design row as a three-line tick label: "Post-LN / warm-up / isqrt"."""
    return "\n".join([norm_label(_level("norm", cell.norm)),
                      "warm-up" if _level("warmup", cell.warmup) else "no warm-up", _level("decay", cell.decay)])


def _at(table: pd.DataFrame, budget: str, metric: str) -> pd.DataFrame:
    """The rows of a cells/effects/observations table at one budget and metric."""
    return table[(table["budget"] == budget) & (table["metric"] == metric)]


def _interval(ax: plt.Axes, x: float, row: pd.Series, **kwargs: Any) -> None:
    """A cell's mean with its 95% interval as an error bar (the mean alone without an interval)."""
    err = None if math.isnan(row["ci_low"]) else [[row["mean"] - row["ci_low"]], [row["ci_high"] - row["mean"]]]
    ax.errorbar([x], [row["mean"]], yerr=err, capsize=4, zorder=4, **kwargs)


def plot_cells(obs: pd.DataFrame, cells: pd.DataFrame, design: pd.DataFrame, budget: str, split: str,
               out: Path) -> Path:
    """Every factorial cell at the fixed ``budget``: each finished seed as a point, the cell mean with its 95% t
    interval, and the count of seeds left out (diverged or stopped) under the cell; loss and BLEU of ``split``."""
    fig, axes = plt.subplots(1, 2, figsize=(max(10.0, 1.5 * len(design) + 2), 5), layout="constrained")
    for ax, (metric, ylabel, _) in zip(axes, _metrics(split)):
        o, c = _at(obs, budget, f"{split}_{metric}"), _at(cells, budget, f"{split}_{metric}").set_index("run")
        for i, cell in enumerate(design.itertuples()):
            color = norm_style(_level("norm", cell.norm))["color"]
            ok = o[(o["run"] == cell.run) & (o["outcome"] == OK)]["value"].dropna()
            ax.scatter(i + np.linspace(-0.15, 0.15, len(ok)) if len(ok) > 1 else [i] * len(ok), ok, s=22,
                       color=color, alpha=0.6, zorder=3, label=f"{norm_label(_level('norm', cell.norm))} seed")
            if cell.run in c.index and c.loc[cell.run, "n"] > 0:
                _interval(ax, i + 0.3, c.loc[cell.run], fmt="D", markersize=5, color="black",
                          label="cell mean, 95% t interval")
            counts = c.loc[cell.run] if cell.run in c.index else {"n_left_out": 0, "n_missing": 0}
            absent = [f"{int(counts[k])} {what}" for k, what in (("n_left_out", "left out"),
                                                                 ("n_missing", "not scored")) if counts[k]]
            ax.text(i, 0.02, "\n".join(absent), ha="center", fontsize=7, color="tab:red",
                    transform=ax.get_xaxis_transform())
        ax.set_xticks(range(len(design)), [_cell_label(cell) for cell in design.itertuples()], fontsize=7)
        ax.set_xlim(-0.6, max(len(design), 1) - 0.4)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, axis="y")
        if design.empty:
            _empty(ax, "no factorial cell selected")
    _figure_legend(fig, axes, ncol=3)
    fig.suptitle(f"factorial cells at {budget} (the same updates and target tokens in every cell)", fontsize=9)
    return _save(fig, out)


def _term_label(term: str) -> str:
    """An effect's name with its direction: "norm: pre minus post", "norm x warm-up"."""
    if ":" not in term:
        low, high = LEVEL_WORDS[term]
        return f"{_TERM_WORDS[term]}: {high} minus {low}"
    return " x ".join(_TERM_WORDS[f] for f in term.split(":"))


def plot_effects(effects: pd.DataFrame, budget: str, split: str, out: Path) -> Path:
    """The factorial fit at ``budget``: every main effect and interaction (2 beta, -1/+1 coding) with its 95%
    interval over seeds, one panel per metric; a term the cells do not identify says so."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4), layout="constrained")
    ys = np.arange(len(TERMS))[::-1]
    for ax, (metric, _, unit) in zip(axes, _metrics(split)):
        e = _at(effects, budget, f"{split}_{metric}").set_index("effect")
        ax.axvline(0, color="gray", linewidth=1)
        for y, term in zip(ys, TERMS):
            if term not in e.index or math.isnan(e.loc[term, "estimate"]):
                ax.text(0.5, y, "not identified by the cells with data", ha="center", va="center", fontsize=7,
                        color="dimgray", transform=ax.get_yaxis_transform())
                continue
            r = e.loc[term]
            err = None if math.isnan(r["ci_low"]) else [[r["estimate"] - r["ci_low"]], [r["ci_high"] - r["estimate"]]]
            ax.errorbar([r["estimate"]], [y], xerr=err, fmt="o", color="black", capsize=4)
        ax.set_yticks(ys, [_term_label(t) for t in TERMS], fontsize=8)
        ax.set_ylim(-0.6, len(TERMS) - 0.4)
        score = "loss" if metric == "loss_base2" else "BLEU"
        ax.set_xlabel(f"effect on {SPLIT_WORDS.get(split, split)} {score} ({unit})")
        ax.grid(alpha=0.3, axis="x")
    fig.suptitle(f"main effects and interactions at {budget}: 2 beta of y ~ norm * warmup * decay "
                 "(-1/+1 coding), 95% interval over seeds", fontsize=9)
    return _save(fig, out)


_SIMPLE_STYLES = [("tab:blue", "--"), ("tab:orange", ":"), ("tab:green", "-."), ("tab:purple", (0, (5, 1, 1, 1)))]


def plot_effects_by_epoch(by_epoch: pd.DataFrame, split: str, out: Path) -> Path:
    """effects_by_epoch.csv drawn: one row per metric (validation loss, BLEU), one column per factor with its
    main effect (black, solid) and its simple effects (a colour and line style each), and one column of the
    interactions; each line with its 95% band, at every scored epoch."""
    metrics = [(f"{split}_{m}", label, unit) for m, label, unit in _metrics(split)]
    cols = [*LEVEL_WORDS, "interactions"]
    fig, axes = plt.subplots(len(metrics), len(cols), figsize=(4.2 * len(cols), 3.4 * len(metrics) + 0.9),
                             layout="constrained", squeeze=False, sharex=True)
    for row, (metric, _, unit) in zip(axes, metrics):
        m = by_epoch[by_epoch["metric"] == metric]
        for ax, col in zip(row, cols):
            if col == "interactions":
                lines = [(t, _term_label(t)) for t in TERMS if ":" in t]
            else:
                lines = [(col, f"main: {_term_label(col)}")] + [
                    (e, e) for e in dict.fromkeys(m.loc[(m["kind"] == "simple") & (m["factor"] == col), "effect"])]
            for i, (effect, label) in enumerate(lines):
                g = m[m["effect"] == effect].sort_values("epoch", kind="stable")
                g = g[g["estimate"].notna()]
                if col != "interactions" and i == 0:
                    color, ls = "black", "-"
                else:
                    color, ls = _SIMPLE_STYLES[(i - (col != "interactions")) % len(_SIMPLE_STYLES)]
                ax.plot(g["epoch"], g["estimate"], color=color, linestyle=ls, marker="o", markersize=3, label=label)
                ax.fill_between(g["epoch"], g["ci_low"], g["ci_high"], color=color, alpha=0.12, linewidth=0)
            ax.axhline(0, color="gray", linewidth=0.8)
            if m.empty:
                _empty(ax, "no factorial fit (cells not selected or not scored)")
            ax.set_title(col if col == "interactions" else _TERM_WORDS[col], fontsize=9)
            ax.set_ylabel(f"{'loss' if 'loss' in metric else 'BLEU'} effect ({unit})", fontsize=8)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("epoch")
            ax.grid(alpha=0.3)
            handles, labels = ax.get_legend_handles_labels()
            if metric == metrics[-1][0] and handles:  # the legend below each column, outside the data
                ax.legend(handles, labels, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=1,
                          frameon=False)
    fig.suptitle("factorial effects at every scored epoch (2 beta, -1/+1 coding) with 95% bands; "
                 "simple effects: the factor with another held at one level", fontsize=9)
    return _save(fig, out)


def plot_interaction(cells: pd.DataFrame, design: pd.DataFrame, budget: str, split: str, out: Path) -> Path:
    """Norm x warm-up at ``budget``: the cell means (95% t interval) with warm-up off and on, a line per norm
    position, one panel per decay and metric; non-parallel lines are the interaction."""
    fig, axes = plt.subplots(2, 2, figsize=(10, 7.6), layout="constrained", squeeze=False)
    for row, (metric, ylabel, _) in zip(axes, _metrics(split)):
        c = _at(cells, budget, f"{split}_{metric}").set_index("run")
        c = c[c["n"] > 0]  # a cell without a finished seed has no mean to draw
        for ax, decay in zip(row, (-1, 1)):
            for norm in (-1, 1):
                sub = design[(design["norm"] == norm) & (design["decay"] == decay)]
                sub = sub.sort_values("warmup", kind="stable")
                sub = sub[sub["run"].isin(c.index)]
                st, label = norm_style(_level("norm", norm)), norm_label(_level("norm", norm))
                xs = [0 if w < 0 else 1 for w in sub["warmup"]]
                ax.plot(xs, [c.loc[r, "mean"] for r in sub["run"]], marker="o", label=label, **st)
                for x, run in zip(xs, sub["run"]):
                    _interval(ax, x, c.loc[run], fmt="none", color=st["color"])
            ax.set_xticks([0, 1], ["warm-up off", "warm-up on"])
            ax.set_xlim(-0.3, 1.3)
            ax.set_title(f"{_level('decay', decay)} decay", fontsize=9)
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
    _figure_legend(fig, axes)
    fig.suptitle(f"interaction of norm position and warm-up at {budget} (cell means, 95% t interval)", fontsize=9)
    return _save(fig, out)


def plot_failures(failures: pd.DataFrame, out: Path) -> Path:
    """Per run (cell), the share of its seeds with a fate at the last epoch that diverged, stopped, or did not
    train (budget.failure_rule), stacked, with the count failed / seeds with a fate."""
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.42 * max(len(failures), 1)), layout="constrained")
    fate = (failures["n_seeds"] - failures["n_unfinished"]).clip(lower=1)
    ys = np.arange(len(failures))
    left = np.zeros(len(failures))
    for col, label, color in (("n_diverged", "diverged", "tab:red"), ("n_stopped", "stopped (max_updates)", "tab:gray"),
                              ("n_did_not_train", "did not train (far from the best run)", "tab:orange")):
        share = 100 * failures[col].to_numpy(dtype=float) / fate.to_numpy(dtype=float)
        ax.barh(ys, share, left=left, color=color, label=label, height=0.6)
        left += share
    for y, r in zip(ys, failures.itertuples()):
        n_fate = r.n_seeds - r.n_unfinished
        ax.text(101, y, f"{r.n_failed}/{n_fate} failed" if n_fate else "no seed finished", va="center", fontsize=7)
    ax.set_yticks(ys, list(failures["run"]), fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of the seeds that finished or failed (%)")
    ax.grid(alpha=0.3, axis="x")
    if failures.empty:
        _empty(ax, "no run selected")
    fig.legend(fontsize=7, loc="outside upper center", ncol=3)
    ax.set_title("each seed's fate at the last epoch", fontsize=9)
    return _save(fig, out)


def _layer_panels(df: pd.DataFrame) -> list[tuple[str, str]]:
    """(stack, sublayer) panels in a stable order: enc before dec, attn, cross_attn, ffn, others."""
    order = {"attn": 0, "self_attn": 0, "cross_attn": 1, "encoder_attn": 1, "ffn": 2}
    pairs = df[["stack", "sublayer"]].drop_duplicates().itertuples(index=False)
    return sorted(((s, u) for s, u in pairs), key=lambda p: (p[0] != "enc", p[0], order.get(p[1], 3), p[1]))


def plot_layer_grads(summary: pd.DataFrame, out: Path, *, value: str = "grad_norm_mean", group: str = "run",
                     title: str = "", styles: dict | None = None, logy: bool = True,
                     ylabel: str = "gradient norm") -> Path:
    """Gradient norm by layer (numbered from 1, as ``summary`` has them), one panel per (stack, sublayer), one
    line per ``group`` value (run for training logs, norm for gradinit), averaged over seeds (band: seed min/max)."""
    df = summary[summary["layer"].notna()] if len(summary) else summary
    panels = _layer_panels(df) if len(df) else []
    if not panels:
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.text(0.5, 0.5, "no per-layer gradient norms logged", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return _save(fig, out)
    # one row per stack (encoder, decoder), one column per sublayer of that stack
    stacks = list(dict.fromkeys(st for st, _ in panels))
    ncol = max(sum(1 for st, _ in panels if st == s) for s in stacks)
    nrow = len(stacks)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 3.3 * nrow + 0.6), squeeze=False, layout="constrained")
    groups = list(dict.fromkeys(df[group]))
    styles = styles or run_styles(groups)
    placed = []
    for r, st in enumerate(stacks):
        subs = [p for p in panels if p[0] == st]
        placed += [(axes[r][c], p) for c, p in enumerate(subs)]
        for c in range(len(subs), ncol):
            axes[r][c].set_axis_off()
    for ax, (stack, sub) in placed:
        p = df[(df["stack"] == stack) & (df["sublayer"] == sub)]
        for gv in groups:
            q = p[p[group] == gv].groupby("layer")[value].agg(["mean", "min", "max"]).sort_index()
            if q.empty:
                continue
            st = styles.get(gv, {})
            ax.plot(q.index.astype(int), q["mean"], marker="o", markersize=3, label=str(_name(styles, gv)),
                    **_line(st))
            ax.fill_between(q.index.astype(int), q["min"], q["max"], color=st.get("color"), alpha=0.15, linewidth=0)
        ax.set_title(f"{'encoder' if stack == 'enc' else 'decoder' if stack == 'dec' else stack} {sub}", fontsize=9)
        ax.set_xlabel("layer (1 = bottom)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(ylabel)
        if logy:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    handles: dict[str, Any] = {}
    for ax in axes.flat:  # one legend for the figure: every group, even those missing from some panels
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncol=min(4, len(handles)), fontsize=8)
    fig.suptitle(title, fontsize=10)
    return _save(fig, out)


def plot_total_grad(curves: pd.DataFrame, max_update: int, out: Path, styles: dict | None = None) -> Path:
    """Total gradient norm per logged update (seed mean) over the early window, log scale."""
    fig, ax = plt.subplots(figsize=(10, 4), layout="constrained")
    c = curves[(curves["update"] <= max_update) & curves["grad_norm"].notna()] if len(curves) else curves
    styles = styles or run_styles(list(dict.fromkeys(c["run"])) if len(c) else [])
    if len(c):
        for run, g in c.groupby("run", sort=False):
            m = g.groupby("update")["grad_norm"].mean()
            ax.plot(m.index, m.values, label=_name(styles, run), **_line(styles.get(run, {})))
        ax.set_yscale("log")
        fig.legend(loc="outside right upper", fontsize=7)  # outside the axes: the curves stay visible
    else:
        ax.text(0.5, 0.5, "no gradient norms logged", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("update")
    ax.set_ylabel("total gradient norm")
    ax.set_title(f"first {max_update} updates")
    ax.grid(alpha=0.3)
    return _save(fig, out)


def _series_styles(gi: pd.DataFrame) -> dict[str, dict[str, str]]:
    """Line style per ``series`` of gradinit rows: each variant's at init, dash-dotted orange after warm-up."""
    rows = gi[["norm", "checkpoint", "series"]].drop_duplicates().itertuples(index=False)
    return {series: norm_style(norm) if checkpoint == "init" else {"color": "tab:orange", "linestyle": "-."}
            for norm, checkpoint, series in rows}


def plot_gradinit(gradinit: pd.DataFrame, out: Path, depth: int | None = None) -> Path:
    """The paper's Figure 3(a)/(b): ||E_batch[dL/dW]||_F of the FFN's W^1 and W^2 by layer, encoder and decoder, in
    the models of ``depth`` layers (default: the smallest measured), one line per variant at init and for the
    checkpoint after warm-up at that depth; mean over seeds, band seed min/max."""
    depth = depth if depth is not None else int(init_rows(gradinit)["depth"].min())
    g = gradinit[(gradinit["statistic"] == "expected_grad_fro") & (gradinit["sublayer"] == "ffn")
                 & (gradinit["depth"] == depth)]
    widths = set(g.loc[g["checkpoint"] == "init", "d_model"])  # a checkpoint of another width says so
    g = g.assign(sublayer=g["param"].map({"fc1": "W1 (fc1)", "fc2": "W2 (fc2)"}), layer=g["layer"] + 1,  # 1-based
                 series=[series_label(n, c) + ("" if w in widths else f" (d_model {w})")
                         for n, c, w in zip(g["norm"], g["checkpoint"], g["d_model"])])
    return plot_layer_grads(g, out, value="value", group="series", styles=_series_styles(g),
                            ylabel="||E[dL/dW]||_F",
                            title=f"expected gradient of the FFN weights, {depth}-{depth} layers "
                                  "(mean over seeds; band: seed min/max)")


def plot_gradinit_depth(gradinit: pd.DataFrame, fit: pd.DataFrame | None, out: Path) -> Path:
    """The paper's Figure 3(c): the last decoder layer's ||E[dL/dW^2]||_F against depth, log-log, per variant at
    init: every seed's value (dots), the seed mean with the seed min..max (error bars), and the fitted line
    c * L^b with b and its 95% interval in the legend."""
    last = last_layer(init_rows(gradinit))
    last = last[(last["stack"] == HEADLINE["stack"]) & (last["param"] == HEADLINE["param"])
                & (last["statistic"] == HEADLINE["statistic"])]
    fits = headline(fit).set_index("norm") if fit is not None else pd.DataFrame()
    fig, ax = plt.subplots(figsize=(6.4, 4.4), layout="constrained")
    for norm in [n for n in NORMS if n in set(last["norm"])]:
        g, st = last[last["norm"] == norm], norm_style(norm)
        per = g.groupby("depth")["value"].agg(["mean", "min", "max"])
        ax.scatter(g["depth"], g["value"], s=10, color=st["color"], alpha=0.35, linewidths=0)
        label = series_label(norm, "init")
        if norm in fits.index and np.isfinite(fits.loc[norm, "b"]):
            f = fits.loc[norm]
            xs = np.geomspace(per.index.min(), per.index.max(), 50)
            ax.plot(xs, f["c"] * xs ** f["b"], **st, linewidth=1)
            label += f": b = {f['b']:.2f} [{f['b_low']:.2f}, {f['b_high']:.2f}]"
        elif (g["value"] == 0).all():  # ReZero at init: every branch times 0 (no point on a log scale)
            label += ": exactly 0 at initialization, not drawn"
        spread = np.clip([per["mean"] - per["min"], per["max"] - per["mean"]], 0, None)  # rounding: never < 0
        ax.errorbar(per.index, per["mean"], yerr=spread, fmt="o",
                    color=st["color"], capsize=3, markersize=4, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    depths = sorted(last["depth"].unique().tolist())
    ax.xaxis.set_major_locator(FixedLocator(depths))
    ax.xaxis.set_major_formatter(FixedFormatter([str(d) for d in depths]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("layers L (encoder = decoder)")
    ax.set_ylabel("||E[dL/dW2]||_F, last decoder layer")
    ax.set_title("value ~ c L^b, 95% interval of b (theory: Post-LN 0, Pre-LN -0.5)", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    if len(last):
        ax.legend(fontsize=8)
    return _save(fig, out)


def plot_depth_rates(rates: pd.DataFrame, budget: str, out: Path) -> Path:
    """The depth study's rates against depth at ``budget``: failure (top) and divergence (bottom), with warm-up
    (left) and without (right), a line per variant (its gradinit colour and line style) and lr_max (its marker,
    named in the legend where there are several) with Wilson 95% intervals over seeds, the lines dodged apart at
    each depth."""
    at = rates[rates["budget"] == budget]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True, sharey=True, layout="constrained")
    norms = [n for n in NORMS if n in set(at["variant"])]
    lrs = list(dict.fromkeys(at["lr_max"]))
    lines = [(norm, lr) for norm in norms for lr in lrs if ((at["variant"] == norm) & (at["lr_max"] == lr)).any()]
    depths = sorted(at["depth"].unique().tolist())
    dodge = 0.02 * (depths[-1] - depths[0] if len(depths) > 1 else 1)  # between lines, in layers
    for col, warmup in enumerate((True, False)):
        for row, what in enumerate(("failure", "divergence")):
            ax = axes[row][col]
            for k, (norm, lr) in enumerate(lines):
                g = at[(at["variant"] == norm) & (at["lr_max"] == lr) & (at["warmup"] == warmup)]
                g = g.sort_values("depth", kind="stable")
                if g.empty:
                    continue
                x = g["depth"].to_numpy(dtype=float) + (k - (len(lines) - 1) / 2) * dodge
                y = g[f"{what}_rate"].to_numpy(dtype=float)
                err = np.nan_to_num(np.array([y - g[f"{what}_low"], g[f"{what}_high"] - y], dtype=float))
                label = NORMS[norm].label + (f", lr_max {sig(lr)}" if len(lrs) > 1 else "")
                i = lrs.index(lr)  # the first rate's markers filled, the others' open and their lines lighter
                ax.errorbar(x, y, yerr=err, capsize=3, marker=_LR_MARKERS[i % len(_LR_MARKERS)],
                            markersize=4 if i == 0 else 5, label=label, **norm_style(norm),
                            **({} if i == 0 else {"markerfacecolor": "white", "alpha": 0.7}))
            ax.xaxis.set_major_locator(FixedLocator(depths))
            ax.set_ylim(-0.05, 1.05)
            ax.grid(alpha=0.3)
            ax.set_title(f"{what} rate, {'with' if warmup else 'without'} warm-up", fontsize=9)
            if col == 0:
                ax.set_ylabel(f"{what} rate (Wilson 95%)")
            if row == 1:
                ax.set_xlabel("layers L (encoder = decoder)")
    if at.empty:
        _empty(axes[0][0], "no run of more than one depth")
    else:
        _figure_legend(fig, axes, ncol=len(norms) if len(lrs) == 1 else 4)
    fig.suptitle(f"share of seeds failed and diverged at {budget}, per variant and depth", fontsize=9)
    return _save(fig, out)


def make_figures(data: ReportData, fig_dir: Path) -> dict[str, Path]:
    """Draw every figure the report links from the builder's tables; returns key -> path (keys of FIGURES)."""
    fig_dir, experiment, agg, s = Path(fig_dir), data.experiment, data.agg, data.study
    styles = run_styles(list(experiment.select), experiment)
    split, pair = agg.split, data.figure4_runs
    out = {
        "figure4": plot_figure4(agg.run_epochs, pair, split, fig_dir / FIGURES["figure4"], marks=data.marks,
                                note=data.marks_note, styles=styles),
        "figure4_time": plot_figure4_time(agg.run_epochs, pair, split, fig_dir / FIGURES["figure4_time"],
                                          styles=styles),
        "lr": plot_learning_rates(agg.lrs, fig_dir / FIGURES["lr"], styles=styles, experiment=experiment),
        "cells": plot_cells(s.observations, s.cells, s.design, s.last, split, fig_dir / FIGURES["cells"]),
        "effects": plot_effects(s.effects, s.fit_last, split, fig_dir / FIGURES["effects"]),
        "interaction": plot_interaction(s.cells, s.design, s.last, split, fig_dir / FIGURES["interaction"]),
        "effects_by_epoch": plot_effects_by_epoch(s.effects_by_epoch, split, fig_dir / FIGURES["effects_by_epoch"]),
        "failures": plot_failures(s.failures, fig_dir / FIGURES["failures"]),
        "grad_layers": plot_layer_grads(agg.layers_early, fig_dir / FIGURES["grad_layers"], styles=styles,
                                        title=f"mean gradient norm per layer over the first {agg.early_updates} updates"),
        "grad_total": plot_total_grad(agg.curves, agg.early_updates, fig_dir / FIGURES["grad_total"], styles=styles),
    }
    out["answer"] = plot_answer(data, fig_dir / FIGURES["answer"], styles=styles)
    gi = data.gradinit
    if gi is not None and len(init_rows(gi)):
        out["gradinit"] = plot_gradinit(gi, fig_dir / FIGURES["gradinit"], data.gradinit_depth)
        out["gradinit_depth"] = plot_gradinit_depth(gi, data.gradinit_fit, fig_dir / FIGURES["gradinit_depth"])
    if data.depth.shown:
        out["depth"] = plot_depth_rates(data.depth.rates, s.last, fig_dir / DEPTH_FIGURES["depth"])
    return out


# --- the Answer section's figure (lnrepro.analysis.sections.answer's tables)

_FACTOR_COLORS = {"norm": "tab:purple", "warmup": "tab:orange", "decay": "tab:green"}


def _time_panel(ax: plt.Axes, ttq: pd.DataFrame, metric: str, styles: dict[str, dict[str, Any]]) -> None:
    """Epochs each arm of Figure 4's pair needs to reach each target: seed mean, 95% t interval; an arm that does
    not reach a target is marked on the axis."""
    t = ttq[(ttq["pair"] == "figure4") & (ttq["metric"] == metric) & (ttq["arm"] != "ratio")]
    if t.empty:
        _empty(ax, "no target every seed reaches")
        return
    fractions = sorted(t["fraction"].unique())
    for k, (arm, g) in enumerate(t.groupby("arm", sort=False)):
        run = g["run"].iloc[0]
        st = styles.get(run, {})
        g = g.set_index("fraction").loc[fractions]
        xs = np.arange(len(fractions)) + (k - 0.5) * 0.2
        ok = g["status"] == "reached"
        err = np.array([g["epochs"] - g["epochs_low"], g["epochs_high"] - g["epochs"]])
        ax.errorbar(xs[ok.to_numpy()], g["epochs"][ok], yerr=np.nan_to_num(err[:, ok.to_numpy()]), fmt="o",
                    capsize=4, color=st.get("color"), label=_name(styles, run))
        for x in xs[~ok.to_numpy()]:
            ax.text(x, 0.03, "not\nreached", ha="center", fontsize=7, color=st.get("color"),
                    transform=ax.get_xaxis_transform())
    targets = t.drop_duplicates("fraction").set_index("fraction").loc[fractions, "target"]
    unit = "BLEU" if metric.endswith("bleu_tok") else "bits"
    ax.set_xticks(range(len(fractions)), [f"{f:.0%}\n({v:.3g} {unit})" for f, v in zip(fractions, targets)],
                  fontsize=8)
    ax.set_xlabel(f"target: fraction of the lower arm's final {'BLEU' if unit == 'BLEU' else 'loss drop'}")
    ax.set_ylabel("epochs to the target (interpolated)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7)


def _decomposition_panel(ax: plt.Axes, dec: pd.DataFrame, gap: pd.DataFrame, metric: str, path: str | None,
                         words: dict[str, str]) -> None:
    """One path's steps stacked per epoch (bars; positive up, negative down from 0) with Figure 4's gap (line,
    95% Welch band)."""
    d = dec[(dec["metric"] == metric) & (dec["path"] == path)]
    g = gap[gap["metric"] == metric].sort_values("epoch", kind="stable")
    if d.empty or g.empty:
        _empty(ax, "no decomposition: a cell between Figure 4's arms is not selected or not scored")
        return
    epochs = sorted(d["epoch"].unique())
    up, down = np.zeros(len(epochs)), np.zeros(len(epochs))
    for factor in dict.fromkeys(d.sort_values("step", kind="stable")["factor"]):
        v = d[d["factor"] == factor].set_index("epoch").loc[epochs, "change"].to_numpy(dtype=float)
        v = np.nan_to_num(v)
        base = np.where(v >= 0, up, down)
        ax.bar(epochs, v, bottom=base, width=0.6, color=_FACTOR_COLORS.get(factor), alpha=0.75,
               label=words.get(factor, factor))
        up, down = up + np.clip(v, 0, None), down + np.clip(v, None, 0)
    ax.plot(g["epoch"], g["change"], color="black", marker="o", markersize=3, label="Figure 4's gap (Pre-LN arm "
            "minus Post-LN arm)")
    ax.fill_between(g["epoch"], g["ci_low"], g["ci_high"], color="black", alpha=0.12, linewidth=0,
                    label="its 95% Welch interval")
    ax.axhline(0, color="gray", linewidth=0.8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch (checkpoint)")
    ax.set_ylabel(f"change in {'BLEU' if metric.endswith('bleu_tok') else 'loss (bits)'}")
    ax.set_title(f"one factor at a time: {(path or '').replace('>', ', then ')}", fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7)


def plot_answer(data: ReportData, out: Path, *, styles: dict[str, dict[str, Any]] | None = None) -> Path:
    """The Answer section's figure: top, the epochs each arm of Figure 4's pair needs to reach each target
    (validation BLEU left, loss right); bottom, Figure 4's gap at every epoch split along the main path, norm
    first (stacked), with the gap itself and its interval."""
    from ..sections.answer import main_path, step_text

    a, split = data.answer, data.agg.split
    if a.pair is None:  # one panel that says why, its long note wrapped to the figure's width
        fig, ax = plt.subplots(figsize=(12, 1.6), layout="constrained")
        ax.set_axis_off()
        _empty(ax, textwrap.fill(a.note, 110))
        return _save(fig, out)
    styles = styles or run_styles([a.pair.from_run, a.pair.to_run])
    metrics = (f"{split}_bleu_tok", f"{split}_loss_base2")
    dec, path = a.decomposition, main_path(a)
    split_shown = bool(len(dec[(dec["path"] == path) & dec["metric"].isin(metrics)])) and bool(len(a.gap))
    fig, axes = plt.subplots(2 if split_shown else 1, 2, figsize=(12, 8.4 if split_shown else 4.6),
                             layout="constrained", squeeze=False)
    lo, hi = (data.experiment.runs[r].factors for r in (a.pair.from_run, a.pair.to_run))
    words = {f: step_text(f, lo[f], hi[f]) for f in a.pair.factors}
    for col, metric in enumerate(metrics):
        _time_panel(axes[0][col], a.time_to_quality, metric, styles)
        if split_shown:
            _decomposition_panel(axes[1][col], dec, a.gap, metric, path, words)
    pair = f"{_name(styles, a.pair.to_run)} and {_name(styles, a.pair.from_run)}"
    fig.suptitle(textwrap.fill(f"Answer: time to quality of {pair}" + (
        " (top), and their gap split one factor at a time (bottom); 95% intervals over seeds" if split_shown else
        "; 95% intervals over seeds. No split of their gap: no cell between Figure 4's arms is selected"), 160),
        fontsize=9)
    return _save(fig, out)
