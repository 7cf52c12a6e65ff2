"""Every file of the stage contracts, named once (docs/outputs.md describes their contents).

The Snakefile builds one ``Paths`` for the experiment and every rule file takes its inputs and outputs from
it, so no rule file depends on another's globals. Methods return a concrete path for concrete arguments and
a Snakemake pattern (``{run}``, ``{seed}``, ``{ep}``, ``{split}``) with the defaults. ``RunFolder`` is the
layout of one run's folder (its declared outputs, scores and ``state/``), which ``Paths`` and every stage that
writes or reads a run's files go through.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .errors import LnReproError

LANGS: tuple[str, ...] = ("de", "en")  # source, target: the paper's direction
SPLITS: tuple[str, ...] = ("train", "valid", "test")
DOWNLOADS = "results/downloads"  # shared by every experiment: a download is checksum-verified once
EXPERIMENT_JSON = "experiment.json"  # the report's slice, in results/{exp}/, beside runs/
ANSWER_MD = "answer.md"  # the report's Answer sentences, in results/{exp}/report/ (the README quotes them)
# A name (the experiment's, a run's) is part of a path component: a file system takes 255 bytes per component,
# and the longest component holding a name is a job's log or benchmark, {run}.seed{seed}_{splits}.log, with a seed
# of at most 10 digits (config.schema.yaml) and every split in its suffix. The schema's names are ASCII.
NAME_ROOM = len(".seed") + 10 + len("_valid_test") + len(".log")
MAX_NAME = 255 - NAME_ROOM
# A study's store (lnrepro.store): its records, laid out as results/{exp}/ is, plus these two files.
STORE_INDEX = "store.json"  # what the store holds: study-level digests and each unit's files (written last)
STORE_CONFIG = "study.yaml"  # the merged config the store's study resolves from (a --configfile for its parts)


def store_dir(exp: str) -> str:
    """The store of study ``exp``: ``published/{exp}``."""
    return f"published/{exp}"


def prepared_texts(folder: str) -> list[str]:
    """The text files of a prepared folder: every split's tokenized sides, then the raw sides of valid and test
    (the references of sacreBLEU)."""
    text = [f"{folder}/{s}.{lang}" for s in SPLITS for lang in LANGS]
    return text + [f"{folder}/{s}.raw.{lang}" for s in ("valid", "test") for lang in LANGS]


def _epoch(ep: int | str) -> str:
    """An epoch as file names write it: ``007`` for 7; a string (``{ep}``, ``007``) as it is."""
    return f"{ep:03d}" if isinstance(ep, int) else ep


@dataclass(frozen=True)
class RunFolder:
    """The files of one run and seed, under ``root`` (``results/{exp}/runs/{run}/seed{seed}``); with the default
    root ``""`` the names relative to the run folder (``epochs/epoch001.json``), as ``state/outputs/`` keys them."""

    root: str = ""

    def _at(self, name: str) -> str:
        return f"{self.root}/{name}" if self.root else name

    @classmethod
    def of_manifest(cls, manifest: str | Path) -> RunFolder:
        """The run folder of an epoch manifest (``{root}/epochs/epochNNN.json``)."""
        return cls(str(Path(manifest).resolve().parent.parent))

    # ---- the declared outputs of training, and its input ------------------------------------------------

    @property
    def config(self) -> str:
        return self._at("config.json")

    @property
    def run_json(self) -> str:
        return self._at("run.json")

    @property
    def train_jsonl(self) -> str:
        return self._at("train.jsonl")

    @property
    def summary(self) -> str:
        return self._at("summary.json")

    def epoch_manifest(self, ep: int | str = "{ep}") -> str:
        return self._at(f"epochs/epoch{_epoch(ep)}.json")

    def epoch_manifests(self, epochs: int) -> list[str]:
        return [self.epoch_manifest(ep) for ep in range(1, epochs + 1)]

    def is_epoch_manifest(self, path: str) -> bool:
        """Whether ``path`` is one of this folder's epoch manifests (a three-digit epoch)."""
        pattern = re.escape(self.epoch_manifest()).replace(re.escape("{ep}"), r"\d{3}")
        return re.fullmatch(pattern, path) is not None

    def train_outputs(self, epochs: int) -> list[str]:
        """What a training job declares: run.json, train.jsonl, summary.json and every epoch manifest."""
        return [self.run_json, self.train_jsonl, self.summary] + self.epoch_manifests(epochs)

    # ---- scoring ----------------------------------------------------------------------------------------

    def score(self, ep: int | str = "{ep}") -> str:
        return self._at(f"eval/epoch{_epoch(ep)}.json")

    def hypotheses(self, ep: int | str = "{ep}", split: str = "{split}") -> str:
        return self._at(f"eval/epoch{_epoch(ep)}.{split}.hyp")

    # ---- the gradient after warm-up (a unit of analysis.gradinit.after_warmup_run only) ------------------

    @property
    def gradinit_after_warmup(self) -> str:
        """The gradient at this run and seed's end of warm-up (rule ``gradinit_after_warmup``)."""
        return self._at("gradinit_after_warmup.csv")

    @classmethod
    def manifest_scored_by(cls, score: str | Path) -> Path:
        """The epoch manifest ``epochs/epochNNN.json`` of a score file ``eval/epochNNN.json`` (a scoring job is
        told its score files; the checkpoints are those of the same run folder and epochs)."""
        score = Path(score)
        found = re.fullmatch(r"epoch(\d{3})\.json", score.name)
        if found is None or score.parent.name != "eval":
            raise LnReproError(f"{score}: not a score file eval/epochNNN.json of a run folder; name the manifest")
        return Path(cls(str(score.parent.parent)).epoch_manifest(found.group(1)))

    @staticmethod
    def hypotheses_beside(score: str | Path, split: str) -> Path:
        """``eval/epochNNN.{split}.hyp`` beside the score file ``eval/epochNNN.json`` (the scoring job is told
        where to write its score file; its hypotheses go beside it, as the rule declares them)."""
        score = Path(score)
        return score.parent / f"{score.stem}.{split}.hyp"

    # ---- state/ (undeclared: train/checkpoint.py) -------------------------------------------------------

    @property
    def state(self) -> str:
        return self._at("state")

    def epoch_weights(self, ep: int | str = "{ep}") -> str:
        """The weights of epoch ``ep`` (``state/epochs/epochNNN.pt``), which the manifest names relative to
        the run folder."""
        return self._at(f"state/epochs/epoch{_epoch(ep)}.pt")


