"""The learning rate as one product: lr(t) = lr_max * w(t) * g(t) (docs/architecture.md, "The schedule").

t = updates already done (0 for the first update), as fairseq's ``lr_step_update(num_updates)`` sets the rate
of the *next* update (fairseq/optim/lr_scheduler/inverse_square_root_schedule.py: warmup_init_lr 0, linear
warm-up, then lr_max * sqrt(warmup / t)); epoch k counts from 1.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ..config import ScheduleSettings
from ..errors import LnReproError

# Which settings lr_at reads, by switch: declared once, here, next to the code that reads them. A setting
# the run's switches do not list cannot act (it is inert): the confound analysis ignores its differences.
SWITCHES: frozenset[str] = frozenset({"warmup", "decay"})
WARMUP_SETTINGS: frozenset[str] = frozenset({"warmup_updates"})
DECAY_SETTINGS: dict[str, frozenset[str]] = {
    "isqrt": frozenset({"anchor_updates"}),
    "step": frozenset({"decay_epochs", "decay_factor"}),
    "constant": frozenset(),
}
_SWITCHED = WARMUP_SETTINGS.union(*DECAY_SETTINGS.values())


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


def used_settings(schedule: ScheduleSettings | Mapping[str, Any]) -> frozenset[str]:
    """Dotted keys (``schedule.warmup_updates``) of the settings ``lr_at`` reads under ``schedule``'s switches.

    ``schedule`` is the typed section or its mapping (config.json, experiment.json); only the switches are
    read, so a mapping without the inert settings works too."""
    warmup, decay = ((schedule["warmup"], schedule["decay"]) if isinstance(schedule, Mapping)
                     else (schedule.warmup, schedule.decay))
    if decay not in DECAY_SETTINGS:
        # a new decay declares its settings here, or every other one would look inert under it
        raise LnReproError(f"schedule.decay: '{decay}' declares no settings; expected one of {sorted(DECAY_SETTINGS)}")
    used = SWITCHES | DECAY_SETTINGS[decay] | (WARMUP_SETTINGS if warmup else frozenset())
    return frozenset(f"schedule.{k}" for k in used)


def inert_settings(schedule: ScheduleSettings | Mapping[str, Any]) -> frozenset[str]:
    """Dotted keys of the switched settings that cannot act under ``schedule``'s switches (the warm-up length
    without warm-up, the step decay's epochs and factor under another decay, the isqrt anchor under another)."""
    return frozenset(f"schedule.{k}" for k in _SWITCHED) - used_settings(schedule)
