"""Multi30k task 1 De->En (train 29,000 / val 1,014 / test_2016_flickr 1,000 pairs), the CPU-scale real data.

The raw files ``{train,val,test_2016_flickr}.{de,en}.gz`` (multi30k/dataset, data/task1/raw/) go through the
same text pipeline as IWSLT14 (lnrepro.data.text): Moses tokenization with escaping and fairseq's final-period
rule, lowercasing, and untokenized references for valid and test. Unlike IWSLT there is no metadata to filter
and no ``’`` replacement (the IWSLT recipe does that only for its XML files). Cleaning is optional and applies to
train only (``cfg["clean"]``: ``{min_len, max_len, ratio}`` with clean-corpus-n semantics, or null for none);
valid and test are never filtered, so scores stay comparable with published Multi30k numbers.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

from ..errors import LnReproError
from . import text as T
from .download import file_digests
from .prepared import write_prepared

LANGS = ("de", "en")
# Split name in lnrepro -> file stem in multi30k/dataset (overridable by cfg["files"]).
DEFAULT_FILES = {"train": "train", "valid": "val", "test": "test_2016_flickr"}


def file_names(cfg: dict) -> dict[str, str]:
    """``{split}.{lang}`` -> file name (e.g. ``valid.de`` -> ``val.de.gz``) from ``cfg['files']``."""
    stems = {**DEFAULT_FILES, **(cfg.get("files") or {})}
    return {f"{split}.{lang}": f"{stems[split]}.{lang}.gz" for split in DEFAULT_FILES for lang in LANGS}


def _read_gz_lines(path: Path) -> list[str]:
    try:
        with gzip.open(path, "rb") as f:
            return T.split_lines(f.read().decode("utf-8"))
    except FileNotFoundError as e:
        raise LnReproError(f"Multi30k file {path}: not found") from e
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise LnReproError(f"Multi30k file {path}: not a readable gzip of UTF-8 text ({e})") from e


def prepare_multi30k(files: dict[str, Path] | Path, out_dir: Path, cfg: dict, threads: int = 1) -> dict:
    """Prepare Multi30k into ``out_dir`` (the files of lnrepro.data.prepared) and return the stats.

    ``files`` is a folder holding the six ``.gz`` files, or a mapping ``{split}.{lang}`` -> path (as returned by
    `lnrepro download`). ``cfg`` is the ``data.multi30k`` config section (``files``, ``clean``,
    optional ``expected_counts`` mapping train/valid/test to line counts checked after preparation).
    """
    names = file_names(cfg)
    if isinstance(files, (str, Path)):
        paths = {key: Path(files) / name for key, name in names.items()}
    else:
        missing = sorted(set(names) - set(files))
        if missing:
            raise LnReproError(f"Multi30k: no file given for {missing}; expected keys {sorted(names)}")
        paths = {key: Path(files[key]) for key in names}

    text = {key: _read_gz_lines(path) for key, path in paths.items()}
    for split in DEFAULT_FILES:
        n_de, n_en = len(text[f"{split}.de"]), len(text[f"{split}.en"])
        if n_de != n_en:
            raise LnReproError(
                f"Multi30k {split}: {paths[f'{split}.de']} has {n_de} lines but {paths[f'{split}.en']} has {n_en}"
            )

    # One tokenizer pass per language over all splits (one process pool start instead of three).
    tokenized: dict[str, list[str]] = {}
    for lang in LANGS:
        keys = [f"{split}.{lang}" for split in DEFAULT_FILES]
        joined = T.tokenize_lines([line for k in keys for line in text[k]], lang, threads, desc=f"tokenize {lang}")
        start = 0
        for k in keys:
            tokenized[k] = joined[start:start + len(text[k])]
            start += len(text[k])

    clean_cfg = cfg.get("clean")
    train_de, train_en = tokenized["train.de"], tokenized["train.en"]
    clean_stats: dict[str, Any] | None = None
    if clean_cfg:
        unknown = set(clean_cfg) - {"min_len", "max_len", "ratio"}
        if unknown:
            raise LnReproError(
                f"data.multi30k.clean: unknown key(s) {sorted(unknown)}; expected min_len, max_len, ratio"
            )
        result = T.clean_corpus(train_de, train_en, min_len=int(clean_cfg.get("min_len", 1)),
                                max_len=int(clean_cfg.get("max_len", 175)), ratio=float(clean_cfg.get("ratio", 1.5)))
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
    expected = cfg.get("expected_counts")
    if expected:
        wrong = {k: (counts.get(k), v) for k, v in expected.items() if counts.get(k) != v}
        if wrong:
            detail = ", ".join(f"{k}: got {got}, expected {exp}" for k, (got, exp) in wrong.items())
            raise LnReproError(
                f"Multi30k preparation gave other line counts than data.multi30k.expected_counts ({detail})"
            )

    stats = {
        "dataset": "multi30k",
        "source": {key: {"path": str(p), "sha256": file_digests(p)["sha256"]} for key, p in paths.items()},
        "tokenizer": {"sacremoses": T.SACREMOSES_VERSION, "escape": True, "final_period_split": True,
                      "aggressive_dash_splits": False, "lowercase": True},
        "cleaning": clean_stats,
        "counts": counts,
    }
    return write_prepared(Path(out_dir), splits, raw, stats)

