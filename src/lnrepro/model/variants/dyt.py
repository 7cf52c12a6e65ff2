"""DyT (Zhu et al. 2025, "Transformers without Normalization", arXiv 2503.10622): Pre-LN with every LayerNorm
replaced by Dynamic Tanh, DyT(x) = gamma * tanh(alpha x) + beta: the sublayers' x_{l+1} = x_l + dropout(F(DyT(x_l)))
and the one after each stack.

Reference: the paper's Algorithm 1 (``DyT(C, init_alpha)``: alpha a learned scalar, gamma ones and beta zeros of
width C) and its code, github.com/jiachenzhu/DyT ``dynamic_tanh.py`` (``DynamicTanh``: ``alpha =
nn.Parameter(torch.ones(1) * alpha_init_value)`` with ``alpha_init_value=0.5``, ``weight`` ones, ``bias`` zeros,
``tanh(alpha * x) * weight + bias`` channels last; ``convert_ln_to_dyt`` replaces every ``nn.LayerNorm`` of a
model). Built here as there: alpha of shape (1,) per DyT, initialized to 0.5; every LayerNorm replaced, so the
two final LayerNorms of Pre-LN are DyTs too (``final_norm``). Other libraries' DyT defaults (x-transformers') are
not followed: each variant here follows its own method's reference.

A sublayer's DyT is held under fairseq's LayerNorm name (``self_attn_layer_norm.alpha``/``weight``/``bias``), the
stacks' under ``encoder_norm``/``decoder_norm``; every other weight is Pre-LN's for a seed (nothing is drawn).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..config import ModelConfig
from .base import register_residual
from .pre import PreLN

ALPHA_INIT = 0.5  # DynamicTanh's alpha_init_value default


def dynamic_tanh(x: torch.Tensor, alpha: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """tanh(alpha * x) * weight + bias, the reference's order of operations."""
    return torch.tanh(alpha * x) * weight + bias


class DynamicTanh(nn.Module):
    """DyT after the last layer of a stack, in place of Pre-LN's final LayerNorm."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.full((1,), ALPHA_INIT))
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def reset_parameters(self) -> None:
        nn.init.constant_(self.alpha, ALPHA_INIT)
        nn.init.ones_(self.weight)
        nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dynamic_tanh(x, self.alpha, self.weight, self.bias)


@register_residual("dyt")
class DyT(PreLN):
    """Pre-LN's x + dropout(F(DyT(x))), DyT's gamma and beta held as ``weight`` and ``bias`` beside ``alpha``."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.alpha = nn.Parameter(torch.full((1,), ALPHA_INIT))

    def norm(self, x: torch.Tensor) -> torch.Tensor:
        return dynamic_tanh(x, self.alpha, self.weight, self.bias)

    def init_weights(self, layer: nn.Module, stack: str, index: int, encoder_layers: int, decoder_layers: int,
                     cfg: ModelConfig) -> None:
        super().init_weights(layer, stack, index, encoder_layers, decoder_layers, cfg)
        nn.init.constant_(self.alpha, ALPHA_INIT)

    @classmethod
    def final_norm(cls, cfg: ModelConfig) -> nn.Module:
        return DynamicTanh(cfg.d_model)
