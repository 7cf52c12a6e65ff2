"""The optimizers training can run: the registry of ``optim.name`` and ``build_optimizer``.

An optimizer is one ``register_optimizer`` call: its name (the config value), what it is (``run.json`` records
it), the ``optim`` settings it reads besides the learning rate, and a builder that imports torch itself. This
module imports neither torch nor the configuration at import time, so the configuration layer fills the
schema's enum of ``optim.name`` from ``OPTIMIZERS`` (as it fills ``model.norm``'s from ``lnrepro.norms``)
without loading torch. The learning rate is set before every update by ``lnrepro.train.step.train_step``
from the schedule; an optimizer is built with lr 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol

from .errors import LnReproError

if TYPE_CHECKING:  # torch only for the annotations: the registry's names are read without it
    import torch


class OptimizerSettings(Protocol):
    """What the registry reads of ``lnrepro.config.settings.OptimSettings`` (a protocol: the configuration
    imports this module, so this one does not import it)."""

    name: str


@dataclass(frozen=True)
class Optimizer:
    """One value of ``optim.name``."""

    name: str  # the config value
    implementation: str  # what it is, in words (run.json's ``optimizer``)
    settings: tuple[str, ...]  # the optim settings it reads besides lr_max: passed to build by name
    build: Callable[..., "torch.optim.Optimizer"]  # (parameters, **settings) -> optimizer at lr 0


# name -> optimizer, in registration order (the schema's enum)
OPTIMIZERS: dict[str, Optimizer] = {}


def register_optimizer(optimizer: Optimizer) -> Optimizer:
    """Add ``optimizer`` to the registry; a name registered twice is an error."""
    if optimizer.name in OPTIMIZERS:
        raise LnReproError(f"optim.name: '{optimizer.name}' is already registered")
    OPTIMIZERS[optimizer.name] = optimizer
    return optimizer


def optimizer_of(optim: OptimizerSettings) -> Optimizer:
    """The registered optimizer ``optim.name`` names (validated when the config was loaded; checked again for
    a config.json written by hand)."""
    try:
        return OPTIMIZERS[optim.name]
    except KeyError:
        raise LnReproError(f"optim.name: '{optim.name}' is not a registered optimizer; expected one of "
                           f"{', '.join(OPTIMIZERS)}") from None


def optimizer_settings(optim: OptimizerSettings) -> dict[str, Any]:
    """run.json's ``optimizer_settings``: the name and the settings ``optim``'s optimizer reads (lists for
    tuples, as JSON writes them)."""
    values = {k: getattr(optim, k) for k in optimizer_of(optim).settings}
    return {"name": optim.name, **{k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}}


def build_optimizer(model: "torch.nn.Module", optim: OptimizerSettings) -> "torch.optim.Optimizer":
    """The optimizer ``optim.name`` names over every parameter of ``model``, at lr 0."""
    spec = optimizer_of(optim)
    params: Iterable[Any] = model.parameters()
    return spec.build(params, **{k: getattr(optim, k) for k in spec.settings})


def _adamw(params: Iterable[Any], betas: tuple[float, float], eps: float,
           weight_decay: float) -> "torch.optim.Optimizer":
    # torch.optim.AdamW = fairseq's Adam with decoupled weight decay (p -= lr * wd * p before the Adam step) on
    # every parameter. Difference: AdamW adds eps after the bias correction, fairseq before it; at eps=1e-8 this
    # is negligible. The fused implementation (one pass over each parameter instead of the default foreach's
    # dozen passes over all of them; +2.8% tokens/s at the paper size, bf16) is deterministic.
    import torch

    return torch.optim.AdamW(params, lr=0.0, betas=tuple(betas), eps=eps, weight_decay=weight_decay, fused=True)


register_optimizer(Optimizer(
    name="adamw",
    implementation="torch.optim.AdamW (fused; decoupled weight decay, as fairseq's Adam)",
    settings=("betas", "eps", "weight_decay"),
    build=_adamw,
))
