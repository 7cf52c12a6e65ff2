"""Multi30k task 1 De->En (train 29,000 / val 1,014 / test_2016_flickr 1,000 pairs), the CPU-scale real data.

The raw files ``{train,val,test_2016_flickr}.{de,en}.gz`` (multi30k/dataset, data/task1/raw/) go through the
same text pipeline as IWSLT14 (lnrepro.data.text): Moses tokenization with escaping and fairseq's final-period
rule, lowercasing, and untokenized references for valid and test. Unlike IWSLT there is no metadata to filter
and no ``’`` replacement (the IWSLT recipe does that only for its XML files). Cleaning is optional and applies to
train only (``clean``: ``{min_len, max_len, ratio}`` with clean-corpus-n semantics, or null for none); valid and
test are never filtered, so scores stay comparable with published Multi30k numbers.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

from ..errors import LnReproError
from ..paths import DOWNLOADS
from . import text as T
from .download import Download, file_digests
from .prepared import check_counts, write_prepared

LANGS = ("de", "en")
KEY = "defaults.data.multi30k"  # the config section, named in messages
FOLDER = "multi30k"  # the six files' folder under results/downloads/
# Split name in lnrepro -> file stem in multi30k/dataset.
STEMS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}


def file_names() -> dict[str, str]:
    """``{split}.{lang}`` -> file name (e.g. ``valid.de`` -> ``val.de.gz``)."""
    return {f"{split}.{lang}": f"{stem}.{lang}.gz" for split, stem in STEMS.items() for lang in LANGS}


def downloads(section: dict) -> list[Download]:
    """The six raw files: ``url_base`` + name, or the section's mirror folder; each sha256-checked."""
    return [Download(name=f"{FOLDER}/{name}", urls=(section["url_base"] + name,), algorithm="sha256",
                     checksum=section["sha256"].get(name), checksum_key=f"{KEY}.sha256.{name}",
                     mirror=section.get("mirror"), mirror_key=f"{KEY}.mirror")
            for name in file_names().values()]


def _read_gz_lines(path: Path) -> list[str]:
    try:
        with gzip.open(path, "rb") as f:
            return T.split_lines(f.read().decode("utf-8"))
    except FileNotFoundError as e:
        raise LnReproError(f"Multi30k file {path}: not found") from e
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise LnReproError(f"Multi30k file {path}: not a readable gzip of UTF-8 text ({e})") from e


def prepare(settings: dict, out_dir: Path, threads: int = 1, downloads_dir: Path = Path(DOWNLOADS)) -> dict:
    """Prepare the six ``.gz`` files in ``downloads_dir/multi30k`` into ``out_dir``; return the stats.

    ``settings`` is the content part of the config section (data.json): ``clean`` and ``expected_counts``
    (train/valid/test line counts after preparation, checked before anything is written) are read.
    """
    from . import moses  # imported on use (lnrepro.data.moses says why)

    paths = {key: Path(downloads_dir) / FOLDER / name for key, name in file_names().items()}
    text = {key: _read_gz_lines(path) for key, path in paths.items()}
    for split in STEMS:
        n_de, n_en = len(text[f"{split}.de"]), len(text[f"{split}.en"])
        if n_de != n_en:
            raise LnReproError(
                f"Multi30k {split}: {paths[f'{split}.de']} has {n_de} lines but {paths[f'{split}.en']} has {n_en}"
            )

    # One tokenizer pass per language over all splits (one process pool start instead of three).
    tokenized: dict[str, list[str]] = {}
    for lang in LANGS:
        keys = [f"{split}.{lang}" for split in STEMS]
        joined = moses.tokenize_lines([line for k in keys for line in text[k]], lang, threads, desc=f"tokenize {lang}")
        start = 0
        for k in keys:
            tokenized[k] = joined[start:start + len(text[k])]
            start += len(text[k])

    clean_cfg = settings.get("clean")
    train_de, train_en = tokenized["train.de"], tokenized["train.en"]
    clean_stats: dict[str, Any] | None = None
    if clean_cfg:
        result = T.clean_corpus(train_de, train_en, min_len=int(clean_cfg["min_len"]),
                                max_len=int(clean_cfg["max_len"]), ratio=float(clean_cfg["ratio"]))
        train_de, train_en = result.src, result.tgt
        clean_stats = {**clean_cfg, "into_cleaning": len(tokenized["train.de"]), "after_cleaning": len(result.kept),
                       "dropped": result.dropped}

    splits = {
        "train": (T.lowercase(train_de), T.lowercase(train_en)),
        "valid": (T.lowercase(tokenized["valid.de"]), T.lowercase(tokenized["valid.en"])),
        "test": (T.lowercase(tokenized["test.de"]), T.lowercase(tokenized["test.en"])),
    }
    raw = {split: tuple([T.raw_reference(line) for line in text[f"{split}.{lang}"]] for lang in LANGS)
           for split in ("valid", "test")}

    counts = {split: len(pair[0]) for split, pair in splits.items()}
    check_counts(counts, settings.get("expected_counts"), "multi30k", str(Path(downloads_dir) / FOLDER),
                 "those of the official task 1 files without cleaning")

    stats = {
        "dataset": "multi30k",
        "source": {key: {"path": str(p), "sha256": file_digests(p)["sha256"]} for key, p in paths.items()},
        "tokenizer": {"sacremoses": moses.SACREMOSES_VERSION, "escape": True, "final_period_split": True,
                      "aggressive_dash_splits": False, "lowercase": True},
        "cleaning": clean_stats,
        "counts": counts,
    }
    return write_prepared(Path(out_dir), splits, raw, stats)

