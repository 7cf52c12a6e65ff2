"""Sandwich-LN (Ding et al. 2021, CogView, arXiv 2105.13290) / Peri-LN (Kim et al. 2025, arXiv 2502.02732): Pre-LN
with a second LayerNorm on each branch's output, x_{l+1} = x_l + dropout(LN_out(F(LN_in(x_l)))), and Pre-LN's final
LayerNorm after each stack.

References, read (not copied): lucidrains/x-transformers ``x_transformers/x_transformers.py``,
``AttentionLayers(..., sandwich_norm=True)``: each layer gets ``pre_branch_norm`` (as ``pre_norm``) and
``post_branch_norm`` (``norm_fn() if sandwich_norm``), sandwich_norm is refused without ``pre_norm``, and
``final_norm`` is kept for ``pre_norm``; ``AttentionLayers`` does not normalize the embeddings' output. The
Peri-LN paper's text read (its abstract, arXiv 2502.02732v3) defines the placement as normalization
"peripherally around sublayers"; whether Peri-LN also normalizes the embeddings' output was not in what could be
read, so this module builds x-transformers' ``sandwich_norm``: no LayerNorm on the embeddings, one LN_in and one
LN_out per sublayer, the final LayerNorm of Pre-LN. CogView's own code (THUDM/CogView ``mpu/sparse_transformer.py``,
``GPT2ParallelTransformerLayer`` with ``scale_normalization``: ``third_layernorm`` and
``fourth_layernorm`` on the attention's and the MLP's outputs, ``final_layernorm`` after the last layer) has the
same LayerNorms.

Dropout placement, where the references differ from each other and from this module:

- CogView drops out inside the branch, before LN_out: x + LN_out(dropout(F(LN_in(x)))) (the attention's
  ``output_dropout`` after ``dense``, the MLP's ``dropout`` after ``dense_4h_to_h``, both before
  ``third_layernorm``/``fourth_layernorm``).
- x-transformers (``AttentionLayers.forward``: ``out = block(x)``, ``out = post_branch_norm(out)``, then
  ``residual_fn(out, inner_residual)``) has no dropout between the branch and the residual sum: its dropouts are
  on the attention weights (``Attend``) and inside the FFN before its last ``nn.Linear`` (``FeedForward``), as the
  attention and activation dropouts here.
- Here, dropout after LN_out: x + dropout(LN_out(F(LN_in(x)))), fairseq's place (the branch's output dropped out
  just before the residual sum, as in Pre-LN here), so that LN_out does not undo dropout's 1/(1-p) scaling. It
  differs from CogView's order and is kept: the reference this module builds (x-transformers) does not decide it.

CogView's ``LayerNorm`` also divides its input by max|x|/8 first (its PB-relax); not built here, as x-transformers
does not.

LN_in is held under fairseq's LayerNorm name (``self_attn_layer_norm.weight``/``bias``, Pre-LN's keys), LN_out
beside it (``out_weight``/``out_bias``); both are 1 and 0 at initialization, and every other weight is
Pre-LN's for a seed (the module draws nothing).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config import ModelConfig
from .base import Fn, LayerNormResidual, register_residual


@register_residual("sandwich")
class Sandwich(LayerNormResidual):
    """x + dropout(LN_out(F(LN_in(x)))): LN_in is ``weight``/``bias``, LN_out ``out_weight``/``out_bias``."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.out_weight = nn.Parameter(torch.ones(cfg.d_model))
        self.out_bias = nn.Parameter(torch.zeros(cfg.d_model))

    def norm_out(self, x: torch.Tensor) -> torch.Tensor:
        """LN_out, nn.LayerNorm's computation (eps 1e-5) as LN_in's."""
        return F.layer_norm(x, self.out_weight.shape, self.out_weight, self.out_bias, 1e-5)

    def forward(self, x: torch.Tensor, f: Fn, dropout: Fn) -> torch.Tensor:
        return x + dropout(self.norm_out(f(self.norm(x))))

    def init_weights(self, layer: nn.Module, stack: str, index: int, encoder_layers: int, decoder_layers: int,
                     cfg: ModelConfig) -> None:
        super().init_weights(layer, stack, index, encoder_layers, decoder_layers, cfg)
        nn.init.ones_(self.out_weight)
        nn.init.zeros_(self.out_bias)
