"""Collect an experiment's results tree into tidy pandas tables (one job: read and tabulate, no plotting).

Reads, under ``results/{exp}/runs/{run}/seed{seed}/``: ``epochs/epochNNN.json`` (training manifests),
``eval/epochNNN.json`` (scores), ``summary.json``, ``run.json`` and ``train.jsonl``. Every reader is
tolerant: a missing optional file gives NaN / "missing", never a crash, because the report must render
for a partly finished experiment too. A run or epoch that diverged is recorded as ``diverged`` (a result),
never as missing data.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

from ..config.settings import Experiment
from ..errors import LnReproError
from ..io import read_json

# Scores read per split from eval/epochNNN.json "splits": {split: {...}}.
SPLIT_METRICS = ("loss", "nll", "loss_base2", "nll_base2", "bleu_tok", "sacrebleu")
# Fields of a train.jsonl record that are scalars of the training curve.
TRAIN_SCALARS = ("loss", "nll", "lr", "grad_norm", "tokens_per_s", "wall_s", "attempt")

STATUS_OK = "ok"
STATUS_DIVERGED = "diverged"
STATUS_NOT_EVALUATED = "not evaluated"
STATUS_MISSING = "missing"


def run_dir(exp_dir: Path, run: str, seed: int) -> Path:
    return Path(exp_dir) / "runs" / run / f"seed{seed}"


def _run_seeds(exp_dir: Path, experiment: Experiment) -> Iterator[tuple[str, int, Path]]:
    """(run, seed, its folder) for every selected run and each of its seeds, in ``select`` then seed order."""
    for run in experiment.select:
        for seed in experiment.seeds_of(run):
            yield run, seed, run_dir(exp_dir, run, seed)


def _read_optional_json(path: Path) -> dict[str, Any] | None:
    """A JSON file that may not exist yet (the stage has not run); a corrupt one is still an error."""
    if not path.exists():
        return None
    obj = read_json(path)
    if not isinstance(obj, dict):
        raise LnReproError(f"{path}: expected a JSON object")
    return obj


def _num(x: Any) -> float:
    """A float, NaN for None/missing/non-numeric (so absent scores become NaN, not crashes)."""
    try:
        return float(x) if x is not None else math.nan
    except (TypeError, ValueError):
        return math.nan


_EPOCH_FILE = re.compile(r"^epoch(\d+)\.json$")


def _epochs_on_disk(folder: Path) -> set[int]:
    if not folder.is_dir():
        return set()
    return {int(m.group(1)) for p in folder.iterdir() if (m := _EPOCH_FILE.match(p.name))}


def primary_split(experiment: Experiment) -> str:
    """The split of the report's headline numbers: 'valid' (validation loss, as the paper) when scored."""
    splits = experiment.eval.splits
    return "valid" if "valid" in splits else next(iter(splits))


# ---------------------------------------------------------------------------------------------------
# per (run, seed, epoch)


