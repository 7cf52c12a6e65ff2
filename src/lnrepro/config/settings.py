"""The typed configuration: frozen dataclasses for every section, and the JSON slices the stages read.

The config is validated once, when it is loaded (``lnrepro.config.load``); afterwards every stage reads these
objects, never a raw dict with defaults of its own. Each slice file a rule writes (``config.json``,
``eval.json``, ``data.json``, ``bpe.json``, ``experiment.json``) is one of these classes written with
``write`` and read back with ``read``. See docs/architecture.md, "The configuration".
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, TypeVar

from ..device import device_for
from ..errors import LnReproError
from ..io import atomic_write_text, json_text, read_json
from ..typed import convert, plain, type_hints

T = TypeVar("T", bound="Section")

# The config key each studied factor of the factorial design varies.
FACTOR_KEYS: dict[str, str] = {"norm": "model.norm", "warmup": "schedule.warmup", "decay": "schedule.decay"}

# Which schedule settings ``lnrepro.train.schedule.lr_at`` reads, by switch: declared once, here, beside the section
# they belong to. A setting the run's switches do not list cannot act (it is inert): a run's config.json leaves
# it out and the confound analysis ignores its differences. A new decay declares its settings here.
SWITCHES: frozenset[str] = frozenset({"warmup", "decay"})
WARMUP_SETTINGS: frozenset[str] = frozenset({"warmup_updates"})
DECAY_SETTINGS: dict[str, frozenset[str]] = {
    "isqrt": frozenset({"anchor_updates"}),
    "step": frozenset({"decay_epochs", "decay_factor"}),
    "constant": frozenset(),
}
_SWITCHED = WARMUP_SETTINGS.union(*DECAY_SETTINGS.values())
VALID = "valid"  # the split eval.valid_bleu_floor reads


def _dotted(where: str, key: str) -> str:
    """A configuration key's path: ``defaults.model`` + ``norm``."""
    return f"{where}.{key}" if where else key


# Field metadata: the key is left out of the section's mapping while its value is None (``Section.to_dict``).
ABSENT_WHEN_NONE = "absent_when_none"


class Section:
    """Base of every configuration section: built from a mapping, written back as one."""

    @classmethod
    def from_dict(cls: type[T], data: Any, where: str = "") -> T:
        """Build from a mapping; a missing or unknown key is an LnReproError naming it (``where`` is its path)."""
        label = where or cls.__name__
        if not isinstance(data, Mapping):
            raise LnReproError(f"{label}: expected a mapping, got {type(data).__name__}")
        hints = type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - set(fields))
        if unknown:
            raise LnReproError(f"{label}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(fields)})")
        kwargs = {}
        for name, f in fields.items():
            key = f"{where}.{name}" if where else name
            if name in data:
                kwargs[name] = convert(hints[name], data[name], key, _dotted, ints_as_floats=True)
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise LnReproError(f"{label}: missing key {name}")
        return cls(**kwargs)  # type: ignore[call-arg]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready mapping: nested sections as mappings, tuples as lists (as JSON reads them back). A field
        marked ``ABSENT_WHEN_NONE`` is left out while it is None, so that a key added later with None meaning
        "as before" keeps the files written before it (experiment.json, a store's slices) byte for byte."""
        return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)  # type: ignore[arg-type]
                if not (f.metadata.get(ABSENT_WHEN_NONE) and getattr(self, f.name) is None)}

    @classmethod
    def read(cls: type[T], path: str | Path) -> T:
        """Read a slice file written by ``write``; errors name the file."""
        return cls.from_dict(read_json(path), str(path))

    def text(self) -> str:
        """The slice file's text (``io.json_text``): the one source of its bytes, for ``write``, the rule that
        writes ``config.json`` and the digest the trainer checks it against (``sha256``)."""
        return json_text(self.to_dict())

    def sha256(self) -> str:
        """SHA-256 of the file ``write`` writes (of ``text``), without writing it."""
        return hashlib.sha256(self.text().encode("utf-8")).hexdigest()

    def write(self, path: str | Path) -> None:
        atomic_write_text(path, self.text())