@dataclass(frozen=True)
class Paths:
    """The files of experiment ``exp`` under ``results/{exp}``."""

    exp: str

    @property
    def root(self) -> str:
        return f"results/{self.exp}"

    # ---- data and BPE -------------------------------------------------------------------------------------

    @staticmethod
    def download(name: str) -> str:
        return f"{DOWNLOADS}/{name}"

    @property
    def data_json(self) -> str:
        return f"{self.root}/data.json"

    @property
    def prepared(self) -> str:
        return f"{self.root}/data/prepared"

    @property
    def prepared_files(self) -> list[str]:
        """Tokenized splits, the raw references of valid/test (for sacreBLEU), and stats.json."""
        return prepared_texts(self.prepared) + [f"{self.prepared}/stats.json"]

    @property
    def bpe_json(self) -> str:
        return f"{self.root}/bpe.json"

    @property
    def bpe(self) -> str:
        return f"{self.root}/data/bpe"

    @property
    def spm_model(self) -> list[str]:
        return [f"{self.bpe}/spm.model", f"{self.bpe}/spm.vocab"]

    @property
    def bpe_ids(self) -> list[str]:
        return [f"{self.bpe}/{s}.{lang}.ids" for s in SPLITS for lang in LANGS]

    @property
    def bpe_stats(self) -> str:
        return f"{self.bpe}/stats.json"

    # ---- training and scoring -----------------------------------------------------------------------------

    def run_dir(self, run: str = "{run}", seed: str | int = "{seed}") -> str:
        return f"{self.root}/runs/{run}/seed{seed}"

    def run_folder(self, run: str = "{run}", seed: str | int = "{seed}") -> RunFolder:
        return RunFolder(self.run_dir(run, seed))

    def run_config(self, run: str = "{run}", seed: str | int = "{seed}") -> str:
        return self.run_folder(run, seed).config

    def train_outputs(self, epochs: int, run: str = "{run}", seed: str | int = "{seed}") -> list[str]:
        return self.run_folder(run, seed).train_outputs(epochs)

    def summary(self, run: str = "{run}", seed: str | int = "{seed}") -> str:
        return self.run_folder(run, seed).summary

    def epoch_manifest(self, run: str = "{run}", seed: str | int = "{seed}", ep: str = "{ep}") -> str:
        return self.run_folder(run, seed).epoch_manifest(ep)

    def epoch_manifests(self, epochs: int, run: str = "{run}", seed: str | int = "{seed}") -> list[str]:
        return self.run_folder(run, seed).epoch_manifests(epochs)

    def eval_json(self, suffix: str = "") -> str:
        """The scoring slice of one group of scoring jobs: eval.json (every split), eval_{splits}.json (some)."""
        return f"{self.root}/eval{suffix}.json"

    def score(self, run: str = "{run}", seed: str | int = "{seed}", ep: str = "{ep}") -> str:
        return self.run_folder(run, seed).score(ep)

    def hypotheses(self, splits: tuple[str, ...], run: str = "{run}", seed: str | int = "{seed}",
                   ep: str = "{ep}") -> list[str]:
        return [self.run_folder(run, seed).hypotheses(ep, split) for split in splits]

    def scores(self, epochs: int, run: str, seed: str | int) -> list[str]:
        return [self.score(run, seed, f"{ep:03d}") for ep in range(1, epochs + 1)]

    # ---- analysis and report ------------------------------------------------------------------------------

    @property
    def experiment_json(self) -> str:
        return f"{self.root}/{EXPERIMENT_JSON}"

    @property
    def gradinit_json(self) -> str:
        return f"{self.root}/gradinit.json"

    @property
    def gradinit_after_warmup_json(self) -> str:
        return f"{self.root}/gradinit_after_warmup.json"

    @property
    def gradinit_csv(self) -> str:
        return f"{self.root}/analysis/gradinit.csv"

    @property
    def gradinit_fit_csv(self) -> str:
        return f"{self.root}/analysis/gradinit_fit.csv"

    def gradinit_after_warmup_csv(self, run: str = "{run}", seed: str | int = "{seed}") -> str:
        return self.run_folder(run, seed).gradinit_after_warmup

    @property
    def report(self) -> str:
        return f"{self.root}/report"

    @property
    def report_html(self) -> str:
        return f"{self.report}/index.html"

    @property
    def confounds_md(self) -> str:
        return f"{self.report}/confounds.md"

    @property
    def answer_md(self) -> str:
        return f"{self.report}/{ANSWER_MD}"

    def figure(self, name: str) -> str:
        return f"{self.report}/figures/{name}.png"

    # ---- logs and benchmarks ------------------------------------------------------------------------------

    def log(self, rule: str, job: str = "") -> str:
        """One log per job: ``logs/{rule}.log``, or ``logs/{rule}/{job}.log`` for rules with wildcards."""
        return f"{self.root}/logs/{rule}/{job}.log" if job else f"{self.root}/logs/{rule}.log"

    def benchmark(self, rule: str, job: str) -> str:
        return f"{self.root}/benchmarks/{rule}/{job}.tsv"
