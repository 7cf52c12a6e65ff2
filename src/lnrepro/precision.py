"""The arithmetic a stage runs in: fp32, or bf16 autocast (``autocast``), and a warning where bf16 is emulated.

On a CPU without bf16 instructions (no AVX-512 BF16 or AMX: most laptops, AVX2-only servers) oneDNN has no
bf16 kernels and PyTorch falls back to slow reference code. Measured on an AVX2-only 2-core AMD EPYC
(2026-12-02, torch 2.13.0, one thread): a 2048^2 matmul 0.3 GFLOP/s in bf16 against 55 in fp32, the CPU
study's output projection (2048 x 64 x 4000) 398 ms against 36 ms. The results are still correct, so a stage
that is asked for bf16 there runs it, and says once in its log why it is slow.
"""

from __future__ import annotations

import contextlib
import functools
import warnings

import torch

__all__ = ["autocast", "bf16_is_native"]


@functools.cache
def bf16_is_native(device_type: str) -> bool:
    """Whether bf16 matmuls on ``device_type`` run on bf16 hardware (every CUDA device PyTorch supports here
    does or emulates them fast; on the CPU, oneDNN's own check)."""
    if device_type != "cpu":
        return True
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


@functools.cache
def _warn_emulated() -> None:
    warnings.warn("precision bf16 on a CPU without bf16 instructions (no AVX-512 BF16 or AMX): PyTorch emulates it, "
                  "10-200x slower than fp32 (lnrepro/precision.py); set the stage's precision to fp32",
                  RuntimeWarning, stacklevel=3)


def autocast(device: torch.device | str, precision: str) -> contextlib.AbstractContextManager:
    """bf16 autocast on ``device`` for ``precision`` "bf16", nothing for "fp32"; any other value is an error."""
    device_type = torch.device(device).type
    if precision == "fp32":
        return contextlib.nullcontext()
    if precision != "bf16":
        raise ValueError(f"precision {precision!r}: fp32 or bf16")
    if not bf16_is_native(device_type):
        _warn_emulated()
    return torch.autocast(device_type, dtype=torch.bfloat16)