@dataclass(frozen=True)
class ModelSettings(Section):
    """The model section: ``lnrepro.model.ModelConfig`` without the vocabulary size (the BPE decides it)."""

    encoder_layers: int
    decoder_layers: int
    d_model: int
    heads: int
    ffn_dim: int
    dropout: float
    attention_dropout: float
    activation_dropout: float
    norm: str
    share_decoder_embeddings: bool
    share_all_embeddings: bool
    max_positions: int

    def model_config(self, vocab_size: int):  # -> lnrepro.model.ModelConfig (imported here: torch is heavy)
        from ..model import ModelConfig

        return ModelConfig(vocab_size=vocab_size, **self.to_dict())


@dataclass(frozen=True)
class OptimSettings(Section):
    """The optimizer (``name``: one of ``lnrepro.optimizers.OPTIMIZERS``) and its settings."""

    name: str
    lr_max: float
    betas: tuple[float, float]
    eps: float
    weight_decay: float
    clip_norm: float  # 0: no clipping
    label_smoothing: float


@dataclass(frozen=True)
class ScheduleSettings(Section):
    """lr(t) = lr_max * w(t) * g(t) (lnrepro.train.schedule).

    A setting the switches (``warmup``, ``decay``) leave unused may be None: a run's config.json drops them
    (``used_only``), so that changing one reruns no run that cannot feel it. Which settings each switch uses
    is declared once, above (``used_settings``).
    """

    warmup: bool
    decay: str  # isqrt | step | constant
    warmup_updates: int | None
    anchor_updates: int | None
    decay_epochs: tuple[int, ...] | None
    decay_factor: float | None

    @classmethod
    def from_dict(cls, data: Any, where: str = "") -> ScheduleSettings:
        """As ``Section.from_dict``, except that a setting the switches leave unused may be absent (it reads as
        None); a used one absent or null is an LnReproError naming it."""
        if isinstance(data, Mapping) and {"warmup", "decay"} <= set(data):
            data = {**{key.split(".", 1)[1]: None for key in inert_settings(data)}, **data}
        s = super().from_dict(data, where)
        unset = sorted(key for key in used_settings(s) if getattr(s, key.split(".", 1)[1]) is None)
        if unset:
            raise LnReproError(f"{where or cls.__name__}: {', '.join(unset)} unset, but "
                               f"warmup={s.warmup}, decay={s.decay} uses it")
        return s

    def used_only(self) -> ScheduleSettings:
        """This schedule with every setting its switches leave unused (``inert_settings``) set to None."""
        return dataclasses.replace(self, **{key.split(".", 1)[1]: None for key in inert_settings(self)})


def used_settings(schedule: ScheduleSettings | Mapping[str, Any]) -> frozenset[str]:
    """Dotted keys (``schedule.warmup_updates``) of the settings ``lr_at`` reads under ``schedule``'s switches.

    ``schedule`` is the typed section or its mapping (config.json, experiment.json); only the switches are
    read, so a mapping without the inert settings works too."""
    warmup, decay = ((schedule["warmup"], schedule["decay"]) if isinstance(schedule, Mapping)
                     else (schedule.warmup, schedule.decay))
    if decay not in DECAY_SETTINGS:
        # a new decay declares its settings here, or every other one would look inert under it
        raise LnReproError(f"schedule.decay: '{decay}' declares no settings; expected one of {sorted(DECAY_SETTINGS)}")
    used = SWITCHES | DECAY_SETTINGS[decay] | (WARMUP_SETTINGS if warmup else frozenset())
    return frozenset(f"schedule.{k}" for k in used)


def inert_settings(schedule: ScheduleSettings | Mapping[str, Any]) -> frozenset[str]:
    """Dotted keys of the switched settings that cannot act under ``schedule``'s switches (the warm-up length
    without warm-up, the step decay's epochs and factor under another decay, the isqrt anchor under another)."""
    return frozenset(f"schedule.{k}" for k in _SWITCHED) - used_settings(schedule)


@dataclass(frozen=True)
class TrainSettings(Section):
    epochs: int
    max_tokens: int
    required_batch_size_multiple: int
    log_every: int
    checkpoint_every: int
    precision: str  # fp32 | bf16
    diverge_loss: float
    max_updates: int  # 0: no limit


@dataclass(frozen=True)
class SplitDecoding(Section):
    """How one split is decoded: the settings of ``lnrepro.evaluate.DecodeOptions`` a config chooses per split
    (min_len, unk_penalty and the KV cache keep fairseq's defaults; max_tokens is shared: ``ScoreSettings``)."""

    beam: int  # 1: greedy
    lenpen: float
    max_len_a: float
    max_len_b: int
    precision: str  # fp32 | bf16 (autocast), also of the split's validation loss


