"""Weights for the scoring measurements, saved the way the training loop saves them.

An untrained model decodes every sentence to the length limit (max_len_b = 200 tokens), which measures the
worst case, not what scoring a real checkpoint costs. So the bench scores a "trained-ish" model too: the
small size trained for a few hundred updates with the project's training step (``train_step``, the optimizer
training builds, the project's schedule), enough to end sentences at about the right length. It is trained
once per corpus and size and cached. It trains at the bench's thread count: more threads than free cores on a
shared machine slow an OpenMP step down many times, not up. The weights are ``weights_blob(model)`` (atomic
torch.save), what ``lnrepro.model.load_model`` reads.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from ..config.settings import ScheduleSettings
from ..io import atomic_torch_save, atomic_write_json, read_json
from ..model import Transformer, weights_blob
from ..optimizers import build_optimizer, optimizer_of
from .batches import index_batches, make_batch
from .corpus import Corpus
from .sizes import OPTIM, Size
from .timing import log, timed
from .train import SEED, project_step

# A short linear warm-up, then inverse square root with the anchor at its end: the project's isqrt schedule at
# a scale that trains a Pre-LN model in a few hundred small updates. bf16, as the Multi30k preset trains.
TRAIN_LR, TRAIN_WARMUP, TRAIN_PRECISION = 1e-3, 50, "bf16"
TRAIN_SCHEDULE = ScheduleSettings(warmup=True, decay="isqrt", warmup_updates=TRAIN_WARMUP,
                                  anchor_updates=TRAIN_WARMUP, decay_epochs=None, decay_factor=None)
TRAIN_OPTIM = dataclasses.replace(OPTIM, lr_max=TRAIN_LR)


def trained_weights(corpus: Corpus, size: Size, updates: int, max_tokens: int) -> tuple[Path, dict]:
    """The cached weights file of ``size`` trained ``updates`` updates of ``max_tokens``, and its record."""
    torch.manual_seed(SEED)
    model = Transformer(size.config()).train()
    # The cache key holds the recipe, the optimizer and the model's parameter names and shapes: a changed
    # model or optimizer retrains.
    recipe = {"size": size.name, "updates": updates, "max_tokens": max_tokens, "lr": TRAIN_LR, "warmup": TRAIN_WARMUP,
              "precision": TRAIN_PRECISION, "seed": SEED, "optimizer": optimizer_of(TRAIN_OPTIM).implementation,
              "parameters": [[k, list(v.shape)] for k, v in model.state_dict().items()]}
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:10]
    folder = corpus.root / "checkpoints" / f"{size.name}-{updates}u-{key}"
    weights, record = folder / "weights.pt", folder / "record.json"
    if record.exists():
        return weights, read_json(record)
    src, tgt = corpus.pairs(size.vocab, "train")
    batches = index_batches(src, tgt, max_tokens, SEED)
    order = np.random.RandomState(SEED).permutation(len(batches)).tolist()
    opt = build_optimizer(model, TRAIN_OPTIM)
    log(f"training the trained-ish {size.name} checkpoint: {updates} updates of {max_tokens} tokens "
        f"(once; cached in {folder})")

    def train() -> list[float]:
        losses = []
        for t in range(updates):
            idx = batches[order[t % len(batches)]]
            batch = make_batch([src[i] for i in idx], [tgt[i] for i in idx])
            losses.append(project_step(model, opt, batch, TRAIN_PRECISION, t, TRAIN_SCHEDULE, TRAIN_OPTIM))
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
