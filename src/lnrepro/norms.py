"""Where the LayerNorm goes: the registry of norm variants, keyed by the config's ``model.norm``.

A variant is the residual/normalization arrangement of one sublayer (self-attention, encoder attention or FFN)
and whether each stack ends with one more LayerNorm. The model (``lnrepro.model.transformer``), gradinit
(every registered variant) and the figures (labels, line styles) read this registry, so a new variant is one
``register_norm`` call. This module imports no torch: the configuration layer and the Snakefile read the
registered names without loading it.

Xiong et al. 2020 (arXiv 2002.04745), Table 1, in short: Post-LN x_{l+1} = LN(x_l + F(x_l)), Pre-LN
x_{l+1} = x_l + F(LN(x_l)). As in fairseq 0.9.0 fairseq/modules/transformer_layer.py: each sublayer runs
``residual = x; x = maybe_layer_norm(ln, x, before=True); x = F(x); x = dropout(x); x = residual + x;
x = maybe_layer_norm(ln, x, after=True)``, and ``maybe_layer_norm`` applies ``ln`` iff
``after ^ normalize_before``; fairseq/models/transformer.py adds one LayerNorm after the last layer of the
encoder and of the decoder iff ``normalize_before``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .errors import LnReproError

# (x, norm, f, dropout) -> x: the input, the sublayer's LayerNorm, the sublayer's function, the residual dropout.
Sublayer = Callable[[Any, Callable[[Any], Any], Callable[[Any], Any], Callable[[Any], Any]], Any]


@dataclass(frozen=True)
class NormVariant:
    """One value of ``model.norm``: how a sublayer combines residual, dropout and LayerNorm."""

    name: str  # the config value
    sublayer: Sublayer  # (x, norm, f, dropout) -> x
    final_norm: bool  # one LayerNorm after the last layer of each stack (fairseq: iff normalize_before)
    label: str  # for plots and tables, e.g. "Post-LN"


# name -> variant, in registration order: the order figures and tables list the variants in.
NORMS: dict[str, NormVariant] = {}


def register_norm(variant: NormVariant) -> NormVariant:
    """Add ``variant`` under its name (a name is registered once) and return it."""
    if variant.name in NORMS:
        raise LnReproError(f"model.norm: variant {variant.name!r} is already registered")
    NORMS[variant.name] = variant
    return variant


def norm_variant(name: str) -> NormVariant:
    """The registered variant called ``name``; a clear error naming model.norm and the choices otherwise."""
    try:
        return NORMS[name]
    except (KeyError, TypeError):  # TypeError: an unhashable value from a hand-written config
        raise LnReproError(f"model.norm: expected one of {', '.join(map(repr, NORMS))}, got {name!r}") from None


# The paper's two arrangements (post first: the original Transformer, the baseline every figure starts with).
# Named module-level functions, not lambdas, so that a model holding them can be pickled (copy.deepcopy,
# torch.save of the whole module, multiprocessing).


def post_ln_sublayer(x: Any, norm: Callable[[Any], Any], f: Callable[[Any], Any], dropout: Callable[[Any], Any]) -> Any:
    """Post-LN: x_{l+1} = LN(x_l + dropout(F(x_l)))."""
    return norm(x + dropout(f(x)))


def pre_ln_sublayer(x: Any, norm: Callable[[Any], Any], f: Callable[[Any], Any], dropout: Callable[[Any], Any]) -> Any:
    """Pre-LN: x_{l+1} = x_l + dropout(F(LN(x_l)))."""
    return x + dropout(f(norm(x)))


register_norm(NormVariant("post", post_ln_sublayer, final_norm=False, label="Post-LN"))
register_norm(NormVariant("pre", pre_ln_sublayer, final_norm=True, label="Pre-LN"))