@dataclass(frozen=True)
class SplitEval(SplitDecoding):
    """``eval.splits.{split}``: its decoding and the epochs scored, resolved at load time to every epoch (``all``)
    or the ``listed`` epoch numbers and the last. The last epoch is each run's own, so a run of E epochs scores
    the split at ``scored(E)``: the one resolution for every length."""

    every: bool  # all: every epoch of the run
    listed: tuple[int, ...]  # else the numbered epochs scored besides the run's last (none for ``last``)

    def scored(self, last: int) -> tuple[int, ...]:
        """The epochs scored in a run whose last epoch is ``last``, ascending (the last among them)."""
        return tuple(range(1, last + 1)) if self.every else tuple(sorted({*self.listed, last}))

    def scores(self, epoch: int, last: int) -> bool:
        """Whether ``epoch`` of a run whose last epoch is ``last`` scores this split (in constant time: the DAG
        asks it of every epoch)."""
        return 1 <= epoch <= last and (self.every or epoch == last or epoch in self.listed)

    def decoding(self) -> SplitDecoding:
        return SplitDecoding(**{f.name: getattr(self, f.name) for f in dataclasses.fields(SplitDecoding)})


@dataclass(frozen=True)
class ScoreSettings(Section):
    """What a scoring slice (``eval.json``, ``eval_{splits}.json``) holds: the splits its jobs score, each with its
    decoding, and what every split shares.

    No epochs: the DAG decides which checkpoints a slice's jobs score, so changing a split's epochs or another
    split's decoding rewrites no slice of jobs that do not score it (``EvalSettings.groups``).
    """

    splits: dict[str, SplitDecoding]
    max_tokens: int
    label_smoothing: float  # the validation loss is the training criterion (optim.label_smoothing)
    # eval.valid_bleu_floor, in a slice that scores valid beside another split (else None: nothing to skip)
    valid_bleu_floor: float | None = None


@dataclass(frozen=True)
class EvalSettings(Section):
    """The eval section, resolved: per scored split its decoding and epochs (a split scored at no epoch is left
    out), and the settings shared by every split. Scoring jobs read ``ScoreSettings`` slices of it. Which epochs
    score which splits depends on the run's length (``all`` and ``last`` are the run's own), so each method
    that names epochs takes the last epoch of the runs it is asked for."""

    splits: dict[str, SplitEval]
    max_tokens: int
    label_smoothing: float
    # the other splits of a checkpoint whose valid BLEU is below this are not decoded (None: always decoded)
    valid_bleu_floor: float | None = None

    def scored(self, last: int) -> dict[str, tuple[int, ...]]:
        """Each scored split -> its epochs in a run whose last epoch is ``last``, in config order."""
        return {name: s.scored(last) for name, s in self.splits.items()}

    def due(self, epoch: int, last: int) -> tuple[str, ...]:
        """The splits scored at ``epoch`` of a run whose last epoch is ``last``, in config order."""
        return tuple(name for name, s in self.splits.items() if s.scores(epoch, last))

    def groups(self, last: int) -> dict[tuple[str, ...], tuple[int, ...]]:
        """The splits scored together -> the epochs they are scored at, in a run whose last epoch is ``last``:
        one scoring rule each (a rule's outputs, the hypotheses, are fixed patterns). The group of every split
        comes first (it always exists: every split is scored at the last epoch). Linear in the epochs."""
        out: dict[tuple[str, ...], list[int]] = {tuple(self.splits): []}
        for ep in range(1, last + 1):
            splits = self.due(ep, last)
            if splits:
                out.setdefault(splits, []).append(ep)
        return {splits: tuple(eps) for splits, eps in out.items() if eps}

    def scoring(self, splits: tuple[str, ...]) -> ScoreSettings:
        """The slice of the jobs that score ``splits``; the floor only where valid is scored beside another split
        (so that changing it rescores no valid-only checkpoint)."""
        floor = self.valid_bleu_floor if VALID in splits and len(splits) > 1 else None
        return ScoreSettings({name: self.splits[name].decoding() for name in splits}, self.max_tokens,
                             self.label_smoothing, floor)


