"""presets/depth-cpu.yaml: six variants x depth 6 and 18 x warm-up on and off at the CPU study's width, batch and
lr_max, five seeds for the cells the depth claims compare and three for the others, and Post-LN and Pre-LN again at
a second, smaller lr_max; runs of different depths in one experiment; the valid-BLEU floor of test."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import REPO, plan
from lnrepro import config as cfg
from lnrepro.errors import LnReproError
from lnrepro.config.settings import GRADINIT_NORMS as NORMS  # the six variants the preset trains

PRESET = REPO / "presets" / "depth-cpu.yaml"
# The preset's six variants (registered ones beyond them are not in it) and their run names' prefixes.
SHORT = {"post": "postln", "pre": "preln", "pre_nofinal": "prenofinal", "deepnorm": "deepnorm", "admin": "admin",
         "rezero": "rezero"}
COMPARED = ("post", "pre", "deepnorm")  # five seeds at the study's lr_max; the others three
SECOND = ("post", "pre")  # also at the second lr_max, five seeds
SECOND_LR, SUFFIX = 1.0e-3, "_lr1e-3"
RUNS = ({f"{SHORT[n]}_{w}_isqrt_L{d}" for n in SHORT for w in ("warmup", "nowarmup") for d in (6, 18)}
        | {f"{SHORT[n]}_{w}_isqrt_L{d}{SUFFIX}" for n in SECOND for w in ("warmup", "nowarmup") for d in (6, 18)})


def depth_in_name(run: str) -> int:
    """The L of a run name ``..._L{layers}`` or ``..._L{layers}_lr{rate}``."""
    return int(run.rsplit("_L", 1)[1].split("_")[0])


def five_seeds(run: str, norm: str) -> bool:
    """Whether ``run`` (of variant ``norm``) is a cell the depth claims compare: five seeds."""
    return run.endswith(SUFFIX) or norm in COMPARED


@pytest.fixture(scope="module")
def loaded() -> dict:
    return cfg.load_config([REPO / "config.yaml", PRESET])


def test_the_preset_is_the_depth_design(loaded: dict) -> None:
    x, study = cfg.experiment(loaded), cfg.experiment(cfg.load_config([REPO / "config.yaml",
                                                                       REPO / "presets" / "study-cpu.yaml"]))
    assert set(SHORT) <= set(NORMS) and SECOND_LR < study.runs["postln_warmup_isqrt"].optim.lr_max
    assert set(x.select) == RUNS and len(x.select) == 32
    assert x.depths == (6, 18)
    for run in x.select:
        s = x.runs[run]
        assert x.seeds_of(run) == ((1, 2, 3, 4, 5) if five_seeds(run, s.model.norm) else (1, 2, 3)), run
        depth = depth_in_name(run)
        assert (s.model.encoder_layers, s.model.decoder_layers) == (depth, depth)
        assert SHORT[s.model.norm] == run.split("_")[0] and s.schedule.warmup == ("_warmup_" in run)
        assert s.schedule.decay == "isqrt"
        ref = study.runs["postln_warmup_isqrt"]
        assert (s.model.d_model, s.model.ffn_dim, s.model.heads) == (ref.model.d_model, ref.model.ffn_dim,
                                                                        ref.model.heads)
        lr = SECOND_LR if run.endswith(SUFFIX) else ref.optim.lr_max
        assert (s.optim.lr_max, s.train.max_tokens) == (lr, ref.train.max_tokens)
        assert s.schedule.warmup_updates == ref.schedule.warmup_updates
    assert x.epochs >= 3
    assert x.eval.splits["valid"].beam == 1 and x.eval.splits["valid"].scored(x.epochs) == tuple(range(1, x.epochs + 1))
    assert x.eval.splits["test"].beam == 5 and x.eval.splits["test"].scored(x.epochs) == (x.epochs,)
    assert x.eval.valid_bleu_floor is not None and x.eval.valid_bleu_floor > 0
    assert x.analysis.gradinit.depths == (6, 12, 18) and len(x.analysis.gradinit.seeds) == 3
    for key in ("model", "epochs", "seeds", "gradinit", "eval.splits.test", "lr_max", "lr_max_second", "budget"):
        assert key in loaded["scaling"], key
    assert "mirror" not in PRESET.read_text().split("name: depth-cpu", 1)[1]


def test_each_run_builds_the_model_of_its_own_depth(loaded: dict) -> None:
    """DeepNorm's constants and Admin's profiling read the model's own layer counts (ModelConfig): a run's
    config.json carries its depth, not defaults.model's."""
    from lnrepro.model.variants.deepnorm import deepnorm_constants

    x = cfg.experiment(loaded)
    for depth in (6, 18):
        rc = x.run_config(f"deepnorm_nowarmup_isqrt_L{depth}", 1)
        m = rc.model.model_config(vocab_size=100)
        assert (m.encoder_layers, m.decoder_layers) == (depth, depth)
    assert deepnorm_constants("decoder", 18, 18) != deepnorm_constants("decoder", 6, 6)


def test_the_floor_is_in_the_slice_that_scores_test_beside_valid(loaded: dict) -> None:
    x = cfg.experiment(loaded)
    groups = x.eval.groups(x.epochs)
    assert groups == {("valid", "test"): (x.epochs,), ("valid",): tuple(range(1, x.epochs))}
    assert x.eval.scoring(("valid", "test")).valid_bleu_floor == x.eval.valid_bleu_floor
    assert x.eval.scoring(("valid",)).valid_bleu_floor is None  # changing the floor rescores no valid-only job


def test_a_floor_needs_valid_wherever_another_split_is_scored(loaded: dict) -> None:
    c = cfg.deep_merge(loaded, {"defaults": {"eval": {"splits": {"valid": {"epochs": [1, "last"]},
                                                                  "test": {"epochs": "all"}}}}})
    unread = r"defaults\.eval\.valid_bleu_floor: .*valid is not scored at epoch\(s\) \[2\]"
    with pytest.raises(LnReproError, match=unread):
        cfg.validate_config(c)
    cfg.validate_config(cfg.deep_merge(c, {"defaults": {"eval": {"valid_bleu_floor": None}}}))
    with pytest.raises(LnReproError, match="valid_bleu_floor"):
        cfg.validate_config(cfg.deep_merge(loaded, {"defaults": {"eval": {"valid_bleu_floor": -1}}}))


def test_the_dry_run_lists_every_training_of_both_depths(tmp_path: Path) -> None:
    proc = plan(tmp_path, configfiles=(PRESET,))
    out = proc.stdout + proc.stderr
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", out, flags=re.M))
    # at 2e-3: 3 variants x 2 depths x 2 warm-up settings x 5 seeds + 3 x 2 x 2 x 3; at 1e-3: 2 x 2 x 2 x 5
    assert counts["train_run"] == "136"
    assert counts["score_checkpoint"] == "136" and counts["score_checkpoint_valid"] == "136"  # valid+test, valid
    assert counts["gradinit"] == "1" and counts["make_report"] == "1"
    trained = set(re.findall(r"wildcards: run=([\w.=-]+), seed=(\d+)", out))
    assert {run for run, _ in trained} == RUNS
    assert len(trained) == 136
