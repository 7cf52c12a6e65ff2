"""Checkpoints for the scoring measurements, saved the way the training loop saves them.

An untrained model decodes every sentence to the length limit (max_len_b = 200 tokens), which measures the
worst case, not what scoring a real checkpoint costs. So the bench scores a "trained-ish" model too: the
small size trained for a few hundred updates with the project's training step, enough to end sentences at
about the right length. It is trained once per corpus and size and cached. It trains at the bench's thread
count: more threads than free cores on a shared machine slow an OpenMP step down many times, not up.

On disk as ``lnrepro.train.loop`` writes them: weights ``state/epochs/epochNNN.pt`` = ``weights_blob(model)``
(atomic torch.save) and the manifest ``epochs/epochNNN.json`` naming them by path relative to the run folder
with their sha256, which is what ``score_checkpoint`` reads and checks.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import torch

from ..io import atomic_torch_save, atomic_write_json, file_sha256, read_json, where_ran
from ..model import Transformer, weights_blob
from .batches import index_batches, make_batch
from .corpus import Corpus
from .sizes import Size
from .timing import log, timed
from .train import SEED, project_optimizer, project_step

# A short linear warm-up, then inverse square root: the project's isqrt schedule at a scale that trains a
# Pre-LN model in a few hundred small updates. bf16, as the Multi30k preset trains.
TRAIN_LR, TRAIN_WARMUP, TRAIN_PRECISION = 1e-3, 50, "bf16"


def _lr(t: int) -> float:
    return TRAIN_LR * min(1.0, t / TRAIN_WARMUP) * min(1.0, (TRAIN_WARMUP / t) ** 0.5 if t else 1.0)


def trained_weights(corpus: Corpus, size: Size, updates: int, max_tokens: int) -> tuple[Path, dict]:
    """The cached weights file of ``size`` trained ``updates`` updates of ``max_tokens``, and its record."""
    torch.manual_seed(SEED)
    model = Transformer(size.config()).train()
    # The cache key holds the recipe and the model's parameter names and shapes: a changed model retrains.
    recipe = {"size": size.name, "updates": updates, "max_tokens": max_tokens, "lr": TRAIN_LR, "warmup": TRAIN_WARMUP,
              "precision": TRAIN_PRECISION, "seed": SEED,
              "parameters": [[k, list(v.shape)] for k, v in model.state_dict().items()]}
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:10]
    folder = corpus.root / "checkpoints" / f"{size.name}-{updates}u-{key}"
    weights, record = folder / "weights.pt", folder / "record.json"
    if record.exists():
        return weights, read_json(record)
    src, tgt = corpus.pairs(size.vocab, "train")
    batches = index_batches(src, tgt, max_tokens, SEED)
    order = np.random.RandomState(SEED).permutation(len(batches)).tolist()
    opt = project_optimizer(model)
    log(f"training the trained-ish {size.name} checkpoint: {updates} updates of {max_tokens} tokens "
        f"(once; cached in {folder})")

    def train() -> list[float]:
        losses = []
        for t in range(updates):
            idx = batches[order[t % len(batches)]]
            batch = make_batch([src[i] for i in idx], [tgt[i] for i in idx])
            losses.append(project_step(model, opt, batch, TRAIN_PRECISION, lr=_lr(t)))
        return losses

    losses, seconds = timed(train)
    atomic_torch_save(weights_blob(model), weights)
    info = {"size": size.name, "norm": "pre", "updates": updates, "max_tokens": max_tokens, "lr": TRAIN_LR,
            "warmup": TRAIN_WARMUP, "precision": TRAIN_PRECISION, "train_s": seconds,
            "final_loss": float(np.mean(losses[-20:])), "corpus": corpus.name}
    atomic_write_json(record, info)
    return weights, info


def untrained_weights(size: Size, folder: Path) -> Path:
    """A freshly initialized model of ``size`` (the bench's seed), saved as a weights file."""
    torch.manual_seed(SEED)
    path = folder / f"untrained-{size.name}.pt"
    atomic_torch_save(weights_blob(Transformer(size.config())), path)
    return path


def write_run(run_dir: Path, weights: Path, epochs: int, updates: int) -> list[Path]:
    """A run folder with ``epochs`` epoch checkpoints (copies of ``weights``) and their manifests."""
    manifests = []
    for ep in range(1, epochs + 1):
        path = run_dir / "state" / "epochs" / f"epoch{ep:03d}.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(weights, path)
        manifest = run_dir / "epochs" / f"epoch{ep:03d}.json"
        atomic_write_json(manifest, {
            "epoch": ep, "status": "ok", "weights": str(path.relative_to(run_dir)), "sha256": file_sha256(path),
            "updates": updates, "wall_s": 0.0, "partial": False, "run": "bench", "seed": SEED,
            "config_sha256": None, "where_ran": where_ran(),
        })
        manifests.append(manifest)
    return manifests
