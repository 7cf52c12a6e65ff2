"""lr(t) = lr_max * w(t) * g(t) for the eight factorial cells, per update."""

import dataclasses
import math

import pytest

from lnrepro.config import ScheduleSettings, load_schema
from lnrepro.config.settings import DECAY_SETTINGS, inert_settings, used_settings
from lnrepro.errors import LnReproError
from lnrepro.train.schedule import lr_at

LR = 5e-4
BASE = {"warmup_updates": 4000, "anchor_updates": 4000, "decay_epochs": [8], "decay_factor": 0.1}
CELLS = [f"{n}_{w}_{d}" for n in ("postln", "preln") for w in ("warmup", "nowarmup") for d in ("isqrt", "step8")]


def cfg_of(cell: str, **changes) -> ScheduleSettings:
    _, w, d = cell.split("_")
    return ScheduleSettings.from_dict({**BASE, "warmup": w == "warmup", "decay": "isqrt" if d == "isqrt" else "step",
                                       **changes})


def expected(cell, t, epoch):
    """The formula written out independently of the implementation."""
    _, w, d = cell.split("_")
    warm = min(1.0, t / 4000) if w == "warmup" else 1.0
    if d == "isqrt":
        g = 1.0 if t < 4000 else math.sqrt(4000 / t)
    else:
        g = 0.1 if epoch >= 8 else 1.0
    return LR * warm * g


# (t = updates already done, epoch from 1): first update, mid warm-up, end of warm-up, last update of
# epoch 7, first update of epoch 8, late.
POINTS = [(0, 1), (1, 1), (2000, 2), (4000, 4), (4001, 4), (8799, 7), (8800, 8), (30000, 20)]


@pytest.mark.parametrize("cell", CELLS)
def test_eight_cells(cell):
    cfg = cfg_of(cell)
    for t, ep in POINTS:
        assert lr_at(t, ep, cfg, LR) == pytest.approx(expected(cell, t, ep), rel=1e-12, abs=0)


def test_landmarks():
    post = cfg_of("postln_warmup_isqrt")
    assert lr_at(0, 1, post, LR) == 0.0  # fairseq inverse_sqrt: warmup_init_lr 0 for the first update
    assert lr_at(4000, 4, post, LR) == pytest.approx(LR)  # end of warm-up: the peak
    assert lr_at(16000, 12, post, LR) == pytest.approx(LR / 2)  # sqrt(4000/16000)
    pre = cfg_of("preln_nowarmup_step8")
    assert lr_at(0, 1, pre, LR) == LR  # no warm-up: full rate from the first update
    assert lr_at(8799, 7, pre, LR) == LR
    assert lr_at(8800, 8, pre, LR) == pytest.approx(0.1 * LR)  # from the first update of epoch 8


def test_single_step_decay():
    pre = cfg_of("preln_nowarmup_step8")
    rates = [lr_at(10000 + 1000 * ep, ep, pre, LR) for ep in range(8, 21)]
    assert rates == pytest.approx([0.1 * LR] * len(rates))  # one drop, not one per epoch
    two = dataclasses.replace(pre, decay_epochs=(8, 12))
    assert lr_at(0, 12, two, LR) == pytest.approx(0.01 * LR)


def test_constant_decay():
    assert lr_at(123, 5, cfg_of("preln_nowarmup_isqrt", decay="constant"), LR) == LR
    assert lr_at(100, 1, cfg_of("preln_warmup_isqrt", decay="constant"), LR) == pytest.approx(LR * 100 / 4000)


def test_a_missing_schedule_key_is_named():
    # An unknown decay is the schema's to reject (tests/test_config.py); a slice missing a key names it.
    with pytest.raises(LnReproError, match="missing key warmup"):
        ScheduleSettings.from_dict({"decay": "constant", "warmup_updates": 1, "anchor_updates": 1,
                                    "decay_epochs": [], "decay_factor": 0.1})


# The declaration written out by hand: the settings each (warm-up, decay) reads besides the two switches.
USED = {
    (True, "isqrt"): {"warmup_updates", "anchor_updates"},
    (True, "step"): {"warmup_updates", "decay_epochs", "decay_factor"},
    (True, "constant"): {"warmup_updates"},
    (False, "isqrt"): {"anchor_updates"},
    (False, "step"): {"decay_epochs", "decay_factor"},
    (False, "constant"): set(),
}
SWITCHED = {"warmup_updates", "anchor_updates", "decay_epochs", "decay_factor"}
# A second value of each switched setting, different enough to move lr_at at some POINT if it is read.
OTHER = {"warmup_updates": 1000, "anchor_updates": 1000, "decay_epochs": (3,), "decay_factor": 0.5}


@pytest.mark.parametrize("warmup,decay", list(USED))
def test_used_and_inert_settings(warmup, decay):
    s = ScheduleSettings.from_dict({**BASE, "warmup": warmup, "decay": decay})
    used = {f"schedule.{k}" for k in USED[warmup, decay] | {"warmup", "decay"}}
    assert used_settings(s) == used
    assert inert_settings(s) == {f"schedule.{k}" for k in SWITCHED - USED[warmup, decay]}
    # a mapping (config.json, experiment.json) reads the same, even without its inert settings
    assert used_settings({"warmup": warmup, "decay": decay}) == used_settings(s.to_dict()) == used


@pytest.mark.parametrize("warmup,decay", list(USED))
def test_declaration_matches_lr_at(warmup, decay):
    """An inert setting never moves the learning rate; a used one does somewhere."""
    s = ScheduleSettings.from_dict({**BASE, "warmup": warmup, "decay": decay})
    for key, value in OTHER.items():
        changed = dataclasses.replace(s, **{key: value})
        moved = any(lr_at(t, ep, s, LR) != lr_at(t, ep, changed, LR) for t, ep in POINTS)
        assert moved == (f"schedule.{key}" in used_settings(s)), key


def test_every_decay_declares_its_settings():
    assert set(DECAY_SETTINGS) == set(load_schema()["$defs"]["schedule"]["properties"]["decay"]["enum"])
    with pytest.raises(LnReproError, match="cosine"):
        used_settings({"warmup": True, "decay": "cosine"})
