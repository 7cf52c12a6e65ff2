"""The learning rate as one product (design.md): lr(t) = lr_max * w(t) * g(t).

t = updates already done (0 for the first update), as fairseq's ``lr_step_update(num_updates)`` sets the rate
of the *next* update (fairseq/optim/lr_scheduler/inverse_square_root_schedule.py: warmup_init_lr 0, linear
warm-up, then lr_max * sqrt(warmup / t)); epoch k counts from 1.
"""

from __future__ import annotations

import math

from ..errors import LnReproError


def lr_at(t: int, epoch: int, cfg: dict, lr_max: float) -> float:
    """Learning rate of update t (0-based) in epoch ``epoch`` (1-based); cfg is the config's schedule section.

    w(t) = min(1, t / warmup_updates) with warm-up, 1 without (so with warm-up the first update runs at lr 0);
    g(t) = isqrt: min(1, sqrt(anchor_updates / t)); step: decay_factor ** #{e in decay_epochs: epoch >= e}
    (one drop per listed epoch, from its first update on); constant: 1.
    """
    try:
        if cfg["warmup"]:
            tw = cfg["warmup_updates"]
            w = min(1.0, t / tw) if tw > 0 else 1.0
        else:
            w = 1.0
        decay = cfg["decay"]
        if decay == "isqrt":
            anchor = cfg["anchor_updates"]
            g = 1.0 if (t < anchor or t == 0) else math.sqrt(anchor / t)
        elif decay == "step":
            g = float(cfg["decay_factor"]) ** sum(1 for e in cfg["decay_epochs"] if epoch >= e)
        elif decay == "constant":
            g = 1.0
        else:
            raise LnReproError(f"schedule.decay: expected 'isqrt', 'step' or 'constant', got {decay!r}")
    except KeyError as e:
        raise LnReproError(f"schedule.{e.args[0]}: missing (needed by lr_at)") from e
    return lr_max * w * g
