"""The report's figures (one job: draw PNGs from the aggregate tables; matplotlib, Agg backend).

Every figure is rendered to bytes and written atomically into report/figures/. Runs keep one colour in
every figure (their position in ``select``); the line style follows the run's ``model.norm`` (Post-LN solid,
Pre-LN dashed, further variants of ``lnrepro.norms.NORMS`` dotted, dash-dotted), so the norm position reads at a
glance. Curves are seed means with a band from the seed minimum to maximum; runs with diverged seeds say so in
the legend.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FixedFormatter, FixedLocator, MaxNLocator, NullLocator  # noqa: E402

from ..config.settings import Experiment  # noqa: E402
from ..io import atomic_write_bytes  # noqa: E402
from ..norms import NORMS  # noqa: E402
from . import FIGURES  # noqa: E402
from .gradinit_fit import HEADLINE, figure_depth, headline, init_rows, last_layer, series_label  # noqa: E402

# File names of the figures (workflow/report/<stem>.rst holds each caption).

# Per norm variant, by its position in NORMS (post, pre, then any other): line style, and colour in gradinit.
_NORM_LINESTYLES = ["-", "--", ":", "-."]
_NORM_COLORS = ["tab:red", "tab:blue", "tab:green", "tab:purple"]


def norm_style(norm: str | None) -> dict[str, str]:
    """Line style and colour of a norm variant; those of the first registered one when ``norm`` is unknown."""
    i = list(NORMS).index(norm) if norm in NORMS else 0
    return {"linestyle": _NORM_LINESTYLES[i % len(_NORM_LINESTYLES)], "color": _NORM_COLORS[i % len(_NORM_COLORS)]}


def _save(fig: plt.Figure, path: Path) -> Path:
    buf = io.BytesIO()
    # No "Software"/date metadata: the same tables give the same bytes.
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return Path(path)


def run_styles(runs: list[str], experiment: Experiment | None = None) -> dict[str, dict[str, Any]]:
    """Colour per run (by order) and line style per norm position (the run's resolved model.norm)."""
    cmap = plt.get_cmap("tab10")
    styles = {}
    for i, run in enumerate(runs):
        norm = experiment.runs[run].model.norm if experiment is not None else None
        styles[run] = {"color": cmap(i % 10), "linestyle": norm_style(norm)["linestyle"]}
    return styles


def _label(run: str, g: pd.DataFrame) -> str:
    n_div = int((g["n_diverged"] > 0).any() and g["n_diverged"].max())
    return f"{run} (diverged {n_div}/{int(g['n_seeds'].max())} seeds)" if n_div else run


def plot_curves(run_epochs: pd.DataFrame, metric: str, out: Path, *, x: str = "epoch", ylabel: str = "",
                title: str = "", styles: dict[str, dict[str, Any]] | None = None) -> Path:
    """One line per run: seed mean of ``{metric}_mean`` vs ``x`` ('epoch' or 'train_wall_s'),
    band over the seed min/max. A run's diverged epochs have no value and end its line; a cross marks
    the first diverged epoch on the x axis."""
    fig, ax = plt.subplots(figsize=(7, 4.2), layout="constrained")
    styles = styles or run_styles(list(dict.fromkeys(run_epochs["run"])) if len(run_epochs) else [])
    col = f"{metric}_mean"
    if x == "epoch":
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    drawn = False
    if len(run_epochs) and col in run_epochs:
        for run, g in run_epochs.groupby("run", sort=False):
            g = g.sort_values("epoch")
            xs = g["epoch"] if x == "epoch" else g["train_wall_s_mean"]
            st = styles.get(run, {})
            ax.plot(xs, g[col], marker="o", markersize=3, label=_label(run, g), **st)
            ax.fill_between(xs, g[f"{metric}_min"], g[f"{metric}_max"], color=st.get("color"), alpha=0.15, linewidth=0)
            div = g[g["status"] == "diverged"]
            if len(div) and x == "epoch":
                ax.plot([div["epoch"].iloc[0]], [0], marker="x", color=st.get("color"), markersize=9,
                        transform=ax.get_xaxis_transform(), clip_on=False)
            drawn = drawn or g[col].notna().any()
    if not drawn:
        ax.text(0.5, 0.5, "no scored checkpoints yet", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("epoch (checkpoint)" if x == "epoch" else "training wall-clock (s)")
    ax.set_ylabel(ylabel or metric)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=7)
    return _save(fig, out)


def plot_curves_by_split(run_epochs: pd.DataFrame, splits: list[str], metric: str, out: Path, *,
                         x: str = "epoch", ylabel: str = "", styles: dict | None = None) -> Path:
    """``plot_curves`` with one panel per split (e.g. tokenized BLEU on valid and on test)."""
    fig, axes = plt.subplots(1, len(splits), figsize=(6.2 * len(splits), 4.2), squeeze=False, layout="constrained")
    styles = styles or run_styles(list(dict.fromkeys(run_epochs["run"])) if len(run_epochs) else [])
    for ax, sp in zip(axes[0], splits):
        col = f"{sp}_{metric}"
        drawn = False
        if len(run_epochs) and f"{col}_mean" in run_epochs:
            for run, g in run_epochs.groupby("run", sort=False):
                g = g.sort_values("epoch")
                xs = g["epoch"] if x == "epoch" else g["train_wall_s_mean"]
                st = styles.get(run, {})
                ax.plot(xs, g[f"{col}_mean"], marker="o", markersize=3, label=_label(run, g), **st)
                ax.fill_between(xs, g[f"{col}_min"], g[f"{col}_max"], color=st.get("color"), alpha=0.15, linewidth=0)
                drawn = drawn or g[f"{col}_mean"].notna().any()
        if not drawn:
            ax.text(0.5, 0.5, "no scored checkpoints yet", ha="center", va="center", transform=ax.transAxes)
        else:
            ax.legend(fontsize=7)
        ax.set_title(sp)
        if x == "epoch":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch (checkpoint)" if x == "epoch" else "training wall-clock (s)")
        ax.set_ylabel(ylabel or metric)
        ax.grid(alpha=0.3)
    return _save(fig, out)


def _layer_panels(df: pd.DataFrame) -> list[tuple[str, str]]:
    """(stack, sublayer) panels in a stable order: enc before dec, attn, cross_attn, ffn, others."""
    order = {"attn": 0, "self_attn": 0, "cross_attn": 1, "encoder_attn": 1, "ffn": 2}
    pairs = df[["stack", "sublayer"]].drop_duplicates().itertuples(index=False)
    return sorted(((s, u) for s, u in pairs), key=lambda p: (p[0] != "enc", p[0], order.get(p[1], 3), p[1]))


def plot_layer_grads(summary: pd.DataFrame, out: Path, *, value: str = "grad_norm_mean", group: str = "run",
                     title: str = "", styles: dict | None = None, logy: bool = True,
                     ylabel: str = "gradient norm") -> Path:
    """Gradient norm by layer index, one panel per (stack, sublayer), one line per ``group`` value
    (run for training logs, norm for gradinit), averaged over seeds (band: seed min/max)."""
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
            ax.plot(q.index.astype(int) + 1, q["mean"], marker="o", markersize=3, label=str(gv), **st)
            ax.fill_between(q.index.astype(int) + 1, q["min"], q["max"], color=st.get("color"), alpha=0.15, linewidth=0)
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
    fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    c = curves[(curves["update"] <= max_update) & curves["grad_norm"].notna()] if len(curves) else curves
    styles = styles or run_styles(list(dict.fromkeys(c["run"])) if len(c) else [])
    if len(c):
        for run, g in c.groupby("run", sort=False):
            m = g.groupby("update")["grad_norm"].mean()
            ax.plot(m.index, m.values, label=run, **styles.get(run, {}))
        ax.set_yscale("log")
        ax.legend(fontsize=7)
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
    g = g.assign(sublayer=g["param"].map({"fc1": "W1 (fc1)", "fc2": "W2 (fc2)"}),
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


def make_figures(agg: Any, experiment: Experiment, fig_dir: Path, gradinit: pd.DataFrame | None = None,
                 gradinit_fit: pd.DataFrame | None = None) -> dict[str, Path]:
    """Draw every figure the report links; returns key -> path (keys of FIGURES)."""
    fig_dir = Path(fig_dir)
    styles = run_styles(list(experiment.select), experiment)
    split = agg.split
    splits = list(experiment.eval.splits)
    out = {
        "loss_epoch": plot_curves(agg.run_epochs, f"{split}_loss_base2", fig_dir / FIGURES["loss_epoch"],
                                  ylabel=f"{split} loss (base 2, label-smoothed)", styles=styles,
                                  title="validation loss per checkpoint"),
        "bleu_epoch": plot_curves_by_split(agg.run_epochs, splits, "bleu_tok", fig_dir / FIGURES["bleu_epoch"],
                                           ylabel="BLEU (tokenized)", styles=styles),
        "loss_wall": plot_curves(agg.run_epochs, f"{split}_loss_base2", fig_dir / FIGURES["loss_wall"],
                                 x="train_wall_s", ylabel=f"{split} loss (base 2)", styles=styles,
                                 title="validation loss vs training wall-clock"),
        "bleu_wall": plot_curves_by_split(agg.run_epochs, splits, "bleu_tok", fig_dir / FIGURES["bleu_wall"],
                                          x="train_wall_s", ylabel="BLEU (tokenized)", styles=styles),
        "grad_layers": plot_layer_grads(agg.layers_early, fig_dir / FIGURES["grad_layers"], styles=styles,
                                        title=f"mean gradient norm per layer over the first {agg.early_updates} updates"),
        "grad_total": plot_total_grad(agg.curves, agg.early_updates, fig_dir / FIGURES["grad_total"], styles=styles),
    }
    if gradinit is not None and len(init_rows(gradinit)):
        depth = figure_depth(gradinit, experiment.model.decoder_layers)
        out["gradinit"] = plot_gradinit(gradinit, fig_dir / FIGURES["gradinit"], depth)
        out["gradinit_depth"] = plot_gradinit_depth(gradinit, gradinit_fit, fig_dir / FIGURES["gradinit_depth"])
    return out
