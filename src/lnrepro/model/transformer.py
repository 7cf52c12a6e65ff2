"""The encoder-decoder Transformer of the paper in one file; where its LayerNorms go is ``model.norm``.

Modeled on nanoGPT's ``model.py`` (one config dataclass, small modules, one init method, ``num_params``,
a FLOPs estimate) and faithful to fairseq 0.9.0's ``transformer_iwslt_de_en`` in everything that affects
initialization and optimization (Xiong et al. 2020 trained with fairseq). Each sublayer's residual connection
and normalization is the torch module of the norm variant ``model.norm`` (``lnrepro.model.variants``, one module
per variant, with its initialization hooks); whether each stack ends with a LayerNorm comes from its
description in ``lnrepro.norms``. docs/architecture.md describes how the pieces fit together.

- fairseq/models/transformer.py (0.9.0): ``TransformerEncoder``/``TransformerDecoder``: token embeddings scaled
  by sqrt(d_model), sinusoidal positions added, dropout; after the last layer one LayerNorm only when
  ``normalize_before`` (Pre-LN; ``NormVariant.final_norm``); decoder output through the (shared) embedding
  matrix, no bias; ``Embedding()``: N(0, d^-0.5) with the padding row zero; ``Linear()``: Xavier-uniform,
  zero bias.
- fairseq/modules/transformer_layer.py (0.9.0): ``TransformerEncoderLayer``/``TransformerDecoderLayer``:
  each sublayer is ``residual = x; [LN if pre]; x = F(x); dropout; x = residual + x; [LN if post]``
  (the variant's ``Residual.forward``, registered under fairseq's LayerNorm names: ``RESIDUAL_NAMES``); the FFN
  is fc1 -> ReLU -> dropout(activation_dropout) -> fc2.
- fairseq/modules/multihead_attention.py (0.9.0): separate q/k/v projections, Xavier-uniform with gain
  1/sqrt(2) (PyTorch's default bias init kept), out_proj Xavier-uniform with zero bias, q scaled by
  head_dim^-0.5, dropout on the attention probabilities; in incremental decoding (``incremental_state``) the
  self-attention keys/values grow by one step per call and the encoder-attention ones are computed once
  (``static_kv``): ``KVCache``/``LayerCache``, the one cache of ``decode`` and of beam search, written in place
  into buffers and moved row by row where fairseq concatenates and index-selects (``reorder_incremental_state``).
- fairseq/modules/sinusoidal_positional_embedding.py (0.9.0): half sin, half cos, frequencies
  exp(-i * log(10000) / (half_dim - 1)), positions numbered from padding_idx + 1 (fairseq/utils.py
  ``make_positions``), the padding position's row zero; incremental decoding uses position padding_idx + step.

Documented deviations that do not change results: sources are padded on the RIGHT (fairseq pads them on the
left); positions count only non-padding tokens either way and padded keys are masked. The decoder's
self-attention uses the causal mask only (fairseq also masks padded keys; with right padding no real query can
see a padded key, so only the outputs at padded positions, which the loss ignores, differ). Attention is
computed as fairseq computes it, with explicit matmuls (``attend``), except that head_dim^-0.5 scales the
fp32 scores rather than q (the same values when head_dim is a power of 4, as the Multi30k preset's 64; equal
up to rounding otherwise, as the paper size's 128).

Speed on the CPU (benchmarks/train_throughput.py; each choice says what it measured): attention through
matmuls instead of SDPA's flash kernel; q/k/v as one GEMM (``Attention._project``); the decoder's work on the
non-padding target positions only (``Rows``; the logits at padded positions are zero); dropout masks from
16-bit integer draws (``dropout``); in beam search, one copy of the encoder attention's keys/values per
sentence for all its beams (``shared_attend``: bitwise the values of repeated keys; measured +4% sentences/s
scoring the Multi30k test set, fp32); rows of fewer keys than one CPU vector padded with masked keys
(``short_keys``: +9-10% tokens/s of a training update at the CPU study's size, where sentences are 10-15
tokens); in training, the logits of the non-padding positions only (``decode(..., packed=True)``, +4%). These
compute the same function (equal up to rounding; dropout draws another random stream, with p rounded to
2^-17).

References: Vaswani et al. 2017; Xiong et al. 2020 (arXiv 2002.04745); fairseq 0.9.0 (github.com/pytorch/fairseq,
tag v0.9.0); nanoGPT (github.com/karpathy/nanoGPT, model.py).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..errors import LnReproError
from ..norms import norm_variant
from .config import ModelConfig
from .variants import Residual, residual_class
from ..vocab import PAD


# --------------------------------------------------------------------------------------------------------------
# Encoder output and key/value cache (the beam search's interface)


@dataclass
class EncoderOut:
    """Encoder states [B,S,D] and the source padding mask [B,S] (True at padding)."""

    out: torch.Tensor
    pad_mask: torch.Tensor

    def reorder(self, index: torch.Tensor) -> "EncoderOut":
        """Select/repeat batch rows (beam search: expand to B*beam, or follow surviving hypotheses)."""
        return EncoderOut(self.out.index_select(0, index), self.pad_mask.index_select(0, index))

    def move(self, dst: torch.Tensor, src: torch.Tensor, rows: int) -> "EncoderOut":
        """Rows ``dst`` <- rows ``src`` (disjoint sets) in place, then the first ``rows`` rows (search: the rows of
        finished sentences take the last ones')."""
        self.out[dst], self.pad_mask[dst] = self.out[src], self.pad_mask[src]
        return EncoderOut(self.out[:rows], self.pad_mask[:rows])


KV = tuple[torch.Tensor, torch.Tensor]  # keys, values [rows, heads, len, head_dim]
Move = tuple[torch.Tensor, torch.Tensor, int]  # (dst, src, count): rows dst <- rows src, then the first count


class LayerCache:
    """One decoder layer's keys/values in incremental decoding (fairseq's incremental_state for the layer).

    The self-attention's are written in place into buffers of the cache's rows and capacity (fairseq concatenates
    prev_key and the new keys every step); the encoder attention's are computed once (fairseq's static_kv), one
    row per encoder row: per sentence in beam search, whose beams share it (``shared_attend``).
    """

    def __init__(self, cache: "KVCache") -> None:
        self.cache = cache
        self.self_kv: KV | None = None  # [>= rows, heads, >= length, head_dim] each
        self.encoder_kv: KV | None = None  # [>= cache.encoder_rows, heads, src_len, head_dim] each

    def self_attention(self, k: torch.Tensor, v: torch.Tensor) -> KV:
        """Write this step's keys/values [n, heads, t, head_dim] after the ``length`` positions so far and return
        views of all positions of the first n rows."""
        n, start, end = k.size(0), self.cache.length, self.cache.length + k.size(2)
        if self.self_kv is None or n > self.self_kv[0].size(0) or end > self.self_kv[0].size(2):
            self._reserve(k, n, end)
        kb, vb = self.self_kv  # type: ignore[misc]
        kb[:n, :, start:end] = k
        vb[:n, :, start:end] = v
        return kb[:n, :, :end], vb[:n, :, :end]

    def _reserve(self, like: torch.Tensor, rows: int, positions: int) -> None:
        """Buffers of at least ``rows`` rows and ``positions`` positions, allocated at the first step (head shape and
        dtype, bf16 under autocast, are known then) with the cache's rows and capacity, and grown (at least doubled)
        for callers that decode more than they asked for; the positions so far are copied."""
        have_rows, have_pos = (0, 0) if self.self_kv is None else self.self_kv[0].shape[0:3:2]
        if rows <= have_rows and positions <= have_pos:
            return
        shape = (have_rows if rows <= have_rows else max(rows, 2 * have_rows, self.cache.rows), like.size(1),
                 have_pos if positions <= have_pos else max(positions, 2 * have_pos, self.cache.capacity),
                 like.size(3))
        grown = (like.new_empty(shape), like.new_empty(shape))
        for new, old in zip(grown, self.self_kv or ()):
            new[:have_rows, :, : self.cache.length] = old[:, :, : self.cache.length]
        self.self_kv = grown

    def encoder_attention(self, compute_kv: Callable[[], KV]) -> KV:
        """The encoder output's keys/values: ``compute_kv()`` at the first step, stored contiguous so that no step's
        attention copies them, and the first ``encoder_rows`` of them after (the encoder output does not change)."""
        if self.encoder_kv is None:
            k, v = compute_kv()
            self.encoder_kv = (k.contiguous(), v.contiguous())
            self.cache.encoder_rows = k.size(0)
        n = self.cache.encoder_rows
        return self.encoder_kv[0][:n], self.encoder_kv[1][:n]

    def reorder(self, index: torch.Tensor, shared_encoder: bool) -> None:
        length = self.cache.length
        if self.self_kv is not None:
            picked = [buf[:, :, :length].index_select(0, index) for buf in self.self_kv]
            self._reserve(picked[0], index.numel(), length)
            for buf, rows in zip(self.self_kv, picked):
                buf[: index.numel(), :, :length] = rows
        if self.encoder_kv is not None and not shared_encoder:
            n = self.cache.encoder_rows
            self.encoder_kv = (self.encoder_kv[0][:n].index_select(0, index),
                               self.encoder_kv[1][:n].index_select(0, index))

    def move(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        for buf in self.self_kv or ():
            self.cache.copy_rows(buf[:, :, : self.cache.length], dst, src)

    def move_encoder(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        for buf in self.encoder_kv or ():
            self.cache.copy_rows(buf, dst, src)


class KVCache:
    """The decoder's cache: one ``LayerCache`` per layer; ``length`` = target positions already decoded.

    Buffers of ``rows`` rows and ``capacity`` positions (beam search knows both: they are allocated once per batch
    and no step concatenates or index-selects the whole cache; a caller that does not know them gets buffers
    grown as it decodes). fairseq's ``reorder_incremental_state`` index-selects every row at every step of beam
    search; here ``reorder`` does (a general reorder, or each sentence expanded into its beams, which keep one
    row of encoder keys/values per sentence) and ``move`` copies only the rows whose hypothesis changes.
    """

    def __init__(self, num_layers: int, rows: int = 0, capacity: int = 0) -> None:
        self.layers = [LayerCache(self) for _ in range(num_layers)]
        self.length = 0
        self.rows, self.capacity = rows, capacity  # of the buffers at the first step
        self.encoder_rows = 0  # encoder keys/values in use (set at the first step): per sentence, or per row
        self.scratch: torch.Tensor | None = None  # holds the rows being copied (copy_rows)

    def copy_rows(self, x: torch.Tensor, dst: torch.Tensor, src: torch.Tensor) -> None:
        """x[dst] = x[src] through a scratch buffer allocated once: advanced indexing on these strided views
        is several times slower, and a fresh temporary each time costs page faults."""
        shape = (src.numel(), *x.shape[1:])
        size = src.numel() * x[0].numel()
        if self.scratch is None or self.scratch.numel() < size or self.scratch.dtype != x.dtype:
            grown = 2 * self.scratch.numel() if self.scratch is not None else 0  # positions grow step by step
            self.scratch = x.new_empty(max(size, grown, self.rows * x[0].numel()))
        rows = self.scratch[:size].view(shape)
        torch.index_select(x, 0, src, out=rows)
        x.index_copy_(0, dst, rows)

    def reorder(self, index: torch.Tensor, shared_encoder: bool = False) -> None:
        """Row i becomes row ``index[i]`` (rows may repeat; there may be more or fewer than before). The encoder's
        keys/values are selected likewise, one per row, unless ``shared_encoder``: beam search's expansion of each
        sentence into its consecutive beams, which then share the sentence's row (``shared_attend``)."""
        for layer in self.layers:
            layer.reorder(index, shared_encoder)
        if not shared_encoder:
            self.encoder_rows = index.numel()

    def move(self, dst: torch.Tensor, src: torch.Tensor, sentences: Move | None = None) -> None:
        """Rows ``dst`` <- rows ``src`` (disjoint sets), only those copied; the next step decodes the first rows it
        is given. ``sentences`` (dst, src, count) moves the encoder's keys/values likewise and keeps the first
        count of them; None leaves them (moves among the beams of a sentence)."""
        if dst.numel():
            for layer in self.layers:
                layer.move(dst, src)
        if sentences is not None:
            s_dst, s_src, self.encoder_rows = sentences
            if s_dst.numel():
                for layer in self.layers:
                    layer.move_encoder(s_dst, s_src)


@dataclass
class Rows:
    """The non-padding positions of a right-padded [B,T] batch: the decoder's position-wise work (projections,
    FFN, LayerNorms, dropout, residuals) runs on these N rows only, attention on the padded layout.

    Targets are about 12.5% padding in fairseq's batches of real sentences (sources 0.6%: they are sorted by
    source length first), so skipping it saves an eighth of the decoder's matmuls and element-wise work;
    packing and unpacking cost a few copies per attention sublayer. Measured (real batches, interleaved):
    +13% tokens/s at the paper size (bf16), +6% (bf16) and +10% (fp32) at the Multi30k preset size.
    """

    index: torch.Tensor  # [N] flat positions b * T + t that are not padding
    batch: int
    length: int

    @classmethod
    def of(cls, tokens: torch.Tensor) -> "Rows":
        return cls(tokens.reshape(-1).ne(PAD).nonzero().squeeze(1), tokens.size(0), tokens.size(1))

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """[B,T,...] -> [N,...]."""
        return x.reshape(self.batch * self.length, *x.shape[2:]).index_select(0, self.index)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """[N,W] -> [B,T,W], zeros at the padded positions."""
        full = x.new_zeros(self.batch * self.length, x.size(-1)).index_copy_(0, self.index, x)
        return full.view(self.batch, self.length, -1)


# --------------------------------------------------------------------------------------------------------------
# Building blocks


def sinusoidal_table(num_positions: int, dim: int, padding_idx: int = PAD) -> torch.Tensor:
    """fairseq 0.9.0 SinusoidalPositionalEmbedding.get_embedding: [num_positions, dim], padding row zero."""
    half_dim = dim // 2
    scale = math.log(10000) / (half_dim - 1)
    freqs = torch.exp(torch.arange(half_dim, dtype=torch.float) * -scale)
    args = torch.arange(num_positions, dtype=torch.float).unsqueeze(1) * freqs.unsqueeze(0)
    table = torch.cat([torch.sin(args), torch.cos(args)], dim=1).view(num_positions, -1)
    if dim % 2 == 1:
        table = torch.cat([table, torch.zeros(num_positions, 1)], dim=1)
    table[padding_idx, :] = 0
    return table


class SinusoidalPositions(nn.Module):
    """Fixed positions (a non-persistent buffer: not in the state dict, as in fairseq)."""

    def __init__(self, dim: int, max_positions: int, padding_idx: int = PAD) -> None:
        super().__init__()
        self.dim, self.padding_idx = dim, padding_idx
        # fairseq: init_size = num_embeddings + padding_idx + 1
        self.register_buffer("table", sinusoidal_table(max_positions + padding_idx + 1, dim, padding_idx),
                             persistent=False)

    def _table(self, needed: int) -> torch.Tensor:
        if needed > self.table.size(0):  # fairseq recomputes a larger table on demand
            self.table = sinusoidal_table(needed, self.dim, self.padding_idx).to(self.table.device)
        return self.table

    def forward(self, tokens: torch.Tensor, start: int | None = None) -> torch.Tensor:
        """[B,T,D] positions; ``start`` = tokens already decoded (incremental decoding), else make_positions."""
        if start is not None:
            # fairseq incremental: position padding_idx + step (step from 1) for the newest tokens
            pos = self.padding_idx + start + 1 + torch.arange(tokens.size(1), device=tokens.device)
            pos = pos.unsqueeze(0).expand_as(tokens)
        else:
            mask = tokens.ne(self.padding_idx).int()
            pos = (torch.cumsum(mask, dim=1) * mask).long() + self.padding_idx  # fairseq utils.make_positions
        return self._table(int(pos.max()) + 1)[pos]


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout as ``F.dropout`` (zero with probability ``p``, scale the rest), with a cheaper mask.

    On the CPU ``F.dropout`` draws its mask with ``bernoulli_``, about 4.5 ns per element: a tenth of a bf16
    training step. Here each element gets 16 random bits of the default generator (``random_`` filling 64-bit
    words, four draws per word: about 0.3 ns per element) and is kept when they are below k = round((1-p) 2^16):
    dropped with probability 1 - k/2^16, within 2^-17 of p, and the kept values are scaled by 2^16/k, so the
    output is unbiased exactly (F.dropout scales by 1/(1-p)). The mask is applied in the input's dtype
    (multiplying by, or casting, a bool tensor is a scalar loop on the CPU; uint8 casts are vectorized). The
    same function as F.dropout up to that rounding of p, from another random stream; the default generator is
    seeded and checkpointed, so runs stay reproducible and resumable. Other devices keep ``F.dropout``.
    """
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, training=True)
    kept = round((1.0 - p) * 2 ** 16)  # of the 2^16 values of a draw
    if kept == 2 ** 16:  # p < 2^-17
        return x
    if kept == 0:  # p > 1 - 2^-17
        return x * 0.0
    words = torch.empty((x.numel() + 3) // 4, dtype=torch.int64, device=x.device).random_(-2 ** 63, None)
    draws = words.view(torch.int16)[: x.numel()].view(x.shape)  # uniform over [-2^15, 2^15)
    keep = (draws < kept - 2 ** 15).view(torch.uint8).to(x.dtype)  # bool -> uint8 -> dtype: bool casts are slow
    return x.mul(keep).mul_(2 ** 16 / kept)


class Dropout(nn.Module):
    """``dropout`` as a module (what ``nn.Dropout`` was here: follows ``train()``/``eval()``, no parameters)."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_pad: torch.Tensor | None, causal: bool,
           p_drop: float, training: bool) -> torch.Tensor:
    """softmax(q k^T / sqrt(head_dim), masked) v for q [B,H,T,hd], k/v [B,H,S,hd]; key_pad [B,S] True at padding.

    As fairseq 0.9.0 multihead_attention.py computes it: scores in the input's dtype (bf16 under autocast),
    padded and future keys set to -inf, softmax in fp32 (``utils.softmax(..., dim=-1)`` upcasts), the
    probabilities cast back to the input's dtype, dropout on them, then @ v. Written out rather than through
    ``F.scaled_dot_product_attention``: on the CPU its flash kernel's backward is several times slower than
    these matmuls at training shapes (short sentences, head_dim 64), and bf16 softmax kernels are slower than
    fp32 ones on short rows. fairseq scales q before q @ k^T; the scale is applied to the fp32 scores here
    (exactly equal when head_dim is a power of 4, e.g. 64; otherwise equal up to rounding).
    ``causal``: query i (of the last T of S positions) sees keys 0..i + S - T (incremental decoding included).
    k/v (and key_pad) may have fewer rows than q, B / g: then g consecutive query rows share one row of keys
    (the beams of a sentence share its encoder output; ``shared_attend``).
    """
    if k.size(0) != q.size(0):
        return shared_attend(q, k, v, key_pad, p_drop, training)
    tq, tk = q.size(-2), k.size(-2)
    k, v, key_pad, short = pad_short_keys(q, k, v, key_pad, causal)
    scores = torch.matmul(q, k.transpose(-2, -1)).float().mul_(q.size(-1) ** -0.5)
    if key_pad is not None:
        scores.masked_fill_(key_pad[:, None, None, :], float("-inf"))
    if causal and tq > 1:
        future = torch.ones(tq, tk + short, dtype=torch.bool, device=q.device).triu_(tk - tq + 1)
        scores.masked_fill_(future, float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(v.dtype)
    return torch.matmul(dropout(probs, p_drop, training), v)


# fp32 values in one of the CPU's vectors (aten's kernels are built for AVX512 and AVX2).
_VECTOR_FLOATS = {"AVX512": 16, "AVX2": 8}


@functools.cache
def _cpu_vector_floats() -> int:
    """fp32 values in one vector of the kernels aten dispatches to on this CPU (1: none of ``_VECTOR_FLOATS``)."""
    return _VECTOR_FLOATS.get(torch.backends.cpu.get_cpu_capability(), 1)


def pad_short_keys(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_pad: torch.Tensor | None, causal: bool
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, int]:
    """(k, v, key_pad, added): keys and values padded with ``short_keys`` zero rows, masked (the causal mask of
    ``attend`` covers every key after the last, so a causal attention without padding needs no key mask)."""
    tk = k.size(-2)
    short = short_keys(q, tk)
    if not short:
        return k, v, key_pad, 0
    k, v = F.pad(k, (0, 0, 0, short)), F.pad(v, (0, 0, 0, short))
    if key_pad is not None:
        key_pad = F.pad(key_pad, (0, short), value=True)
    elif not causal:
        key_pad = torch.arange(tk + short, device=q.device).ge(tk).unsqueeze(0)
    return k, v, key_pad, short


def short_keys(q: torch.Tensor, tk: int) -> int:
    """How many masked keys ``attend`` adds so that a softmax row fills one CPU vector of fp32 values.

    aten's CPU softmax reduces each row with ``vec::reduce_all`` and ``vec::map`` (ATen/cpu/vec/functional_base.h),
    which handle a row shorter than one vector element by element. Measured (one thread, AVX512, 7,168 rows):
    softmax forward 1.41 ms for rows of 14 keys against 0.15 ms for 16, backward 0.55 against 0.04. Sentences
    of Multi30k are 10-15 tokens, so every decoder self-attention of a training step took that path. Padded keys
    are masked to -inf: the probabilities of the real keys are those of the unpadded row up to the order of the
    softmax's sums. Only full-sequence attention (tq > 1: training, teacher-forced scoring) pads; incremental
    decoding attends one query over a cache, where copying the keys would cost more than the softmax saves.
    """
    lanes = _cpu_vector_floats() if q.device.type == "cpu" else 1
    return lanes - tk if q.size(-2) > 1 and tk < lanes else 0


def shared_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_pad: torch.Tensor | None, p_drop: float,
                  training: bool) -> torch.Tensor:
    """``attend`` (not causal) for q [B*g,H,T,hd] whose g consecutive rows share the keys/values k/v [B,H,S,hd]
    and key_pad [B,S]: the encoder attention of beam search, whose beams of one sentence share its encoder output.

    Each of the g query rows of a group is multiplied with the shared keys in its own matmul, of the shapes
    ``attend`` would multiply if the keys were repeated g times, so the results are exactly ``attend``'s on
    repeated keys (one matmul of g query rows per group would round differently). The keys are never repeated:
    beam search stores and moves one copy per sentence instead of one per hypothesis.
    """
    b, g = k.size(0), q.size(0) // k.size(0)
    k, v, key_pad, _ = pad_short_keys(q, k, v, key_pad, False)
    groups = q.view(b, g, *q.shape[1:])
    out = []
    for j in range(g):
        scores = torch.matmul(groups[:, j], k.transpose(-2, -1)).float().mul_(q.size(-1) ** -0.5)
        if key_pad is not None:
            scores.masked_fill_(key_pad[:, None, None, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1).to(v.dtype)
        out.append(torch.matmul(dropout(probs, p_drop, training), v))
    return torch.stack(out, dim=1).view(q.shape[:-1] + v.shape[-1:])


class Attention(nn.Module):
    """Multi-head attention with fairseq MultiheadAttention's parameters and semantics (``attend``)."""

    def __init__(self, d_model: int, heads: int, attention_dropout: float) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, d_model // heads
        self.attention_dropout = attention_dropout
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def _split(self, x: torch.Tensor) -> torch.Tensor:  # [B,T,D] -> [B,H,T,hd]
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.head_dim).transpose(1, 2)

    def _project(self, x: torch.Tensor, rows: Rows | None, *projs: nn.Linear) -> tuple[torch.Tensor, ...]:
        """x [B,T,D] (or its ``rows`` [N,D]) through one or more projections as one GEMM over their stacked
        weights, each split into heads [B,H,T,hd] (contiguous, as the attention matmuls need them).

        One GEMM and, under autocast, one cast of x instead of one per projection, and one head-split copy
        instead of one per tensor; the stacked weights are a copy of len(projs) x D x D values per call,
        amortized over the B x T rows of a batch (measured: +2.4% tokens/s at the paper size, bf16).
        """
        if len(projs) == 1:
            y = projs[0](x)
        else:
            y = F.linear(x, torch.cat([p.weight for p in projs]), torch.cat([p.bias for p in projs]))
        if rows is not None:
            y = rows.unpack(y)
        b, t, _ = y.shape
        return y.view(b, t, len(projs), self.heads, self.head_dim).permute(2, 0, 3, 1, 4).contiguous().unbind(0)

    def _kv(self, memory: torch.Tensor) -> KV:
        k, v = self._project(memory, None, self.k_proj, self.v_proj)
        return k, v

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None, key_pad: torch.Tensor | None = None,
                causal: bool = False, cache: LayerCache | None = None, rows: Rows | None = None) -> torch.Tensor:
        """x [B,T,D] queries, or [N,D]: the ``rows`` of a padded [B,T] batch (output likewise); memory [B,S,D]
        keys/values (None: self-attention); key_pad [B,S] True at padding; ``cache``: the decoder layer's
        keys/values in incremental decoding."""
        if memory is None and cache is not None:
            # Incremental decoding: one new position per row, too few rows to pay for stacking the weights.
            q, k, v = (self._split(p(x)) for p in (self.q_proj, self.k_proj, self.v_proj))
            k, v = cache.self_attention(k, v)
        elif memory is None:
            q, k, v = self._project(x, rows, self.q_proj, self.k_proj, self.v_proj)
        else:
            (q,) = self._project(x, rows, self.q_proj)
            k, v = self._kv(memory) if cache is None else cache.encoder_attention(lambda: self._kv(memory))
        y = attend(q, k, v, key_pad, causal, self.attention_dropout, self.training)
        b, _, t, _ = y.shape
        y = y.transpose(1, 2).reshape(b, t, self.heads * self.head_dim)
        return self.out_proj(y if rows is None else rows.pack(y))


class FeedForward(nn.Module):
    """fc1 -> ReLU -> dropout(activation_dropout) -> fc2 (fairseq transformer_layer.py)."""

    def __init__(self, d_model: int, ffn_dim: int, activation_dropout: float) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, d_model)
        self.activation_dropout = Dropout(activation_dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.activation_dropout(F.relu(self.fc1(x))))


