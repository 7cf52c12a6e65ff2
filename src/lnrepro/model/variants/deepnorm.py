"""DeepNorm (Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000 Layers", arXiv 2203.00555): Post-LN with
the residual scaled, x_{l+1} = LN(alpha * x_l + dropout(G(x_l))), and an initialization scaled by beta.

The reference is the paper's pseudo-code (Figure 2, encoder-decoder: Table 1 / Section 4), which
Transformer-Clinic's ``deepnet`` initialization follows (read: LiyuanLucasLiu/Transformer-Clinic
``fairseq/fairseq/modules/transformer_layer.py``, ``TransformerEncoderLayer``/``TransformerDecoderLayer`` with
``'deepnet' in args.init_type``): for an encoder-decoder of N encoder and M decoder layers

    encoder: alpha = 0.81 (N^4 M)^(1/16),  beta = 0.87 (N^4 M)^(-1/16)     (6+6 layers: 1.418, 0.497)
    decoder: alpha = (3 M)^(1/4),          beta = (12 M)^(-1/4)            (6+6 layers: 2.060, 0.343)

every sublayer of a stack (self-attention, encoder attention, FFN) uses its stack's alpha, and each layer's
weights are drawn again with ``xavier_normal_``: gain beta for the FFN's fc1 and fc2 and for the value and output
projections of every attention (self and encoder attention), gain 1 for the query and key projections. The
attention here holds q, k and v as three separate d x d ``nn.Linear`` layers (``Attention.q_proj``/``k_proj``/
``v_proj``, stacked only in the forward pass), so each is drawn on its own d x d matrix, as the reference's
separate ``q_proj_weight``/``k_proj_weight``/``v_proj_weight`` (``fuse_inproject=False``) are. Dropout acts on
G's output before the scaled residual is added, as in Post-LN (``post.py``) and the reference.

Shared with Post-LN's initial weights for a seed: the re-draws come after fairseq's initialization (the layer's
first residual module draws, in the order self-attention q, k, v, out; encoder attention q, k, v, out; fc1, fc2,
layer by layer, encoder first), so the token embeddings (and an unshared output projection), every bias (the
attention q/k/v biases' uniform draws, the zero out_proj and FFN biases) and the LayerNorms' constant gains and
biases are Post-LN's; every weight matrix inside the layers (q, k, v, out, fc1, fc2) is DeepNorm's own. alpha is a
constant of the architecture, not a parameter: the state-dict keys are Post-LN's.

Known difference, not followed: the authors' library (read: microsoft/torchscale
``torchscale/architecture/encoder.py`` and ``decoder.py``, ``args.deepnorm``) keeps its base xavier-uniform
initialization (q/k/v gain 1/sqrt(2), ``torchscale/component/multihead_attention.py``) and divides the weights
and biases of every parameter named fc1, fc2, out_proj or v_proj by (N^4 M)^(1/16) / 1.15 in the encoder and by
(12 M)^(1/4) in the decoder: an encoder gain of 1.15 (N^4 M)^(-1/16) on top of xavier-uniform gains instead of the
paper's 0.87 (N^4 M)^(-1/16) on xavier-normal, q and k left at its base gain; the alphas are the paper's.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ...errors import LnReproError
from ..config import ModelConfig
from .base import Fn, LayerNormResidual, register_residual


def deepnorm_constants(stack: str, encoder_layers: int, decoder_layers: int) -> tuple[float, float]:
    """(alpha, beta) of ``stack`` ("encoder" | "decoder") in an encoder-decoder of N encoder and M decoder layers
    (the paper's encoder-decoder rule, module docstring)."""
    n, m = encoder_layers, decoder_layers
    if stack == "encoder":
        return 0.81 * (n ** 4 * m) ** (1 / 16), 0.87 * (n ** 4 * m) ** (-1 / 16)
    if stack == "decoder":
        return (3 * m) ** (1 / 4), (12 * m) ** (-1 / 4)
    raise LnReproError(f"deepnorm: unknown stack {stack!r} (expected 'encoder' or 'decoder')")


@register_residual("deepnorm")
class DeepNorm(LayerNormResidual):
    """LN(alpha * x + dropout(G(x))), alpha its stack's (set by ``init_weights``)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.alpha: float | None = None  # known once the module knows its stack (init_weights)

    def forward(self, x: torch.Tensor, f: Fn, dropout: Fn) -> torch.Tensor:
        if self.alpha is None:
            raise LnReproError("deepnorm: alpha is set by init_weights (build the module inside a Transformer)")
        return self.norm(self.alpha * x + dropout(f(x)))

    def init_weights(self, layer: nn.Module, stack: str, index: int, encoder_layers: int, decoder_layers: int,
                     cfg: ModelConfig) -> None:
        super().init_weights(layer, stack, index, encoder_layers, decoder_layers, cfg)
        alpha, beta = deepnorm_constants(stack, encoder_layers, decoder_layers)
        self.alpha = alpha
        if layer.residuals()[0] is not self:  # the layer's weights are drawn once, by its first residual module
            return
        for name in ("self_attn", "encoder_attn"):
            attn = getattr(layer, name, None)
            if attn is None:  # encoder layers have no encoder attention
                continue
            for proj, gain in ((attn.q_proj, 1.0), (attn.k_proj, 1.0), (attn.v_proj, beta), (attn.out_proj, beta)):
                nn.init.xavier_normal_(proj.weight, gain=gain)
        for fc in (layer.ffn.fc1, layer.ffn.fc2):
            nn.init.xavier_normal_(fc.weight, gain=beta)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"
