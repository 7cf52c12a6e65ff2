"""Gradient norms: the total, and per layer for attention and FFN weights (the paper's Figure 3 quantities).

Computed only on logged updates (``torch.nn.utils.get_total_norm``, fused per group), so unlogged updates pay nothing.
"""

from __future__ import annotations

import torch

from ..model import Transformer


def _norm(tensors: list[torch.Tensor]) -> float:
    tensors = [t for t in tensors if t is not None]
    if not tensors:
        return 0.0
    return float(torch.nn.utils.get_total_norm(tensors, norm_type=2.0))


def total_grad_norm(params) -> float:
    """L2 norm of all gradients together (what clip_grad_norm_ would return)."""
    return _norm([p.grad for p in params if p.grad is not None])


def _attn_weights(attn) -> list[torch.Tensor]:
    return [attn.q_proj.weight.grad, attn.k_proj.weight.grad, attn.v_proj.weight.grad, attn.out_proj.weight.grad]


def _ffn_weights(ffn) -> list[torch.Tensor]:
    return [ffn.fc1.weight.grad, ffn.fc2.weight.grad]


def layer_grad_norms(model: Transformer) -> dict:
    """Per layer index (0 = nearest the input) the gradient norm of the weight matrices (biases excluded) of:
    encoder self-attention (q,k,v,out) and FFN (fc1, fc2); decoder self-attention, encoder attention, FFN."""
    return {
        "encoder": {
            "self_attn": [_norm(_attn_weights(layer.self_attn)) for layer in model.encoder_layers],
            "ffn": [_norm(_ffn_weights(layer.ffn)) for layer in model.encoder_layers],
        },
        "decoder": {
            "self_attn": [_norm(_attn_weights(layer.self_attn)) for layer in model.decoder_layers],
            "encoder_attn": [_norm(_attn_weights(layer.encoder_attn)) for layer in model.decoder_layers],
            "ffn": [_norm(_ffn_weights(layer.ffn)) for layer in model.decoder_layers],
        },
    }
