"""The typed records a run writes and the stages after it read (docs/outputs.md, "Training" and "Scoring").

Each record is a frozen dataclass whose fields are its JSON keys: ``EpochManifest`` (``epochs/epochNNN.json``),
``CheckpointScores`` with one ``SplitScores`` per split (``eval/epochNNN.json``), ``RunSummary`` with its
``Divergence`` (``summary.json``) and ``RunRecord`` (``run.json``). A record writes its own JSON (``text``,
``write``: ``io.json_text``, atomically) and reads it back (``read``); as the config slices
(``lnrepro.config.settings.Section``), a missing or unknown key, or a status outside the record's statuses, is
one ``LnReproError`` naming the file and the key. ``RunStatus`` is the one enumeration of run and checkpoint
statuses. Torch-free, so the report and the Snakefile can read records without it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, Mapping, TypeVar

from .errors import LnReproError
from .io import atomic_write_text, file_sha256, finite_json, json_text, read_json
from .paths import RunFolder
from .typed import convert, plain, type_hints

R = TypeVar("R", bound="Record")


class RunStatus(str, Enum):
    """How a run or one of its checkpoints ended (the JSON holds the value)."""

    OK = "ok"  # epoch manifest, score file: the epoch's weights were saved
    DIVERGED = "diverged"  # manifest, score file, summary: a non-finite loss or one above train.diverge_loss
    STOPPED = "stopped"  # manifest, score file: training ended (train.max_updates) before this epoch's end
    COMPLETED = "completed"  # summary: every epoch was trained
    MAX_UPDATES = "max_updates"  # summary: training stopped at train.max_updates


def _key(where: str, key: str) -> str:
    """``file: a.b`` for key ``b`` under ``file: a``; ``file: a`` for key ``a`` of ``file``."""
    return f"{where}.{key}" if ": " in where else f"{where}: {key}"


class Record:
    """Base of the run records: built from a mapping with every key checked, written back as one.

    ``OPTIONAL`` keys are left out of the JSON when None and may be absent when read (the manifest's
    ``reason`` exists only for an epoch not trained); ``STATUSES`` are the statuses the record may hold;
    ``FINITE`` records write a non-finite float as null (strict JSON), as the training outputs always did."""

    OPTIONAL: ClassVar[frozenset[str]] = frozenset()
    STATUSES: ClassVar[tuple[RunStatus, ...]] = ()
    FINITE: ClassVar[bool] = False

    @classmethod
    def from_dict(cls: type[R], data: Any, where: str = "") -> R:
        """Build from a mapping; ``where`` names the file (and the key path) in an error."""
        label = where or cls.__name__
        if not isinstance(data, Mapping):
            raise LnReproError(f"{label}: expected a mapping, got {type(data).__name__}")
        fields = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        unknown = sorted(set(data) - set(fields))
        if unknown:
            raise LnReproError(f"{label}: unknown key(s) {', '.join(unknown)} ({cls.__name__} allows: "
                               f"{', '.join(fields)})")
        missing = [k for k in fields if k not in data and k not in cls.OPTIONAL]
        if missing:
            raise LnReproError(f"{label}: missing key(s) {', '.join(missing)} (expected a {cls.__name__})")
        hints = type_hints(cls)
        kwargs = {k: convert(hints[k], data.get(k), _key(label, k), _key) for k in fields}
        record = cls(**kwargs)  # type: ignore[call-arg]
        status = getattr(record, "status", None)
        if cls.STATUSES and status not in cls.STATUSES:
            raise LnReproError(f"{label}: status {status.value!r}; expected "
                               f"{' or '.join(repr(s.value) for s in cls.STATUSES)}")
        return record

    def to_dict(self) -> dict[str, Any]:
        """The JSON mapping: every field under its own name, optional ones only when set."""
        out = {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)  # type: ignore[arg-type]
               if not (f.name in self.OPTIONAL and getattr(self, f.name) is None)}
        return finite_json(out) if self.FINITE else out

    def text(self) -> str:
        """The file's text (``io.json_text``: the one JSON layout)."""
        return json_text(self.to_dict())

    @classmethod
    def read(cls: type[R], path: str | Path) -> R:
        """Read a file ``write`` wrote; errors name the file."""
        return cls.from_dict(read_json(path), str(path))

    def write(self, path: str | Path) -> None:
        atomic_write_text(path, self.text())