@dataclass(frozen=True)
class DataSettings(Section):
    """What ``data.json`` holds: the dataset's name and the settings that determine its content.

    Where the files come from (URLs, mirror, local archive) is not part of it: changing a location must not
    rerun preparation or training. ``options`` is the dataset's own section minus those keys.
    """

    dataset: str
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BpeSettings(Section):
    vocab_size: int
    character_coverage: float
    seed: int


@dataclass(frozen=True)
class RunSettings(Section):
    """One run's resolved settings: the defaults with the run's delta merged in."""

    model: ModelSettings
    optim: OptimSettings
    schedule: ScheduleSettings
    train: TrainSettings

    @property
    def factors(self) -> dict[str, Any]:
        """The run's level of each studied factor (norm, warmup, decay)."""
        flat = self.flat()
        return {name: flat[key] for name, key in FACTOR_KEYS.items()}

    def flat(self) -> dict[str, Any]:
        """Every setting under its dotted key (``schedule.warmup_updates``), lists as lists."""
        return {f"{section}.{key}": v for section, values in self.to_dict().items() for key, v in values.items()}


@dataclass(frozen=True)
class RunConfig(Section):
    """What ``runs/{run}/seed{seed}/config.json`` holds: only what training depends on."""

    run: str
    seed: int
    model: ModelSettings
    optim: OptimSettings
    schedule: ScheduleSettings
    train: TrainSettings
    data: DataSettings
    bpe: BpeSettings

    @property
    def settings(self) -> RunSettings:
        return RunSettings(self.model, self.optim, self.schedule, self.train)

    def to_dict(self) -> dict[str, Any]:
        """As ``Section.to_dict``, without the schedule settings that are None (unused: ``used_only``)."""
        d = super().to_dict()
        d["schedule"] = {key: value for key, value in d["schedule"].items() if value is not None}
        return d


@dataclass(frozen=True)
class Comparison(Section):
    runs: tuple[str, ...]
    factor: str  # a key of FACTOR_KEYS, or a dotted run setting (optim.name)
    claim: str


# analysis.gradinit.norms when the key is absent: the variants gradinit measured before the key existed, in their
# order then (variants registered later are measured only where an experiment lists them).
GRADINIT_NORMS: tuple[str, ...] = ("post", "pre", "pre_nofinal", "deepnorm", "admin", "rezero")


@dataclass(frozen=True)
class GradinitSettings(Section):
    """analysis.gradinit: the expected gradient at initialization (Xiong et al. 2020, Section 3.4, Figure 3)."""

    batches: int = 8  # K mini-batches per model (at least 2: the noise is their spread)
    seeds: tuple[int, ...] = (1, 2, 3)
    max_tokens: int = 4096
    depths: tuple[int, ...] = (6, 8, 10, 12, 14)  # encoder = decoder layers L (the paper's Figure 3(c))
    d_model: int | None = None  # None: the experiment's width (defaults.model)
    ffn_dim: int | None = None
    heads: int | None = None
    label_smoothing: float = 0.0  # the theorem's loss has none
    dropout: bool = False  # the theorem's model has none
    precision: str = "fp32"  # fp32 | bf16 (autocast)
    after_warmup_run: str | None = "postln_warmup_isqrt"  # measured at its end of warm-up when selected
    # The norm variants measured, in this order; None (the key absent): GRADINIT_NORMS, the six measured before the
    # key existed, so that an experiment resolved without it (experiment.json, a store's) stays the same.
    norms: tuple[str, ...] | None = field(default=None, metadata={ABSENT_WHEN_NONE: True})

    @property
    def measured_norms(self) -> tuple[str, ...]:
        """The variants gradinit measures: ``norms``, or GRADINIT_NORMS when it is not set."""
        return GRADINIT_NORMS if self.norms is None else self.norms


@dataclass(frozen=True)
class GradinitConfig(Section):
    """What ``gradinit.json`` and ``gradinit_after_warmup.json`` hold: only what the gradinit stages read, so a
    change of the beam, the notes, a mirror or a run's settings reruns neither (``Experiment.gradinit_config``)."""

    gradinit: GradinitSettings  # analysis.gradinit; after_warmup_run None in gradinit.json (init does not read it)
    model: ModelSettings  # defaults.model: the width measured at initialization
    batch_multiple: int  # the first selected run's required_batch_size_multiple: the batching training uses
    warmup_updates: int | None = None  # gradinit_after_warmup.json: after_warmup_run's T_warmup (None in gradinit.json)


