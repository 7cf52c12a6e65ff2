"""The encoder-decoder Transformer, fairseq 0.9.0 semantics, LayerNorm placement from ``lnrepro.norms``;
see transformer.py."""

from .transformer import (
    Attention,
    DecoderLayer,
    Dropout,
    EncoderLayer,
    EncoderOut,
    FeedForward,
    KVCache,
    LayerCache,
    ModelConfig,
    Rows,
    Transformer,
    load_model,
    sinusoidal_table,
    weights_blob,
)

__all__ = [
    "Attention", "DecoderLayer", "Dropout", "EncoderLayer", "EncoderOut", "FeedForward", "KVCache", "LayerCache",
    "ModelConfig", "Rows", "Transformer", "load_model", "sinusoidal_table", "weights_blob",
]
