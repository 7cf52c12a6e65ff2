"""The encoder-decoder Transformer (Post-LN or Pre-LN), fairseq 0.9.0 semantics; see transformer.py."""

from .transformer import (
    Attention,
    DecoderLayer,
    EncoderLayer,
    EncoderOut,
    FeedForward,
    KVCache,
    ModelConfig,
    Transformer,
    load_model,
    sinusoidal_table,
    weights_blob,
)

__all__ = [
    "Attention", "DecoderLayer", "EncoderLayer", "EncoderOut", "FeedForward", "KVCache", "ModelConfig",
    "Transformer", "load_model", "sinusoidal_table", "weights_blob",
]
