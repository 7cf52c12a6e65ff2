"""Pre-LN: x_{l+1} = x_l + dropout(F(LN(x_l))) (Xiong et al. 2020, Table 1; fairseq 0.9.0
fairseq/modules/transformer_layer.py with ``normalize_before`` True: ``maybe_layer_norm(before=True)``); each
stack ends with one more LayerNorm (``lnrepro.norms``: final_norm)."""

from __future__ import annotations

import torch

from .base import Fn, LayerNormResidual, register_residual


@register_residual("pre")
class PreLN(LayerNormResidual):
    def forward(self, x: torch.Tensor, f: Fn, dropout: Fn) -> torch.Tensor:
        return x + dropout(f(self.norm(x)))