@dataclass(frozen=True)
class EpochManifest(Record):
    """``epochs/epochNNN.json``: the checkpoint training left at the end of epoch ``epoch``.

    epoch: the epoch, from 1. status: ``ok`` (weights saved), ``diverged`` or ``stopped`` (not trained).
    weights: the weights file relative to the run folder (``state/epochs/epochNNN.pt``), sha256: its digest
    (both None unless ok). updates: updates done at the end of the epoch (at the end of training when not
    trained). wall_s: training wall-clock of the retained work so far; cpu_s: its CPU-seconds (the updates'
    process time; absent in a manifest of an older lnrepro). partial: the epoch ended early (at
    ``train.max_updates``). run, seed: the run. config_sha256: sha256 of the run's config.json. where_ran:
    host, device, slurm_job_id. reason: why the epoch was not trained (the divergence's detail, or
    ``max_updates``); absent when ok. data_sha256: sha256 of each data file the weights were trained with
    (``spm.model``, ``train.de.ids``, ``train.en.ids``), which scoring checks its BPE folder against; absent
    in a manifest of an older lnrepro (scoring then asks for its retraining).
    """

    STATUSES: ClassVar[tuple[RunStatus, ...]] = (RunStatus.OK, RunStatus.DIVERGED, RunStatus.STOPPED)
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"reason", "data_sha256", "cpu_s"})

    epoch: int
    status: RunStatus
    weights: str | None
    sha256: str | None
    updates: int
    wall_s: float
    partial: bool
    run: str
    seed: int
    config_sha256: str | None
    where_ran: dict[str, Any]
    reason: str | None = None
    data_sha256: dict[str, str] | None = None
    cpu_s: float | None = None

    def weights_file(self, run_dir: str | Path, where: str | Path) -> Path:
        """The checkpoint's weights file under ``run_dir``, its sha256 checked against this manifest (``where``:
        the manifest's path, for the messages)."""
        if not self.weights or not self.sha256:
            raise LnReproError(f"{where}: status 'ok' but 'weights' or 'sha256' is missing")
        path = Path(run_dir) / self.weights
        # The cure: train the run again, as the workflow does when told that its summary.json must be rewritten
        # (a plain rerun sees every output up to date); the trainer retrains what its state/ cannot give back.
        summary = RunFolder(str(Path(where).parent.parent)).summary  # the manifest's run folder, as the caller names it
        retrain = (f"train the run again: snakemake --cores all --forcerun {summary} (with your --configfile: it "
                   "retrains this run and scores it again)")
        if not path.is_file():
            raise LnReproError(f"{path}: weights file named by {where} not found (the run's state/ was deleted or "
                               f"moved): {retrain}")
        digest = file_sha256(path)
        if digest != self.sha256:
            raise LnReproError(f"{path}: corrupt checkpoint (sha256 {digest[:12]}... but {where} records "
                               f"{self.sha256[:12]}...): {retrain}")
        return path


@dataclass(frozen=True)
class SplitScores(Record):
    """The scores of one split of a checkpoint (``eval/epochNNN.json``'s ``splits.{split}``).

    loss, nll: teacher-forced label-smoothed loss and NLL, nats per target token; loss_base2, nll_base2: the
    same over ln 2; target_tokens: the tokens they average over. bleu_tok: tokenized BLEU, bleu_tok_detail:
    its score, signature, precisions, bp, sys_len, ref_len, text. sacrebleu, sacrebleu_signature,
    sacrebleu_detail: sacreBLEU on the detokenized hypotheses. sentences: sentences decoded; decode_s,
    sent_per_s: wall-clock of the search alone and its rate (None when it took no time).
    """

    loss: float
    nll: float
    loss_base2: float
    nll_base2: float
    target_tokens: int
    bleu_tok: float
    bleu_tok_detail: dict[str, Any]
    sacrebleu: float
    sacrebleu_signature: str
    sacrebleu_detail: dict[str, Any]
    sentences: int
    decode_s: float
    sent_per_s: float | None


