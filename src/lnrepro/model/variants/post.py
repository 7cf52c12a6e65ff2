"""Post-LN, the original Transformer's sublayer: x_{l+1} = LN(x_l + dropout(F(x_l))) (Xiong et al. 2020,
Table 1; fairseq 0.9.0 fairseq/modules/transformer_layer.py with ``normalize_before`` False:
``maybe_layer_norm(after=True)``)."""

from __future__ import annotations

import torch

from .base import Fn, LayerNormResidual, register_residual


@register_residual("post")
class PostLN(LayerNormResidual):
    def forward(self, x: torch.Tensor, f: Fn, dropout: Fn) -> torch.Tensor:
        return self.norm(x + dropout(f(x)))