@dataclass(frozen=True)
class EquivalenceMargins(Section):
    """analysis.report.equivalence_margins: per end-point metric, the margin within which Figure 4's arms count as
    equivalent at the last epoch (two one-sided tests; lnrepro.analysis.stats.equivalence)."""

    bleu_tok: float = 1.0  # tokenized BLEU points
    nll_base2: float = 0.05  # validation NLL, bits per target token (without label smoothing)


@dataclass(frozen=True)
class ReportSettings(Section):
    """analysis.report: the budgets and thresholds of the report's comparisons (lnrepro.analysis.stats.budget)."""

    budget_epoch: int | None = None  # the earlier budget; None: three quarters of the training (15 of 20)
    target_fraction: float = 0.95  # updates-to-target: the first epoch at this fraction of the best BLEU
    # --- the report's statistical rules (each printed where the report uses it)
    # a finished seed "did not train" at an epoch budget when its BLEU is below this fraction of the best run's
    # seed-mean BLEU there, or its validation NLL above this multiple of the best run's seed-mean NLL there
    failure_bleu_fraction: float = 0.5
    failure_nll_ratio: float = 1.5
    # the factorial fit's covariance: "cell" (each cell's own seed variance, HC2 = Welch, Welch-Satterthwaite
    # degrees of freedom), "hc3" (HC3, the same degrees of freedom) or "pooled" (OLS, one residual variance)
    covariance: str = "cell"
    bleu_interval: str = "logit"  # a BLEU mean's interval: "logit" (t on logit(BLEU/100), inside [0, 100]) or "t"
    convergence_window: int = 4  # the last scored epochs whose validation-NLL slope is tested
    convergence_tolerance: float = 0.005  # converged: the slope's 95% interval within +-this fraction an epoch
    # The Answer section (lnrepro.analysis.sections.answer): time to quality and the end point.
    quality_fractions: tuple[float, ...] = (0.5, 0.75, 0.9)  # targets: these fractions of the lower arm's final quality
    useful_fraction: float = 0.5  # a lower arm below this fraction of the higher arm's final quality has failed
    sign_horizon: int = 5  # the final gap could change sign: smaller than this many epochs of either arm's slope
    equivalence_margins: EquivalenceMargins = EquivalenceMargins()  # the end point's equivalence tests
    # run -> reference run: the failure rule judges the run against the reference's seed means at the same epoch
    # instead of the best run's (e.g. Post-LN without warm-up at lr 5e-4 against Post-LN with warm-up at 5e-4)
    failure_reference: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AnalysisSettings(Section):
    gradinit: GradinitSettings = GradinitSettings()
    report: ReportSettings = ReportSettings()