# fairseq's names of the sublayers' LayerNorms; each sublayer's residual module is registered under its name, so
# that Post-LN's and Pre-LN's state-dict keys (and the digests of their checkpoints) stay fairseq's.
RESIDUAL_NAMES = {"self_attn": "self_attn_layer_norm", "encoder_attn": "encoder_attn_layer_norm",
                  "ffn": "final_layer_norm"}


class _Layer(nn.Module):
    """What encoder and decoder layers share: self-attention and FFN sublayers, each wrapped by the residual
    module of ``model.norm`` (``lnrepro.model.variants``; one per sublayer, or one ``residual`` per layer). A
    layer passes its input ``x`` to those modules only: it is the stack's state, the hidden tensor unless the
    variant carries more (``Residual.stream``)."""

    def __init__(self, cfg: ModelConfig, cross_attention: bool = False) -> None:
        super().__init__()
        residual = residual_class(cfg.norm)
        if residual.per_layer:
            self.residual = residual(cfg)
        # Created in fairseq's order, so a seed gives the same initial weights (residual modules draw nothing).
        self.self_attn = Attention(cfg.d_model, cfg.heads, cfg.attention_dropout)
        self._add_residual("self_attn", residual, cfg)
        if cross_attention:
            self.encoder_attn = Attention(cfg.d_model, cfg.heads, cfg.attention_dropout)
            self._add_residual("encoder_attn", residual, cfg)
        self.ffn = FeedForward(cfg.d_model, cfg.ffn_dim, cfg.activation_dropout)
        self._add_residual("ffn", residual, cfg)
        self.dropout = Dropout(cfg.dropout)

    def _add_residual(self, sublayer: str, residual: type[Residual], cfg: ModelConfig) -> None:
        if not residual.per_layer:
            self.add_module(RESIDUAL_NAMES[sublayer], residual(cfg))

    def residuals(self) -> list[Residual]:
        """The layer's residual modules, each once."""
        return [m for m in self.children() if isinstance(m, Residual)]

    def _sublayer(self, sublayer: str, x: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """The sublayer ``fn`` with its residual connection, normalization and dropout, as the variant computes it."""
        residual = self.residual if "residual" in self._modules else self._modules[RESIDUAL_NAMES[sublayer]]
        return residual(x, fn, self.dropout)


class EncoderLayer(_Layer):
    """Self-attention and FFN sublayers."""

    def forward(self, x: torch.Tensor, pad_mask: torch.Tensor | None) -> torch.Tensor:
        x = self._sublayer("self_attn", x, lambda h: self.self_attn(h, key_pad=pad_mask))
        return self._sublayer("ffn", x, self.ffn)


class DecoderLayer(_Layer):
    """Causal self-attention, encoder attention and FFN sublayers."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg, cross_attention=True)

    def forward(self, x: torch.Tensor, enc: EncoderOut, cache: LayerCache | None = None,
                rows: Rows | None = None, self_pad: torch.Tensor | None = None) -> torch.Tensor:
        """x [B,T,D], or [N,D]: only the ``rows`` of a padded batch (the attention sublayers unpack them);
        ``self_pad`` [B,T] True at padded target positions, masked as keys of the self-attention (fairseq's
        self_attn_padding_mask; only ``decode(..., padded=True)`` passes it)."""
        x = self._sublayer("self_attn", x, lambda h: self.self_attn(h, key_pad=self_pad, causal=True, cache=cache,
                                                                   rows=rows))
        x = self._sublayer("encoder_attn", x, lambda h: self.encoder_attn(h, memory=enc.out, key_pad=enc.pad_mask,
                                                                         cache=cache, rows=rows))
        return self._sublayer("ffn", x, self.ffn)


# --------------------------------------------------------------------------------------------------------------
# The model


class Transformer(nn.Module):
    """Encoder-decoder Transformer; ``forward(src, prev)`` returns logits [B,T,V]."""

    # decode attends from g consecutive rows to one encoder row when the encoder output has B / g rows (attend):
    # beam search then keeps one encoder row per sentence for all its beams.
    beams_share_encoder = True

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        variant = norm_variant(cfg.norm)  # an unknown model.norm fails here, naming the registered ones
        variant_residual = residual_class(cfg.norm)  # and a described one without its module
        stream = variant_residual.stream
        d, v = cfg.d_model, cfg.vocab_size
        self.embed_scale = math.sqrt(d)  # fairseq: embed_scale = sqrt(embed_dim)
        self.encoder_embed = nn.Embedding(v, d, padding_idx=PAD)
        self.decoder_embed = self.encoder_embed if cfg.share_all_embeddings else nn.Embedding(v, d, padding_idx=PAD)
        # Output projection: the decoder embedding itself when shared (F.linear, no bias), else its own matrix
        # (fairseq: embed_out, N(0, d^-0.5)).
        self.output_projection = None if cfg.share_decoder_embeddings else nn.Linear(d, v, bias=False)
        self.positions = SinusoidalPositions(d, cfg.max_positions, PAD)
        self.dropout = Dropout(cfg.dropout)
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        # What a variant carries from layer to layer beside the hidden tensor (Residual.stream; none for most)
        self.encoder_stream = stream(cfg) if stream is not None else None
        self.decoder_stream = stream(cfg) if stream is not None else None
        # Pre-LN: one final LN after each stack; Post-LN: none (fairseq: layer_norm iff normalize_before); a variant
        # may replace the LN (Residual.final_norm)
        self.encoder_norm = variant_residual.final_norm(cfg) if variant.final_norm else None
        self.decoder_norm = variant_residual.final_norm(cfg) if variant.final_norm else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """fairseq 0.9.0 initialization (the paper analyses the gradients it produces), then the norm variant's
        ``init_weights`` hook of every residual module: the one place the initial weights are set."""
        d = self.cfg.d_model
        for emb in {id(self.encoder_embed): self.encoder_embed, id(self.decoder_embed): self.decoder_embed}.values():
            nn.init.normal_(emb.weight, mean=0.0, std=d ** -0.5)  # fairseq transformer.py Embedding()
            with torch.no_grad():
                emb.weight[PAD].zero_()
        if self.output_projection is not None:
            nn.init.normal_(self.output_projection.weight, mean=0.0, std=d ** -0.5)
        for module in self.modules():
            if isinstance(module, Attention):
                # multihead_attention.py reset_parameters (qkv_same_dim): gain 1/sqrt(2); q/k/v biases keep
                # nn.Linear's default init (uniform(+-1/sqrt(fan_in))), set here again so the method is complete.
                for proj in (module.q_proj, module.k_proj, module.v_proj):
                    nn.init.xavier_uniform_(proj.weight, gain=1 / math.sqrt(2))
                    bound = 1 / math.sqrt(proj.in_features)
                    nn.init.uniform_(proj.bias, -bound, bound)
                nn.init.xavier_uniform_(module.out_proj.weight)
                nn.init.zeros_(module.out_proj.bias)
            elif isinstance(module, FeedForward):
                for fc in (module.fc1, module.fc2):  # transformer_layer.py Linear(): xavier, zero bias
                    nn.init.xavier_uniform_(fc.weight)
                    nn.init.zeros_(fc.bias)
            elif isinstance(module, nn.LayerNorm):  # the stacks' final LayerNorms (and a stream's)
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
        for norm in (self.encoder_norm, self.decoder_norm):  # a variant's own final norm (DyT's): its constants
            if norm is not None and not isinstance(norm, nn.LayerNorm):
                norm.reset_parameters()
        # The variant's initialization, after fairseq's draws: its own parameters and any weights it changes.
        c = self.cfg
        for stack, layers in (("encoder", self.encoder_layers), ("decoder", self.decoder_layers)):
            for index, layer in enumerate(layers):
                for residual in layer.residuals():
                    residual.init_weights(layer, stack, index, c.encoder_layers, c.decoder_layers, c)
        residual_class(c.norm).init_model(self)  # then the weights outside the layers

    def init_from_data(self, batch: tuple[torch.Tensor, ...]) -> None:
        """The variant's data-dependent initialization (``Residual.init_from_data``): called once with a training
        batch (src, prev, target) before the first update and before gradinit measures; a no-op for most."""
        residual_class(self.cfg.norm).init_from_data(self, batch)

    # ---- API ------------------------------------------------------------------------------------------------

    def encode(self, src: torch.Tensor) -> EncoderOut:
        """src [B,S] (PAD=1 padding) -> EncoderOut."""
        pad_mask = src.eq(PAD)
        x = self.embed_scale * self.encoder_embed(src) + self.positions(src)
        x = self.dropout(x)
        key_pad = pad_mask if bool(pad_mask.any()) else None  # fairseq: no mask when nothing is padded
        state = x if self.encoder_stream is None else self.encoder_stream.begin(x)
        for layer in self.encoder_layers:
            state = layer(state, key_pad)
        x = state if self.encoder_stream is None else self.encoder_stream.end(state)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return EncoderOut(x, pad_mask)

    def decode(self, prev: torch.Tensor, enc: EncoderOut, cache: KVCache | None = None,
               padded: bool = False, packed: bool = False) -> torch.Tensor:
        """prev [B,T] decoder input (EOS first) -> logits [B,T,V]. With a cache, prev holds only new tokens.

        Without a cache, a padded ``prev`` runs through the layers as its non-padding rows (``Rows``): the
        logits at padded positions are zero (the loss ignores them; before, they were meaningless values).
        ``packed``: the logits of those rows only, [N,V] in row-major order of the non-padding positions (the
        training step's: the output projection, the largest GEMM, and the loss then skip the padding; [B*T,V]
        when nothing is padded). ``padded`` (no cache): every position runs through the layers instead, padding
        included, with the padded keys masked in the self-attention, as fairseq 0.9.0's decoder computes them
        (Admin's profile, whose variances include the padded positions).
        """
        if packed and (padded or cache is not None):
            raise ValueError("decode: packed logits are for a whole padded batch, without a cache or padded=True")
        past = cache.length if cache is not None else 0
        pos = self.positions(prev, start=past) if cache is not None else self.positions(prev)
        has_pad = cache is None and bool(prev.eq(PAD).any())
        rows = Rows.of(prev) if has_pad and not padded else None
        self_pad = prev.eq(PAD) if has_pad and padded else None
        if rows is None:
            x = self.embed_scale * self.decoder_embed(prev) + pos
        else:
            x = self.embed_scale * self.decoder_embed(rows.pack(prev)) + rows.pack(pos)
        x = self.dropout(x)
        enc_use = enc if bool(enc.pad_mask.any()) else EncoderOut(enc.out, None)  # type: ignore[arg-type]
        state = x if self.decoder_stream is None else self.decoder_stream.begin(x)
        for i, layer in enumerate(self.decoder_layers):
            state = layer(state, enc_use, cache.layers[i] if cache is not None else None, rows, self_pad)
        x = state if self.decoder_stream is None else self.decoder_stream.end(state)
        if self.decoder_norm is not None:
            x = self.decoder_norm(x)
        if packed:
            x = x.reshape(-1, x.size(-1))
        elif rows is not None:
            x = rows.unpack(x)
        if cache is not None:
            cache.length += prev.size(1)
        return F.linear(x, self.output_weight)

    @property
    def output_weight(self) -> torch.Tensor:
        """The output projection [V,D]: the decoder embedding when shared (fairseq: no bias)."""
        return self.decoder_embed.weight if self.output_projection is None else self.output_projection.weight

    def forward(self, src: torch.Tensor, prev: torch.Tensor, packed: bool = False) -> torch.Tensor:
        """Logits [B,T,V] of the decoder input ``prev`` given ``src``; ``packed``: [N,V] of its non-padding
        positions only (``decode``)."""
        return self.decode(prev, self.encode(src), packed=packed)

    def new_cache(self, rows: int = 0, capacity: int = 0) -> KVCache:
        """An empty cache for ``decode`` with buffers for ``rows`` rows and ``capacity`` positions (grown as needed)."""
        return KVCache(len(self.decoder_layers), rows, capacity)

    def num_params(self) -> int:
        """Number of trainable parameters, shared matrices counted once (positions are not parameters)."""
        return sum(p.numel() for p in self.parameters())

    def flops_per_batch(self, src_tokens: int, tgt_tokens: int, src_len: int, tgt_len: int) -> float:
        """Approximate training FLOPs (forward + backward = 3x forward) of one batch, nanoGPT-style.

        Matmul FLOPs: 2 per multiply-add; encoder layer 4d^2 + 2d*ffn per source token, decoder layer
        8d^2 + 2d*ffn per target token (plus the encoder-attention k/v projections over source tokens), the
        output projection d*V per target token, and attention scores/values 2*2*d*len per token and layer.
        """
        c, d = self.cfg, self.cfg.d_model
        enc = src_tokens * c.encoder_layers * (4 * d * d + 2 * d * c.ffn_dim + 2 * d * src_len)
        dec = tgt_tokens * c.decoder_layers * (6 * d * d + 2 * d * c.ffn_dim + 2 * d * tgt_len + 2 * d * src_len)
        dec += src_tokens * c.decoder_layers * 2 * d * d  # encoder-attention keys/values
        out = tgt_tokens * d * c.vocab_size
        return 3 * 2 * float(enc + dec + out)


def load_model(path: str | Path, device: str | torch.device = "cpu") -> Transformer:
    """Rebuild a model from a weights file {"model_config": asdict(ModelConfig), "model": state_dict} (eval mode)."""
    try:
        blob = torch.load(path, map_location=device, weights_only=True)
        cfg = ModelConfig(**blob["model_config"])
        model = Transformer(cfg)
        model.load_state_dict(blob["model"])
    except LnReproError:
        raise
    except Exception as e:  # corrupt or foreign file: one clear message
        raise LnReproError(f"{path}: not a valid lnrepro weights file ({type(e).__name__}: {e})") from e
    return model.to(device).eval()


def weights_blob(model: Transformer) -> dict:
    """What a weights file holds (the inverse of load_model)."""
    return {"model_config": dataclasses.asdict(model.cfg), "model": model.state_dict()}
