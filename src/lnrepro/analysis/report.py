"""The HTML report (one job: assemble tables, figures and confounds into report/index.html).

``make_report`` writes, under ``out_dir`` (results/{exp}/report/): ``index.html`` (self-contained: inline
CSS, figures by relative <img> links, tables rendered by pandas), ``tables/*.csv``, ``figures/*.png`` and
``confounds.md``. Optional inputs (gradinit.csv, training logs, evaluations not yet run) only change what
a section says; they never make the report fail. Diverged runs and epochs are shown as "diverged".
"""

from __future__ import annotations

import html
import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import LnReproError
from ..io import atomic_write_text, where_ran
from . import aggregate as ag
from .confounds import differing_keys, flatten, write_confounds
from .plots import make_figures

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


def _esc(x: Any) -> str:
    return html.escape(str(x))


def _table(df: pd.DataFrame, table_id: str, index: bool = False, float_format: str = "{:.4g}") -> str:
    """A pandas table as HTML (escaped; NaN shown as an em dash)."""
    if df is None or df.empty:
        return "<p><em>No data yet.</em></p>"
    return df.to_html(index=index, table_id=table_id, na_rep="—", escape=True, border=0,
                      float_format=lambda v: float_format.format(v))


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


def per_epoch_table(run_epochs: pd.DataFrame, col: str, runs: list[str], digits: int = 2) -> pd.DataFrame:
    """Rows: epoch; columns: runs (in ``select`` order); one formatted value per run per epoch."""
    if run_epochs.empty:
        return pd.DataFrame()
    cells = run_epochs.assign(cell=run_epochs.apply(lambda r: score_cell(r, col, digits), axis=1))
    piv = cells.pivot(index="epoch", columns="run", values="cell")
    piv = piv[[r for r in runs if r in piv.columns]]
    piv = piv.fillna("missing")
    piv.columns.name = None
    return piv.reset_index()


def _read_gradinit(exp_dir: Path) -> tuple[pd.DataFrame | None, str]:
    """analysis/gradinit.csv when present (else None and the reason)."""
    path = Path(exp_dir) / "analysis" / "gradinit.csv"
    if not path.exists():
        return None, f"not computed (no {path.relative_to(exp_dir)})"
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise LnReproError(f"{path}: not a readable CSV ({e})") from e
    need = {"norm", "seed", "stack", "layer", "sublayer", "param", "grad_norm"}
    if not need <= set(df.columns):
        raise LnReproError(f"{path}: expected columns {sorted(need)}, found {list(df.columns)}")
    return df, ""


