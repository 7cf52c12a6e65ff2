"""The learning rate as one product: lr(t) = lr_max * w(t) * g(t) (docs/architecture.md, "The schedule").

t = updates already done (0 for the first update), as fairseq's ``lr_step_update(num_updates)`` sets the rate
of the *next* update (fairseq/optim/lr_scheduler/inverse_square_root_schedule.py: warmup_init_lr 0, linear
warm-up, then lr_max * sqrt(warmup / t)); epoch k counts from 1. Which settings it reads under each switch is
declared in the configuration layer (``lnrepro.config.settings.used_settings``).
"""

from __future__ import annotations

import math

from ..config import ScheduleSettings


def lr_at(t: int, epoch: int, s: ScheduleSettings, lr_max: float) -> float:
    """Learning rate of update t (0-based) in epoch ``epoch`` (1-based).

    w(t) = min(1, t / warmup_updates) with warm-up, 1 without (so with warm-up the first update runs at lr 0);
    g(t) = isqrt: min(1, sqrt(anchor_updates / t)); step: decay_factor ** #{e in decay_epochs: epoch >= e}
    (one drop per listed epoch, from its first update on); constant: 1. ``s.decay`` is one of the three:
    the config was validated when it was loaded.
    """
    w = min(1.0, t / s.warmup_updates) if s.warmup else 1.0
    if s.decay == "isqrt":
        g = 1.0 if (t < s.anchor_updates or t == 0) else math.sqrt(s.anchor_updates / t)
    elif s.decay == "step":
        g = float(s.decay_factor) ** sum(1 for e in s.decay_epochs if epoch >= e)
    else:
        g = 1.0
    return lr_max * w * g