@dataclass(frozen=True)
class GridSettings(Section):
    """One grid of the experiment: runs ``{base}__{key}={value}__...``, one per combination of ``values``.

    ``values`` maps dotted keys (``optim.lr_max``) to the values tried, ``seeds`` are the seeds every run of
    the grid trains (the experiment's unless the grid has its own), ``runs`` the grid's selected runs, in
    the order of the combinations (the first key varies slowest). ``extended`` maps a key to the values added to
    ``values`` after the grid's first run, one extension each, in the order they were added (empty: the grid as
    first planned).
    """

    base: str
    values: dict[str, tuple[Any, ...]]
    seeds: tuple[int, ...]
    runs: tuple[str, ...]
    extended: dict[str, tuple[Any, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Resources(Section):
    """What one worker rule asks of the scheduler (Snakemake's local one and SLURM alike)."""

    threads: int
    mem_mb: int
    runtime: int  # minutes
    gpus: int

    @property
    def device(self) -> str:
        """The device a job of these resources computes on (``lnrepro.device.device_for``): its rule passes it
        to the CLI as ``--device``, so the GPUs a job is given, not the ones it can see, decide."""
        return device_for(self.gpus)


@dataclass(frozen=True)
class Experiment(Section):
    """What ``experiment.json`` holds (the report's and gradinit's input): the whole resolved experiment."""

    name: str
    select: tuple[str, ...]  # every selected run (a grid named in select stands for its runs)
    seeds: tuple[int, ...]  # the seeds of a run outside any grid
    runs: dict[str, RunSettings]  # the selected runs, resolved
    comparisons: dict[str, Comparison]
    eval: EvalSettings
    data: DataSettings
    bpe: BpeSettings
    model: ModelSettings  # defaults.model: the width gradinit analyses
    analysis: AnalysisSettings
    grids: dict[str, GridSettings] = field(default_factory=dict)  # the grids with a selected run
    run_seeds: dict[str, tuple[int, ...]] = field(default_factory=dict)  # config run_seeds: a run's own seeds
    notes: str = ""
    scaling: dict[str, Any] | None = None

    def last_of(self, run: str) -> int:
        """The last epoch (= checkpoint) of ``run``: its own ``train.epochs``."""
        return self.runs[run].train.epochs

    @property
    def lengths(self) -> tuple[int, ...]:
        """The selected runs' numbers of epochs, ascending, each once."""
        return tuple(sorted({self.last_of(run) for run in self.select}))

    def runs_of_length(self, last: int) -> tuple[str, ...]:
        """The selected runs whose last epoch is ``last``, in select order."""
        return tuple(run for run in self.select if self.last_of(run) == last)

    def common_last(self, runs: Iterable[str]) -> int:
        """The last epoch every one of ``runs`` has (the shortest one's last): where a comparison of them ends."""
        return min(self.last_of(run) for run in runs)

    @property
    def epochs(self) -> int:
        """The epochs of every selected run when they all have the same; an LnReproError otherwise (ask
        ``last_of`` a run, or ``common_last`` the runs compared)."""
        if len(self.lengths) > 1:
            raise LnReproError(f"the selected runs differ in train.epochs ({', '.join(map(str, self.lengths))}): "
                               "no one number of epochs")
        return self.lengths[0]

    def scored(self, run: str, split: str) -> tuple[int, ...]:
        """The epochs at which ``run``'s checkpoints score ``split`` (none for a split never scored)."""
        s = self.eval.splits.get(split)
        return s.scored(self.last_of(run)) if s is not None else ()

    def common_scored(self, runs: Iterable[str], split: str) -> tuple[int, ...]:
        """The epochs at which every one of ``runs`` scores ``split``: those a comparison of them observes."""
        sets = [set(self.scored(run, split)) for run in runs]
        return tuple(sorted(set.intersection(*sets))) if sets else ()

    @property
    def depths(self) -> tuple[int, ...]:
        """The selected runs' depths L (``model.encoder_layers``; the presets give the decoder as many), ascending:
        the report's depth study (lnrepro.analysis.sections.depth) and its figure exist for more than one."""
        return tuple(sorted({self.runs[run].model.encoder_layers for run in self.select}))

    def seeds_of(self, run: str) -> tuple[int, ...]:
        """The seeds ``run`` trains: its grid's (all its grids', when several generate it), else its own
        (``run_seeds``), else ``seeds``."""
        own = [seed for grid in self.grids.values() if run in grid.runs for seed in grid.seeds]
        return tuple(dict.fromkeys(own)) or self.run_seeds.get(run, self.seeds)

    def run_config(self, run: str, seed: int, runs: Mapping[str, RunSettings] | None = None) -> RunConfig:
        """The run's config.json: its settings with the schedule's unused ones left out (``used_only``)."""
        s = (runs or self.runs)[run]
        return RunConfig(run, int(seed), s.model, s.optim, s.schedule.used_only(), s.train, self.data, self.bpe)

    @property
    def after_warmup_run(self) -> str | None:
        """``analysis.gradinit.after_warmup_run`` when it is selected (then measured after warm-up), else None."""
        run = self.analysis.gradinit.after_warmup_run
        return run if run in self.runs else None

    def gradinit_config(self, after_warmup: bool = False) -> GradinitConfig:
        """The slice of the gradinit job (``after_warmup``: of the gradinit_after_warmup job)."""
        g, first = self.analysis.gradinit, self.runs[self.select[0]].train
        if not after_warmup:
            return GradinitConfig(dataclasses.replace(g, after_warmup_run=None), self.model,
                                  first.required_batch_size_multiple)
        if self.after_warmup_run is None:
            raise LnReproError(f"analysis.gradinit.after_warmup_run: {g.after_warmup_run!r} is not a selected run "
                               f"({', '.join(self.select)})")
        # with warm-up: the load-time check refuses an after_warmup_run without it
        return GradinitConfig(g, self.model, first.required_batch_size_multiple,
                              self.runs[self.after_warmup_run].schedule.warmup_updates)
