"""ResiDual (Xie et al. 2023, "ResiDual: Transformer with Dual Residual Connections", arXiv 2304.14802): a Post-LN
stream beside an unnormalized one. Each sublayer's dropped-out branch b = dropout(F(x_k)) of the Post-LN stream's
x_k goes into both, x_{k+1} = LN(x_k + b) and y_{k+1} = y_k + b, both streams starting from the embeddings
(after their dropout); the stack's output is x_N + LN(y_N).

Reference, read (not copied): github.com/microsoft/ResiDual, ``resi_dual/resi_dual_layers.py``
(``ResiDualEncoderLayer``/``ResiDualDecoderLayer``: ``x = dropout(F(x)); res = res + x *
res_input_norm_scale; x = layer_norm(x + xr)`` for self-attention, encoder attention and FFN, the
sublayers' LayerNorms under fairseq's names) and ``resi_dual/resi_dual.py`` (``ResiDualEncoder``/
``ResiDualDecoder``: ``res = x * res_input_norm_scale`` after the embeddings' dropout, then
``x = x * alpha + self.layer_norm(res)`` after the last layer, that LayerNorm built with ``eps=1e-7``;
``ResiDualConfig``: ``enc_alpha``, ``dec_alpha``, ``enc_res_input_norm_scale`` and ``dec_res_input_norm_scale``
all 1.0 by default, and ``hydra_config/iwslt.yaml`` keeps both scales at 1.0). The model is fairseq's
``TransformerModelBase`` otherwise (fairseq 0.12.2, ``environment.yaml``). Its layers subclass fairseq's
``TransformerEncoderLayerBase``/``TransformerDecoderLayerBase`` (read: facebookresearch/fairseq
``fairseq/modules/transformer_layer.py``, later than 0.12.2), whose ``build_fc1``/``build_fc2`` return
``quant_noise(nn.Linear(...))``: the ``nn.Linear`` itself without quantization noise (``fairseq/modules/
quant_noise.py``; the configs set none), so fc1 and fc2 keep PyTorch's own initialization, bias included, and
nothing initializes them again (``fairseq/models/transformer/transformer_base.py``, ``transformer_encoder.py``).
No other LayerNorm (``normalize_before: true`` in the configs builds none that the forward uses: the layers'
forward ignores it and the stacks' ``layer_norm`` is ResiDual's own).

Here: the sublayers' modules are ``LayerNormResidual`` (Post-LN's LayerNorm, its gain and bias under fairseq's
names) and take and return the pair (x, y); each stack's ``ResiDualStream`` (``Residual.stream``) begins the pair
as (x, x) and ends it as x + LN(y), its LayerNorm ``encoder_stream.norm`` / ``decoder_stream.norm`` with
eps 1e-7, gain 1 and bias 0. The four scalars are the reference's defaults, 1.0, and not settings: y starts as
the embeddings themselves and the output adds x_N itself. Initialization: fairseq 0.9.0's, then each layer's FFN
module draws its fc1 and fc2 again as ``nn.Linear`` draws them (``linear_default_ffn``), layer by layer, encoder
first, after every fairseq draw: for a seed, every other weight is Post-LN's, and the two stream LayerNorms are
the only parameters Post-LN lacks.

Deviation that changes no result: fairseq's newer encoder (which the reference builds on) zeroes the embeddings
at padded source positions before the first layer; here they are not zeroed. Padded keys are masked and every
other operation is position-wise, so only the outputs at padded positions differ.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..config import ModelConfig
from .base import Fn, LayerNormResidual, Stream, linear_default_ffn, register_residual

Pair = tuple[torch.Tensor, torch.Tensor]  # (x: the Post-LN stream, y: the unnormalized stream)

# The reference's LayerNorm of the unnormalized stream (resi_dual.py: LayerNorm(embed_dim, eps=1e-7)).
STREAM_EPS = 1e-7


class ResiDualStream(Stream):
    """(x, x) from the embeddings; x_N + LN(y_N) at the end of the stack."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.norm = nn.LayerNorm(cfg.d_model, eps=STREAM_EPS)

    def begin(self, x: torch.Tensor) -> Pair:
        return x, x

    def end(self, state: Pair) -> torch.Tensor:
        x, y = state
        return x + self.norm(y)


@register_residual("resi_dual")
class ResiDual(LayerNormResidual):
    """(x, y) -> (LN(x + b), y + b), b = dropout(F(x)): Post-LN's sublayer, its branch also added to y."""

    stream = ResiDualStream

    def forward(self, state: Pair, f: Fn, dropout: Fn) -> Pair:  # type: ignore[override]
        x, y = state
        branch = dropout(f(x))
        return self.norm(x + branch), y + branch

    def init_weights(self, layer: nn.Module, stack: str, index: int, encoder_layers: int, decoder_layers: int,
                     cfg: ModelConfig) -> None:
        super().init_weights(layer, stack, index, encoder_layers, decoder_layers, cfg)
        if layer.residuals()[-1] is self:  # the FFN's module, once per layer
            linear_default_ffn(layer)  # fairseq transformer_layer.py: build_fc1/build_fc2 return nn.Linear