def epoch_table(exp_dir: Path, experiment: Experiment) -> pd.DataFrame:
    """One row per (run, seed, epoch): status, updates, training wall-clock at the end of that epoch,
    evaluation wall-clock, and every scored split's scores as ``{split}_{metric}`` columns (NaN at an epoch the
    split is not scored at: ``eval.splits.{split}.epochs``).

    ``status`` is ``diverged`` when the manifest, the evaluation or summary.json says so,
    ``ok`` when scored, ``not evaluated`` when trained but not yet scored, ``missing`` otherwise.
    """
    splits = experiment.eval.splits
    rows: list[dict[str, Any]] = []
    for run, seed, rd in _run_seeds(exp_dir, experiment):
        summary = _read_optional_json(rd / "summary.json") or {}
        div = summary.get("diverged") if isinstance(summary.get("diverged"), dict) else None
        div_epoch = int(div["epoch"]) if div and div.get("epoch") is not None else None
        # epochs on disk beyond the configured count still show (a results tree from an earlier config)
        n_ep = max([experiment.runs[run].train.epochs, *_epochs_on_disk(rd / "epochs"), *_epochs_on_disk(rd / "eval")])
        for ep in range(1, n_ep + 1):
            man = _read_optional_json(rd / "epochs" / f"epoch{ep:03d}.json")
            ev = _read_optional_json(rd / "eval" / f"epoch{ep:03d}.json")
            train_status = (man or {}).get("status", STATUS_MISSING)
            if man is None and div_epoch is not None and ep >= div_epoch:
                train_status = STATUS_DIVERGED  # summary knows even if manifests are not written yet
            eval_status = (ev or {}).get("status", STATUS_MISSING)
            if STATUS_DIVERGED in (train_status, eval_status):
                status = STATUS_DIVERGED
            elif train_status not in (STATUS_OK, STATUS_MISSING):
                status = str(train_status)  # e.g. "stopped" (train.max_updates reached before this epoch)
            elif eval_status == STATUS_OK:
                status = STATUS_OK
            elif train_status == STATUS_OK:
                status = STATUS_NOT_EVALUATED
            else:
                status = STATUS_MISSING
            row: dict[str, Any] = {
                "run": run, "seed": seed, "epoch": ep, "status": status,
                "train_status": train_status, "eval_status": eval_status,
                "updates": _num((man or {}).get("updates")),
                "train_wall_s": _num((man or {}).get("wall_s")),
                "eval_wall_s": _num((ev or {}).get("wall_s")),
            }
            ev_splits = (ev or {}).get("splits") or {}
            for sp in splits:
                scores = ev_splits.get(sp) or {}
                for m in SPLIT_METRICS:
                    # a diverged epoch has no scores: NaN, with status telling why
                    row[f"{sp}_{m}"] = _num(scores.get(m)) if status == STATUS_OK else math.nan
            rows.append(row)
    cols = ["run", "seed", "epoch", "status", "train_status", "eval_status", "updates", "train_wall_s",
            "eval_wall_s"] + [f"{sp}_{m}" for sp in splits for m in SPLIT_METRICS]
    return pd.DataFrame(rows, columns=cols)


def metric_columns(df: pd.DataFrame) -> list[str]:
    """The numeric score columns of an epoch table."""
    return [c for c in df.columns if any(c.endswith("_" + m) for m in SPLIT_METRICS)]


def run_epoch_table(epochs: pd.DataFrame) -> pd.DataFrame:
    """Per (run, epoch) over seeds: seed counts by status, and mean/std/min/max of every score and of the
    wall-clock/updates. Diverged seeds are excluded from the means and counted in ``n_diverged``;
    ``status`` is ok (all seeds scored), diverged (all diverged), partial (some diverged) or missing."""
    if epochs.empty:
        return pd.DataFrame(columns=["run", "epoch", "n_seeds", "n_ok", "n_diverged", "status"])
    value_cols = ["updates", "train_wall_s", "eval_wall_s"] + metric_columns(epochs)
    out_rows = []
    for (run, ep), g in epochs.groupby(["run", "epoch"], sort=False):
        n, n_ok = len(g), int((g["status"] == STATUS_OK).sum())
        n_div = int((g["status"] == STATUS_DIVERGED).sum())
        if n_div == n:
            status = STATUS_DIVERGED
        elif n_div > 0:
            status = "partial"
        elif n_ok == n:
            status = STATUS_OK
        elif n_ok > 0:
            status = "partial"
        else:  # nothing scored: the seeds' common status (missing, not evaluated, stopped), else "partial"
            statuses = set(g["status"])
            status = statuses.pop() if len(statuses) == 1 else "partial"
        row: dict[str, Any] = {"run": run, "epoch": ep, "n_seeds": n, "n_ok": n_ok, "n_diverged": n_div,
                               "status": status}
        live = g[g["status"] != STATUS_DIVERGED]  # diverged seeds count in n_diverged, not in the means
        for c in value_cols:
            v = live[c].astype(float)
            row[f"{c}_mean"] = v.mean()
            row[f"{c}_std"] = v.std(ddof=1) if v.count() > 1 else (0.0 if v.count() == 1 else math.nan)
            row[f"{c}_min"] = v.min()
            row[f"{c}_max"] = v.max()
        out_rows.append(row)
    return pd.DataFrame(out_rows)


# ---------------------------------------------------------------------------------------------------
# per run


