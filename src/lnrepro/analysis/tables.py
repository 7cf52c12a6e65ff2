"""The report's tidy data tables (one job: reshape what aggregate.py read, no statistics).

- ``progress``: per (run, seed, epoch), the training facts at the end of the epoch: updates so far, target
  tokens seen, training wall-clock, the learning rate of the epoch's last update, and a status that says
  where a run diverged.
- ``scores_long``: tables/scores_long.csv, every run x seed x epoch x split x metric as one row (a split only at
  the epochs it is scored at).
- ``run_facts``: tables/runs.csv, every selected run's resolved configuration and execution facts.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from ..config.settings import FACTOR_KEYS, Experiment
from ..train.schedule import lr_at
from . import aggregate as ag

# The training facts of progress(), under the split "train" in scores_long.
TRAIN_METRICS = ("updates", "target_tokens", "train_wall_s", "lr", "status")
TRAIN_SPLIT = "train"
LONG_COLUMNS = ["run", "seed", "epoch", "split", "metric", "value"]


def _status(row: Any, diverged_update: float) -> str:
    """ok / diverged at update N / stopped, else the epoch table's status (not evaluated, missing)."""
    if row.status == ag.STATUS_DIVERGED:
        return row.status if math.isnan(diverged_update) else f"{row.status} at update {int(diverged_update)}"
    return str(row.status)


def _tokens(updates: float, epoch: int, summary: dict[str, Any] | None) -> float:
    """Target tokens seen at the end of ``epoch``: every epoch has the same batches, so k x the tokens of
    one epoch, except where training ended (the last, a partial, a diverged or stopped epoch): the count
    summary.json recorded. NaN while the run has no summary."""
    if summary is None or math.isnan(updates):
        return math.nan
    if updates == summary["updates"]:
        return summary["target_tokens_trained"]
    return epoch * summary["target_tokens_per_epoch"]


def progress(epochs: pd.DataFrame, summaries: pd.DataFrame, experiment: Experiment) -> pd.DataFrame:
    """Per row of aggregate's epoch table: ``updates``, ``target_tokens``, ``train_wall_s``, ``lr`` (from the
    run's schedule at its last update of the epoch; NaN for an epoch not trained) and ``status``."""
    by_seed = {(r["run"], r["seed"]): r for r in summaries.to_dict("records")}
    rows = []
    for row in epochs.itertuples(index=False):
        summary = by_seed.get((row.run, row.seed))
        s = experiment.runs[row.run]
        trained = row.train_status == ag.STATUS_OK and row.updates >= 1
        rows.append({
            "run": row.run, "seed": row.seed, "epoch": row.epoch, "updates": row.updates,
            "target_tokens": _tokens(row.updates, row.epoch, summary), "train_wall_s": row.train_wall_s,
            "lr": lr_at(int(row.updates) - 1, row.epoch, s.schedule, s.optim.lr_max) if trained else math.nan,
            "status": _status(row, summary["diverged_update"] if summary else math.nan),
        })
    return pd.DataFrame(rows, columns=["run", "seed", "epoch", *TRAIN_METRICS])


def _cell(value: Any) -> Any:
    """A value of the long table: text as text, whole numbers (counts) as int, others as floats with the
    6 significant digits of every other table (an object column is written unformatted)."""
    if isinstance(value, str):
        return value
    v = float(value)
    if math.isnan(v):
        return v
    return int(v) if v.is_integer() and abs(v) < 2 ** 53 else float(f"{v:.6g}")


def scored_rows(epochs: pd.DataFrame, experiment: Experiment, split: str) -> pd.DataFrame:
    """The rows of an epoch table (run, epoch) at which their run scores ``split`` (``Experiment.scored``: the
    epochs are each run's own)."""
    keep = [int(ep) in experiment.scored(run, split) for run, ep in zip(epochs["run"], epochs["epoch"])]
    return epochs.loc[pd.Series(keep, index=epochs.index, dtype=bool)]


def scores_long(epochs: pd.DataFrame, prog: pd.DataFrame, experiment: Experiment) -> pd.DataFrame:
    """One row per (run, seed, epoch, split, metric): every split's scores (tokenized BLEU, sacreBLEU, loss
    and NLL in nats and base 2) at the epochs its run scores it at (``Experiment.scored``: NaN where that scoring
    has no result: diverged, not yet run) and, under split "train", the training facts."""
    keys = ["run", "seed", "epoch"]
    splits = experiment.eval.splits
    scores = [scored_rows(epochs, experiment, sp)[keys + [f"{sp}_{m}" for m in ag.SPLIT_METRICS]]
              .rename(columns={f"{sp}_{m}": m for m in ag.SPLIT_METRICS}).assign(split=sp) for sp in splits]
    parts = [s.melt(id_vars=keys + ["split"], var_name="metric") for s in scores]
    parts.append(prog.assign(split=TRAIN_SPLIT).melt(id_vars=keys + ["split"], var_name="metric"))
    long = pd.concat(parts, ignore_index=True)
    long["value"] = long["value"].map(_cell).astype(object)
    # runs in select order (the epoch table's), splits as configured then "train", metrics as listed
    rank = {"run": dict.fromkeys(epochs["run"]), "split": (*splits, TRAIN_SPLIT),
            "metric": (*ag.SPLIT_METRICS, *TRAIN_METRICS)}
    rank = {col: {v: i for i, v in enumerate(values)} for col, values in rank.items()}
    long = long.sort_values(keys + ["split", "metric"], kind="stable",
                            key=lambda c: c.map(rank[c.name]) if c.name in rank else c)
    return long[LONG_COLUMNS].reset_index(drop=True)


def grid_of(experiment: Experiment, run: str) -> str:
    """The grids that generated ``run`` (comma-separated), "" for a run of its own."""
    return ", ".join(name for name, g in experiment.grids.items() if run in g.runs)


def run_facts(experiment: Experiment, execution: dict[str, dict[str, Any]], wallclock: pd.DataFrame) -> pd.DataFrame:
    """Per selected run: the grid it came from, every resolved setting (dotted keys, the studied factors
    first), the seeds configured and trained, where they ran (device, torch, threads, precision:
    aggregate.execution_facts) and the seed means of training wall-clock, seconds per update and target
    tokens per second."""
    means = wallclock.groupby("run")[["train_wall_s", "s_per_update", "tokens_per_s"]].mean()
    rows = []
    for run in experiment.select:
        flat, facts = experiment.runs[run].flat(), execution.get(run, {})
        keys = [*FACTOR_KEYS.values(), *(k for k in flat if k not in FACTOR_KEYS.values())]
        rows.append({
            "run": run, "grid": grid_of(experiment, run), **{k: setting_cell(flat[k]) for k in keys},
            "seeds": " ".join(map(str, experiment.seeds_of(run))),
            "seeds_trained": " ".join(map(str, facts.get("seeds", []))),
            **{k: facts.get(k, "") for k in ("device", "torch", "threads", "precision")},
            **{k: means[k].get(run, math.nan) for k in means.columns},
        })
    return pd.DataFrame(rows)


def setting_cell(v: Any) -> Any:
    """A setting as one CSV cell: lists and tuples space-separated (decay_epochs "8"), the rest as is."""
    return " ".join(map(str, v)) if isinstance(v, (list, tuple)) else v