@dataclass(frozen=True)
class CheckpointScores(Record):
    """``eval/epochNNN.json``: one checkpoint scored on the splits of its scoring slice.

    epoch, status, run, seed, updates: the manifest's; weights, weights_sha256: its weights and the digest
    verified before loading; manifest: the manifest's path. decode: per split, the decoding options used.
    label_smoothing: epsilon of the validation loss. model_config: the checkpoint's ModelConfig (absent when
    not ok). threads, torch: torch's intra-op threads and version. where_ran: host, device, slurm_job_id.
    wall_s, cpu_s: the checkpoint's share of its scoring job's wall-clock and CPU-seconds (its own scoring plus
    the job's start and imports divided equally among the ``job_checkpoints`` it scored; cpu_s and
    job_checkpoints are absent in a score file of an older lnrepro, whose job scored one checkpoint). splits: per split its ``SplitScores``, None when not ok.
    inputs_sha256: sha256 of every file the scores were computed from, by name (the scoring slice; when ok
    also ``spm.model``, each split's ``{split}.de.ids``, ``{split}.en.ids``, references ``{split}.en`` and
    ``{split}.raw.en``; the weights are ``weights_sha256``); absent in a score file of an older lnrepro.
    skipped: per split not decoded, why (its ``splits`` entry None: the checkpoint's valid BLEU below
    ``eval.valid_bleu_floor``); absent when every split was scored. host: the scoring job's host
    (``lnrepro.host.host_identity``, measured once at the job's start); git_commit, git_dirty: the scoring
    code's checkout (``lnrepro.io.git_commit``; absent outside one); all three absent in a score file of an older
    lnrepro. hypotheses_sha256: per split, the sha256 of its ``.hyp`` file as written (empty where not decoded),
    which a publish checks the file against; absent in a score file of an older lnrepro.
    """

    STATUSES: ClassVar[tuple[RunStatus, ...]] = EpochManifest.STATUSES
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"model_config", "inputs_sha256", "cpu_s", "job_checkpoints",
                                                    "skipped", "host", "git_commit", "git_dirty",
                                                    "hypotheses_sha256"})

    epoch: int
    status: RunStatus
    run: str | None
    seed: int | None
    updates: int | None
    weights: str | None
    weights_sha256: str | None
    manifest: str
    decode: dict[str, Any]
    label_smoothing: float
    threads: int
    torch: str
    where_ran: dict[str, Any]
    wall_s: float
    splits: dict[str, SplitScores | None]
    model_config: dict[str, Any] | None = None
    inputs_sha256: dict[str, str] | None = None
    cpu_s: float | None = None
    job_checkpoints: int | None = None
    skipped: dict[str, str] | None = None
    host: dict[str, Any] | None = None
    git_commit: str | None = None
    git_dirty: bool | None = None
    hypotheses_sha256: dict[str, str] | None = None


@dataclass(frozen=True)
class Divergence(Record):
    """Where a run diverged (``summary.json``'s ``diverged``): the update (counted from 1) and epoch whose loss
    failed the check, detail (``non-finite loss`` or the loss against ``train.diverge_loss``), loss (None when
    not finite) and the update's learning rate."""

    update: int
    epoch: int
    detail: str
    loss: float | None
    lr: float


