"""Every file of the stage contracts, named once (docs/outputs.md describes their contents).

The Snakefile builds one ``Paths`` for the experiment and every rule file takes its inputs and outputs from
it, so no rule file depends on another's globals. Methods return a concrete path for concrete arguments and
a Snakemake pattern (``{run}``, ``{seed}``, ``{ep}``, ``{split}``) with the defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

LANGS: tuple[str, ...] = ("de", "en")  # source, target: the paper's direction
SPLITS: tuple[str, ...] = ("train", "valid", "test")
DOWNLOADS = "results/downloads"  # shared by every experiment: a download is checksum-verified once


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
        text = [f"{self.prepared}/{s}.{lang}" for s in SPLITS for lang in LANGS]
        raw = [f"{self.prepared}/{s}.raw.{lang}" for s in ("valid", "test") for lang in LANGS]
        return text + raw + [f"{self.prepared}/stats.json"]

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

    def run_config(self, run: str = "{run}", seed: str | int = "{seed}") -> str:
        return f"{self.run_dir(run, seed)}/config.json"

    def train_outputs(self, epochs: int, run: str = "{run}", seed: str | int = "{seed}") -> list[str]:
        d = self.run_dir(run, seed)
        return [f"{d}/run.json", f"{d}/train.jsonl", f"{d}/summary.json"] + self.epoch_manifests(epochs, run, seed)

    def summary(self, run: str = "{run}", seed: str | int = "{seed}") -> str:
        return f"{self.run_dir(run, seed)}/summary.json"

    def epoch_manifest(self, run: str = "{run}", seed: str | int = "{seed}", ep: str = "{ep}") -> str:
        return f"{self.run_dir(run, seed)}/epochs/epoch{ep}.json"

    def epoch_manifests(self, epochs: int, run: str = "{run}", seed: str | int = "{seed}") -> list[str]:
        return [self.epoch_manifest(run, seed, f"{ep:03d}") for ep in range(1, epochs + 1)]

    def eval_json(self, suffix: str = "") -> str:
        """The scoring slice of one group of scoring jobs: eval.json (every split), eval_{splits}.json (some)."""
        return f"{self.root}/eval{suffix}.json"

    def score(self, run: str = "{run}", seed: str | int = "{seed}", ep: str = "{ep}") -> str:
        return f"{self.run_dir(run, seed)}/eval/epoch{ep}.json"

    def hypotheses(self, splits: tuple[str, ...], run: str = "{run}", seed: str | int = "{seed}",
                   ep: str = "{ep}") -> list[str]:
        return [f"{self.run_dir(run, seed)}/eval/epoch{ep}.{split}.hyp" for split in splits]

    def scores(self, epochs: int, run: str, seed: str | int) -> list[str]:
        return [self.score(run, seed, f"{ep:03d}") for ep in range(1, epochs + 1)]

    # ---- analysis and report ------------------------------------------------------------------------------

    @property
    def experiment_json(self) -> str:
        return f"{self.root}/experiment.json"

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

    @property
    def gradinit_after_warmup_csv(self) -> str:
        return f"{self.root}/analysis/gradinit_after_warmup.csv"

    @property
    def report(self) -> str:
        return f"{self.root}/report"

    @property
    def report_html(self) -> str:
        return f"{self.report}/index.html"

    @property
    def confounds_md(self) -> str:
        return f"{self.report}/confounds.md"

    def figure(self, name: str) -> str:
        return f"{self.report}/figures/{name}.png"

    # ---- logs and benchmarks ------------------------------------------------------------------------------

    def log(self, rule: str, job: str = "") -> str:
        """One log per job: ``logs/{rule}.log``, or ``logs/{rule}/{job}.log`` for rules with wildcards."""
        return f"{self.root}/logs/{rule}/{job}.log" if job else f"{self.root}/logs/{rule}.log"

    def benchmark(self, rule: str, job: str) -> str:
        return f"{self.root}/benchmarks/{rule}/{job}.tsv"
