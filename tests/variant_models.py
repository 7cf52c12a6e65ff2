"""The tiny model the norm variants' tests build (test_deepnorm, test_admin, test_rezero): 2 encoder and 3 decoder
layers (so that the encoder's and decoder's constants differ), width 16."""

from __future__ import annotations

import torch

from lnrepro.model import ModelConfig, Transformer

VOCAB = 40
TINY = dict(encoder_layers=2, decoder_layers=3, d_model=16, heads=2, ffn_dim=32, max_positions=64)


def tiny_model(norm: str, seed: int = 0, **over) -> Transformer:
    """A freshly initialized tiny ``norm`` model under ``seed``; ``over`` replaces ModelConfig fields."""
    torch.manual_seed(seed)
    return Transformer(ModelConfig(vocab_size=VOCAB, norm=norm, **{**TINY, **over}))
