"""T-Fixup (Huang et al. 2020, "Improving Transformer Optimization Through Better Initialization", ICML): no
LayerNorm at all, x_{l+1} = x_l + dropout(F(x_l)), trained without warm-up from a depth-scaled initialization.

Reference, read (not copied): github.com/layer6ai-labs/T-Fixup, ``fairseq/modules/transformer_layer.py``
(``fixup_initialization`` of ``TransformerEncoderLayer`` and ``TransformerDecoderLayer``; the forward with
``--dont-use-layernorm``: ``residual + dropout(F(x))``, no LayerNorm before or after) and
``fairseq/models/transformer.py`` (``TransformerEncoder``/``TransformerDecoder`` with ``--Tfixup``: the token
embeddings scaled, then every layer's ``fixup_initialization``; no LayerNorm after the stacks). Its base
initialization is fairseq's, as here (``Embedding()`` N(0, d^-0.5), ``Linear()`` xavier-uniform, its
``multihead_attention.py`` q/k/v xavier-uniform with gain 1/sqrt(2), out_proj xavier-uniform). Then, for N
encoder and M decoder layers, the reference multiplies:

    encoder layer:  fc1, fc2, self_attn.out_proj         by 0.67 N^(-1/4)
                    self_attn.v_proj                     by 0.67 N^(-1/4) * sqrt(2)   (xavier gain 1 for v)
    decoder layer:  fc1, fc2, self_attn.out_proj,
                    encoder_attn.out_proj                by (9 M)^(-1/4)
                    self_attn.v_proj, encoder_attn.v_proj by (9 M)^(-1/4) * sqrt(2)
    encoder token embedding                              by (9 N)^(-1/4)
    decoder token embedding                              by (9 M)^(-1/4), unless share_all_embeddings

(written ``(0.67 * (en_layers) ** (- 1. / 4.)) * (param * (2**0.5))`` and ``(9 * de_layers) ** (- 1. / 4.)``
in the reference; the multiplications here are done in the same order). The decoder's embedding is also the
output projection when shared (``share_decoder_embeddings``, the reference's
``--share-decoder-input-output-embed``), so it is scaled too; with ``share_all_embeddings`` the one embedding
gets the encoder's factor only, as the reference's decoder skips its scaling then. An unshared output
projection keeps fairseq's N(0, d^-0.5) (the reference's ``embed_out`` is not scaled). q, k, every bias and the
positions are fairseq's. Dropout acts on each branch before the sum, as in every variant here.

The layer has no parameter of its own: one ``residual`` module per layer (``per_layer``), no state-dict key, so
the state dict is Post-LN's without its LayerNorms; for a seed every weight is Post-LN's, times its factor.

Deviation: the reference's decoder layers build an ``encoder_attn_layer_norm`` even without LayerNorms, never
use it (no gradient) and keep it in the state dict; it is not built here. The reference's recipe
(``Train_IWSLT_TFixup_example.sh``: Adam, lr 5e-4 with ``inverse_sqrt_nowarmup`` and ``--decay-period 4000``,
dropout 0.5, fp16, 300 epochs) is a run's settings, not the variant's: config.yaml's ``tfixup_*`` runs use the
experiment's.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ...errors import LnReproError
from ..config import ModelConfig
from .base import Fn, Residual, register_residual


def tfixup_scale(stack: str, encoder_layers: int, decoder_layers: int) -> float:
    """The factor of ``stack``'s fc1, fc2, out_proj (and, times sqrt(2), v_proj) weights: 0.67 N^(-1/4) for the
    encoder, (9 M)^(-1/4) for the decoder (module docstring)."""
    if stack == "encoder":
        return 0.67 * encoder_layers ** (-1.0 / 4.0)
    if stack == "decoder":
        return (9 * decoder_layers) ** (-1.0 / 4.0)
    raise LnReproError(f"tfixup: unknown stack {stack!r} (expected 'encoder' or 'decoder')")


def tfixup_embedding_scale(layers: int) -> float:
    """The factor of a stack's token embedding, (9 L)^(-1/4) for its L layers."""
    return (9 * layers) ** (-1.0 / 4.0)


@register_residual("tfixup")
class TFixup(Residual):
    """x + dropout(F(x)), one parameterless module per layer; the depth scaling is its initialization."""

    per_layer = True

    def forward(self, x: torch.Tensor, f: Fn, dropout: Fn) -> torch.Tensor:
        return x + dropout(f(x))

    def init_weights(self, layer: nn.Module, stack: str, index: int, encoder_layers: int, decoder_layers: int,
                     cfg: ModelConfig) -> None:
        scale = tfixup_scale(stack, encoder_layers, decoder_layers)
        attentions = [layer.self_attn] + ([layer.encoder_attn] if stack == "decoder" else [])
        with torch.no_grad():
            for attn in attentions:
                attn.v_proj.weight.copy_(scale * (attn.v_proj.weight * 2 ** 0.5))
                attn.out_proj.weight.copy_(scale * attn.out_proj.weight)
            for fc in (layer.ffn.fc1, layer.ffn.fc2):
                fc.weight.copy_(scale * fc.weight)

    @classmethod
    def init_model(cls, model: nn.Module) -> None:
        """The token embeddings: the encoder's by (9 N)^(-1/4), the decoder's by (9 M)^(-1/4) unless it is the
        encoder's (share_all_embeddings)."""
        c = model.cfg
        with torch.no_grad():
            emb = model.encoder_embed.weight
            emb.copy_(tfixup_embedding_scale(c.encoder_layers) * emb)
            if not c.share_all_embeddings:
                emb = model.decoder_embed.weight
                emb.copy_(tfixup_embedding_scale(c.decoder_layers) * emb)

