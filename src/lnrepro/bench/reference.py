"""The reference the project's training step is compared with: a Transformer as a user would write it.

Deliberately "what a user would write" from the PyTorch documentation, not a tuned implementation and not a
copy of the project's model: ``torch.nn.Transformer(..., batch_first=True, norm_first=True)`` with token
embeddings scaled by sqrt(d_model), fixed sinusoidal positions, embedding dropout, an output projection tied
to the target embedding, padding masks and a causal mask, ``F.cross_entropy(label_smoothing=0.1)`` and
``torch.optim.AdamW``. Its shape and parameter count equal the project's Pre-LN model, so the two do the same
model FLOPs. What differs, as it would for that user: nn.Transformer applies its ``dropout`` to the attention
probabilities and after the FFN activation too (the project: attention_dropout = activation_dropout = 0),
packs q/k/v in one in-projection, and a position counts from 0 instead of fairseq's padding_idx + 1.
"""

from __future__ import annotations

import contextlib
import math
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..model import ModelConfig
from ..vocab import PAD
from .sizes import LABEL_SMOOTHING, OPTIM


def sinusoids(length: int, dim: int) -> torch.Tensor:
    """The "Attention is all you need" table [length, dim]: sin on even, cos on odd features."""
    pos = torch.arange(length, dtype=torch.float).unsqueeze(1)
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)
    return table


class ReferenceTransformer(nn.Module):
    """Encoder-decoder on ``torch.nn.Transformer``; ``forward(src, prev)`` returns logits [B, T, V]."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.scale = math.sqrt(d)
        self.src_embed = nn.Embedding(cfg.vocab_size, d, padding_idx=PAD)
        self.tgt_embed = nn.Embedding(cfg.vocab_size, d, padding_idx=PAD)
        self.register_buffer("positions", sinusoids(cfg.max_positions, d), persistent=False)
        self.dropout = nn.Dropout(cfg.dropout)
        with warnings.catch_warnings():  # "enable_nested_tensor is True, but ... norm_first was True": harmless
            warnings.simplefilter("ignore", UserWarning)
            self.transformer = nn.Transformer(d, cfg.heads, cfg.encoder_layers, cfg.decoder_layers, cfg.ffn_dim,
                                              cfg.dropout, batch_first=True, norm_first=True)
        self.out = nn.Linear(d, cfg.vocab_size, bias=False)
        self.out.weight = self.tgt_embed.weight  # weight tying, as the project shares its decoder embedding

    def embed(self, embedding: nn.Embedding, tokens: torch.Tensor) -> torch.Tensor:
        return self.dropout(embedding(tokens) * self.scale + self.positions[: tokens.size(1)])

    def forward(self, src: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        src_pad, tgt_pad = src.eq(PAD), prev.eq(PAD)
        t = prev.size(1)
        causal = torch.ones(t, t, dtype=torch.bool, device=prev.device).triu(1)  # True = may not attend
        h = self.transformer(self.embed(self.src_embed, src), self.embed(self.tgt_embed, prev), tgt_mask=causal,
                             src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
                             memory_key_padding_mask=src_pad, tgt_is_causal=True)
        return self.out(h)


def reference_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    """torch.optim.AdamW with the documentation's defaults (the foreach implementation) and the bench's settings."""
    return torch.optim.AdamW(model.parameters(), lr=OPTIM.lr_max, betas=OPTIM.betas, eps=OPTIM.eps,
                             weight_decay=OPTIM.weight_decay)


def reference_step(model: nn.Module, opt: torch.optim.Optimizer, src: torch.Tensor, prev: torch.Tensor,
                   target: torch.Tensor, ntok: int, bf16: bool) -> float:
    """One update the way the PyTorch AMP recipe writes it: forward and loss under autocast, then backward, step."""
    amp = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    with amp:
        logits = model(src, prev)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), target.view(-1), ignore_index=PAD,
                               label_smoothing=LABEL_SMOOTHING, reduction="sum")
    opt.zero_grad(set_to_none=True)
    (loss / ntok).backward()
    opt.step()
    return loss.item() / ntok
