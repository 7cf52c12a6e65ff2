"""One training update, the one the training loop runs and the bench measures (``train_step``).

In order: the schedule's learning rate of update ``t`` set on every parameter group; the forward pass under the
configured precision (bf16 autocast, or none for fp32), which returns the logits of the non-padding target
positions only (``Transformer.forward(..., packed=True)``); the label-smoothed loss, outside autocast, summed over
the target tokens; its value per target token (the one host sync of an update, which the divergence check needs),
and when it is not finite or above ``diverge_loss`` the update stops there, changing nothing;
``zero_grad(set_to_none=True)``; backward of the loss divided by the target tokens (fairseq's normalization);
clipping of the total gradient norm when ``clip_norm`` > 0; with ``inspect`` the gradient norms (after clipping,
as logged); the optimizer's step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ..config import OptimSettings, ScheduleSettings
from ..model import Transformer
from ..precision import autocast
from ..vocab import PAD
from .gradstats import layer_grad_norms, total_grad_norm
from .loss import label_smoothed_nll_loss
from .schedule import lr_at


class StepBatch(Protocol):
    """A collated batch on the model's device: source, decoder input, target and its token count (no pad)."""

    src: torch.Tensor
    prev: torch.Tensor
    target: torch.Tensor
    ntok: int


@dataclass(frozen=True)
class StepSettings:
    """What an update reads of a run's settings (``of``) or of the bench's."""

    optim: OptimSettings  # lr_max, label_smoothing, clip_norm (the optimizer was built from it)
    schedule: ScheduleSettings
    precision: str  # fp32 | bf16 (train.precision)
    diverge_loss: float  # train.diverge_loss: a loss per target token above it stops the update

    @classmethod
    def of(cls, settings: Any) -> StepSettings:
        """From a ``RunSettings`` or ``RunConfig``."""
        return cls(settings.optim, settings.schedule, settings.train.precision, settings.train.diverge_loss)


@dataclass(frozen=True)
class StepResult:
    """What one update did: its learning rate and loss, and, when asked, its gradient norms."""

    lr: float
    loss: float  # label-smoothed loss per target token (may be non-finite when not stepped)
    nll_sum: torch.Tensor  # the summed NLL, detached: reading it is a sync, so only logged updates do
    stepped: bool  # False: the loss failed the divergence check and nothing was updated
    grad_norm: float | None = None  # total norm before clipping (clipping or inspect)
    grad_norms: dict[str, Any] | None = None  # per layer (inspect)


def train_step(model: Transformer, optimizer: torch.optim.Optimizer, batch: StepBatch, t: int, epoch: int,
               settings: StepSettings, inspect: bool = False) -> StepResult:
    """Update ``t`` (0-based; updates done so far) of epoch ``epoch`` (from 1) on ``batch``."""
    lr = lr_at(t, epoch, settings.schedule, settings.optim.lr_max)
    for group in optimizer.param_groups:
        group["lr"] = lr
    with autocast(batch.src.device, settings.precision):
        logits = model(batch.src, batch.prev, packed=True)  # the non-padding positions' logits only
    target = batch.target.reshape(-1)
    loss_sum, nll_sum = label_smoothed_nll_loss(logits, target[target.ne(PAD)], settings.optim.label_smoothing)
    loss = float(loss_sum.detach()) / batch.ntok
    if not math.isfinite(loss) or loss > settings.diverge_loss:
        return StepResult(lr, loss, nll_sum.detach(), stepped=False)
    optimizer.zero_grad(set_to_none=True)
    (loss_sum / batch.ntok).backward()
    params = list(model.parameters())
    grad_norm = None
    if settings.optim.clip_norm > 0:
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, settings.optim.clip_norm))
    grad_norms = None
    if inspect:
        grad_norm = grad_norm if grad_norm is not None else total_grad_norm(params)
        grad_norms = layer_grad_norms(model)
    optimizer.step()
    return StepResult(lr, loss, nll_sum.detach(), True, grad_norm, grad_norms)
