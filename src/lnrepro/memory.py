"""The process's memory allocator, set up for PyTorch's CPU work (``keep_freed_memory``)."""

from __future__ import annotations

import ctypes
import ctypes.util


def keep_freed_memory() -> None:
    """Have glibc's malloc keep freed memory for reuse instead of returning it to the kernel.

    Every decoding step allocates and frees tensors of tens of MB (logits and log-probabilities of all
    hypotheses), every training update blocks of MB (activations, the loss's chunks); by default glibc maps each
    such block from the kernel and unmaps it when it is freed (or trims the heap's top), so each step pays its
    page faults again. Measured: half the page faults and about 8% of the CPU time of scoring a Multi30k
    checkpoint; 8-10% more tokens/s of a bf16 training update at the CPU study's size, 0-4% in fp32 (two
    processes at once, one per core, swapped; docs/measurements.md).
    mallopt(3): M_MMAP_MAX 0 serves every block from the heap, M_TRIM_THRESHOLD keeps up to 2 GB of freed heap.
    PyTorch's CPU performance guide recommends jemalloc or tcmalloc for the same reason.
    A C library without mallopt (not glibc) is left as it is.
    """
    mallopt = getattr(ctypes.CDLL(ctypes.util.find_library("c")), "mallopt", None)
    if mallopt is not None:
        m_trim_threshold, m_mmap_max = -1, -4  # glibc malloc.h
        mallopt(m_mmap_max, 0)
        mallopt(m_trim_threshold, 2**31 - 1)
