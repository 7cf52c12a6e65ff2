"""Read an experiment's results tree once (one job: the report's only reader of run outputs).

For every selected run and seed, under ``results/{exp}/runs/{run}/seed{seed}/`` (``lnrepro.paths.Paths``): the
epoch manifests, the score files and ``summary.json`` as their typed records (``lnrepro.records``), ``run.json``
and ``train.jsonl``; and the gradient-at-initialization tables under ``analysis/``. A file not written yet is
absent (None), never a crash, because the report must render for a partly finished experiment too; a corrupt
file is an error naming it and its key, and an unreadable training-log line is listed in ``problems``.
``run.json`` is read as its mapping, so that a results tree from an earlier version (an older run.json: no
device name, no torch version) still reports where it ran.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd

from ..config.settings import Experiment
from ..errors import LnReproError
from ..io import open_text, read_json, text_exists
from ..paths import Paths
from ..records import CheckpointScores, EpochManifest, Record, RunSummary
from .gradinit import CSV_COLUMNS as GRADINIT_COLUMNS
from .gradinit_fit import FIT_COLUMNS

_EPOCH_FILE = re.compile(r"^epoch(\d+)\.json$")
R = TypeVar("R", bound=Record)


@dataclass(frozen=True)
class SeedResults:
    """What one seed of one run wrote: each file as its JSON object (None while absent), the training log's
    update records (a resumed run's repeated updates: the last attempt's) and every update's learning rate."""

    run: str
    seed: int
    epochs: int  # the epochs to tabulate: the configured count, or more when more are on disk
    manifests: dict[int, EpochManifest | None]  # epoch -> epochs/epochNNN.json
    scores: dict[int, CheckpointScores | None]  # epoch -> eval/epochNNN.json
    summary: RunSummary | None
    run_info: dict[str, Any] | None  # run.json's mapping
    steps: dict[int, dict[str, Any]]  # update -> its train.jsonl step record, in update order
    lrs: dict[int, float]  # update -> learning rate (the step records' "lrs"), in update order
    problems: list[str] = field(default_factory=list)  # unreadable train.jsonl lines


@dataclass(frozen=True)
class Results:
    """The whole results tree of one experiment, read once."""

    seeds: list[SeedResults]  # in ``select`` order, then seed order
    gradinit: pd.DataFrame | None  # analysis/gradinit.csv (+ gradinit_after_warmup.csv); None when not computed
    gradinit_fit: pd.DataFrame | None  # analysis/gradinit_fit.csv
    gradinit_missing: str  # why gradinit is None ("" when it is not)

    @property
    def problems(self) -> list[str]:
        return [p for s in self.seeds for p in s.problems]

    def unfinished(self, experiment: Experiment) -> list[str]:
        """The units (run and seed) not finished and fully scored: no summary.json, or a score file of a scored
        epoch absent; a study published in parts is incomplete until every unit is stored."""
        def scored(run: str) -> set[int]:
            last = experiment.last_of(run)
            return {ep for epochs in experiment.eval.groups(last).values() for ep in epochs}

        return [f"{s.run} seed {s.seed}" for s in self.seeds
                if s.summary is None or any(s.scores.get(ep) is None for ep in scored(s.run))]


def _optional_json(path: Path) -> dict[str, Any] | None:
    """A JSON file that may not exist yet (the stage has not run); a corrupt one is still an error."""
    if not path.exists():
        return None
    obj = read_json(path)
    if not isinstance(obj, dict):
        raise LnReproError(f"{path}: expected a JSON object")
    return obj


def _optional_record(cls: type[R], path: Path) -> R | None:
    """A record whose stage may not have run yet (None); a corrupt one is still an error."""
    return cls.read(path) if path.exists() else None


def _epochs_on_disk(folder: Path) -> set[int]:
    if not folder.is_dir():
        return set()
    return {int(m.group(1)) for p in folder.iterdir() if (m := _EPOCH_FILE.match(p.name))}


