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
    # what it does differently from the references of its algorithm (the report lists them for the runs using it)
    deviations: tuple[str, ...] = ()


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


def _radam(params: Iterable[Any], betas: tuple[float, float], eps: float,
           weight_decay: float) -> "torch.optim.Optimizer":
    """torch.optim.RAdam (Liu et al. 2020, "On the Variance of the Adaptive Learning Rate and Beyond", arXiv
    1908.03265) with decoupled weight decay (``decoupled_weight_decay=True``: p *= 1 - lr * wd before the
    update, on every parameter, as ``adamw``), betas and eps from the config, at lr 0.

    The update at step t (from 1), as torch 2.13's ``torch/optim/radam.py`` (``_single_tensor_radam``) computes
    it: m_t = beta1 m + (1 - beta1) g, v_t = beta2 v + (1 - beta2) g^2, rho_inf = 2 / (1 - beta2) - 1,
    rho_t = rho_inf - 2 t beta2^t / (1 - beta2^t); if rho_t > 5 (rectified)
    p -= lr * m_t / (1 - beta1^t) * r_t * sqrt(1 - beta2^t) / (sqrt(v_t) + eps) with
    r_t = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t)), else (the variance of the
    adaptive rate is intractable) the un-adapted momentum step p -= lr * m_t / (1 - beta1^t). rho_t <= 5 for
    the first 5 updates at beta2 0.98 (rho_5 = 4.92, rho_6 = 5.88) and at 0.999.

    This follows torch, which here agrees with the RAdam authors' ``radam.py`` (LiyuanLucasLiu/RAdam, the
    buffered ``RAdam``: weight decay always, the momentum step while N_sma < 5; it rectifies at N_sma >= 5
    where torch needs rho_t > 5, equal but for rho_t exactly 5). The implementations differ in those first
    updates (``Optimizer.deviations``): the authors' packaged ``radam/radam.py`` (``degenerated_to_sgd=False``,
    its default) skips both the step and the weight decay, and Transformer-Clinic's ``radam_fairseq/radam.py``
    (LiyuanLucasLiu/Transformer-Clinic, the optimizer behind Liu et al. 2020's Admin numbers, arXiv 2004.08249)
    skips the step but applies the weight decay. Not fused (torch has no fused RAdam): the default foreach
    implementation on CUDA, the per-tensor loop on CPU; both are deterministic.
    """
    import torch

    return torch.optim.RAdam(params, lr=0.0, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                             decoupled_weight_decay=True)


RADAM_DEVIATION = (
    "RAdam (optim.name radam): torch.optim.RAdam with decoupled weight decay. While the variance rectification is "
    "undefined (rho_t <= 5: the first 5 updates at beta2 0.98 or 0.999) it takes the un-adapted momentum step "
    "lr * m_t / (1 - beta1^t) with the weight decay, as the RAdam authors' radam.py; their radam/radam.py "
    "(degenerated_to_sgd=False) skips both the step and the weight decay in those updates, and Transformer-Clinic's "
    "radam_fairseq/radam.py (behind Liu et al. 2020's Admin numbers) skips the step but applies the weight decay.")

register_optimizer(Optimizer(
    name="radam",
    implementation="torch.optim.RAdam (decoupled weight decay; while rho_t <= 5 the un-adapted momentum step)",
    settings=("betas", "eps", "weight_decay"),
    build=_radam,
    deviations=(RADAM_DEVIATION,),
))
