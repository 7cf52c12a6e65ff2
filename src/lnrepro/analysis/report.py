"""The HTML report (one job: assemble tables, figures and confounds into report/index.html).

``make_report`` writes, under ``out_dir`` (results/{exp}/report/): ``index.html`` (self-contained: inline
CSS, figures by relative <img> links, tables rendered by pandas), ``tables/*.csv``, ``figures/*.png`` and
``confounds.md``. Optional inputs (gradinit.csv, training logs, evaluations not yet run) only change what
a section says; they never make the report fail. Diverged runs and epochs are shown as "diverged".

Everything is read, tabulated and drawn once (``_prepare``); each section of the page is then one function
of that ``_Context``, and ``SECTIONS`` lists them in page order (the table of contents comes from it too).
"""

from __future__ import annotations

import html
import json
import math
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import pandas as pd

from ..config.settings import FACTOR_KEYS, Experiment
from ..errors import LnReproError
from ..io import atomic_write_csv, atomic_write_text, where_ran
from ..norms import NORMS
from ..paper import DEVIATIONS
from . import aggregate as ag
from . import study as st
from .claims import STATUSES, fmt
from .effects import LEVEL_WORDS
from .deviations import config_deviations, recipe_notes, unstated_rows
from .confounds import confounds_rows, differing_keys, flatten, write_confounds
from .gradinit import CSV_COLUMNS as GRADINIT_COLUMNS
from .gradinit_fit import FIT_COLUMNS, HEADLINE, figure_depth, headline, init_rows, last_layer, series_label
from .plots import figure4_runs, make_figures, norm_style

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1200px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
h1{border-bottom:2px solid #444}h2{border-bottom:1px solid #bbb;margin-top:2em}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.85em}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}th{background:#f2f2f2}
td:first-child,th:first-child{text-align:left}
.note{background:#fff8e1;border-left:4px solid #f0b400;padding:.5em 1em}
.bad{color:#b00020;font-weight:600}
img{max-width:100%;border:1px solid #ddd;margin:.5em 0}
code{background:#f4f4f4;padding:0 3px}
"""


# How the figures' line styles (plots.norm_style) read in a sentence.
_STYLE_WORDS = {"-": "solid", "--": "dashed", ":": "dotted", "-.": "dash-dotted"}


def _esc(x: Any) -> str:
    return html.escape(str(x))


def _value(v: Any) -> Any:
    """A setting as a table cell: lists, tuples and mappings as JSON (decay_epochs [8]), the rest as is."""
    return json.dumps(v) if isinstance(v, (list, tuple, dict)) else v


_NUMBER = re.compile(r"^[-+]?(\d|\.\d|inf|nan)", re.IGNORECASE)


def _text_columns(df: pd.DataFrame) -> list[int]:
    """1-based positions of the columns holding text (left-aligned); numbers, also formatted ones such as
    '34.1 ± 0.2', stay right-aligned."""
    return [i + 1 for i, c in enumerate(df.columns)
            if df[c].dtype == object and any(not _NUMBER.match(str(v)) for v in df[c].dropna())]


def _table(df: pd.DataFrame, table_id: str) -> str:
    """A pandas table as HTML (escaped; NaN shown as an em dash; text columns left-aligned)."""
    if df.empty:
        return "<p><em>No data yet.</em></p>"
    left = ",".join(f"#{table_id} td:nth-child({i}),#{table_id} th:nth-child({i})" for i in _text_columns(df))
    style = f"<style>{left}{{text-align:left}}</style>\n" if left else ""
    return style + df.to_html(index=False, table_id=table_id, na_rep="—", escape=True, border=0,
                              float_format=lambda v: f"{v:.4g}")


def _kv_table(pairs: Iterable[tuple[str, Any]], table_id: str) -> str:
    """The report's one key/value table (scaling, shared settings, evaluation settings): a row per setting."""
    return _table(pd.DataFrame([{"key": k, "value": _value(v)} for k, v in pairs]), table_id)


def _list(items: Iterable[Any]) -> str:
    return "<ul>" + "".join(f"<li>{_esc(x)}</li>" for x in items) + "</ul>"


def _fmt(v: float, digits: int) -> str:
    return f"{v:.{digits}f}"


def score_cell(row: pd.Series, col: str, digits: int = 2) -> str:
    """One run x epoch cell: seed mean (± std over seeds when several), 'diverged' when every seed
    diverged, the count of diverged seeds when some did, and the status when nothing was scored."""
    if row["status"] == ag.STATUS_DIVERGED:
        return "diverged"
    mean = row.get(f"{col}_mean", math.nan)
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "diverged" if row["n_diverged"] > 0 else str(row["status"])
    s = _fmt(mean, digits)
    if row["n_ok"] > 1 and not math.isnan(row.get(f"{col}_std", math.nan)):
        s += f" ± {_fmt(row[f'{col}_std'], digits)}"
    if row["n_diverged"] > 0:
        s += f" ({int(row['n_diverged'])}/{int(row['n_seeds'])} diverged)"
    return s


def per_epoch_table(run_epochs: pd.DataFrame, col: str, runs: Sequence[str], digits: int = 2,
                    epochs: Sequence[int] | None = None) -> pd.DataFrame:
    """Rows: epoch (only ``epochs``, the ones the column's split is scored at, when given); columns: runs (in
    ``select`` order); one formatted value per run per epoch."""
    if epochs is not None:
        run_epochs = run_epochs[run_epochs["epoch"].isin(epochs)]
    if run_epochs.empty:
        return pd.DataFrame()
    cells = run_epochs.assign(cell=run_epochs.apply(lambda r: score_cell(r, col, digits), axis=1))
    piv = cells.pivot(index="epoch", columns="run", values="cell")
    piv = piv[[r for r in runs if r in piv.columns]]
    piv = piv.fillna("missing")
    piv.columns.name = None
    return piv.reset_index()


def _read_analysis_csv(path: Path, columns: list[str]) -> pd.DataFrame | None:
    """One of the analysis stage's CSV files when present (else None), with at least ``columns``."""
    if not path.exists():
        return None
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise LnReproError(f"{path}: not a readable CSV ({e})") from e
    if not set(columns) <= set(df.columns):
        raise LnReproError(f"{path}: expected columns {columns}, found {list(df.columns)}")
    return df


def _read_gradinit(exp_dir: Path, experiment: Experiment) -> tuple[pd.DataFrame | None, pd.DataFrame | None, str]:
    """analysis/gradinit.csv with the rows of gradinit_after_warmup.csv appended when the experiment measures
    one (its after_warmup_run is selected) and it exists, and gradinit_fit.csv (None when absent); without
    gradinit.csv (None, None, the reason)."""
    analysis = Path(exp_dir) / "analysis"
    gi = _read_analysis_csv(analysis / "gradinit.csv", GRADINIT_COLUMNS)
    if gi is None:
        return None, None, "not computed (no analysis/gradinit.csv)"
    if experiment.analysis.gradinit.after_warmup_run in experiment.runs:
        after = _read_analysis_csv(analysis / "gradinit_after_warmup.csv", GRADINIT_COLUMNS)
        gi = gi if after is None else pd.concat([gi, after], ignore_index=True)
    return gi, _read_analysis_csv(analysis / "gradinit_fit.csv", FIT_COLUMNS), ""


def _series_order(gi: pd.DataFrame) -> list[str]:
    """The gradinit series in figure order: the variants at init (in NORMS order), then after warm-up."""
    rank = {n: i for i, n in enumerate(NORMS)}
    pairs = sorted(set(map(tuple, gi[["norm", "checkpoint"]].values)),
                   key=lambda p: (p[1] != "init", rank.get(p[0], len(rank)), p[0]))
    return [series_label(n, c) for n, c in pairs]


def _gradinit_layers(gi: pd.DataFrame, depth: int) -> pd.DataFrame:
    """At ``depth`` layers, each weight matrix's expected gradient averaged over seeds: one column per series,
    the first variant's ratio to each other one at init ("Post-LN/Pre-LN"), and the largest seed-mean noise
    of the row's values (a difference below it is not a result)."""
    keys = ["stack", "layer", "sublayer", "param"]
    g = gi[(gi["statistic"] == "expected_grad_fro") & (gi["depth"] == depth)]
    g = g.assign(series=[series_label(n, c) for n, c in zip(g["norm"], g["checkpoint"])])
    means = g.groupby([*keys, "series"])[["value", "noise"]].mean()
    piv = means["value"].unstack("series")
    series = [s for s in _series_order(g) if s in piv.columns]
    piv = piv[series]
    inits = [series_label(n, "init") for n in NORMS if series_label(n, "init") in series]
    for other in inits[1:]:
        piv[f"{inits[0]}/{other}"] = piv[inits[0]] / piv[other]
    piv["noise (max)"] = means["noise"].unstack("series").max(axis=1)
    piv = piv.reset_index()
    piv.columns.name = None
    order = {"enc": 0, "dec": 1}
    return piv.sort_values(keys, key=lambda s: s.map(order) if s.name == "stack" else s)


def _gradinit_by_depth(gi: pd.DataFrame) -> pd.DataFrame:
    """Figure 3(c) as a table: per depth and variant at init, the last decoder layer's W^2 expected gradient
    (seed mean, seed standard deviation, mean noise) and the per-batch mean of norms beside it."""
    last = last_layer(init_rows(gi))
    last = last[(last["stack"] == HEADLINE["stack"]) & (last["param"] == HEADLINE["param"])]
    out = pd.DataFrame({"depth": sorted(last["depth"].unique())}).set_index("depth")
    for norm in [n for n in NORMS if n in set(last["norm"])]:
        g = last[last["norm"] == norm]
        e = g[g["statistic"] == HEADLINE["statistic"]].groupby("depth")
        label = series_label(norm, "init")
        out[label] = e["value"].mean()
        out[f"{label} seed sd"] = e["value"].std()
        out[f"{label} noise"] = e["noise"].mean()
        out[f"{label} mean_grad_norm"] = g[g["statistic"] == "mean_grad_norm"].groupby("depth")["value"].mean()
    return out.reset_index()


def _after_warmup_text(ctx: _Context) -> str:
    """Which checkpoint was measured after warm-up, per seed, or why none was."""
    gi, run = ctx.gradinit, ctx.experiment.analysis.gradinit.after_warmup_run
    after = gi[gi["checkpoint"] == "after_warmup"]
    if after.empty:
        why = "analysis.gradinit.after_warmup_run is null" if run is None else \
            f"{run} is not selected" if run not in ctx.experiment.runs else "its measurement is missing"
        return f"No checkpoint after warm-up: {why}."
    t_warmup = ctx.experiment.runs[run].schedule.warmup_updates
    seeds = after[["seed", "epoch", "updates", "depth", "d_model"]].drop_duplicates().sort_values("seed")
    return (f"After warm-up: {run}, the first checkpoint whose update count reaches T_warmup = {t_warmup}: "
            + "; ".join(f"seed {r.seed}: epoch {r.epoch} ({r.updates} updates)" for r in seeds.itertuples())
            + f". Its model: {_distinct(seeds['depth'])} layers, d_model {_distinct(seeds['d_model'])}.")


def _learning_rates(exp_dir: Path, experiment: Experiment) -> pd.DataFrame:
    """Every update's learning rate per selected run and seed (run, seed, update, lr), from the ``lrs`` lists of
    train.jsonl's step records (the lrs of the updates since the previous step record, this one last); a
    resumed run's repeated updates: the last attempt's. Unreadable lines are skipped (the aggregate lists them)."""
    rows = []
    for run in experiment.select:
        for seed in experiment.seeds_of(run):
            path = ag.run_dir(exp_dir, run, seed) / "train.jsonl"
            lrs: dict[int, float] = {}
            for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
                try:
                    rec = json.loads(line)
                    if rec.get("kind", "step") == "step" and isinstance(rec.get("lrs"), list):
                        end = int(rec["update"])
                        lrs.update(zip(range(end - len(rec["lrs"]) + 1, end + 1), map(float, rec["lrs"])))
                except (json.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError):
                    continue
            rows += [(run, seed, u, lr) for u, lr in sorted(lrs.items())]
    return pd.DataFrame(rows, columns=["run", "seed", "update", "lr"])


def _run_settings(experiment: Experiment) -> list[dict[str, Any]]:
    """Each selected run's settings under dotted keys, in ``select`` order."""
    return [experiment.runs[r].flat() for r in experiment.select]


def _run_factors(experiment: Experiment) -> pd.DataFrame:
    """The selected runs with their level of each studied factor and every other key that differs between them."""
    settings = _run_settings(experiment)
    keys = list(FACTOR_KEYS.values())
    keys += [k for k in differing_keys(settings) if k not in keys]
    return pd.DataFrame([{"run": r, **{k: _value(f[k]) for k in keys}} for r, f in zip(experiment.select, settings)])


def _shared_settings(experiment: Experiment) -> list[tuple[str, Any]]:
    """Settings equal across all selected runs (bpe and the run sections), then the dataset. Sorted by key,
    the order the report has always listed them in (experiment.json's)."""
    settings = _run_settings(experiment)
    differ = set(differing_keys(settings))
    shared = [(f"bpe.{k}", v) for k, v in experiment.bpe.to_dict().items()]
    shared += [(k, v) for k, v in settings[0].items() if k not in differ]
    return sorted(shared) + [("data.dataset", experiment.data.dataset)]


def _norm_styles() -> str:
    """How the figures tell the norm variants apart, e.g. "Post-LN solid, Pre-LN dashed"."""
    return ", ".join(f"{v.label} {_STYLE_WORDS[norm_style(name)['linestyle']]}" for name, v in NORMS.items())


def _distinct(values: pd.Series) -> str:
    """The distinct values of a column, sorted, comma-separated (the gradinit settings actually used)."""
    return ", ".join(map(str, sorted(values.dropna().unique().tolist())))


@dataclass(frozen=True)
class _Context:
    """What every section reads: the experiment and what was read, tabulated and drawn for it, once."""

    experiment: Experiment
    out_dir: Path
    agg: ag.Aggregate
    tables: dict[str, Path]  # name -> tables/{name}.csv
    figures: dict[str, Path]  # key of FIGURES -> figures/*.png
    confounds: dict[str, Any]  # confounds.analyze_confounds's result
    gradinit: pd.DataFrame | None  # analysis/gradinit.csv (+ gradinit_after_warmup.csv), None when not computed
    gradinit_views: dict[str, pd.DataFrame]  # its tables: gradinit_summary, gradinit_by_depth, gradinit_fit
    gradinit_missing: str  # why gradinit is None
    study: st.Study  # budgets, effects, tuned baselines, claims and findings (lnrepro.analysis.study)

    def rel(self, path: Path) -> str:
        return Path(path).relative_to(self.out_dir).as_posix()

    def figure(self, key: str, caption: str) -> str:
        src = _esc(self.rel(self.figures[key]))
        return f'<figure><img src="{src}" alt="{_esc(caption)}"><figcaption>{_esc(caption)}</figcaption></figure>'

    def per_epoch(self, heading: str, split: str, metric: str, table_id: str, digits: int = 2) -> list[str]:
        """A heading and the per run per epoch table of one score of ``split``, at the epochs it is scored at."""
        epochs = self.experiment.eval.splits[split].epochs
        table = per_epoch_table(self.agg.run_epochs, f"{split}_{metric}", self.experiment.select, digits, epochs)
        return [f"<h3>{_esc(heading)}</h3>", _table(table, table_id)]


def _prepare(exp_dir: Path, experiment: Experiment, out_dir: Path) -> _Context:
    """Aggregate the results tree and write the report's files other than index.html (tables, figures,
    confounds.md)."""
    agg = ag.aggregate(exp_dir, experiment)
    tables = {k: atomic_write_csv(out_dir / "tables" / f"{k}.csv", v) for k, v in agg.tables().items()}
    gi, fit, gi_missing = _read_gradinit(exp_dir, experiment)
    study = st.build(exp_dir, experiment, agg, gi, fit)
    tables.update({k: atomic_write_csv(out_dir / "tables" / f"{k}.csv", v) for k, v in study.tables().items()})
    views = {} if gi is None else {
        "gradinit_summary": _gradinit_layers(gi, figure_depth(gi, experiment.model.decoder_layers)),
        "gradinit_by_depth": _gradinit_by_depth(gi), **({} if fit is None else {"gradinit_fit": fit})}
    tables.update({k: atomic_write_csv(out_dir / "tables" / f"{k}.csv", v) for k, v in views.items()})
    figures = make_figures(agg, experiment, out_dir / "figures", gi, fit, study=study,
                           lrs=_learning_rates(exp_dir, experiment))
    # the tuned baselines are a comparison of their own in the confound table
    exp = experiment.to_dict()
    exp["comparisons"] = {**exp["comparisons"], **study.tuned_comparisons}
    confounds = write_confounds(exp, out_dir / "confounds.md", ag.execution_facts(exp_dir, experiment))
    # the same rows as a table, for readers of CSV (the README's generated results read figure4's verdict)
    tables["confounds"] = atomic_write_csv(out_dir / "tables" / "confounds.csv", pd.DataFrame(confounds_rows(confounds)))
    return _Context(experiment, out_dir, agg, tables, figures, confounds, gi, views, gi_missing, study)


# --- the sections, in page order (SECTIONS below)


def _what_was_run(ctx: _Context) -> list[str]:
    e = ctx.experiment
    grid_seeds = "".join(f"; grid {g}: {', '.join(map(str, gs.seeds))}" for g, gs in e.grids.items())
    parts = [f"<p>Seeds: {_esc(', '.join(map(str, e.seeds)) + grid_seeds)}. Runs selected: {len(e.select)}. "
             f"Dataset: <code>{_esc(e.data.dataset)}</code>.</p>"]
    if e.notes:
        parts.append(f'<div class="note"><strong>Notes:</strong> {_esc(e.notes)}</div>')
    if e.scaling:
        parts += ["<p><strong>Scaling</strong> (this preset rescales the paper's schedule):</p>",
                  _kv_table(flatten(e.scaling).items(), "scaling")]
    else:
        parts.append("<p>Scaling: none (the paper's schedule numbers).</p>")
    return parts + [
        "<h3>Runs</h3>", _table(_run_factors(e), "runs"),
        "<h3>Settings shared by all runs</h3>", _kv_table(_shared_settings(e), "shared-settings"),
        # sorted by key, as the shared settings
        "<h3>Evaluation settings</h3>", _kv_table(sorted(flatten(e.eval.to_dict()).items()), "eval-settings"),
    ]


def _figure4(ctx: _Context) -> list[str]:
    split, splits = ctx.agg.split, ctx.experiment.eval.splits
    pair = figure4_runs(ctx.experiment)
    parts = [
        "<p>The figures show the paper's two runs (<code>comparisons.figure4</code>: "
        f"{_esc(' vs '.join(pair) or 'not configured or not selected')}): validation loss (base 2, "
        "label-smoothed, as fairseq reports it) and tokenized BLEU (BLEU-4 on the Moses-tokenized lowercased text, "
        "as the paper and fairseq report it) at every checkpoint (one per epoch) that scores the split "
        "(<code>eval.splits</code>), the seed mean with a band from the "
        "seed minimum to maximum, and the paper's published points where the dataset and model size are the "
        "paper's. The tables give every run: means over seeds ± standard deviation. "
        "<strong>diverged</strong> marks a run/epoch that diverged (no checkpoint to score); "
        "<em>not evaluated</em>/<em>missing</em> mark work not done yet.</p>",
        ctx.figure("figure4", "Figure 4: validation loss and BLEU per epoch"),
        "<p>The same checkpoints against updates and against training wall-clock: equal checkpoints are not "
        "equal time.</p>",
        ctx.figure("figure4_time", "Figure 4's curves against updates and training wall-clock"),
        *ctx.per_epoch(f"Tokenized BLEU on {split}, per run per epoch", split, "bleu_tok", "bleu-per-epoch"),
        *ctx.per_epoch(f"Validation loss (base 2) on {split}, per run per epoch", split, "loss_base2",
                       "loss-per-epoch", 3),
    ]
    for sp in splits:
        if sp != split:
            parts += ctx.per_epoch(f"Tokenized BLEU on {sp}", sp, "bleu_tok", f"bleu-per-epoch-{sp}")
    for sp in splits:
        parts += ctx.per_epoch(f"sacreBLEU (detokenized, against the raw references) on {sp}", sp, "sacrebleu",
                               f"sacrebleu-per-epoch-{sp}")
    return parts + [
        f"<h3>Had the runs stopped improving?</h3><p>The spread of each run's seed-mean validation loss (bits) "
        f"on {_esc(split)} over its last three scored epochs, (max - min) / min; <em>plateau</em> when it is "
        "within 1%. A comparison at the last epoch between runs that are still improving compares how fast "
        "they learn, not where they end.</p>",
        _table(ctx.agg.plateau, "plateau"),
        f"<h3>Checkpoints and time to a common BLEU</h3><p>Target: 95% of the best seed-mean tokenized BLEU any "
        f"run reaches on {_esc(split)}. The paper's claim (Pre-LN's 9th checkpoint about as good as Post-LN's 15th) "
        "is about the epoch column; the wall-clock column says whether it holds in time.</p>",
        _table(ctx.agg.milestones, "milestones"),
    ]


def _confounds(ctx: _Context) -> list[str]:
    conf = ctx.confounds
    return [
        _table(pd.DataFrame(confounds_rows(conf)), "confounds"),
        _list(c["sentence"] for c in conf["comparisons"]),
        "<p>The schedule confound made visible: the learning rate of every update of every run, from "
        "train.jsonl.</p>",
        ctx.figure("lr", "learning rate of every run over updates"),
        f'<div class="note">{_esc(conf["time_note"])}</div>',
        '<p>Also as markdown: <a href="confounds.md">confounds.md</a>.</p>',
    ]


def _early_grad_table(layers_early: pd.DataFrame, runs: Sequence[str]) -> pd.DataFrame:
    """Per (stack, layer, sublayer): each run's early gradient norm averaged over seeds, runs in ``select`` order."""
    le = (layers_early.groupby(["stack", "layer", "sublayer", "run"], sort=False)["grad_norm_mean"].mean()
          .unstack("run").reset_index())
    le = le[["stack", "layer", "sublayer"] + [r for r in runs if r in le.columns]]
    le.columns.name = None
    return le


def _stability(ctx: _Context) -> list[str]:
    agg = ctx.agg
    parts = [
        "<p>Divergence: a non-finite loss or a loss above the configured bound stops a run (recorded in its "
        "summary.json); the rate is over the seeds that finished.</p>",
        _table(agg.divergence, "divergence"),
        f"<p>Gradient norms per layer, averaged over the logged updates of the first {agg.early_updates} updates "
        f"(the first epoch), then over seeds. {_esc(_norm_styles())}.</p>",
        ctx.figure("grad_layers", "per-layer gradient norms early in training"),
        ctx.figure("grad_total", "total gradient norm early in training"),
    ]
    if len(agg.layers_early):
        parts.append(_table(_early_grad_table(agg.layers_early, ctx.experiment.select), "grad-norms-early"))
    else:
        parts.append("<p><em>No per-layer gradient norms in the training logs.</em></p>")
    if agg.problems:
        parts.append("<p class='bad'>Unreadable training-log lines (skipped):</p>" + _list(agg.problems[:20]))
    return parts


def _wallclock(ctx: _Context) -> list[str]:
    return [
        "<p>Training wall-clock summed over attempts (a resumed run counts every attempt), per run and seed. "
        'The <a href="#figure4">Figure 4 section</a> puts the scores on a time axis: the x position of each '
        "point is the seed-mean training wall-clock at the end of that epoch.</p>",
        _table(ctx.agg.wallclock, "wallclock"),
    ]


def _gradinit(ctx: _Context) -> list[str]:
    gi, views = ctx.gradinit, ctx.gradinit_views
    if gi is None:
        return [f"<p>Expected gradient at initialization: {_esc(ctx.gradinit_missing)}.</p>"]
    init = init_rows(gi)
    depth = figure_depth(gi, ctx.experiment.model.decoder_layers)
    used = "; ".join(f"{col}: {_distinct(init[col])}" for col in (
        "batches", "max_tokens", "target_tokens", "d_model", "ffn_dim", "heads", "label_smoothing", "dropout",
        "precision"))
    parts = [
        "<p>The paper's Section 3.4 and Figure 3: for every layer weight matrix, its gradient on each of K real "
        "training batches (the cross-entropy averaged over the batch's target tokens), averaged elementwise; the "
        "Frobenius norm of that mean is the value, ||E_batch[dL/dW]||_F (<code>expected_grad_fro</code>; the "
        "per-batch mean of norms, <code>mean_grad_norm</code>, is the other statistic of gradinit.csv). Its noise "
        "is the standard error sqrt(sum_k ||g_k - g_mean||_F^2 / (K (K - 1))); with K batches the squared value "
        "overestimates ||E[g]||^2 by about the squared noise. Every norm position starts from the same weights for "
        f"a seed and sees the same batches. Seeds {_esc(_distinct(init['seed']))}; depths "
        f"{_esc(_distinct(init['depth']))} (encoder = decoder layers); {_esc(used)}.</p>",
        f"<p>{_esc(_after_warmup_text(ctx))}</p>",
        f"<h3>Figure 3(a)/(b): the FFN weights by layer, {depth}-{depth} layers</h3>",
        ctx.figure("gradinit", "expected gradient of W1 and W2 by layer"),
        "<p>Every layer weight at that depth (seed means), the ratio of the first variant's to each other's, and "
        "the largest seed-mean noise of the row:</p>",
        _table(views["gradinit_summary"], "gradinit"),
        "<h3>Figure 3(c): the last layer's W2 against depth</h3>",
        ctx.figure("gradinit_depth", "last decoder layer's W2 expected gradient against depth, log-log"),
    ]
    if "gradinit_fit" not in views:
        return parts + ["<p><em>No fit (analysis/gradinit_fit.csv absent).</em></p>"]
    fit = views["gradinit_fit"]
    top = headline(fit)
    parts.append("<p>Fitted value ~ c L^b (" + _esc(", ".join(sorted(set(top["interval"])))) + "): " + _esc("; ".join(
        f"{series_label(r.norm, 'init')} b = {r.b:.3f} [{r.b_low:.3f}, {r.b_high:.3f}]"
        + (f" (theory {r.theory_b:g})" if math.isfinite(r.theory_b) else "") for r in top.itertuples())) + ".</p>")
    rest = fit.drop(top.index)
    return parts + [_table(views["gradinit_by_depth"], "gradinit-by-depth"),
                    "<p>Every fit (last layer of each stack, both FFN matrices, both statistics):</p>",
                    _table(pd.concat([top, rest]).drop(columns="interval"), "gradinit-fit")]


def _interval_cell(v: float, lo: float, hi: float) -> str:
    """An estimate as one table cell: "1.23 [0.51, 1.95]", the value alone without an interval, "—" without one."""
    if math.isnan(v):
        return "—"
    return fmt(v) if math.isnan(lo) else f"{fmt(v)} [{fmt(lo)}, {fmt(hi)}]"


def _effects_view(effects: pd.DataFrame) -> pd.DataFrame:
    """tables/effects.csv on the page: a row per (metric, budget), a column per term, then the counts."""
    if effects.empty:
        return effects
    rows = []
    for (metric, budget), g in effects.groupby(["metric", "budget"], sort=False):
        first = g.iloc[0]
        rows.append({"metric": metric, "budget": budget,
                     **{r.effect: _interval_cell(r.estimate, r.ci_low, r.ci_high) for r in g.itertuples()},
                     "n_seeds": first["n_seeds"], "n_left_out": first["n_left_out"],
                     "n_missing": first["n_missing"], "note": g.loc[g["estimate"].notna(), "note"].iloc[0]
                     if g["estimate"].notna().any() else first["note"]})
    return pd.DataFrame(rows)


def _cells_view(cells: pd.DataFrame, runs: Sequence[str]) -> pd.DataFrame:
    """tables/cells.csv on the page: a row per run, a column per (metric, budget): mean [95% interval] (n)."""
    if cells.empty:
        return cells
    text = cells.assign(cell=[f"{_interval_cell(r.mean, r.ci_low, r.ci_high)} ({r.n})" + (
        f", {r.n_left_out} left out" if r.n_left_out else "") for r in cells.itertuples()],
        column=cells["metric"] + " @ " + cells["budget"])
    piv = text.pivot(index="run", columns="column", values="cell")
    piv = piv.loc[[r for r in runs if r in piv.index], list(dict.fromkeys(text["column"]))]
    piv.columns.name = None
    return piv.reset_index()


def _findings(ctx: _Context) -> list[str]:
    return ["<p>Every sentence is filled in from the tables below (Claims; Effects at the fixed budget): the "
            "measured value with its 95% interval over seeds, the status from the claims table, and the factors "
            "the factorial fit attributes Figure 4's difference to.</p>", _list(ctx.study.findings)]


def _effects(ctx: _Context) -> list[str]:
    s = ctx.study
    design = s.design.rename(columns={f: f"{f} (-1 {lo}, +1 {hi})" for f, (lo, hi) in LEVEL_WORDS.items()})
    parts = [
        "<p>Every factorial cell of a seed trains on the same batches, so an epoch is the same number of updates "
        "and target tokens in every cell: a fixed budget. The cells are compared at the last epoch, at an earlier "
        "epoch (<code>analysis.report.budget_epoch</code>), at equal training wall-clock (interpolated linearly "
        "between each seed's checkpoints), and by the epochs and wall-clock each seed needs to reach "
        f"{s.settings.target_fraction:.0%} of the best seed-mean BLEU on {_esc(s.split)} "
        f"(target {fmt(s.target_bleu)} BLEU).</p>",
        _table(s.budget_table, "budgets"),
        "<h3>The design</h3><p>One run per cell, coded -1/+1 (sum-to-zero).</p>", _table(design, "design"),
    ]
    if s.design_notes:
        parts += ["<p>Selected runs not in the fit:</p>", _list(s.design_notes)]
    return parts + [
        "<h3>Cells at each budget</h3><p>Seed mean [95% t interval] (finished seeds); a cell with fewer than two "
        "finished seeds has no interval. Diverged or stopped seeds are left out and counted below.</p>",
        _table(_cells_view(s.cells, ctx.experiment.select), "cells"),
        ctx.figure("cells", f"every cell at {s.last}: seeds as points, mean and 95% interval"),
        "<h3>Main effects and interactions</h3><p>Ordinary least squares of y ~ norm * warmup * decay over the "
        "finished seeds (statsmodels), seeds as replicates, each term as 2 beta: a main effect is the mean at the "
        "high level minus the mean at the low level (norm: pre minus post; warmup: on minus off; decay: step minus "
        "isqrt), interactions on the same scale; [95% interval]. On an incomplete design only the terms the cells "
        "identify are fitted (the note says which are not); with one seed there are point estimates and no "
        "interval.</p>",
        _table(_effects_view(s.effects), "effects"),
        ctx.figure("effects", f"main effects and interactions at {s.last}, 95% intervals"),
        ctx.figure("interaction", f"norm x warm-up interaction at {s.last}"),
        f"<h3>Failures</h3><p>At the last epoch, per run: diverged, stopped, or finished below the BLEU floor "
        f"({fmt(s.settings.bleu_floor)}, <code>analysis.report.bleu_floor</code>).</p>",
        _table(s.failures, "failures"),
        ctx.figure("failures", "share of seeds diverged, stopped or below the BLEU floor, per cell"),
    ]


def _tuned(ctx: _Context) -> list[str]:
    s, e = ctx.study, ctx.experiment
    if not e.grids:
        return ["<p>No grid is selected (config <code>grids:</code>): no tuned baselines.</p>"]
    parts = [f"<p>Each grid's best run is the one with the lowest seed-mean validation loss at {_esc(s.last)}; the "
             "selection never sees the test split. Grids whose bases are a configured comparison's two runs and "
             "that try as many settings are compared tuned against tuned on the test split (difference b - a, "
             "Welch's 95% interval), and appear in the confound table as <code>{comparison}_tuned</code>.</p>"]
    for name, table in s.grids.items():
        g = e.grids[name]
        parts += [f"<h3>Grid <code>{_esc(name)}</code></h3><p>Base {_esc(g.base)}; varies "
                  f"{_esc(', '.join(g.values))}; seeds {_esc(', '.join(map(str, g.seeds)))}; best: "
                  f"{_esc(s.best.get(name, 'none scored yet'))}.</p>", _table(table, f"grid-{name}")]
    return parts + ["<h3>Tuned against tuned (test split)</h3>", _table(s.tuned, "tuned")]


def _claims(ctx: _Context) -> list[str]:
    c = ctx.study.claims
    view = c.assign(measured=[_interval_cell(r.measured, r.ci_low, r.ci_high) for r in c.itertuples()])
    return [
        "<p>Each published claim (<code>lnrepro/analysis/published.yaml</code>, with its source) against this "
        f"experiment. Statuses: {_esc(', '.join(STATUSES))}. An absolute number is compared only at the paper's "
        "dataset and model size; a relative claim is checked in a scale-free form (a ratio of epochs, the sign of "
        "an effect, an exponent). Reproduced: the 95% interval contains the published value (within its stated "
        "precision) and excludes the competing prediction, or excludes zero on the claimed side; not reproduced: "
        "it excludes the published value or the claimed side; inconclusive otherwise, and always with one "
        "seed.</p>",
        _table(view.drop(columns=["ci_low", "ci_high"]), "claims"),
    ]


def _assumptions(ctx: _Context) -> list[str]:
    e = ctx.experiment
    return [
        "<h3>Settings the paper does not state</h3>", _table(pd.DataFrame(unstated_rows(e)), "unstated"),
        "<h3>This config against the paper's stated setup</h3>", _list(config_deviations(e) + recipe_notes(e)),
        "<h3>The implementation</h3>", _list(DEVIATIONS),
    ]


def _where(ctx: _Context) -> list[str]:
    me = where_ran()
    job = f", SLURM job {_esc(me['slurm_job_id'])}" if me["slurm_job_id"] else ""
    return [
        "<p>Training (from each run.json):</p>",
        _table(ctx.agg.wallclock[["run", "seed", "host", "device", "threads", "precision"]], "where-ran"),
        f"<p>This report: host <code>{_esc(me['host'])}</code>, device <code>{_esc(me['device'])}</code>{job}.</p>",
    ]


def _files(ctx: _Context) -> list[str]:
    links = [ctx.rel(p) for _, p in sorted(ctx.tables.items())] + ["confounds.md"]
    return ["<ul>" + "".join(f'<li><a href="{_esc(x)}">{_esc(x)}</a></li>' for x in links) + "</ul>"]


# (anchor, heading, section): the page's order and its table of contents.
SECTIONS: tuple[tuple[str, str, Callable[[_Context], list[str]]], ...] = (
    ("findings", "Findings", _findings),
    ("run", "What was run", _what_was_run),
    ("figure4", "Figure 4 reproduction", _figure4),
    ("effects", "Effects at the fixed budget", _effects),
    ("tuned", "Tuned baselines", _tuned),
    ("claims", "Claims", _claims),
    ("confounds", "Confounds", _confounds),
    ("stability", "Stability", _stability),
    ("wallclock", "Wall-clock", _wallclock),
    ("gradinit", "Gradient at initialization", _gradinit),
    ("assumptions", "Assumptions and deviations", _assumptions),
    ("where", "Where it ran", _where),
    ("files", "Files", _files),
)


def _header(experiment: Experiment) -> list[str]:
    """Title, what the page is, when it was made, and the table of contents."""
    return [
        f"<h1>Pre-LN vs Post-LN: experiment <code>{_esc(experiment.name)}</code></h1>",
        "<p>Reproduction of Figure 4 of Xiong et al. (ICML 2020), <em>On Layer Normalization in the Transformer "
        "Architecture</em>, and a controlled factorial study of norm position, warm-up and decay. "
        f"Generated {_esc(datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC'))}.</p>",
        "<ul>" + "".join(f'<li><a href="#{a}">{_esc(t)}</a></li>' for a, t, _ in SECTIONS) + "</ul>",
    ]


def make_report(exp_dir: Path, experiment: Experiment, out_dir: Path) -> Path:
    """Build ``out_dir`` (results/{exp}/report/): index.html, tables/*.csv, figures/*.png, confounds.md.
    Returns the path of index.html."""
    ctx = _prepare(Path(exp_dir), experiment, Path(out_dir))
    parts = _header(experiment)
    for anchor, heading, section in SECTIONS:
        parts += [f'<h2 id="{anchor}">{_esc(heading)}</h2>', *section(ctx)]
    doc = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
           f"<title>lnrepro report: {_esc(experiment.name)}</title><style>{CSS}</style></head><body>\n"
           + "\n".join(parts) + "\n</body></html>\n")
    index = ctx.out_dir / "index.html"
    atomic_write_text(index, doc)
    return index
