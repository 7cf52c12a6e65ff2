"""The device a job computes on: the GPUs the scheduler gave it decide, never what happens to be visible.

A job given no GPU (its rule's ``resources.<rule>.gpus: 0`` in the config) runs on the CPU, also on a machine
with one: the scheduler did not give it that GPU (other jobs may hold it), and a CPU study must be computed on
the CPU. A job given a GPU runs on CUDA, and refuses to start when torch sees none. The workflow passes the
decision to each stage as ``--device`` (``device_for``, through ``lnrepro.config.Resources.device``); run by
hand, ``lnrepro train``, ``evaluate`` and ``gradinit`` compute on the CPU unless given ``--device cuda``.

torch is imported only by ``select_device`` and ``device_name``, so the Snakefile maps resources to a device
without importing it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import LnReproError
from .io import cpu_name

if TYPE_CHECKING:
    import torch

DEVICES: tuple[str, ...] = ("cpu", "cuda")
DEFAULT_DEVICE = "cpu"  # a stage run by hand, without --device


def device_for(gpus: int) -> str:
    """The device of a job given ``gpus`` GPUs: ``cuda`` for one or more, else ``cpu``."""
    return "cuda" if gpus > 0 else "cpu"


def select_device(name: str) -> torch.device:
    """``name`` (cpu | cuda) as a torch device. cuda without a visible CUDA device is an error: the job was
    given a GPU it cannot use, and computing on the CPU instead would run another experiment than asked."""
    import torch

    if name not in DEVICES:
        raise LnReproError(f"--device {name!r}: expected one of {', '.join(DEVICES)}")
    if name == "cuda" and not torch.cuda.is_available():
        raise LnReproError(
            "--device cuda: the job was given a GPU (its rule's gpus in the config's resources: section, "
            "resources.<rule>.gpus), but torch sees no CUDA device (no GPU or driver, CUDA_VISIBLE_DEVICES "
            f"empty, or a CPU-only torch {torch.__version__}). Nothing was computed. Run it where a GPU is "
            "visible, or give the rule 0 GPUs (e.g. resources.train_run.gpus: 0) to compute on the CPU")
    return torch.device(name)


def device_name(device: torch.device) -> str:
    """The model of ``device``: the GPU's name, or the CPU's (as records name where a job ran)."""
    import torch

    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
