"""Token-bounded batches as fairseq 0.9.0 builds them, and collation.

- fairseq/data/language_pair_dataset.py ``ordered_indices``: a seeded random permutation, stably sorted by
  target length, then stably by source length (so source length is the primary key).
- fairseq/data/data_utils.py ``batch_by_size`` (data_utils_fast.pyx): greedy batches in that order; a batch
  is full when (sentences + 1) x (longest source-or-target length so far, padding included) > max_tokens; the
  cut keeps a multiple of ``required_batch_size_multiple`` sentences where possible, the rest starts the next.
- fairseq/data/iterators.py ``EpochBatchIterator``: batches are built once, only their order is shuffled every
  epoch, with numpy seed (seed + epoch), epoch from 1.
Lengths count the final EOS (fairseq's binarized sizes include it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..errors import LnReproError
from ..vocab import EOS, PAD


def read_ids(path: str | Path, vocab_size: int | None = None) -> list[list[int]]:
    """One sequence per line of space-separated ids, with EOS appended (the files hold none).

    With ``vocab_size`` every id must lie in [0, vocab_size): checked here, when the split is loaded, because
    an id outside the embedding only fails when its batch comes up (torch's IndexError, updates later)."""
    seqs: list[list[int]] = []
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                try:
                    ids = [int(tok) for tok in line.split()]
                except ValueError as e:
                    raise LnReproError(f"{path}:{lineno}: expected space-separated integer ids") from e
                if vocab_size is not None and ids and (min(ids) < 0 or max(ids) >= vocab_size):
                    bad = next(i for i in ids if not 0 <= i < vocab_size)
                    raise LnReproError(f"{path}:{lineno}: id {bad} is outside the vocabulary (expected ids 0 to "
                                       f"{vocab_size - 1}: spm.model has {vocab_size} pieces); encode the "
                                       "split again with this model (the apply_bpe stage)")
                ids.append(EOS)
                seqs.append(ids)
    except FileNotFoundError as e:
        raise LnReproError(f"{path}: file not found") from e
    return seqs


def ordered_indices(src_lens, tgt_lens, seed: int) -> np.ndarray:
    """fairseq LanguagePairDataset.ordered_indices under data_utils.numpy_seed(seed)."""
    src_lens, tgt_lens = np.asarray(src_lens), np.asarray(tgt_lens)
    indices = np.random.RandomState(seed).permutation(len(src_lens))
    indices = indices[np.argsort(tgt_lens[indices], kind="mergesort")]
    return indices[np.argsort(src_lens[indices], kind="mergesort")]


def batch_by_size(src_lens, tgt_lens, max_tokens: int, seed: int, multiple: int = 8) -> list[list[int]]:
    """Index batches of at most max_tokens (sentences x longest length) in fairseq 0.9.0's order and cuts."""
    src_lens, tgt_lens = np.asarray(src_lens), np.asarray(tgt_lens)
    if len(src_lens) != len(tgt_lens):
        raise LnReproError(f"batch_by_size: {len(src_lens)} source lengths but {len(tgt_lens)} target lengths")
    num_tokens = np.maximum(src_lens, tgt_lens)  # LanguagePairDataset.num_tokens
    batches: list[list[int]] = []
    batch: list[int] = []
    sample_lens: list[int] = []
    sample_len = 0
    for idx in ordered_indices(src_lens, tgt_lens, seed).tolist():
        n = int(num_tokens[idx])
        sample_lens.append(n)
        sample_len = max(sample_len, n)
        if sample_len > max_tokens:
            raise LnReproError(f"train.max_tokens: sentence pair {idx} has {sample_len} tokens, more than "
                               f"max_tokens={max_tokens}")
        if batch and (len(batch) + 1) * sample_len > max_tokens:
            mod_len = max(multiple * (len(batch) // multiple), len(batch) % multiple)
            batches.append(batch[:mod_len])
            batch = batch[mod_len:]
            sample_lens = sample_lens[mod_len:]
            sample_len = max(sample_lens) if sample_lens else 0
        batch.append(idx)
    if batch:
        batches.append(batch)
    return batches


def epoch_order(num_batches: int, seed: int, epoch: int) -> list[int]:
    """The order of the (fixed) batches in ``epoch`` (from 1): np.random.shuffle under numpy seed seed+epoch."""
    order = list(range(num_batches))
    np.random.RandomState(seed + epoch).shuffle(order)
    return order


def collate(src_seqs: list[list[int]], tgt_seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(src [B,S], prev [B,T], target [B,T]), all padded on the right with PAD; prev = EOS + target[:-1].

    Sequences already end with EOS (read_ids). fairseq pads sources on the left; right padding with masks
    gives the same results (see model/transformer.py).
    """
    b = len(src_seqs)
    s, t = max(map(len, src_seqs)), max(map(len, tgt_seqs))
    src = torch.full((b, s), PAD, dtype=torch.long)
    target = torch.full((b, t), PAD, dtype=torch.long)
    prev = torch.full((b, t), PAD, dtype=torch.long)
    for i, (x, y) in enumerate(zip(src_seqs, tgt_seqs)):
        src[i, : len(x)] = torch.tensor(x)
        target[i, : len(y)] = torch.tensor(y)
        prev[i, 0] = EOS  # fairseq move_eos_to_beginning
        prev[i, 1 : len(y)] = target[i, : len(y) - 1]
    return src, prev, target
