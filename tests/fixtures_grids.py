"""Test helper: the demo experiment with two hand-made grids (the tuned baselines of the Figure-4 pair), built
from the typed sections directly, so that the analysis tests do not depend on the grids a preset configures."""

from __future__ import annotations

import copy
from pathlib import Path

from lnrepro import config
from lnrepro.config import Experiment

REPO = Path(__file__).resolve().parents[1]
LRS = (1.5e-3, 6.0e-3)
GRIDS = {"tune_postln": "postln_warmup_isqrt", "tune_preln": "preln_nowarmup_step8"}  # grid -> base


def grid_run(base: str, lr: float) -> str:
    return f"{base}__lr_max={lr:g}"


def demo_with_grids() -> Experiment:
    """The demo's runs plus, per grid, its base at each of LRS (runs ``{base}__lr_max={lr}``, seed 1)."""
    exp = config.experiment(config.load_config([REPO / "config.yaml", REPO / "presets" / "demo.yaml"])).to_dict()
    grids = {}
    for grid, base in GRIDS.items():
        names = []
        for lr in LRS:
            run = copy.deepcopy(exp["runs"][base])
            run["optim"]["lr_max"] = lr
            exp["runs"][grid_run(base, lr)] = run
            names.append(grid_run(base, lr))
        grids[grid] = {"base": base, "values": {"optim.lr_max": list(LRS)}, "seeds": [1], "runs": names}
    preset = {r for g in exp["grids"].values() for r in g["runs"]}  # the preset's own grids, if any, are left out
    own = [r for r in exp["select"] if r not in preset]
    exp.update(select=own + [r for g in grids.values() for r in g["runs"]], grids=grids,
               runs={r: exp["runs"][r] for r in own + [r for g in grids.values() for r in g["runs"]]})
    return Experiment.from_dict(exp)