def divergence_table(exp_dir: Path, experiment: Experiment, epochs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per run: seeds finished (summary.json present), seeds diverged, divergence rate, and where."""
    rows = []
    for run in experiment.select:
        n_fin, n_div, where, seeds = 0, 0, [], experiment.seeds_of(run)
        for seed in seeds:
            summary = _read_optional_json(run_dir(exp_dir, run, seed) / "summary.json")
            div = None
            if summary is not None:
                n_fin += 1
                div = summary.get("diverged")
            elif epochs is not None:
                # no summary yet: a diverged manifest still tells us
                g = epochs[(epochs["run"] == run) & (epochs["seed"] == seed) & (epochs["train_status"] == STATUS_DIVERGED)]
                if len(g):
                    n_fin += 1
                    div = {"epoch": int(g["epoch"].min())}
            if div:
                n_div += 1
                d = div if isinstance(div, dict) else {}
                why = d.get("detail")
                where.append(f"seed {seed}: update {d.get('update', '?')}, epoch {d.get('epoch', '?')}"
                             + (f" ({why})" if why else ""))
        rows.append({"run": run, "n_seeds": len(seeds), "n_finished": n_fin, "n_diverged": n_div,
                     "divergence_rate": (n_div / n_fin) if n_fin else math.nan, "diverged_at": "; ".join(where)})
    return pd.DataFrame(rows, columns=["run", "n_seeds", "n_finished", "n_diverged", "divergence_rate", "diverged_at"])


def wallclock_table(exp_dir: Path, experiment: Experiment, epochs: pd.DataFrame,
                    curves: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (run, seed): updates, training wall-clock summed over attempts (summary.json), seconds per
    update, mean logged target tokens/s, evaluation wall-clock summed over epochs, attempts, host, device."""
    rows = []
    for run, seed, rd in _run_seeds(exp_dir, experiment):
        summary = _read_optional_json(rd / "summary.json") or {}
        rj = _read_optional_json(rd / "run.json") or {}
        ran = rj.get("where_ran") or {}
        g = epochs[(epochs["run"] == run) & (epochs["seed"] == seed)]
        updates = _num(summary.get("updates"))
        # training wall-clock summed over attempts: the time in updates whose results were kept, across
        # resumes (the epoch manifests' wall_s is the same clock)
        wall = _num(summary.get("train_s"))
        if math.isnan(wall) and len(g):  # summary not yet written: last manifest's cumulative wall-clock
            wall = g["train_wall_s"].max()
            updates = g["updates"].max() if math.isnan(updates) else updates
        tps, attempts = _num(summary.get("tokens_per_s")), _num(summary.get("attempts"))
        if curves is not None and len(curves):
            c = curves[(curves["run"] == run) & (curves["seed"] == seed)]
            if len(c) and math.isnan(tps) and c["tokens_per_s"].notna().any():
                tps = c["tokens_per_s"].mean()
            if len(c) and math.isnan(attempts) and c["attempt"].notna().any():
                attempts = c["attempt"].nunique()
        rows.append({
            "run": run, "seed": seed, "updates": updates, "train_wall_s": wall,
            "s_per_update": wall / updates if updates and not math.isnan(updates) else math.nan,
            "wall_s_all_attempts": _num(summary.get("wall_s_all_attempts")),
            "tokens_per_s": tps, "attempts": attempts,
            "eval_wall_s": g["eval_wall_s"].sum(min_count=1) if len(g) else math.nan,
            "threads": rj.get("threads"), "precision": rj.get("precision"),
            "host": str(ran.get("host") or ""), "device": str(ran.get("device") or ""),
        })
    return pd.DataFrame(rows)


def execution_facts(exp_dir: Path, experiment: Experiment) -> dict[str, dict[str, Any]]:
    """Per selected run, where it ran, as ``confounds.analyze_confounds`` compares it: ``seeds``, the seeds
    trained (with a summary.json, diverged or not), and from their run.json ``device`` (device_name, else the
    device type), ``precision``, ``torch`` (torch_version) and ``threads``, each as the distinct values over
    the run's seeds joined by ", " ("" when no run.json says)."""
    fields = {"device": ("device_name", "device"), "precision": ("precision",), "torch": ("torch_version",),
              "threads": ("threads",)}
    seeds: dict[str, list[int]] = {run: [] for run in experiment.select}
    values: dict[str, dict[str, set[str]]] = {run: {name: set() for name in fields} for run in experiment.select}
    for run, seed, rd in _run_seeds(exp_dir, experiment):
        if not (rd / "summary.json").exists():
            continue
        seeds[run].append(seed)
        rj = _read_optional_json(rd / "run.json") or {}
        for name, keys in fields.items():
            value = next((rj[k] for k in keys if rj.get(k) not in (None, "")), None)
            if value is not None:
                values[run][name].add(str(value))
    return {run: {"seeds": seeds[run], **{name: ", ".join(sorted(v)) for name, v in values[run].items()}}
            for run in experiment.select}


def summary_table(exp_dir: Path, experiment: Experiment) -> pd.DataFrame:
    """Per (run, seed) with a summary.json: ``status`` (completed / diverged / max_updates), ``updates``,
    ``diverged_update`` (the update whose loss diverged, else NaN), ``target_tokens_per_epoch`` and
    ``target_tokens_trained``."""
    cols = ["run", "seed", "status", "updates", "diverged_update", "target_tokens_per_epoch", "target_tokens_trained"]
    rows = []
    for run, seed, rd in _run_seeds(exp_dir, experiment):
        summary = _read_optional_json(rd / "summary.json")
        if summary is None:
            continue
        div = summary.get("diverged") if isinstance(summary.get("diverged"), dict) else {}
        rows.append({"run": run, "seed": seed, "status": str(summary.get("status") or ""),
                     "updates": _num(summary.get("updates")), "diverged_update": _num(div.get("update")),
                     "target_tokens_per_epoch": _num(summary.get("target_tokens_per_epoch")),
                     "target_tokens_trained": _num(summary.get("target_tokens_trained"))})
    return pd.DataFrame(rows, columns=cols)


def milestone_table(run_epochs: pd.DataFrame, split: str, frac: float = 0.95) -> pd.DataFrame:
    """Per run, from the seed means on ``split``: best tokenized BLEU, its epoch and wall-clock, and the
    first epoch (and training wall-clock) at which the run reaches ``frac`` x the best BLEU any run
    reaches. Answers the paper's "sooner" claim in checkpoints AND in time."""
    col = f"{split}_bleu_tok_mean"
    cols = ["run", "best_bleu", "best_epoch", "best_wall_s", "target_bleu", "epoch_to_target", "wall_s_to_target"]
    if run_epochs.empty or col not in run_epochs:
        return pd.DataFrame(columns=cols)
    target = frac * run_epochs[col].max()
    rows = []
    for run, g in run_epochs.groupby("run", sort=False):
        g = g.sort_values("epoch")
        ok = g[g[col].notna()]
        row: dict[str, Any] = {"run": run, "target_bleu": target}
        if len(ok):
            b = ok.loc[ok[col].idxmax()]
            row.update(best_bleu=b[col], best_epoch=int(b["epoch"]), best_wall_s=b["train_wall_s_mean"])
            hit = ok[ok[col] >= target]
            if len(hit):
                h = hit.iloc[0]
                row.update(epoch_to_target=int(h["epoch"]), wall_s_to_target=h["train_wall_s_mean"])
        rows.append(row)
    return pd.DataFrame(rows, columns=cols)


PLATEAU_EPOCHS = 3  # issue 14: a plateau is the last three epochs' validation losses within 1% of each other
PLATEAU_TOLERANCE = 0.01


def plateau_table(run_epochs: pd.DataFrame, split: str) -> pd.DataFrame:
    """Per run, the spread of the seed-mean validation loss over its last ``PLATEAU_EPOCHS`` scored epochs,
    (max - min) / min, and whether it is within ``PLATEAU_TOLERANCE``: says whether a run had stopped
    improving when the budget ended, so that a comparison at the last epoch is not one of unfinished runs."""
    col = f"{split}_loss_base2_mean"
    cols = ["run", "epochs", "loss_first", "loss_last", "spread", "plateau"]
    if run_epochs.empty or col not in run_epochs:
        return pd.DataFrame(columns=cols)
    rows = []
    for run, g in run_epochs.groupby("run", sort=False):
        last = g[g[col].notna()].sort_values("epoch").tail(PLATEAU_EPOCHS)
        row: dict[str, Any] = {"run": run}
        if len(last) == PLATEAU_EPOCHS:
            v = last[col].astype(float)
            spread = (v.max() - v.min()) / v.min()
            row.update(epochs=f"{int(last['epoch'].iloc[0])}-{int(last['epoch'].iloc[-1])}",
                       loss_first=v.iloc[0], loss_last=v.iloc[-1], spread=spread,
                       plateau=bool(spread <= PLATEAU_TOLERANCE))
        rows.append(row)
    return pd.DataFrame(rows, columns=cols)


# ---------------------------------------------------------------------------------------------------
# train.jsonl: scalar curves and per-layer gradient norms

_STACKS = {"enc": "enc", "encoder": "enc", "encoder_layers": "enc", "dec": "dec", "decoder": "dec",
           "decoder_layers": "dec"}
_NOISE = {"layers", "layer", "grad", "grad_norm", "grad_norms", "layer_grad_norms", "norm", "weight"}


def parse_layer_key(key: str) -> tuple[str, float, str]:
    """Map a flattened per-layer gradient-norm key to (stack 'enc'|'dec'|'other', layer index or NaN,
    sublayer name). Accepts any token order: "enc.3.attn", "encoder.self_attn.3" (a list flattened by
    index), "decoder.layers.0.ffn". Unknown shapes keep the whole key as the sublayer, so nothing the
    training stage logs is dropped."""
    tokens = [t for t in key.split(".") if t]
    stack, layer, rest = "other", math.nan, []
    for t in tokens:
        low = t.lower()
        if stack == "other" and low in _STACKS:
            stack = _STACKS[low]
        elif math.isnan(layer) and t.isdigit():
            layer = float(int(t))
        elif low not in _NOISE:
            rest.append(t)
    if stack == "other" or math.isnan(layer):
        return "other", math.nan, key
    return stack, layer, "_".join(rest) or "all"


def _flatten_numeric(d: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Nested dicts/lists of numbers -> {"a.b.0": value}; a list index becomes a key (the layer)."""
    out: dict[str, float] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict):
            out.update(_flatten_numeric(v, key))
        elif isinstance(v, list):  # per-layer lists: the index is the layer
            out.update(_flatten_numeric({str(i): x for i, x in enumerate(v)}, key))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[key] = float(v)
        elif v is None:
            out[key] = math.nan
    return out


@dataclass
class TrainLog:
    """The training logs of all runs: ``curves`` (one row per logged update) and ``layers``
    (one row per logged update and per-layer gradient-norm key)."""

    curves: pd.DataFrame
    layers: pd.DataFrame
    problems: list[str] = field(default_factory=list)


def read_train_logs(exp_dir: Path, experiment: Experiment) -> TrainLog:
    """Read every selected run's train.jsonl. Records with a "kind" other than "step" (attempt, epoch,
    diverged, finished markers) are not updates and are skipped; records without "kind" count as steps.
    Every dict-valued field of a step is taken as per-layer gradient norms (generic: nested dicts and
    per-layer lists are flattened; the exact key names come from the training stage). A resumed run logs
    some updates twice (once per attempt): the last attempt's record wins. Corrupt lines are skipped
    and listed in ``problems`` (a killed writer may leave a partial last line)."""
    curve_rows: list[dict[str, Any]] = []
    layer_rows: list[tuple] = []
    problems: list[str] = []
    for run, seed, rd in _run_seeds(exp_dir, experiment):
        path = rd / "train.jsonl"
        if not path.exists():
            continue
        recs: dict[int, dict[str, Any]] = {}
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                    if isinstance(rec, dict) and rec.get("kind", "step") != "step":
                        continue
                    upd = int(rec["update"])
                except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                    problems.append(f"{path}:{i}: not a JSON record with an 'update'")
                    continue
                recs[upd] = rec  # later attempts overwrite earlier ones
        for upd in sorted(recs):
            rec = recs[upd]
            row = {"run": run, "seed": seed, "update": upd, "epoch": _num(rec.get("epoch"))}
            for k in TRAIN_SCALARS:
                row[k] = _num(rec.get(k))
            curve_rows.append(row)
            for k, v in rec.items():
                if isinstance(v, dict):  # top-level lists (e.g. "lrs", per-update lrs) are not layers
                    for key, val in _flatten_numeric(v).items():
                        stack, layer, sub = parse_layer_key(key)
                        layer_rows.append((run, seed, upd, row["epoch"], key, stack, layer, sub, val))
    curves = pd.DataFrame(curve_rows, columns=["run", "seed", "update", "epoch", *TRAIN_SCALARS])
    layers = pd.DataFrame(layer_rows, columns=["run", "seed", "update", "epoch", "key", "stack", "layer",
                                               "sublayer", "grad_norm"])
    return TrainLog(curves=curves, layers=layers, problems=problems)


def early_window(epochs: pd.DataFrame) -> int:
    """Updates that count as "early in training" for the per-layer gradient study: the first epoch
    (the smallest updates count at epoch 1 over runs and seeds), else 1000 updates. The paper's
    argument is about initialization and warm-up, which the first epoch covers at every scale."""
    e1 = epochs.loc[(epochs["epoch"] == 1) & epochs["updates"].notna(), "updates"]
    return int(e1.min()) if len(e1) and e1.min() > 0 else 1000


def layer_grad_summary(layers: pd.DataFrame, max_update: int) -> pd.DataFrame:
    """Mean / max of each layer key's gradient norm over the logged updates <= ``max_update``,
    per (run, seed), and averaged over seeds (seed = "mean")."""
    cols = ["run", "seed", "stack", "layer", "sublayer", "key", "grad_norm_mean", "grad_norm_max", "n_updates"]
    if layers.empty:
        return pd.DataFrame(columns=cols)
    early = layers[layers["update"] <= max_update]
    g = (early.groupby(["run", "seed", "stack", "layer", "sublayer", "key"], sort=False, dropna=False)["grad_norm"]
         .agg(grad_norm_mean="mean", grad_norm_max="max", n_updates="count").reset_index())
    return g[cols]


def layer_grad_by_epoch(layers: pd.DataFrame) -> pd.DataFrame:
    """Mean gradient norm per (run, seed, epoch, layer key): the whole training, compressed."""
    if layers.empty:
        return pd.DataFrame(columns=["run", "seed", "epoch", "stack", "layer", "sublayer", "key", "grad_norm_mean"])
    return (layers.groupby(["run", "seed", "epoch", "stack", "layer", "sublayer", "key"], sort=False, dropna=False)
            ["grad_norm"].mean().rename("grad_norm_mean").reset_index())


# ---------------------------------------------------------------------------------------------------
# everything at once


@dataclass
class Aggregate:
    """All tables of one experiment (report/tables/)."""

    epochs: pd.DataFrame          # per (run, seed, epoch)
    run_epochs: pd.DataFrame      # per (run, epoch), over seeds
    divergence: pd.DataFrame      # per run
    wallclock: pd.DataFrame       # per (run, seed)
    milestones: pd.DataFrame      # per run
    plateau: pd.DataFrame         # per run
    curves: pd.DataFrame          # per (run, seed, logged update)
    layers: pd.DataFrame          # per (run, seed, logged update, layer key) (not written: can be large)
    layers_early: pd.DataFrame    # per (run, seed, layer key), over the early window
    layers_by_epoch: pd.DataFrame  # per (run, seed, epoch, layer key)
    early_updates: int
    split: str
    problems: list[str]

    def tables(self) -> dict[str, pd.DataFrame]:
        return {
            "epochs": self.epochs, "run_epochs": self.run_epochs, "divergence": self.divergence,
            "wallclock": self.wallclock, "milestones": self.milestones, "plateau": self.plateau,
            "train_curves": self.curves,
            "grad_norms_early": self.layers_early, "grad_norms_by_epoch": self.layers_by_epoch,
        }


def aggregate(exp_dir: Path, experiment: Experiment) -> Aggregate:
    """Read the whole results tree of one experiment into tables."""
    exp_dir = Path(exp_dir)
    epochs = epoch_table(exp_dir, experiment)
    run_epochs = run_epoch_table(epochs)
    log = read_train_logs(exp_dir, experiment)
    early = early_window(epochs)
    split = primary_split(experiment)
    return Aggregate(
        epochs=epochs, run_epochs=run_epochs,
        divergence=divergence_table(exp_dir, experiment, epochs),
        wallclock=wallclock_table(exp_dir, experiment, epochs, log.curves),
        milestones=milestone_table(run_epochs, split),
        plateau=plateau_table(run_epochs, split),
        curves=log.curves, layers=log.layers,
        layers_early=layer_grad_summary(log.layers, early),
        layers_by_epoch=layer_grad_by_epoch(log.layers),
        early_updates=early, split=split, problems=log.problems,
    )


__all__ = [
    "Aggregate", "aggregate", "epoch_table", "run_epoch_table", "divergence_table", "wallclock_table",
    "milestone_table", "plateau_table", "summary_table", "read_train_logs", "parse_layer_key", "layer_grad_summary", "primary_split",
]
