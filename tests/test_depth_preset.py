"""presets/depth-cpu.yaml: every registered variant x depth 6 and 18 x warm-up on and off at the CPU study's
width, batch and lr_max, a cap in updates, five seeds in every 18-layer cell and in Post-LN with warm-up at 6
layers, one in the other 6-layer cells, none of them a first-edition seed; a diverge_loss that can fire; the fate
rule's constants as the preset states them; runs of different depths in one experiment; the valid-BLEU floor of
test."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from conftest import REPO, plan
from lnrepro import config as cfg
from lnrepro.analysis import fates
from lnrepro.errors import LnReproError
from lnrepro.norms import NORMS

PRESET = REPO / "presets" / "depth-cpu.yaml"
# Run names' prefixes per variant: the first edition's words for its six, the registry's names for the others.
SHORT = {"post": "postln", "pre": "preln", "pre_nofinal": "prenofinal"}
RUNS = {f"{SHORT.get(n, n)}_{w}_isqrt_L{d}" for n in NORMS for w in ("warmup", "nowarmup") for d in (6, 18)}
SEEDS, ONE_SEED = (21, 22, 23, 24, 25), (21,)
FIRST_EDITION_SEEDS = {1, 2, 3, 4, 5}
CAP, EPOCH_UPDATES = 1375, 275  # the cap in updates; an epoch of this BPE and batch (docs/measurements.md)


@pytest.fixture(scope="module")
def loaded() -> dict:
    return cfg.load_config([REPO / "config.yaml", PRESET])


def depth_in_name(run: str) -> int:
    return int(run.rsplit("_L", 1)[1])


def test_the_preset_is_the_atlas_design(loaded: dict) -> None:
    x, study = cfg.experiment(loaded), cfg.experiment(cfg.load_config([REPO / "config.yaml",
                                                                       REPO / "presets" / "study-cpu.yaml"]))
    assert len(NORMS) == 11 and set(x.select) == RUNS and len(x.select) == 44
    assert x.depths == (6, 18)
    ref = study.runs["postln_warmup_isqrt"]
    for run in x.select:
        s = x.runs[run]
        depth = depth_in_name(run)
        five = depth == 18 or run == "postln_warmup_isqrt_L6"
        assert x.seeds_of(run) == (SEEDS if five else ONE_SEED), run
        assert not set(x.seeds_of(run)) & FIRST_EDITION_SEEDS
        assert (s.model.encoder_layers, s.model.decoder_layers) == (depth, depth)
        assert SHORT.get(s.model.norm, s.model.norm) == run.split("_warmup")[0].split("_nowarmup")[0]
        assert s.schedule.warmup == ("_warmup_" in run) and s.schedule.decay == "isqrt"
        assert (s.model.d_model, s.model.ffn_dim, s.model.heads) == (ref.model.d_model, ref.model.ffn_dim,
                                                                        ref.model.heads)
        assert (s.optim.lr_max, s.train.max_tokens) == (ref.optim.lr_max, ref.train.max_tokens)
        assert s.schedule.warmup_updates == s.schedule.anchor_updates == ref.schedule.warmup_updates
        assert s.train.max_updates == 0
    assert x.epochs * EPOCH_UPDATES == CAP
    assert sum(len(x.seeds_of(r)) for r in x.select) == 136
    assert x.eval.splits["valid"].beam == 1 and x.eval.splits["valid"].scored(x.epochs) == tuple(range(1, x.epochs + 1))
    assert x.eval.splits["test"].beam == 5 and x.eval.splits["test"].scored(x.epochs) == (x.epochs,)
    assert x.eval.valid_bleu_floor is not None and x.eval.valid_bleu_floor > 0
    assert x.analysis.gradinit.depths == (6, 12, 18) and set(x.analysis.gradinit.norms) == set(NORMS)
    for key in ("model", "epochs", "seeds", "gradinit", "eval.splits.test", "diverge_loss", "budget"):
        assert key in loaded["scaling"], key
    assert "mirror" not in PRESET.read_text().split("name: depth-cpu", 1)[1]


def test_divergence_can_fire_and_the_stop_is_the_rules(loaded: dict) -> None:
    """diverge_loss lies above anything a unit that recovers logged (ln V is 8.29 nats at 4,000 types) and far below
    the schema's default, and it is the 4 ln V the preset's rule states."""
    x = cfg.experiment(loaded)
    loss = {x.runs[r].train.diverge_loss for r in x.select}
    vocab = loaded["defaults"]["bpe"]["vocab_size"]
    assert loss == {33.0} and round(4 * math.log(vocab)) == 33
    assert "train.diverge_loss = 33 nats (4 ln V" in PRESET.read_text()


def test_the_rule_the_preset_states_is_the_fates_module() -> None:
    """The preset's comment and docs/outputs.md state the fate rule's constants; lnrepro.analysis.fates is the
    rule: one fact."""
    text = " ".join(line.lstrip("# ").strip() for line in PRESET.read_text().splitlines() if line.startswith("#"))
    assert f"NLL above ln V after update {fates.RULE_START}" in text
    assert f"within {fates.RECOVERY} updates" in text
    assert f"last {fates.WINDOW} updates above H - {fates.STALL_MARGIN:g} nats" in text
    assert f"fewer than {fates.DISTINCT_SHARE:.0%} of the validation hypotheses" in text
    assert f"at or below {fates.SPEED_TARGET:g} nats" in text
    assert f"every unit trains {CAP:,} updates" in text
    docs = " ".join((REPO / "docs" / "outputs.md").read_text(encoding="utf-8").split())
    assert (f"NLL above ln V after update {fates.RULE_START} not back below H within {fates.RECOVERY} updates"
            in docs)
    assert f"the last {fates.WINDOW} updates above H - {fates.STALL_MARGIN:g};" in docs
    assert f"fewer than {fates.DISTINCT_SHARE:.0%} of the validation hypotheses" in docs


def test_each_run_builds_the_model_of_its_own_depth(loaded: dict) -> None:
    """DeepNorm's constants and Admin's profiling read the model's own layer counts (ModelConfig): a run's
    config.json carries its depth, not defaults.model's."""
    from lnrepro.model.variants.deepnorm import deepnorm_constants

    x = cfg.experiment(loaded)
    for depth in (6, 18):
        rc = x.run_config(f"deepnorm_nowarmup_isqrt_L{depth}", 21)
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
    unread = r"defaults\.eval\.valid_bleu_floor: .*valid is not scored at epoch\(s\) \[2, 3, 4\]"
    with pytest.raises(LnReproError, match=unread):
        cfg.validate_config(c)
    cfg.validate_config(cfg.deep_merge(c, {"defaults": {"eval": {"valid_bleu_floor": None}}}))
    with pytest.raises(LnReproError, match="valid_bleu_floor"):
        cfg.validate_config(cfg.deep_merge(loaded, {"defaults": {"eval": {"valid_bleu_floor": -1}}}))


def test_the_dry_run_lists_every_training_of_both_depths(tmp_path: Path) -> None:
    proc = plan(tmp_path, configfiles=(PRESET,))
    out = proc.stdout + proc.stderr
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", out, flags=re.M))
    # 11 variants x 2 warm-up settings: x 5 seeds at 18 layers (110), x 1 at 6 layers but Post-LN with warm-up (26)
    assert counts["train_run"] == "136"
    assert counts["score_checkpoint"] == "136" and counts["score_checkpoint_valid"] == "136"  # valid+test, valid
    assert counts["gradinit"] == "1" and counts["make_report"] == "1"
    trained = set(re.findall(r"wildcards: run=([\w.=-]+), seed=(\d+)", out))
    assert {run for run, _ in trained} == RUNS
    assert len(trained) == 136
