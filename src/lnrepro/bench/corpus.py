"""The corpus the bench measures on: Multi30k prepared by the project's own stages, or the synthetic corpus.

Multi30k goes through the same functions as the pipeline (``lnrepro.data.multi30k.prepare``: Moses
tokenization, lowercasing; ``lnrepro.bpe``: joint sentencepiece BPE, encoded splits), so the batches have the
lengths training sees. It takes seconds and is cached under ``--cache`` (default ``results/bench-cache``);
a folder counts as done when its ``stats.json``, written last by those stages, exists.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import LnReproError
from ..train.batching import read_ids
from .timing import log

# The development machines' local copy of the six Multi30k files (a user's machine has none: synthetic then).
MIRROR = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "multi30k"
MULTI30K_FILES = tuple(f"{stem}.{lang}.gz" for stem in ("train", "val", "test_2016_flickr") for lang in ("de", "en"))
# Synthetic corpus: the demo preset's BPE for every size. The grammar has a few thousand word types, too
# few for an 8,000 or 10,000 piece BPE; the models keep their size's vocabulary (output layer and embedding
# cost), only the ids they see come from the smaller BPE.
SYNTHETIC_BPE = 600
SYNTHETIC_SEED = 1234  # config.yaml defaults.data.synthetic.seed


@dataclass
class Corpus:
    """A prepared corpus in the cache: ``prepared/`` (lnrepro.data.prepared layout) and ``bpe-N/`` folders."""

    name: str  # "multi30k" | "synthetic"
    root: Path
    source: str  # where the text came from, for the output
    preparation: str  # how it was turned into ids, for the output

    @property
    def prepared(self) -> Path:
        return self.root / "prepared"

    def bpe_vocab(self, vocab: int) -> int:
        """The BPE size the corpus is encoded with for a model of ``vocab`` (see SYNTHETIC_BPE)."""
        return vocab if self.name == "multi30k" else SYNTHETIC_BPE

    def bpe(self, vocab: int) -> Path:
        """The bpe folder (spm.model, {split}.{de,en}.ids) for a model of ``vocab``, learned on first use."""
        from .. import bpe
        from ..config import BpeSettings

        n = self.bpe_vocab(vocab)
        out = self.root / f"bpe-{n}"
        if not (out / "stats.json").exists():
            log(f"learning a {n}-piece sentencepiece BPE on {self.name} (lnrepro.bpe) into {out}")
            bpe.learn_bpe(self.prepared, out, BpeSettings(n, 1.0, 1))
            bpe.apply_bpe(self.prepared, out, threads=os.cpu_count() or 1)
        return out

    def pairs(self, vocab: int, split: str) -> tuple[list[list[int]], list[list[int]]]:
        """(German, English) id sequences of one split, EOS appended (read_ids, as training reads them)."""
        folder = self.bpe(vocab)
        return read_ids(folder / f"{split}.de.ids"), read_ids(folder / f"{split}.en.ids")

    def describe(self) -> dict:
        return {"name": self.name, "source": self.source, "preparation": self.preparation, "cache": str(self.root)}


def _mirror_key(folder: Path) -> str:
    """A short digest of the six files, so another mirror's content gets its own cache folder."""
    h = hashlib.sha256()
    for name in MULTI30K_FILES:
        h.update((folder / name).read_bytes())
    return h.hexdigest()[:10]


def _multi30k(folder: Path, cache: Path) -> Corpus:
    from ..data import multi30k

    missing = [name for name in MULTI30K_FILES if not (folder / name).is_file()]
    if missing:
        raise LnReproError(f"--data {folder}: not a Multi30k mirror (missing {', '.join(missing)})")
    corpus = Corpus("multi30k", cache / f"multi30k-{_mirror_key(folder)}", f"Multi30k task 1 mirror {folder}",
                    "lnrepro.data.multi30k.prepare (Moses tokenization, lowercase, no cleaning) + "
                    "lnrepro.bpe joint sentencepiece BPE of the size's vocabulary")
    if not (corpus.prepared / "stats.json").exists():
        log(f"preparing Multi30k from {folder} into {corpus.prepared}")
        # the dataset reads DOWNLOADS/multi30k/*.gz: a downloads folder of links to the mirror's files
        downloads = corpus.root / "downloads"
        (downloads / multi30k.FOLDER).mkdir(parents=True, exist_ok=True)
        for name in MULTI30K_FILES:
            link = downloads / multi30k.FOLDER / name
            if not link.exists():
                link.symlink_to((folder / name).resolve())
        multi30k.prepare({"clean": None}, corpus.prepared, os.cpu_count() or 1, downloads)
    return corpus


def _synthetic(cache: Path, quick: bool) -> Corpus:
    from ..data import synthetic

    # quick: the demo preset's split sizes; else config.yaml's (20,000 training pairs)
    sizes = {"train": 4000, "valid": 200, "test": 200} if quick else {"train": 20000, "valid": 500, "test": 500}
    corpus = Corpus("synthetic", cache / f"synthetic-{sizes['train']}",
                    f"lnrepro.data.synthetic, seed {SYNTHETIC_SEED}, {sizes['train']} training pairs",
                    f"lnrepro.data.synthetic.prepare + lnrepro.bpe sentencepiece BPE of {SYNTHETIC_BPE} pieces")
    if not (corpus.prepared / "stats.json").exists():
        log(f"generating the synthetic corpus into {corpus.prepared}")
        synthetic.prepare({"seed": SYNTHETIC_SEED, **sizes}, corpus.prepared)
    return corpus


def open_corpus(data: str, cache: Path, quick: bool) -> Corpus:
    """``data``: "auto" (the Multi30k mirror when present, else synthetic), "synthetic", or a mirror folder."""
    if data == "synthetic":
        return _synthetic(cache, quick)
    if data == "auto":
        if all((MIRROR / name).is_file() for name in MULTI30K_FILES):
            return _multi30k(MIRROR, cache)
        log(f"no Multi30k mirror at {MIRROR}: using the synthetic corpus")
        return _synthetic(cache, quick)
    return _multi30k(Path(data), cache)
