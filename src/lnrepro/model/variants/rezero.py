"""ReZero (Bachlechner et al. 2020, "ReZero is All You Need: Fast Convergence at Large Depth", arXiv 2003.04887):
x_{l+1} = x_l + a * dropout(F(x_l)), no LayerNorm at all (none in the sublayers, none after the stacks:
``lnrepro.norms`` describes it with final_norm False), ``a`` a learned scalar initialized to 0.

The reference is the authors' ``rztx.py`` (read: majumderb/rezero ``rezero/transformer/rztx.py``,
``RZTXEncoderLayer``/``RZTXDecoderLayer``): one ``resweight`` per layer, ``torch.zeros((1,))``, shared by all of
the layer's sublayers (``per_layer``), and the branch is dropped out and scaled, ``x + dropout(F(x)) * resweight``
(the encoder layer scales before its dropout, ``x + dropout(F(x) * resweight)``: the same value, dropout's mask
and 1/(1-p) commute with a scalar). Transformer-Clinic's ``rezero`` initialization (LiyuanLucasLiu/
Transformer-Clinic ``fairseq/fairseq/modules/transformer_layer.py``, ``rezero_weight``) computes the same:
``residual + rezero_weight * dropout(x)``, one scalar per layer, no LayerNorm. Neither changes the sublayers'
initialization: here they keep fairseq's, so a seed gives ReZero every embedding and Linear weight of Post-LN.

The scalar is this per-layer module's ``resweight`` (the reference's name), so its state-dict key is
``{encoder,decoder}_layers.{i}.residual.resweight`` (the layer's one residual module is ``residual``); it is a
0-dimensional tensor where rztx's has shape (1,).

At initialization a = 0 multiplies every branch: the model is the identity on the residual path (the encoder's
output is its scaled embeddings plus positions, dropout aside) and every weight matrix inside the layers has an
exactly zero gradient. Gradinit therefore also measures the scalars (``gradinit_params``); only the decoder's have
a nonzero gradient at initialization (the encoder's reach the loss through the decoder's encoder attention,
which its own a = 0 cuts off).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..config import ModelConfig
from .base import Fn, Residual, register_residual


@register_residual("rezero")
class ReZero(Residual):
    """x + resweight * dropout(F(x)), one ``resweight`` per layer shared by its sublayers."""

    per_layer = True
    gradinit_params = ("resweight",)

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.resweight = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor, f: Fn, dropout: Fn) -> torch.Tensor:
        return x + self.resweight * dropout(f(x))

    def init_weights(self, layer: nn.Module, stack: str, index: int, encoder_layers: int, decoder_layers: int,
                     cfg: ModelConfig) -> None:
        nn.init.zeros_(self.resweight)
