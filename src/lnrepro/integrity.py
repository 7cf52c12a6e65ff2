"""Whose a record is and whether it is whole: checked once, here, before any record is reported or published.

``check_run(run_dir, run, seed)`` checks a run folder's records (``lnrepro.records``) against each other and
against the run they are read for: every record names this run and seed, every epoch manifest and ``run.json``
this run's config digest (``config_sha256``: the experiment's, when given, else ``config.json``'s), every score
file the manifest of its epoch (status, updates, weights digest), no manifest or score file lies beyond the
run's configured epochs, and a finished training's ``train.jsonl`` and manifests are whole against what
``summary.json`` says was trained. With the ``experiment`` (``lnrepro.config.settings.Experiment``), each score
file's splits and decoding are also checked against the experiment's eval settings, and its scoring slice's
digest against the slice the experiment resolves (the class of check the trainer makes of ``config.json``).
A folder still training or not yet scored is not an error (``RunCheck`` says what is there); a record that is
not this run's, or contradicts the others, is one ``LnReproError`` naming the file, what is wrong and the way
out.

``check_table(path, df, keys)`` checks that a study-level table holds every combination of the values its
settings name, each with as many rows as the others of its kind; ``check_gradinit`` and ``check_gradinit_fit``
apply it to the gradient-at-initialization tables with the experiment's ``analysis.gradinit``.

Torch-free: the report and ``lnrepro publish`` call it.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, TypeVar

import pandas as pd

from .config.settings import Experiment
from .errors import LnReproError
from .io import file_sha256, open_text, read_json, text_exists
from .norms import NORMS
from .paths import RunFolder
from .records import GRADINIT_COLUMNS, CheckpointScores, EpochManifest, Record, RunStatus, RunSummary

R = TypeVar("R", bound=Record)

__all__ = ["RunCheck", "TrainLog", "check_gradinit", "check_gradinit_fit", "check_run", "check_table",
           "read_train_log"]

_EPOCH_JSON = re.compile(r"^epoch(\d{3})\.json$")
# the decoding settings a score file records per split that the experiment's eval settings decide
_DECODE_KEYS = ("beam", "lenpen", "max_len_a", "max_len_b", "precision")


@dataclass(frozen=True)
class RunCheck:
    """What ``check_run`` verified of one run folder.

    config_sha256: the config digest every record was checked against (None: no config.json, run.json or
    experiment to take it from). epochs: the configured epochs (None when nothing says). epochs_trained: the
    epochs whose manifest is on disk; epochs_ok: those of them with weights (status ok). epochs_scored: the
    epochs with a score file. training_complete: ``summary.json`` is on disk (training ended: completed,
    diverged or at max_updates) and its log and manifests are whole. status: the summary's status, or None.
    manifests, scores, summary, log: the records as checked, by epoch (read once: the report takes them from
    here)."""

    run: str
    seed: int
    config_sha256: str | None
    epochs: int | None
    epochs_trained: tuple[int, ...]
    epochs_ok: tuple[int, ...]
    epochs_scored: tuple[int, ...]
    training_complete: bool
    status: RunStatus | None
    manifests: dict[int, EpochManifest]
    scores: dict[int, CheckpointScores]
    summary: RunSummary | None
    log: TrainLog | None


@dataclass(frozen=True)
class TrainLog:
    """``train.jsonl`` read whole: its step records by update (a resumed run's repeated updates: the last
    attempt's), every update's learning rate, its epoch records by epoch and its ``finished`` record."""

    steps: dict[int, dict[str, Any]]
    lrs: dict[int, float]
    epochs: dict[int, dict[str, Any]]
    finished: dict[str, Any] | None


def _retrain_rule(experiment: Experiment | None, run: str) -> str:
    """The training rule of ``run`` (``train_run``, ``train_run_e{E}`` where the selected runs' lengths differ)."""
    if experiment is not None and len(experiment.lengths) > 1:
        return f"train_run_e{experiment.last_of(run)}"
    return "train_run"


def _rewrite_outputs(path: Path, experiment: Experiment | None, run: str) -> str:
    """The way out for a damaged declared output of training: its finished state writes them again."""
    return (f"write the training's outputs again from its finished state (byte for byte, without training): "
            f"snakemake --configfile ... --forcerun {_retrain_rule(experiment, run)}, or delete {path} and run "
            "snakemake again")


def rewrite(path: str | Path) -> str:
    """The way out of a damaged output of the workflow: the command that writes it again (a plain rerun sees it
    up to date)."""
    return f"write it again: snakemake --cores all --forcerun {path} (with your --configfile)"


def _read(cls: type[R], path: Path, way_out: str) -> R:
    """A record read whole; one that does not parse is an error naming ``way_out``."""
    try:
        return cls.read(path)
    except LnReproError as e:
        raise LnReproError(f"{e}; {way_out}") from e


def read_train_log(path: str | Path) -> TrainLog:
    """``train.jsonl``'s records; a line that is not a JSON object (a cut or damaged file: training writes it
    whole, from ``state/``) is an error naming the line, and so is any record after the ``finished`` record (training
    writes that one last: a record after it was added to the log later). Records without ``kind`` count as steps."""
    path = Path(path)
    steps: dict[int, dict[str, Any]] = {}
    lrs: dict[int, float] = {}
    epochs: dict[int, dict[str, Any]] = {}
    finished, finished_line = None, 0
    with open_text(path) as f:  # a store's train.jsonl.gz where the plain file is absent
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            if finished is not None:
                raise LnReproError(f"{path}:{i}: a record after the finished record (line {finished_line}), which "
                                   "training writes last: the log was changed after training wrote it")
            try:
                rec = json.loads(line)
                kind = rec.get("kind", "step")
                if kind == "step":
                    update = int(rec["update"])
                    values = [float(v) for v in rec["lrs"]] if isinstance(rec.get("lrs"), list) else []
                elif kind == "epoch":
                    epochs[int(rec["epoch"])] = rec
                    continue
                else:
                    if kind == "finished":
                        finished, finished_line = rec, i
                    continue
            except (json.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as e:
                raise LnReproError(f"{path}:{i}: not a whole training-log record ({e}): the log was cut or "
                                   "damaged after training wrote it") from e
            steps[update] = rec  # later attempts overwrite earlier ones
            lrs.update(zip(range(update - len(values) + 1, update + 1), values))
    return TrainLog(dict(sorted(steps.items())), dict(sorted(lrs.items())), epochs, finished)


def _epoch_files(folder: Path) -> dict[int, Path]:
    if not folder.is_dir():
        return {}
    return dict(sorted((int(m.group(1)), p) for p in folder.iterdir() if (m := _EPOCH_JSON.match(p.name))))


def _belongs(where: Path, record_run: str | None, record_seed: int | None, run: str, seed: int, way_out: str) -> None:
    if (record_run, record_seed) != (run, seed):
        raise LnReproError(f"{where}: the record of run {record_run} seed {record_seed}, read as run {run} seed "
                           f"{seed}: a file copied from another run folder; {way_out}")


def _config_reference(folder: RunFolder, run: str, seed: int, config_sha256: str | None,
                      experiment: Experiment | None) -> str | None:
    if config_sha256 is not None:
        return config_sha256
    if experiment is not None:
        return experiment.run_config(run, seed).sha256()
    if Path(folder.config).is_file():
        return file_sha256(folder.config)
    return None


def _configured_epochs(folder: RunFolder, run: str, experiment: Experiment | None) -> int | None:
    if experiment is not None:
        return experiment.last_of(run)
    if Path(folder.config).is_file():
        config = read_json(folder.config)
        try:
            return int(config["train"]["epochs"])
        except (KeyError, TypeError, ValueError) as e:
            raise LnReproError(f"{folder.config}: no train.epochs ({e})") from e
    return None


def _refuse_beyond(folder: RunFolder, epochs: int, manifests: dict[int, Path], scores: dict[int, Path]) -> None:
    """Manifests or score files of epochs after the configured last: left by an earlier, longer training."""
    stale = sorted({ep for ep in (*manifests, *scores) if ep > epochs})
    if not stale:
        return
    files = [str(p) for ep in stale for p in (manifests.get(ep), scores.get(ep)) if p is not None]
    hyps = [str(p) for ep in stale for p in sorted(Path(folder.score(ep)).parent.glob(f"epoch{ep:03d}.*.hyp"))]
    raise LnReproError(
        f"{folder.root}: records of epoch(s) {', '.join(map(str, stale))} beyond the run's {epochs} configured "
        f"epochs, left by an earlier training of other settings: {', '.join(files)}. They are not this run's; "
        f"delete them: rm {' '.join(files + hyps)}")


def _check_manifest(path: Path, ep: int, m: EpochManifest, run: str, seed: int, config: str | None,
                    experiment: Experiment | None) -> None:
    retrain = (f"train the run again: snakemake --configfile ... --forcerun {_retrain_rule(experiment, run)}, or "
               f"delete {path}")
    _belongs(path, m.run, m.seed, run, seed, retrain)
    if m.epoch != ep:
        raise LnReproError(f"{path}: the manifest of epoch {m.epoch}, under the name of epoch {ep}: {retrain}")
    if config is not None and m.config_sha256 is not None and m.config_sha256 != config:
        raise LnReproError(f"{path}: trained from another config.json (config_sha256 {m.config_sha256[:12]}..., the "
                           f"run's is {config[:12]}...): left by a training of other settings; {retrain}")


def _check_summary(folder: RunFolder, s: RunSummary, run: str, seed: int, epochs: int | None,
                   manifests: dict[int, EpochManifest], experiment: Experiment | None) -> None:
    path = Path(folder.summary)
    way_out = _rewrite_outputs(path, experiment, run)
    _belongs(path, s.run, s.seed, run, seed, way_out)
    if epochs is not None and s.epochs != epochs:
        raise LnReproError(f"{path}: a training of {s.epochs} epochs, but the run is configured for {epochs}: "
                           f"left by a training of other settings; train the run again: snakemake --configfile ... "
                           f"--forcerun {_retrain_rule(experiment, run)}")
    missing = [folder.epoch_manifest(ep) for ep in range(1, s.epochs + 1) if ep not in manifests]
    if missing:
        raise LnReproError(f"{', '.join(missing)}: missing, though {path} says the training ended ({s.status.value}, "
                           f"{s.updates} updates): {way_out}")
    last = manifests[s.epochs]
    if last.updates != s.updates:
        raise LnReproError(f"{folder.epoch_manifest(s.epochs)}: {last.updates} updates at the end of training, but "
                           f"{path} records {s.updates}: the two are of different trainings; {way_out}")


def _check_log(folder: RunFolder, s: RunSummary, run: str, experiment: Experiment | None) -> TrainLog:
    """A finished training's train.jsonl must hold what its summary says was trained: every completed epoch's
    record, the last logged update and the finished record at the summary's updates."""
    path = Path(folder.train_jsonl)
    way_out = _rewrite_outputs(path, experiment, run)
    if not text_exists(path):
        raise LnReproError(f"{path}: missing, though {folder.summary} says the training ended: {way_out}")
    try:
        log = read_train_log(path)
    except LnReproError as e:
        raise LnReproError(f"{e}; {way_out}") from e
    last_step = max(log.steps, default=None)
    epochs = sorted(log.epochs)
    whole = (log.finished is not None and log.finished.get("update") == s.updates
             and all(ep in log.epochs for ep in range(1, s.epochs_completed + 1))
             and (s.final_loss_update is None or last_step == s.final_loss_update))
    if not whole:
        raise LnReproError(
            f"{path}: incomplete: its step records end at update {last_step}, its epoch records at epoch "
            f"{epochs[-1] if epochs else None}, {'with' if log.finished else 'without'} the finished record, but "
            f"{folder.summary} records {s.updates} updates, {s.epochs_completed} epochs completed and the last "
            f"logged update {s.final_loss_update}: its curves would stop early; {way_out}")
    return log


def _check_score(path: Path, ep: int, sc: CheckpointScores, manifest: EpochManifest | None, run: str, seed: int,
                 experiment: Experiment | None, folder: RunFolder) -> None:
    rescore = (f"delete {path} and its hypotheses (rm {path.parent}/epoch{ep:03d}.*) and run snakemake again to "
               "score the checkpoint")
    _belongs(path, sc.run, sc.seed, run, seed, rescore)
    if sc.epoch != ep:
        raise LnReproError(f"{path}: the scores of epoch {sc.epoch}, under the name of epoch {ep}: {rescore}")
    if manifest is None:
        raise LnReproError(f"{path}: scores a checkpoint with no manifest ({folder.epoch_manifest(ep)}): left by "
                           f"an earlier training; {rescore}")
    mine = (manifest.status, manifest.updates, manifest.sha256)
    theirs = (sc.status, sc.updates, sc.weights_sha256)
    if mine != theirs:
        raise LnReproError(
            f"{path}: scores another checkpoint than {folder.epoch_manifest(ep)} (status, updates, weights sha256: "
            f"{sc.status.value}, {sc.updates}, {str(sc.weights_sha256)[:12]}... against the manifest's "
            f"{manifest.status.value}, {manifest.updates}, {str(manifest.sha256)[:12]}...): from another or "
            f"an earlier training; {rescore}")
    if experiment is not None:
        _check_scoring_settings(path, ep, sc, run, experiment, rescore)


def _check_scoring_settings(path: Path, ep: int, sc: CheckpointScores, run: str, experiment: Experiment,
                            rescore: str) -> None:
    """The score file's splits, decoding and scoring slice are the ones the experiment's eval settings give."""
    due = experiment.eval.due(ep, experiment.last_of(run))
    if set(sc.splits) != set(due):
        raise LnReproError(f"{path}: scores the splits {', '.join(sc.splits)}, but the experiment scores "
                           f"{', '.join(due) or 'none'} at epoch {ep} (eval.splits.*.epochs): {rescore}")
    slice_ = experiment.eval.scoring(due)
    for split, decoding in slice_.splits.items():
        used = sc.decode.get(split, {})
        for key in _DECODE_KEYS:
            if used.get(key) != getattr(decoding, key):
                raise LnReproError(
                    f"{path}: {split} decoded with {key} {used.get(key)!r}, but the experiment's eval settings say "
                    f"{getattr(decoding, key)!r} (eval.splits.{split}.{key}): the scoring slice was edited by hand "
                    f"or written from another configuration. Delete the slice (results/{experiment.name}/"
                    f"eval*.json) so that snakemake writes it again from the configuration and rescores, or "
                    f"{rescore}")
    recorded = {name: digest for name, digest in (sc.inputs_sha256 or {}).items()
                if name.startswith("eval") and name.endswith(".json")}
    expected = slice_.sha256()
    for name, digest in recorded.items():
        if digest != expected:
            raise LnReproError(
                f"{path}: scored with a {name} (sha256 {digest[:12]}...) that is not the scoring slice the "
                f"experiment's eval settings give ({expected[:12]}...): edited by hand or written from another "
                f"configuration. Delete results/{experiment.name}/{name} so that snakemake writes it again and "
                "rescores its checkpoints")


def check_run(run_dir: str | Path, run: str, seed: int, *, config_sha256: str | None = None,
              experiment: Experiment | None = None) -> RunCheck:
    """Check every record of the run folder ``run_dir`` against ``run`` and ``seed`` and against each other.

    config_sha256: the digest of the config.json the run's records must have been trained from (default: the
    experiment's resolution of the run, else the folder's config.json). experiment: also check the score
    files against its eval settings and the epochs against its run length. Returns what is there; raises
    ``LnReproError`` for a record that is not this run's or contradicts the others."""
    folder = RunFolder(str(run_dir))
    config = _config_reference(folder, run, seed, config_sha256, experiment)
    epochs = _configured_epochs(folder, run, experiment)
    manifest_files = _epoch_files(Path(folder.epoch_manifest(1)).parent)
    score_files = _epoch_files(Path(folder.score(1)).parent)
    if epochs is not None:
        _refuse_beyond(folder, epochs, manifest_files, score_files)

    run_json = Path(folder.run_json)
    if run_json.is_file():
        info = read_json(run_json)
        way_out = _rewrite_outputs(run_json, experiment, run)
        if not isinstance(info, dict):
            raise LnReproError(f"{run_json}: expected a JSON object; {way_out}")
        _belongs(run_json, info.get("run"), info.get("seed"), run, seed, way_out)
        if config is not None and info.get("config_sha256") != config:
            raise LnReproError(f"{run_json}: trained from another config.json (config_sha256 "
                               f"{str(info.get('config_sha256'))[:12]}..., the run's is {config[:12]}...): {way_out}")

    manifests = {ep: _read(EpochManifest, p, _rewrite_outputs(p, experiment, run)) for ep, p in manifest_files.items()}
    for ep, m in manifests.items():
        _check_manifest(manifest_files[ep], ep, m, run, seed, config, experiment)
    data = {json.dumps(m.data_sha256, sort_keys=True) for m in manifests.values() if m.data_sha256 is not None}
    if len(data) > 1:
        raise LnReproError(f"{folder.root}/epochs: manifests trained on different data (data_sha256 differs): "
                           f"of different trainings; train the run again: snakemake --configfile ... --forcerun "
                           f"{_retrain_rule(experiment, run)}")

    summary_path = Path(folder.summary)
    summary = (_read(RunSummary, summary_path, _rewrite_outputs(summary_path, experiment, run))
               if summary_path.is_file() else None)
    log_path = Path(folder.train_jsonl)
    if summary is not None:
        _check_summary(folder, summary, run, seed, epochs, manifests, experiment)
        log = _check_log(folder, summary, run, experiment)
    else:  # still training: the log so far
        log = read_train_log(log_path) if text_exists(log_path) else None

    scores = {ep: _read(CheckpointScores, p, rewrite(p)) for ep, p in score_files.items()}
    for ep, sc in scores.items():
        _check_score(score_files[ep], ep, sc, manifests.get(ep), run, seed, experiment, folder)

    return RunCheck(run=run, seed=seed, config_sha256=config, epochs=epochs, epochs_trained=tuple(manifests),
                    epochs_ok=tuple(ep for ep, m in manifests.items() if m.status == RunStatus.OK),
                    epochs_scored=tuple(score_files), training_complete=summary is not None,
                    status=summary.status if summary is not None else None, manifests=manifests, scores=scores,
                    summary=summary, log=log)


def check_table(path: str | Path, df: pd.DataFrame, keys: Mapping[str, Iterable[Any]], *, rule: str,
                per: Iterable[str] = (), filled: Iterable[str] = ()) -> None:
    """Refuse a study-level table that is not whole: every combination of ``keys``' values (column -> the values
    the settings name) must be there and no other, each with as many rows as every other combination that agrees
    on the columns ``per`` (rows per model differ by depth and variant, not by seed); no row may lack a key or a
    value of the columns ``filled`` (a row cut short). ``rule``: the rule that writes the table, named in the
    way out."""
    path, keys, per = Path(path), {k: list(v) for k, v in keys.items()}, list(per)
    way_out = f"write it again: snakemake --configfile ... --forcerun {rule}"
    cols = list(keys)
    empty = [c for c in [*cols, *filled] if df[c].isna().any()]
    if empty:
        raise LnReproError(f"{path}: rows without {', '.join(empty)} (a cut or damaged table): {way_out}")
    typed = df[cols].astype({k: type(v[0]) for k, v in keys.items() if v})
    present = set(typed.itertuples(index=False, name=None))
    expected = set(itertools.product(*keys.values()))
    missing, extra = sorted(expected - present), sorted(present - expected)
    if missing or extra:
        what = "; ".join(filter(None, [
            f"missing {len(missing)} of {len(expected)} ({', '.join(cols)}): {missing[:6]}" if missing else "",
            f"{len(extra)} not in the settings: {extra[:6]}" if extra else ""]))
        raise LnReproError(f"{path}: not the table its settings give ({', '.join(f'{k} {v}' for k, v in keys.items())}"
                           f"): {what}; {way_out}")
    counts = typed.value_counts().rename("rows").reset_index()
    if per:
        spread = counts.groupby(per)["rows"].nunique()
        uneven = spread[spread > 1]
    else:
        uneven = counts["rows"][counts["rows"].nunique() > 1]
    if len(uneven):
        raise LnReproError(f"{path}: combinations of {', '.join(cols)} with fewer rows than their like (a cut or "
                           f"damaged table): {way_out}")


def check_gradinit(path: str | Path, df: pd.DataFrame, experiment: Experiment, *, seed: int | None = None) -> None:
    """``gradinit.csv`` holds every model its settings measure, each whole, with those settings: each norm variant
    of ``analysis.gradinit.norms`` (every one a registered variant) at every depth and seed. With ``seed``,
    ``gradinit_after_warmup.csv`` of that seed of the after-warm-up run: that one model, with every layer of each
    stack and as many rows for each layer of a stack."""
    g = experiment.analysis.gradinit
    settings = {"batches": [g.batches], "max_tokens": [g.max_tokens], "precision": [g.precision]}
    rule = "gradinit" if seed is None else "gradinit_after_warmup"
    if seed is not None:
        model = experiment.runs[g.after_warmup_run].model
        models = {"checkpoint": ["after_warmup"], "run": [g.after_warmup_run], "norm": [model.norm],
                  "depth": [model.decoder_layers], "seed": [seed]}
    else:
        measured = set(df["norm"].dropna())
        unknown = sorted(measured - set(NORMS))
        if unknown:
            raise LnReproError(f"{path}: norm variants {unknown} that are not registered ({', '.join(NORMS)}): "
                               f"write it again: snakemake --configfile ... --forcerun {rule}")
        models = {"checkpoint": ["init"], "norm": list(g.measured_norms), "depth": list(g.depths),
                  "seed": list(g.seeds)}
    check_table(path, df, {**models, **settings}, rule=rule, per=[k for k in models if k != "seed"],
                filled=["value", "updates", "stack", "layer"])
    if seed is not None:  # one model: whole when every layer is there with as many rows as its stack's others
        for stack, layers in (("enc", model.encoder_layers), ("dec", model.decoder_layers)):
            check_table(path, df[df["stack"] == stack], {"stack": [stack], "layer": list(range(layers))}, rule=rule,
                        per=["stack"])


def read_table(path: Path, columns: list[str]) -> pd.DataFrame | None:
    """One of the analysis stages' CSV files when present (else None), with at least ``columns``."""
    if not path.exists():
        return None
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise LnReproError(f"{path}: not a readable CSV ({e})") from e
    if not set(columns) <= set(df.columns):
        raise LnReproError(f"{path}: expected columns {columns}, found {list(df.columns)}")
    return df


def read_after_warmup(path: Path, experiment: Experiment, seed: int) -> pd.DataFrame | None:
    """The gradinit_after_warmup.csv of ``seed`` of the after-warm-up run at ``path`` (None when absent), checked
    whole and that seed's (``check_gradinit``)."""
    after = read_table(path, GRADINIT_COLUMNS)
    if after is not None:
        check_gradinit(path, after, experiment, seed=seed)
    return after


def check_gradinit_fit(path: str | Path, fit: pd.DataFrame, experiment: Experiment, norms: Iterable[str]) -> None:
    """``gradinit_fit.csv`` fits each of ``norms`` (the variants gradinit.csv measured) over the depths and seeds
    of ``analysis.gradinit``."""
    g, norms = experiment.analysis.gradinit, set(norms)
    fitted = {"norm": [n for n in NORMS if n in norms], "depths": [";".join(map(str, g.depths))],
              "seeds": [";".join(map(str, g.seeds))]}
    check_table(path, fit.astype({"depths": str, "seeds": str}), fitted, rule="gradinit", per=["norm"],
                filled=["n"])