def _train_log(path: Path) -> tuple[dict[int, dict[str, Any]], dict[int, float], list[str]]:
    """train.jsonl's step records by update and every update's learning rate, each from the last attempt that
    logged it, and the unreadable lines. Records with a "kind" other than "step" (attempt, epoch, diverged,
    finished markers) are not updates; records without "kind" count as steps. A store's ``train.jsonl.gz`` is read
    where the plain file is absent (``io.open_text``). A step's ``lrs`` are the learning
    rates of the updates since the previous step record, its own last."""
    steps: dict[int, dict[str, Any]] = {}
    lrs: dict[int, float] = {}
    problems: list[str] = []
    if not text_exists(path):
        return steps, lrs, problems
    with open_text(path) as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                if isinstance(rec, dict) and rec.get("kind", "step") != "step":
                    continue
                update = int(rec["update"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                problems.append(f"{path}:{i}: not a JSON record with an 'update'")  # a killed writer's last line
                continue
            steps[update] = rec  # later attempts overwrite earlier ones
            if isinstance(rec.get("lrs"), list):
                try:
                    values = [float(v) for v in rec["lrs"]]
                except (TypeError, ValueError):
                    continue
                lrs.update(zip(range(update - len(values) + 1, update + 1), values))
    return dict(sorted(steps.items())), dict(sorted(lrs.items())), problems


def _read_seed(exp_dir: Path, paths: Paths, experiment: Experiment, run: str, seed: int) -> SeedResults:
    def local(path: str) -> Path:  # a path of the layout, under exp_dir (the report may read a copied tree)
        return exp_dir / Path(path).relative_to(paths.root)

    folder = local(paths.run_dir(run, seed))
    manifest, score = (local(p(run, seed, "000")).parent for p in (paths.epoch_manifest, paths.score))
    # epochs on disk beyond the configured count still show (a results tree from an earlier config)
    n = max([experiment.runs[run].train.epochs, *_epochs_on_disk(manifest), *_epochs_on_disk(score)])
    steps, lrs, problems = _train_log(folder / "train.jsonl")
    return SeedResults(
        run=run, seed=seed, epochs=n,
        manifests={ep: _optional_record(EpochManifest, local(paths.epoch_manifest(run, seed, f"{ep:03d}")))
                   for ep in range(1, n + 1)},
        scores={ep: _optional_record(CheckpointScores, local(paths.score(run, seed, f"{ep:03d}")))
                for ep in range(1, n + 1)},
        summary=_optional_record(RunSummary, local(paths.summary(run, seed))),
        run_info=_optional_json(folder / "run.json"),
        steps=steps, lrs=lrs, problems=problems)


def _analysis_csv(path: Path, columns: list[str]) -> pd.DataFrame | None:
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


def _read_gradinit(exp_dir: Path, paths: Paths, experiment: Experiment
                   ) -> tuple[pd.DataFrame | None, pd.DataFrame | None, str]:
    """analysis/gradinit.csv with the rows of gradinit_after_warmup.csv appended when the experiment measures
    one (its after_warmup_run is selected) and it exists, and gradinit_fit.csv (None when absent); without
    gradinit.csv (None, None, the reason)."""
    def local(path: str) -> Path:
        return exp_dir / Path(path).relative_to(paths.root)

    gi = _analysis_csv(local(paths.gradinit_csv), GRADINIT_COLUMNS)
    if gi is None:
        return None, None, f"not computed (no {Path(paths.gradinit_csv).relative_to(paths.root)})"
    if experiment.analysis.gradinit.after_warmup_run in experiment.runs:
        after = _analysis_csv(local(paths.gradinit_after_warmup_csv), GRADINIT_COLUMNS)
        gi = gi if after is None else pd.concat([gi, after], ignore_index=True)
    return gi, _analysis_csv(local(paths.gradinit_fit_csv), FIT_COLUMNS), ""


def read_results(exp_dir: Path, experiment: Experiment) -> Results:
    """Every selected run's and seed's outputs and the gradinit tables under ``exp_dir`` (results/{exp})."""
    exp_dir, paths = Path(exp_dir), Paths(experiment.name)
    seeds = [_read_seed(exp_dir, paths, experiment, run, seed)
             for run in experiment.select for seed in experiment.seeds_of(run)]
    return Results(seeds, *_read_gradinit(exp_dir, paths, experiment))