@dataclass(frozen=True)
class RunSummary(Record):
    """``summary.json``: how one run and seed's training ended.

    run, seed. status: ``completed``, ``diverged`` or ``max_updates``. final_loss, final_nll,
    final_loss_update: the last logged training loss and NLL (nats per target token) and their update (None
    when nothing was logged). updates: updates done. epochs_completed: epochs trained to their end; epochs:
    the configured epochs. diverged: the ``Divergence``, None unless diverged. train_s: training wall-clock of
    the retained work; wall_s_all_attempts: wall-clock of every attempt summed; attempts: their number.
    train_cpu_s: CPU-seconds of the retained updates; cpu_s_all_attempts: the job processes' CPU-seconds, every
    attempt summed, start-up and checkpoints included (both absent in a summary of an older lnrepro).
    target_tokens_per_epoch, target_tokens_trained: target tokens of one epoch and of the updates done;
    tokens_per_s: the latter over train_s. where_ran: host, device, slurm_job_id.
    """

    STATUSES: ClassVar[tuple[RunStatus, ...]] = (RunStatus.COMPLETED, RunStatus.DIVERGED, RunStatus.MAX_UPDATES)
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"train_cpu_s", "cpu_s_all_attempts"})
    FINITE: ClassVar[bool] = True

    run: str
    seed: int
    status: RunStatus
    final_loss: float | None
    final_nll: float | None
    final_loss_update: int | None
    updates: int
    epochs_completed: int
    epochs: int
    diverged: Divergence | None
    train_s: float
    wall_s_all_attempts: float
    attempts: int
    target_tokens_per_epoch: int
    target_tokens_trained: int
    tokens_per_s: float | None
    where_ran: dict[str, Any]
    train_cpu_s: float | None = None
    cpu_s_all_attempts: float | None = None


@dataclass(frozen=True)
class RunRecord(Record):
    """``run.json``: what one run and seed trained, with what, and where.

    run, seed. config: the run's config.json (``RunConfig``); config_sha256: its digest; inputs_sha256: the
    digest of every training input by name; state_digest: the digest of state/. model_config: the
    ModelConfig trained; num_params. torch_version, python_version; device (cpu, cuda) and device_name;
    threads; precision. optimizer: the optimizer ``optim.name`` names, in words (its registry entry's
    implementation); optimizer_settings: ``name`` and the ``optim`` settings that optimizer reads. train_pairs, batches_per_epoch; source_lang, target_lang. git_commit,
    git_dirty: the package's checkout (None outside one). attempts: attempts so far. where_ran: host, device,
    slurm_job_id. executions: per attempt of the retained training, in order, the execution facts that decide
    its bits besides the inputs (``attempt``, ``resumed_update``, ``torch``, ``numpy``, ``device``,
    ``device_name``, ``threads``); attempts that differ in them make a result that is not bitwise an
    uninterrupted run's. Absent in a run.json of an older lnrepro. host: the host of the attempt that wrote the
    file (``lnrepro.host.host_identity``, measured at its start: cpu_model, cpu_flags, threads, matmul_gflops;
    each attempt's in its train.jsonl ``attempt`` record); absent in a run.json of an older lnrepro.
    """

    FINITE: ClassVar[bool] = True
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"executions", "host"})

    run: str
    seed: int
    config: dict[str, Any]
    config_sha256: str
    inputs_sha256: dict[str, str]
    state_digest: str
    model_config: dict[str, Any]
    num_params: int
    torch_version: str
    python_version: str
    device: str
    device_name: str
    threads: int
    precision: str
    optimizer: str
    optimizer_settings: dict[str, Any]
    train_pairs: int
    batches_per_epoch: int
    source_lang: str
    target_lang: str
    git_commit: str | None
    git_dirty: bool | None
    attempts: int
    where_ran: dict[str, Any]
    executions: list[dict[str, Any]] | None = None
    host: dict[str, Any] | None = None


# The gradinit stage's tables (lnrepro.analysis.gradinit, lnrepro.analysis.stats.gradinit_fit), which the store
# and the report read. gradinit.csv: one row per model, weight matrix and statistic; ``checkpoint``: init |
# after_warmup; ``run``, ``epoch`` and ``updates`` name the checkpoint of an after_warmup row (empty, 0, 0 at init).
GRADINIT_COLUMNS = ["checkpoint", "norm", "depth", "seed", "stack", "layer", "sublayer", "param", "statistic", "value",
                    "noise", "d_model", "ffn_dim", "heads", "batches", "max_tokens", "target_tokens",
                    "label_smoothing", "dropout", "precision", "run", "epoch", "updates"]
# gradinit_fit.csv: the power law of the last layer's value against depth, per variant, stack, weight, statistic.
GRADINIT_FIT_COLUMNS = ["norm", "stack", "layer", "param", "statistic", "b", "b_low", "b_high", "c", "depths",
                        "seeds", "n", "theory_b", "interval", "note"]
