"""The model's configuration dataclass, in a module of its own: the model and its residual variants
(``lnrepro.model.variants``) both read it, and neither imports the other for it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ModelConfig:
    """Architecture hyper-parameters (defaults: the paper's transformer_iwslt_de_en, dropout 0.1).

    Plain values, not validated here: the configuration layer checks them once, when the config is loaded.
    """

    vocab_size: int
    encoder_layers: int = 6
    decoder_layers: int = 6
    d_model: int = 512
    heads: int = 4
    ffn_dim: int = 1024
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    norm: str = "post"  # a variant registered in lnrepro.norms.NORMS: "post" (Post-LN), "pre" (Pre-LN), ...
    share_decoder_embeddings: bool = True  # decoder input embedding == output projection
    share_all_embeddings: bool = False  # one embedding for encoder, decoder and output
    max_positions: int = 1024
