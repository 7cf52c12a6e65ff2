"""presets/study-cpu.yaml keeps its design: the eight cells, three seeds, the paper's depth, equal tuned
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


def test_endpoint_preset_is_the_end_point_design() -> None:
    """presets/endpoint-cpu.yaml: Figure 4's pair trained longer than the grids, grids of three lr_max values (and
    those an extension added) with the factorial's inside, Post-LN without warm-up at the paper's lr_max judged against Post-LN with warm-up at
    that lr_max."""
    x = cfg.experiment(cfg.load_config([REPO / "config.yaml", REPO / "presets" / "endpoint-cpu.yaml"]))
    study = cfg.experiment(cfg.load_config([REPO / "config.yaml", REPO / "presets" / "study-cpu.yaml"]))
    pair = list(x.comparisons["figure4"].runs)
    assert all(x.last_of(r) > study.epochs for r in pair) and len(x.seeds_of(pair[0])) >= 4
    post, pre = (x.runs[r] for r in pair)
    assert post.schedule.warmup_updates == study.runs["postln_warmup_isqrt"].schedule.warmup_updates
    # the step decay at the same fraction of the training as in the factorial
    frac = (study.runs["preln_nowarmup_step8"].schedule.decay_epochs[0] - 1) / study.epochs
    assert (pre.schedule.decay_epochs[0] - 1) / x.last_of(pair[1]) == frac
    for name in ("tune_postln", "tune_preln"):
        lrs = x.grids[name].values["optim.lr_max"]
        assert len(lrs) >= 3 and min(lrs) < study.runs["postln_warmup_isqrt"].optim.lr_max < max(lrs)
        assert set(x.grids[name].seeds).isdisjoint(x.seeds_of(pair[0]))
        assert all(x.last_of(r) == study.epochs for r in x.grids[name].runs)
    paper = ("postln_nowarmup_isqrt__lr_max=5.0e-4", "postln_warmup_isqrt__lr_max=5.0e-4")
    assert all(r in x.select and len(x.seeds_of(r)) == 3 for r in paper)
    assert dict(x.analysis.report.failure_reference) == {paper[0]: paper[1]}
    extended = {name: len(x.grids[name].extended.get("optim.lr_max", ())) for name in ("tune_postln", "tune_preln")}
    assert all(len(x.grids[n].values["optim.lr_max"]) == 3 + extended[n] for n in extended)
    assert len(x.select) == 2 + sum(3 + n for n in extended.values()) + 2