def _gradinit_summary(gi: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds of each weight's gradient norm; one column per norm position, plus post/pre."""
    piv = gi.groupby(["stack", "layer", "sublayer", "param", "norm"])["grad_norm"].mean().unstack("norm").reset_index()
    if {"post", "pre"} <= set(piv.columns):
        piv["post/pre"] = piv["post"] / piv["pre"]
    piv.columns.name = None
    order = {"enc": 0, "dec": 1}
    return piv.sort_values(["stack", "layer", "sublayer", "param"], key=lambda s: s.map(order) if s.name == "stack" else s)


def _run_factors(experiment: dict[str, Any]) -> pd.DataFrame:
    """The selected runs with their norm/warm-up/decay and every other key that differs between them."""
    runs = experiment["select"]
    cfgs = [experiment["runs"][r] for r in runs]
    keys = ["model.norm", "schedule.warmup", "schedule.decay"]
    keys += [k for k in differing_keys(cfgs) if k not in keys]
    rows = []
    for r, c in zip(runs, cfgs):
        f = flatten(c)
        rows.append({"run": r, **{k: json.dumps(f.get(k)) if isinstance(f.get(k), (list, dict)) else f.get(k) for k in keys}})
    return pd.DataFrame(rows)


def _shared_settings(experiment: dict[str, Any]) -> pd.DataFrame:
    """Settings equal across all selected runs (model, optim, schedule, train sections)."""
    runs = experiment["select"]
    if not runs:
        return pd.DataFrame()
    cfgs = [experiment["runs"][r] for r in runs]
    diff = set(differing_keys(cfgs))
    f = flatten(cfgs[0])
    rows = [{"key": k, "value": json.dumps(v) if isinstance(v, (list, dict)) else v}
            for k, v in f.items() if k not in diff and k.split(".")[0] in ("model", "optim", "schedule", "train", "bpe")]
    rows.append({"key": "data.dataset", "value": f.get("data.dataset")})
    return pd.DataFrame(rows)


def _figure(rel: str, alt: str) -> str:
    return f'<figure><img src="{_esc(rel)}" alt="{_esc(alt)}"><figcaption>{_esc(alt)}</figcaption></figure>'


def make_report(exp_dir: Path, experiment: dict[str, Any] | None = None, out_dir: Path | None = None) -> Path:
    """Build results/{exp}/report/: index.html, tables/*.csv, figures/*.png, confounds.md.

    ``experiment`` is experiment.json's content (read from ``exp_dir`` when None); ``out_dir`` defaults
    to ``exp_dir/report``. Returns the path of index.html."""
    exp_dir = Path(exp_dir)
    if experiment is None:
        experiment = ag.load_experiment(exp_dir)
    ag.check_experiment(experiment, exp_dir / "experiment.json")
    out_dir = Path(out_dir) if out_dir is not None else exp_dir / "report"
    runs = list(experiment["select"])
    splits = ag.splits_of(experiment)
    split = ag.primary_split(experiment)

    agg = ag.aggregate(exp_dir, experiment)
    tables = ag.write_tables(agg, out_dir / "tables")
    gi, gi_reason = _read_gradinit(exp_dir)
    if gi is not None:
        tables["gradinit_summary"] = ag.write_csv(_gradinit_summary(gi), out_dir / "tables" / "gradinit_summary.csv")
    figs = make_figures(agg, experiment, out_dir / "figures", gi)
    devices = {r: set(agg.wallclock.loc[agg.wallclock["run"] == r, "device"].dropna().astype(str)) for r in runs}
    conf = write_confounds(experiment, out_dir / "confounds.md", devices)

    def rel(p: Path) -> str:
        return Path(p).relative_to(out_dir).as_posix()

    parts: list[str] = []
    add = parts.append
    name = experiment.get("name", exp_dir.name)
    add(f"<h1>Pre-LN vs Post-LN: experiment <code>{_esc(name)}</code></h1>")
    add("<p>Reproduction of Figure 4 of Xiong et al. (ICML 2020), <em>On Layer Normalization in the Transformer "
        "Architecture</em>, and a controlled factorial study of norm position, warm-up and decay. "
        f"Generated {_esc(datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC'))}.</p>")
    toc = [("run", "What was run"), ("figure4", "Figure 4 reproduction"), ("confounds", "Confounds"),
           ("stability", "Stability"), ("wallclock", "Wall-clock"), ("gradinit", "Gradient at initialization"),
           ("deviations", "Deviations from the paper"), ("where", "Where it ran"), ("files", "Files")]
    add("<ul>" + "".join(f'<li><a href="#{a}">{_esc(t)}</a></li>' for a, t in toc) + "</ul>")

    # --- what was run
    add('<h2 id="run">What was run</h2>')
    add(f"<p>Seeds: {_esc(', '.join(map(str, experiment['seeds'])))}. Runs selected: {len(runs)}. "
        f"Dataset: <code>{_esc(flatten(experiment['runs'][runs[0]]).get('data.dataset') if runs else '?')}</code>.</p>")
    if experiment.get("notes"):
        add(f'<div class="note"><strong>Notes:</strong> {_esc(experiment["notes"])}</div>')
    if experiment.get("scaling"):
        add("<p><strong>Scaling</strong> (this preset rescales the paper's schedule):</p>")
        sc = experiment["scaling"]
        add(_table(pd.DataFrame([{"key": k, "value": json.dumps(v) if isinstance(v, (list, dict)) else v}
                                 for k, v in flatten(sc).items()]) if isinstance(sc, dict)
                   else pd.DataFrame([{"scaling": str(sc)}]), "scaling"))
    else:
        add("<p>Scaling: none (the paper's schedule numbers).</p>")
    add("<h3>Runs</h3>")
    add(_table(_run_factors(experiment), "runs"))
    add("<h3>Settings shared by all runs</h3>")
    add(_table(_shared_settings(experiment), "shared-settings"))
    if experiment.get("eval"):
        add("<h3>Evaluation settings</h3>")
        add(_table(pd.DataFrame([{"key": k, "value": json.dumps(v) if isinstance(v, (list, dict)) else v}
                                 for k, v in flatten(experiment["eval"]).items()]), "eval-settings"))

    # --- figure 4
    add('<h2 id="figure4">Figure 4 reproduction</h2>')
    add("<p>Validation loss (base 2, label-smoothed, as fairseq reports it) and tokenized BLEU (BLEU-4 on the "
        "Moses-tokenized lowercased text, as the paper and fairseq report it) for every run at every checkpoint "
        "(one per epoch). Values are means over seeds ± standard deviation; band in the figures: seed min/max. "
        "<strong>diverged</strong> marks a run/epoch that diverged (no checkpoint to score); "
        "<em>not evaluated</em>/<em>missing</em> mark work not done yet.</p>")
    add(_figure(rel(figs["loss_epoch"]), "validation loss per epoch"))
    add(_figure(rel(figs["bleu_epoch"]), "tokenized BLEU per epoch"))
    add(f"<h3>Tokenized BLEU on {_esc(split)}, per run per epoch</h3>")
    add(_table(per_epoch_table(agg.run_epochs, f"{split}_bleu_tok", runs), "bleu-per-epoch"))
    add(f"<h3>Validation loss (base 2) on {_esc(split)}, per run per epoch</h3>")
    add(_table(per_epoch_table(agg.run_epochs, f"{split}_loss_base2", runs, 3), "loss-per-epoch"))
    for sp in splits:
        if sp != split:
            add(f"<h3>Tokenized BLEU on {_esc(sp)}</h3>")
            add(_table(per_epoch_table(agg.run_epochs, f"{sp}_bleu_tok", runs), f"bleu-per-epoch-{sp}"))
    for sp in splits:
        add(f"<h3>sacreBLEU (detokenized, against the raw references) on {_esc(sp)}</h3>")
        add(_table(per_epoch_table(agg.run_epochs, f"{sp}_sacrebleu", runs), f"sacrebleu-per-epoch-{sp}"))
    add(f"<h3>Checkpoints and time to a common BLEU</h3><p>Target: 95% of the best seed-mean tokenized BLEU any "
        f"run reaches on {_esc(split)}. The paper's claim (Pre-LN's 9th checkpoint about as good as Post-LN's 15th) "
        "is about the epoch column; the wall-clock column says whether it holds in time.</p>")
    add(_table(agg.milestones, "milestones"))

    # --- confounds
    add('<h2 id="confounds">Confounds</h2>')
    ct = pd.DataFrame([{
        "comparison": c["name"], "runs": ", ".join(c["runs"]), "factor": c["factor_key"],
        "also differs (confounds)": ", ".join(c["confounds"]) if c["verdict"] != "skipped" else "",
        "verdict": c["verdict"] + (f": {c['reason']}" if c["reason"] else ""), "claim": c["claim"],
    } for c in conf["comparisons"]])
    add(_table(ct, "confounds"))
    add("<ul>" + "".join(f"<li>{_esc(s)}</li>" for s in conf["sentences"]) + "</ul>")
    add(f'<div class="note">{_esc(conf["time_note"])}</div>')
    for h in conf["hardware_notes"]:
        add(f'<p class="bad">{_esc(h)}</p>')
    add('<p>Also as markdown: <a href="confounds.md">confounds.md</a>.</p>')

    # --- stability
    add('<h2 id="stability">Stability</h2>')
    add("<p>Divergence: a non-finite loss or a loss above the configured bound stops a run (recorded in its "
        "summary.json); the rate is over the seeds that finished.</p>")
    div = agg.divergence.copy()
    add(_table(div, "divergence"))
    add(f"<p>Gradient norms per layer, averaged over the logged updates of the first {agg.early_updates} updates "
        "(the first epoch), then over seeds. Post-LN solid, Pre-LN dashed.</p>")
    add(_figure(rel(figs["grad_layers"]), "per-layer gradient norms early in training"))
    add(_figure(rel(figs["grad_total"]), "total gradient norm early in training"))
    if len(agg.layers_early):
        le = (agg.layers_early.groupby(["stack", "layer", "sublayer", "run"], sort=False)["grad_norm_mean"].mean()
              .unstack("run").reset_index())
        le = le[["stack", "layer", "sublayer"] + [r for r in runs if r in le.columns]]
        le.columns.name = None
        add(_table(le, "grad-norms-early"))
    else:
        add("<p><em>No per-layer gradient norms in the training logs.</em></p>")
    if agg.problems:
        add("<p class='bad'>Unreadable training-log lines (skipped):</p><ul>"
            + "".join(f"<li>{_esc(p)}</li>" for p in agg.problems[:20]) + "</ul>")

    # --- wall-clock
    add('<h2 id="wallclock">Wall-clock</h2>')
    add("<p>Training wall-clock summed over attempts (a resumed run counts every attempt), per run and seed. "
        "Curves below put the same scores on a time axis: the x position of each point is the seed-mean "
        "training wall-clock at the end of that epoch.</p>")
    add(_table(agg.wallclock, "wallclock"))
    add(_figure(rel(figs["loss_wall"]), "validation loss vs training wall-clock"))
    add(_figure(rel(figs["bleu_wall"]), "tokenized BLEU vs training wall-clock"))

    # --- gradinit
    add('<h2 id="gradinit">Gradient at initialization</h2>')
    if gi is None:
        add(f"<p>Gradient norms at initialization: {_esc(gi_reason)}.</p>")
    else:
        meta = []
        for col in ("dropout", "batches", "max_tokens", "target_tokens"):
            if col in gi.columns:
                meta.append(f"{col}: {', '.join(map(str, sorted(gi[col].dropna().unique().tolist())))}")
        add("<p>The paper's Section 3 / Figure 3: Frobenius norm of the loss gradient (label-smoothed, per target "
            "token) with respect to each layer's weights at initialization, on real training batches, averaged over "
            f"batches, then over seeds {_esc(', '.join(map(str, sorted(gi['seed'].unique().tolist()))))}. "
            f"Expected: Post-LN's grows toward the top of the decoder, Pre-LN's stays flat. {_esc('; '.join(meta))}</p>")
        add(_figure(rel(figs["gradinit"]), "gradient norm at initialization by layer"))
        add(_table(_gradinit_summary(gi), "gradinit"))

    # --- deviations
    add('<h2 id="deviations">Deviations from the paper</h2>')
    devs = experiment.get("deviations")
    if devs is None:
        try:
            from ..deviations import DEVIATIONS as devs  # the project's list when experiment.json has none
        except ImportError:
            devs = []
    add("<ul>" + "".join(f"<li>{_esc(d)}</li>" for d in devs) + "</ul>" if devs else "<p>None listed.</p>")

    # --- where it ran
    add('<h2 id="where">Where it ran</h2>')
    wr = agg.wallclock[["run", "seed", "host", "device", "threads", "precision"]] if len(agg.wallclock) else pd.DataFrame()
    add("<p>Training (from each run.json):</p>")
    add(_table(wr, "where-ran"))
    me = where_ran()
    add(f"<p>This report: host <code>{_esc(me['host'])}</code>, device <code>{_esc(me['device'])}</code>"
        + (f", SLURM job {_esc(me['slurm_job_id'])}" if me.get("slurm_job_id") else "") + ".</p>")

    # --- files
    add('<h2 id="files">Files</h2><ul>')
    for tname, p in sorted(tables.items()):
        add(f'<li><a href="{_esc(rel(p))}">{_esc(rel(p))}</a></li>')
    add('<li><a href="confounds.md">confounds.md</a></li></ul>')

    doc = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
           f"<title>lnrepro report: {_esc(name)}</title><style>{CSS}</style></head><body>\n"
           + "\n".join(parts) + "\n</body></html>\n")
    index = out_dir / "index.html"
    atomic_write_text(index, doc)
    return index
