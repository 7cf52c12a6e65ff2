"""Each unit's fate read from its own training dynamics (one job: the rule, a function of one unit's records).

A unit (a run and seed) is judged by its training log, its validation hypotheses at the read point, the
vocabulary size V (ln V nats: the loss of a uniform prediction) and H, the target side's unigram entropy in nats
(the loss of a model that ignores the source and the target's prefix): never by other cells, so a seed that
learns slowly is not failed for being slower than the best cell, and the rule is fixed before any unit trains.
The fates, first match wins, read at update U (the unit's last step record unless given):

1. diverged: a non-finite loss or NLL in a step record up to U; a step record's NLL above ln V after
   ``RULE_START`` that does not come back below H within ``RECOVERY`` updates (or by U); or a run that stopped
   as diverged (``summary.json``'s ``diverged``) by U.
2. stalled: the mean NLL of the step records of the last ``WINDOW`` updates up to U above H - ``STALL_MARGIN``.
3. source-ignoring: fewer than ``DISTINCT_SHARE`` of the validation hypotheses at U distinct.
4. trained: otherwise.

Speed is reported beside the fate, never as a failure: the first update whose step record's NLL is at or below
``SPEED_TARGET``, censored at U. Losses are the training log's, in nats per target token, EOS counted
(``lnrepro.train.step``: every non-padding target position, and each target sequence ends with EOS).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..errors import LnReproError
from ..io import open_text
from ..vocab import EOS

if TYPE_CHECKING:  # pandas only for the store's tables
    import pandas as pd

DIVERGED, STALLED, SOURCE_IGNORING, TRAINED = "diverged", "stalled", "source-ignoring", "trained"
FATES = (DIVERGED, STALLED, SOURCE_IGNORING, TRAINED)

# A choice: the first updates are not judged for spikes, since a fresh model may start above ln V (the pilot's
# Pre-LN without its final LayerNorm at 18 layers logged 23 to 25.5 nats at update 20) and every pilot unit was
# below it by update 120.
RULE_START = 100
# A choice: a spike above ln V is judged by whether training comes back below H within this many updates (10
# step records at log_every 20), long enough for a transient, short against a 3-epoch run (825 updates).
RECOVERY = 200
# A choice: the stall test averages the step records of the last 100 updates (5 at log_every 20, 6 where an
# epoch's last update adds one), since each records one batch's NLL and one batch is noisy.
WINDOW = 100
# A choice: a unit whose recent NLL is within 0.3 nats of the unigram loss has learned little beyond unigram
# frequencies; in the pilot the units that decode "a a a ..." end at 5.36 to 5.93 nats (H 5.66), every unit
# that reads its source at 4.46 or below.
STALL_MARGIN = 0.3
# A choice placed between the pilot's two clusters: units that learned emit 62% to 100% distinct hypotheses,
# those that ignore the source (or stalled) 0.1% to 11% (one or a few sentences for all 1,014 inputs).
DISTINCT_SHARE = 0.5
# A choice: the NLL in nats time to learning is measured to, about 1.2 nats below H, which every pilot unit
# that trained reached within its 825 updates (the latest at update 600) and no stalled one did.
SPEED_TARGET = 4.5


@dataclass(frozen=True)
class Step:
    """One step record of a training log: its update count and its batch's loss and NLL (nats per target
    token; NaN where the log wrote null, i.e. not finite)."""

    update: int
    loss: float
    nll: float


@dataclass(frozen=True)
class Fate:
    """A unit's fate at update ``read_at``: why (one line), the mean NLL of its last ``WINDOW`` updates, the
    share of distinct validation hypotheses (NaN where not needed: diverged), and the first update at or below
    ``SPEED_TARGET`` (None: not reached by ``read_at``)."""

    fate: str
    why: str
    read_at: int
    final_nll: float
    distinct_share: float
    reached: int | None

    @property
    def speed(self) -> str:
        """The speed as the table prints it: the update, or that it was not reached by the read point."""
        return str(self.reached) if self.reached is not None else f"not reached by {self.read_at}"


def _number(value: Any) -> float:
    return float(value) if value is not None else math.nan


def steps_of(records: Mapping[int, Mapping[str, Any]]) -> list[Step]:
    """The step records of a training log (``integrity.read_train_log``'s ``steps``: a resumed run's repeated
    updates already the last attempt's) as ``Step``s in update order; a null number (not finite) is NaN."""
    return [Step(int(u), _number(r.get("loss")), _number(r.get("nll"))) for u, r in sorted(records.items())]


def unigram_entropy(ids_path: str | Path) -> float:
    """H in nats: the entropy of the target ids of an encoded split (``{split}.en.ids``, one sentence a line
    without EOS), counting one EOS per sentence as the training NLL does: the loss of the best prediction that
    reads neither the source nor the target's prefix."""
    counts: Counter[int] = Counter()
    sentences = 0
    try:
        with open_text(ids_path) as f:
            for line in f:
                counts.update(int(i) for i in line.split())
                sentences += 1
    except ValueError as e:
        raise LnReproError(f"{ids_path}: expected space-separated integer ids ({e})") from e
    except FileNotFoundError as e:
        raise LnReproError(f"{ids_path}: file not found") from e
    counts[EOS] += sentences
    total = sum(counts.values())
    if total == 0:
        raise LnReproError(f"{ids_path}: no sentences")
    return -sum(c / total * math.log(c / total) for c in counts.values())


def distinct_share(hypotheses: Sequence[str]) -> float:
    """The share of distinct lines among ``hypotheses``."""
    if not hypotheses:
        raise LnReproError("no validation hypotheses to count")
    return len(set(hypotheses)) / len(hypotheses)


def first_reached(steps: Sequence[Step], target: float, read_at: int) -> int | None:
    """The first update up to ``read_at`` whose step record's NLL is at or below ``target`` (None: none)."""
    return next((s.update for s in steps if s.update <= read_at and s.nll <= target), None)


def _unrecovered_spike(steps: Sequence[Step], log_v: float, entropy: float, read_at: int) -> Step | None:
    """The first step record after ``RULE_START`` with NLL above ln V that no later record within ``RECOVERY``
    updates (and up to ``read_at``) brings below H."""
    for i, s in enumerate(steps):
        if s.update > RULE_START and s.nll > log_v:
            end = min(s.update + RECOVERY, read_at)
            if not any(t.nll < entropy for t in steps[i + 1:] if t.update <= end):
                return s
    return None


def classify(steps: Sequence[Step], hypotheses: Sequence[str] | None, vocab_size: int, entropy: float, *,
             read_at: int | None = None, diverged_update: int | None = None) -> Fate:
    """The unit's fate at ``read_at`` (its last step record when None) from its step records, its validation
    hypotheses at that point (None only for a unit that diverged by then: no checkpoint to decode), the
    vocabulary size and the target's unigram entropy H (``unigram_entropy``). ``diverged_update``: the update at
    which training stopped as diverged (``summary.json``), which counts when its previous update is at or before
    the read point."""
    log_v = math.log(vocab_size)
    read_at = read_at if read_at is not None else max((s.update for s in steps), default=0)
    seen = sorted((s for s in steps if s.update <= read_at), key=lambda s: s.update)
    window = [s.nll for s in seen if s.update > read_at - WINDOW]
    final = sum(window) / len(window) if window else math.nan
    reached = first_reached(seen, SPEED_TARGET, read_at)

    def fate(name: str, why: str, share: float = math.nan) -> Fate:
        return Fate(name, why, read_at, final, share, reached)

    if diverged_update is not None and diverged_update - 1 <= read_at:
        return fate(DIVERGED, f"training stopped as diverged at update {diverged_update}")
    bad = next((s for s in seen if not (math.isfinite(s.loss) and math.isfinite(s.nll))), None)
    if bad is not None:
        return fate(DIVERGED, f"non-finite loss at update {bad.update}")
    spike = _unrecovered_spike(seen, log_v, entropy, read_at)
    if spike is not None:
        return fate(DIVERGED, f"NLL {spike.nll:.3g} above ln V {log_v:.3g} at update {spike.update}, not below H "
                              f"{entropy:.3g} by update {min(spike.update + RECOVERY, read_at)}")
    if not window:
        raise LnReproError(f"no step record in the {WINDOW} updates up to update {read_at}")
    if final > entropy - STALL_MARGIN:
        return fate(STALLED, f"mean NLL {final:.3g} of the last {WINDOW} updates above H - {STALL_MARGIN:g} = "
                             f"{entropy - STALL_MARGIN:.3g}")
    if hypotheses is None:
        raise LnReproError(f"no validation hypotheses at update {read_at} of a unit that did not diverge")
    share = distinct_share(hypotheses)
    if share < DISTINCT_SHARE:
        return fate(SOURCE_IGNORING, f"{share:.1%} of {len(hypotheses)} validation hypotheses distinct, below "
                                     f"{DISTINCT_SHARE:.0%}", share)
    return fate(TRAINED, f"mean NLL {final:.3g}, {share:.1%} of hypotheses distinct", share)
