"""B2T connection (Takase et al., "B2T Connection: Serving Stability and Performance in Deep Transformers",
arXiv 2206.00330): Post-LN with one more residual in each layer, from the layer's input x to the input of its
last LayerNorm. In an encoder layer h = LN(x + dropout(Attn(x))), out = LN(h + dropout(FFN(h)) + x); in a decoder
layer the two attention sublayers are Post-LN's and the FFN's LayerNorm adds x, the input of the layer's first
sublayer: h1 = LN(x + SelfAttn(x)), h2 = LN(h1 + EncAttn(h1)), out = LN(h2 + FFN(h2) + x).

Reference, read (not copied): takase/b2t_connection ``fairseq/modules/transformer_layer.py`` with
``--residual-bottom-to-top`` (``residual_bottom_to_top``): ``residual_bottom = x`` at the top of
``TransformerEncoderLayer.forward`` and ``TransformerDecoderLayer.forward``; after the FFN,
``x = residual + dropout(x)`` then ``x = residual_bottom + x`` before ``final_layer_norm`` (the bottom residual is
not dropped out). Its initialization: ``build_fc1``/``build_fc2`` return ``nn.Linear(input_dim, output_dim)``
(PyTorch's own initialization, bias included; the file's Xavier ``Linear()`` helper is not used for them), then
``rescaling_init(self, args.encoder_layers)`` (``args.decoder_layers`` in a decoder layer) at the end of each
layer's ``__init__`` multiplies every parameter of the layer whose name contains "weight" and not "layer_norm" by
``layer_num ** -0.5``: the attention q, k, v and output projections (the decoder's encoder attention too) and fc1,
fc2; biases and LayerNorms are left. Nothing initializes the layers again afterwards (the fork's
``fairseq/models/transformer.py``: only the embeddings' own ``Embedding()``).

Here ``init_weights``, once per layer (by its first residual module), after fairseq 0.9.0's initialization: fc1
then fc2 drawn again as ``nn.Linear`` draws them (``linear_default_ffn``), then the reference's rule on the layer's
parameters, N the layer's own stack's number of layers. For a seed every parameter but fc1's and fc2's is
Post-LN's (the attention projections Post-LN's times N^-1/2): the draws come after fairseq's, layer by layer,
encoder first.

Deviation: the fork's ``--no-layer-norm`` branch (``scale4residual``, ``scale4output``) is another method and is
not built.

The layer's input reaches its last sublayer through ``_Bottom``, which the layer's first residual module fills
and its last one empties (the same layer call: a layer's sublayers run in order, so each call of the last one
reads the input of that layer call).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ...errors import LnReproError
from ..config import ModelConfig
from .base import Fn, LayerNormResidual, linear_default_ffn, register_residual


class _Bottom:
    """The input of the layer call in progress, shared by a layer's first and last residual modules."""

    def __init__(self) -> None:
        self.x: torch.Tensor | None = None


@register_residual("b2t")
class B2T(LayerNormResidual):
    """Post-LN's LN(x + dropout(F(x))); the layer's last sublayer adds the layer's input before its LayerNorm."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.bottom: _Bottom | None = None  # set by init_weights
        self.first = self.last = False

    def forward(self, x: torch.Tensor, f: Fn, dropout: Fn) -> torch.Tensor:
        if self.bottom is None:
            raise LnReproError("b2t: the layer's connection is set by init_weights (build it inside a Transformer)")
        if self.first:
            self.bottom.x = x
        y = x + dropout(f(x))
        if self.last:
            y = y + self.bottom.x
            self.bottom.x = None
        return self.norm(y)

    def init_weights(self, layer: nn.Module, stack: str, index: int, encoder_layers: int, decoder_layers: int,
                     cfg: ModelConfig) -> None:
        super().init_weights(layer, stack, index, encoder_layers, decoder_layers, cfg)
        residuals = layer.residuals()
        self.first, self.last = residuals[0] is self, residuals[-1] is self
        if not self.first:  # the layer's first residual module sets the connection and scales the weights, once
            self.bottom = residuals[0].bottom
            return
        self.bottom = _Bottom()
        linear_default_ffn(layer)  # b2t_connection transformer_layer.py: build_fc1/build_fc2 return nn.Linear
        scale = (encoder_layers if stack == "encoder" else decoder_layers) ** -0.5
        with torch.no_grad():
            for name, p in layer.named_parameters():
                if "layer_norm" not in name and "weight" in name:
                    p.mul_(scale)

    def extra_repr(self) -> str:
        return f"first={self.first}, last={self.last}"
