"""The encoder-decoder Transformer, fairseq 0.9.0 semantics (transformer.py); each sublayer's residual and
normalization is the ``model.norm`` variant's module (variants/, described in ``lnrepro.norms``)."""

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
