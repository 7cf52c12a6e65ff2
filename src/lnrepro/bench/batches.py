"""Real training batches for the bench: the project's batching, a random draw of its batches, their padding.

The batches are those training builds (lnrepro.train.batching.batch_by_size: fairseq's length-sorted,
token-bounded batches, then collate: right padding to the longest sentence), drawn at random, so A and B
of every comparison see identical, realistic shapes and padding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..train.batching import batch_by_size, collate
from ..vocab import PAD
from .sizes import BATCH_MULTIPLE

if TYPE_CHECKING:
    from ..model import Transformer


@dataclass(frozen=True)
class Batch:
    """One collated batch and its token counts (padding excluded)."""

    src: torch.Tensor  # [B, S]
    prev: torch.Tensor  # [B, T] decoder input, EOS first
    target: torch.Tensor  # [B, T]
    ntok: int  # target tokens: the loss' normalizer, what tokens/s counts
    src_tokens: int
    src_len: float  # token-weighted mean source length, sum(n^2) / sum(n): the attention span of a token
    tgt_len: float

    @property
    def shape(self) -> dict:
        """Sizes and token counts, for the JSON."""
        return {"sentences": self.src.size(0), "src_width": self.src.size(1), "tgt_width": self.target.size(1),
                "src_tokens": self.src_tokens, "target_tokens": self.ntok}

    def flops(self, model: "Transformer", padded: bool = False) -> float:
        """Training FLOPs of this batch as ``Transformer.flops_per_batch`` counts them.

        Unpadded (the default): real tokens, each attending over its own sentence's length, the model FLOPs of
        MFU. ``padded``: every position of the padded tensors, what the kernels actually compute.
        """
        if padded:
            b, s, t = self.src.size(0), self.src.size(1), self.target.size(1)
            return model.flops_per_batch(b * s, b * t, s, t)
        return model.flops_per_batch(self.src_tokens, self.ntok, self.src_len, self.tgt_len)


def make_batch(src_seqs: list[list[int]], tgt_seqs: list[list[int]]) -> Batch:
    """collate() the pairs (as the loop does once per run) and count their tokens."""
    src, prev, target = collate(src_seqs, tgt_seqs)
    s_lens, t_lens = [len(x) for x in src_seqs], [len(y) for y in tgt_seqs]
    return Batch(src, prev, target, ntok=int(target.ne(PAD).sum()), src_tokens=int(src.ne(PAD).sum()),
                 src_len=sum(n * n for n in s_lens) / sum(s_lens), tgt_len=sum(n * n for n in t_lens) / sum(t_lens))


def index_batches(src: list[list[int]], tgt: list[list[int]], max_tokens: int, seed: int) -> list[list[int]]:
    """The training batches of (src, tgt): batch_by_size with the loop's settings."""
    return batch_by_size([len(s) for s in src], [len(t) for t in tgt], max_tokens, seed, BATCH_MULTIPLE)


def sample_batches(src: list[list[int]], tgt: list[list[int]], n: int, max_tokens: int, seed: int) -> list[Batch]:
    """``n`` of the training batches, drawn at random without replacement (seeded)."""
    batches = index_batches(src, tgt, max_tokens, seed)
    pick = np.random.RandomState(seed).choice(len(batches), size=min(n, len(batches)), replace=False)
    return [make_batch([src[i] for i in batches[j]], [tgt[i] for i in batches[j]]) for j in pick.tolist()]


def padded_fraction(batches: list[Batch]) -> dict:
    """Padding positions over all positions of the source and target tensors (prev pads as target does)."""
    src_all = sum(b.src.numel() for b in batches)
    tgt_all = sum(b.target.numel() for b in batches)
    src_pad = src_all - sum(b.src_tokens for b in batches)
    tgt_pad = tgt_all - sum(b.ntok for b in batches)
    return {"src": src_pad / src_all, "tgt": tgt_pad / tgt_all, "all": (src_pad + tgt_pad) / (src_all + tgt_all),
            "batches": len(batches)}


def epoch_padding(src: list[list[int]], tgt: list[list[int]], max_tokens: int, seed: int) -> dict:
    """padded_fraction over every batch of one epoch, from the lengths alone (no tensors built)."""
    src_all = tgt_all = src_real = tgt_real = 0
    batches = index_batches(src, tgt, max_tokens, seed)
    for idx in batches:
        s, t = [len(src[i]) for i in idx], [len(tgt[i]) for i in idx]
        src_all += len(idx) * max(s)
        tgt_all += len(idx) * max(t)
        src_real += sum(s)
        tgt_real += sum(t)
    return {"src": 1 - src_real / src_all, "tgt": 1 - tgt_real / tgt_all,
            "all": 1 - (src_real + tgt_real) / (src_all + tgt_all), "batches": len(batches)}
