"""presets/study-cpu.yaml keeps what issue 14 fixes: the eight cells, three seeds, the paper's depth, equal tuned
grids, per-split scoring, and no path outside the repository."""

from __future__ import annotations

from conftest import REPO
from lnrepro import config as cfg

CELLS = {f"{n}_{w}_{d}" for n in ("postln", "preln") for w in ("warmup", "nowarmup") for d in ("isqrt", "step8")}


def test_study_preset_fixes_the_design() -> None:
    c = cfg.load_config([REPO / "config.yaml", REPO / "presets" / "study-cpu.yaml"])
    x = cfg.experiment(c)
    assert CELLS <= set(x.select)
    assert all(len(x.seeds_of(run)) >= 3 for run in CELLS)
    assert (x.model.encoder_layers, x.model.decoder_layers) == (6, 6) and x.model.d_model <= 128
    assert x.epochs >= 8 and x.data.dataset == "multi30k"
    trials = {name: len(g.runs) for name, g in x.grids.items()}
    assert set(trials) == {"tune_postln", "tune_preln"} and len(set(trials.values())) == 1, trials
    assert all(set(g.seeds).isdisjoint(x.seeds) for g in x.grids.values())  # no trial repeats a cell's training
    splits = c["defaults"]["eval"]["splits"]
    assert splits["valid"]["epochs"] == "all" and splits["test"] == {**splits["test"], "beam": 5, "epochs": "last"}
    # the preset names no mirror: the user points defaults.data.multi30k.mirror at one with --config(file)
    assert "mirror" not in (REPO / "presets" / "study-cpu.yaml").read_text().split("name: study-cpu", 1)[1]
    for key in ("model", "bpe.vocab_size", "epochs", "warmup_updates", "decay_epochs", "grids"):
        assert key in c["scaling"], key
