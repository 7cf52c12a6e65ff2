"""Pre-LN without the final LayerNorm of each stack: the sublayers are Pre-LN's; ``lnrepro.norms`` describes it
with final_norm False. The proof of Xiong et al.'s Theorem 1 gets Pre-LN's 1/sqrt(L) gradient scale from that
final LayerNorm; gradinit measures what is left without it."""

from __future__ import annotations

from .base import register_residual
from .pre import PreLN


@register_residual("pre_nofinal")
class PreNoFinalLN(PreLN):
    """Pre-LN's sublayer, unchanged."""
