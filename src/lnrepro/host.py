"""The host a job ran on, as far as its cost depends on it (docs/outputs.md, ``host``).

Studies run in parts on different machines, and a CPU's model name does not say what it computes with: two
hosts that both report "AMD EPYC" may be one AVX2-only and one with AVX-512. ``host_identity`` records the
model name, the vector and matrix extensions the CPU has (``CPU_FLAGS``, from /proc/cpuinfo), the job's thread
count and an fp32 square matmul peak measured at the job's start (``matmul``, which the bench's MFU times too,
best of a few repetitions; about a tenth of a CPU-second). ``host_key`` is the part that decides whether two
jobs' costs compare: the flags and the threads, not the model name (it hides the flags) nor the measured peak
(it moves with whatever else runs on the machine). Torch is imported only to measure, so the report reads keys without it.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping

from .io import cpu_name

# The extensions that decide how fast a CPU multiplies fp32, bf16 and int8 matrices, as /proc/cpuinfo names them.
CPU_FLAGS = frozenset({"avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8",
                       "avx_vnni", "avx512_vnni"})
PEAK_N = 1024  # the matmul's side: large enough for the kernels' peak, small enough to cost well under a second
PEAK_REPS = 3  # timed repetitions after one warm-up; the fastest counts (a disturbance only slows one down)


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> list[str]:
    """The ``CPU_FLAGS`` the first CPU of ``cpuinfo`` lists, sorted; [] where there is no such file or line
    (not Linux, or an architecture whose cpuinfo names its features otherwise)."""
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return sorted(CPU_FLAGS & set(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return []


def matmul(precision: str, n: int, calls: int = 4) -> tuple[Callable[[], object], float]:
    """(a function running ``calls`` n x n @ n x n matmuls in ``precision``, fp32 or bf16, the FLOPs it does).
    The operands come from their own generator: the global RNG is not touched."""
    import torch

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=g).to(dtype) for _ in range(2))
    return (lambda: [torch.mm(a, b) for _ in range(calls)]), 2.0 * n ** 3 * calls


def matmul_gflops(threads: int, n: int = PEAK_N, reps: int = PEAK_REPS) -> float:
    """GFLOP/s of the fastest of ``reps`` n x n fp32 matmuls at ``threads`` threads (after one untimed call).
    The operands come from their own generator and the thread count is restored: no RNG, no model, no setting of
    the job's is touched, so its results stay bitwise what they are."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        run, flops = matmul("fp32", n, calls=1)
        run()
        seconds = []
        for _ in range(reps):
            t0 = time.perf_counter()
            run()
            seconds.append(time.perf_counter() - t0)
    finally:
        torch.set_num_threads(before)
    return flops / min(seconds) / 1e9


def host_identity(threads: int) -> dict[str, Any]:
    """The host of a job running at ``threads`` threads: {"cpu_model", "cpu_flags", "threads", "matmul_gflops"}."""
    return {"cpu_model": cpu_name(), "cpu_flags": cpu_flags(), "threads": int(threads),
            "matmul_gflops": round(matmul_gflops(threads), 1)}


def host_key(identity: Mapping[str, Any]) -> str:
    """What decides whether two jobs' costs compare: the CPU flags and the threads ("avx2+avx512f, 2 threads";
    "no listed flags, 1 thread" where the CPU has none of them or the host is not Linux)."""
    flags = "+".join(sorted(identity.get("cpu_flags") or [])) or "no listed flags"
    threads = identity.get("threads")
    return f"{flags}, {threads} thread{'' if threads == 1 else 's'}"
