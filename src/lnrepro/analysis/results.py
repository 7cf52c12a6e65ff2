"""Read an experiment's results tree once (one job: the report's only reader of run outputs).

For every selected run and seed, under ``results/{exp}/runs/{run}/seed{seed}/`` (``lnrepro.paths.Paths``): the
epoch manifests, the score files and ``summary.json`` as their typed records (``lnrepro.records``), ``run.json``
and ``train.jsonl``; and the gradient-at-initialization tables under ``analysis/``. Each run folder is first
checked by ``lnrepro.integrity.check_run`` against the experiment (every record this run's, seed's, epoch's and
settings', a finished training's log whole against its summary) and each table by ``check_table`` against the
gradinit settings: a record that fails is an error naming the file and the way out, never a silent input. A file
not written yet is absent (None), never a crash, because the report must render for a partly finished
experiment too. ``run.json`` is read as its mapping, so that a results tree from an earlier version (an older
run.json: no device name, no torch version) still reports where it ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..config.settings import Experiment
from ..errors import LnReproError
from ..integrity import check_gradinit, check_gradinit_fit, check_run, read_after_warmup, read_table, rewrite
from ..io import read_json
from ..paths import Paths
from ..records import GRADINIT_COLUMNS, GRADINIT_FIT_COLUMNS, CheckpointScores, EpochManifest, RunSummary



@dataclass(frozen=True)
class SeedResults:
    """What one seed of one run wrote: each file as its JSON object (None while absent), the training log's
    update records (a resumed run's repeated updates: the last attempt's) and every update's learning rate."""

    run: str
    seed: int
    epochs: int  # the run's configured epochs (records beyond them are refused: lnrepro.integrity)
    manifests: dict[int, EpochManifest | None]  # epoch -> epochs/epochNNN.json
    scores: dict[int, CheckpointScores | None]  # epoch -> eval/epochNNN.json
    summary: RunSummary | None
    run_info: dict[str, Any] | None  # run.json's mapping
    steps: dict[int, dict[str, Any]]  # update -> its train.jsonl step record, in update order
    lrs: dict[int, float]  # update -> learning rate (the step records' "lrs"), in update order


@dataclass(frozen=True)
class Results:
    """The whole results tree of one experiment, read once."""

    seeds: list[SeedResults]  # in ``select`` order, then seed order
    gradinit: pd.DataFrame | None  # analysis/gradinit.csv + each seed's gradinit_after_warmup.csv; None: not computed
    gradinit_fit: pd.DataFrame | None  # analysis/gradinit_fit.csv
    gradinit_missing: str  # why gradinit is None ("" when it is not)

    def unfinished(self, experiment: Experiment) -> list[str]:
        """The units (run and seed) not finished and fully scored: no summary.json, or a score file of a scored
        epoch absent; a study published in parts is incomplete until every unit is stored."""
        def scored(run: str) -> set[int]:
            last = experiment.last_of(run)
            return {ep for epochs in experiment.eval.groups(last).values() for ep in epochs}

        return [f"{s.run} seed {s.seed}" for s in self.seeds
                if s.summary is None or any(s.scores.get(ep) is None for ep in scored(s.run))]


def _optional_json(path: Path) -> dict[str, Any] | None:
    """A JSON file that may not exist yet (the stage has not run); a corrupt one is still an error, naming the
    command that writes it again."""
    if not path.exists():
        return None
    try:
        obj = read_json(path)
    except LnReproError as e:
        raise LnReproError(f"{e}; {rewrite(path)}") from e
    if not isinstance(obj, dict):
        raise LnReproError(f"{path}: expected a JSON object; {rewrite(path)}")
    return obj


def _read_seed(exp_dir: Path, paths: Paths, experiment: Experiment, run: str, seed: int) -> SeedResults:
    def local(path: str) -> Path:  # a path of the layout, under exp_dir (the report may read a copied tree)
        return exp_dir / Path(path).relative_to(paths.root)

    folder = local(paths.run_dir(run, seed))
    check = check_run(folder, run, seed, experiment=experiment)  # reads each record once, whole
    n, log = experiment.last_of(run), check.log
    return SeedResults(
        run=run, seed=seed, epochs=n,
        manifests={ep: check.manifests.get(ep) for ep in range(1, n + 1)},
        scores={ep: check.scores.get(ep) for ep in range(1, n + 1)},
        summary=check.summary,
        run_info=_optional_json(folder / "run.json"),
        steps=log.steps if log else {}, lrs=log.lrs if log else {})


def _read_gradinit(exp_dir: Path, paths: Paths, experiment: Experiment
                   ) -> tuple[pd.DataFrame | None, pd.DataFrame | None, str]:
    """analysis/gradinit.csv with the rows of each seed's gradinit_after_warmup.csv appended when the experiment
    measures one (its after_warmup_run is selected; a seed's table, an output of that unit, where it exists), and
    gradinit_fit.csv (None when absent), each checked whole against the gradinit settings (a seed's table: that
    seed's); without gradinit.csv (None, None, the reason)."""
    def local(path: str) -> Path:
        return exp_dir / Path(path).relative_to(paths.root)

    gi = read_table(local(paths.gradinit_csv), GRADINIT_COLUMNS)
    if gi is None:
        return None, None, f"not computed (no {Path(paths.gradinit_csv).relative_to(paths.root)})"
    check_gradinit(local(paths.gradinit_csv), gi, experiment)
    run = experiment.after_warmup_run
    for seed in experiment.seeds_of(run) if run else ():
        after = read_after_warmup(local(paths.gradinit_after_warmup_csv(run, seed)), experiment, seed)
        if after is not None:
            gi = pd.concat([gi, after], ignore_index=True)
    fit = read_table(local(paths.gradinit_fit_csv), GRADINIT_FIT_COLUMNS)
    if fit is not None:
        check_gradinit_fit(local(paths.gradinit_fit_csv), fit, experiment, norms=set(gi["norm"]))
    return gi, fit, ""


def read_results(exp_dir: Path, experiment: Experiment) -> Results:
    """Every selected run's and seed's outputs and the gradinit tables under ``exp_dir`` (results/{exp}). A folder
    that does not exist is an error (a wrong path is not an experiment without data yet)."""
    exp_dir, paths = Path(exp_dir), Paths(experiment.name)
    if not exp_dir.is_dir():
        raise LnReproError(f"{exp_dir}: no such experiment folder (expected results/{experiment.name}, where the "
                           "workflow writes this experiment: check the path, or run snakemake first)")
    seeds = [_read_seed(exp_dir, paths, experiment, run, seed)
             for run in experiment.select for seed in experiment.seeds_of(run)]
    return Results(seeds, *_read_gradinit(exp_dir, paths, experiment))
