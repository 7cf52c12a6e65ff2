"""The fates rule (``analysis.fates``) applied to every unit of a study's store or results tree, and tabulated
against the fates its report gave by the failure rule (one job: ``lnrepro fates``).

Each unit is read at an epoch's end (its last by default): the step records up to that epoch's updates, the
validation hypotheses of that epoch, ``summary.json``'s divergence. V is the study's ``bpe.json`` vocabulary
size; H the unigram entropy of the encoded train split's targets, which the store does not keep: the data
folder is the study's (its ``train.en.ids`` checked against ``store.json``'s digest where the store has one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..config.settings import BpeSettings, Experiment
from ..errors import LnReproError
from ..io import file_sha256, open_text, read_json, text_exists
from ..paths import EXPERIMENT_JSON, LANGS, Paths
from . import fates as fa
from .results import read_results

UNIT_COLUMNS = ["run", "seed", "epoch", "read_at", "fate", "speed", "reached", "final_nll", "distinct_share",
                "old_fate", "why"]
# the report's tables of the failure rule's fates, the depth study's (among the runs of one depth and lr_max)
# first
OLD_FATES = ("report/tables/depth_seed_fates.csv", "report/tables/seed_fates.csv")


@dataclass(frozen=True)
class StoreFates:
    """A study's units' fates (UNIT_COLUMNS), H and ln V, and the report's table they were compared with (None:
    the store has no report)."""

    units: pd.DataFrame
    entropy: float
    log_v: float
    against: Path | None

    def confusion(self) -> pd.DataFrame:
        """Counts of units by the report's fate (rows) and the new fate (columns), with totals."""
        known = self.units[self.units["old_fate"] != ""]
        return pd.crosstab(known["old_fate"], pd.Categorical(known["fate"], categories=fa.FATES),
                           rownames=["old fate"], colnames=["new fate"], margins=True, margins_name="total",
                           dropna=False)

    def per_cell(self) -> pd.DataFrame:
        """Counts of each run's units by new fate."""
        return pd.crosstab(self.units["run"], pd.Categorical(self.units["fate"], categories=fa.FATES),
                           rownames=["run"], colnames=["fate"], dropna=False)

    def text(self) -> str:
        """The per-unit rows, the constants read, the confusion table (when the store has a report) and the
        per-cell counts, as ``lnrepro fates`` prints them."""
        rows = self.units.drop(columns=["reached", "why"]).copy()
        rows["final_nll"] = rows["final_nll"].map(lambda x: f"{x:.3f}")
        rows["distinct_share"] = rows["distinct_share"].map(lambda x: "" if math.isnan(x) else f"{x:.3f}")
        parts = [rows.to_string(index=False),
                 f"\nH = {self.entropy:.4f} nats (target unigram entropy, EOS counted), ln V = {self.log_v:.4f}; "
                 f"stalled above H - {fa.STALL_MARGIN:g}, source-ignoring below {fa.DISTINCT_SHARE:.0%} distinct, "
                 f"speed to NLL {fa.SPEED_TARGET:g}"]
        if self.against is not None:
            parts += [f"\nreport's fate ({self.against}) x new fate:", self.confusion().to_string()]
        parts += ["\nnew fates per run:", self.per_cell().to_string()]
        return "\n".join(parts) + "\n"


def _old_fates(store: Path, epoch: int | None) -> tuple[dict[tuple[str, int], str], Path | None]:
    """(run, seed) -> fate from the store's report at ``epoch`` (each run's last where None), and the table."""
    for name in OLD_FATES:
        path = store / name
        if path.is_file():
            try:
                df = pd.read_csv(path)
            except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
                raise LnReproError(f"{path}: not a readable CSV ({e})") from e
            if not {"run", "seed", "epoch", "fate"} <= set(df.columns):
                raise LnReproError(f"{path}: expected columns run, seed, epoch, fate")
            df = df[df["epoch"] == (epoch if epoch is not None else df.groupby("run")["epoch"].transform("max"))]
            return {(r.run, int(r.seed)): str(r.fate) for r in df.drop_duplicates(["run", "seed"]).itertuples()}, path
    return {}, None


def _target_ids(store: Path, data: Path) -> Path:
    """The study's encoded train targets under ``data`` (``results/{exp}/data``), checked against the store's
    digest of them where it records one."""
    rel = f"data/bpe/train.{LANGS[1]}.ids"
    path = data / "bpe" / f"train.{LANGS[1]}.ids"
    if not path.is_file():
        raise LnReproError(f"{path}: not found; make the study's data: snakemake --until apply_bpe --configfile "
                           f"{store}/study.yaml")
    index = store / "store.json"
    stored = read_json(index).get("study", {}).get(rel) if index.is_file() else None
    if stored is not None and file_sha256(path) != stored:
        raise LnReproError(f"{path}: not the study's ({index} records another sha256 for {rel}); make the data "
                           f"with the study's settings: snakemake --until apply_bpe --configfile {store}/study.yaml")
    return path


def _hypotheses(path: Path) -> list[str]:
    with open_text(path) as f:
        text = f.read()
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")


def store_fates(store: Path, data: Path, epoch: int | None = None) -> StoreFates:
    """Every finished unit of the study at ``store`` (a store or a results tree: ``experiment.json`` beside
    ``runs/``) classified at the end of ``epoch`` (each run's last where None), with H from ``data``."""
    store, data = Path(store), Path(data)
    experiment = Experiment.read(store / EXPERIMENT_JSON)
    paths = Paths(experiment.name)

    def local(path: str) -> Path:  # a path of the layout, under the store
        return store / Path(path).relative_to(paths.root)

    vocab = BpeSettings.read(local(paths.bpe_json)).vocab_size
    entropy = fa.unigram_entropy(_target_ids(store, data))
    old, against = _old_fates(store, epoch)
    rows = []
    for s in read_results(store, experiment).seeds:
        if s.summary is None:  # not stored (yet): no fate
            continue
        ep = epoch if epoch is not None else s.epochs
        manifest = s.manifests.get(ep)
        if manifest is None:
            raise LnReproError(f"{local(paths.epoch_manifest(s.run, s.seed, f'{ep:03d}'))}: not found (epoch {ep} "
                               f"of run {s.run} seed {s.seed})")
        hyp = local(paths.run_folder(s.run, s.seed).hypotheses(ep, "valid"))
        diverged = s.summary.diverged.update if s.summary.diverged else None
        stopped = diverged is not None and diverged - 1 <= manifest.updates
        if not stopped and not text_exists(hyp):
            raise LnReproError(f"{hyp}: not found: the validation hypotheses at epoch {ep} (score the split "
                               "valid at that epoch)")
        try:
            f = fa.classify(fa.steps_of(s.steps), None if stopped else _hypotheses(hyp), vocab, entropy,
                            read_at=manifest.updates, diverged_update=diverged)
        except LnReproError as e:
            raise LnReproError(f"{hyp.parent.parent}: {e}") from e
        rows.append({"run": s.run, "seed": s.seed, "epoch": ep, "read_at": f.read_at, "fate": f.fate,
                     "speed": f.speed, "reached": f.reached, "final_nll": f.final_nll,
                     "distinct_share": f.distinct_share, "old_fate": old.get((s.run, s.seed), ""), "why": f.why})
    return StoreFates(pd.DataFrame(rows, columns=UNIT_COLUMNS), entropy, math.log(vocab), against)
