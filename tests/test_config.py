"""Configuration: defaults + run delta resolution, selection, typed slices, and errors that name the key."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from lnrepro import config as cfg
from lnrepro.errors import LnReproError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def paper() -> dict:
    return cfg.load_config([REPO / "config.yaml"])


def test_paper_config_is_the_papers(paper: dict) -> None:
    d = paper["defaults"]
    assert (d["model"]["encoder_layers"], d["model"]["decoder_layers"], d["model"]["d_model"]) == (6, 6, 512)
    assert (d["model"]["heads"], d["model"]["ffn_dim"], d["model"]["dropout"]) == (4, 1024, 0.1)
    assert d["optim"]["betas"] == [0.9, 0.98] and d["optim"]["lr_max"] == 5e-4
    assert d["schedule"]["warmup_updates"] == 4000 and d["schedule"]["decay_epochs"] == [8]
    assert d["train"]["epochs"] == 20 and paper["seeds"] == [1, 2, 3]
    assert d["eval"]["beam"] == 5 and d["eval"]["lenpen"] == 1.2
    assert len(paper["select"]) == 8
    assert paper["comparisons"]["figure4"]["runs"] == ["postln_warmup_isqrt", "preln_nowarmup_step8"]
    assert len(paper["comparisons"]) == 13


def test_run_resolves_as_deep_merge(paper: dict) -> None:
    r = cfg.resolve_run(paper, "preln_nowarmup_step8")
    assert r.model.norm == "pre" and r.model.d_model == 512
    assert r.schedule.to_dict() == {**paper["defaults"]["schedule"], "warmup": False, "decay": "step"}
    assert r.factors == {"norm": "pre", "warmup": False, "decay": "step"}
    assert r.flat()["schedule.decay_epochs"] == [8] and r.flat()["model.norm"] == "pre"
    assert paper["defaults"]["model"]["norm"] == "post"  # the defaults are not mutated


def test_run_slice_holds_only_what_training_depends_on(paper: dict, tmp_path: Path) -> None:
    s = cfg.experiment(paper).run_config("postln_warmup_isqrt", 2)
    d = s.to_dict()
    assert set(d) == {"run", "seed", "model", "optim", "schedule", "train", "data", "bpe"}
    assert s.seed == 2 and "eval" not in d
    assert s.data.dataset == "iwslt14" and "mirror" not in s.data.options and "archive" not in s.data.options
    s.write(tmp_path / "config.json")
    assert cfg.RunConfig.read(tmp_path / "config.json") == s  # written and read through the same class


def test_every_slice_round_trips(paper: dict, tmp_path: Path) -> None:
    x = cfg.experiment(paper)
    for section in (x, x.eval, x.data, x.bpe):
        section.write(tmp_path / "slice.json")
        assert type(section).read(tmp_path / "slice.json") == section


def test_a_slice_missing_a_key_names_it(paper: dict, tmp_path: Path) -> None:
    d = cfg.experiment(paper).eval.to_dict()
    del d["beam"]
    (tmp_path / "eval.json").write_text(__import__("json").dumps(d))
    with pytest.raises(LnReproError, match=r"eval.json: missing key beam"):
        cfg.EvalSettings.read(tmp_path / "eval.json")


def test_model_settings_are_model_config_without_the_vocabulary() -> None:
    import dataclasses

    from lnrepro.model import ModelConfig

    fields = [f.name for f in dataclasses.fields(ModelConfig)]
    assert fields[0] == "vocab_size" and fields[1:] == [f.name for f in dataclasses.fields(cfg.ModelSettings)]


def test_select_narrows_the_runs(tmp_path: Path) -> None:
    preset = tmp_path / "p.yaml"
    preset.write_text(yaml.safe_dump({"select": ["postln_warmup_isqrt", "preln_nowarmup_step8"]}))
    c = cfg.load_config([REPO / "config.yaml", preset])
    x = cfg.experiment(c)
    assert x.select == ("postln_warmup_isqrt", "preln_nowarmup_step8")
    assert set(x.runs) == {"postln_warmup_isqrt", "preln_nowarmup_step8"}


def test_demo_preset_is_valid_and_scaled() -> None:
    c = cfg.load_config([REPO / "config.yaml", REPO / "presets" / "demo.yaml"])
    assert c["name"] == "demo" and c["defaults"]["data"]["dataset"] == "synthetic"
    assert len(c["select"]) == 5 and c["seeds"] == [1]
    assert c["scaling"] and "warmup_updates" in c["scaling"]


@pytest.mark.parametrize(
    "mutate, key",
    [
        (lambda c: c["defaults"]["model"].update(nrom="pre"), "defaults.model.nrom"),
        (lambda c: c["runs"]["preln_warmup_isqrt"]["schedule"].update(warmpu=True), "runs.preln_warmup_isqrt.schedule.warmpu"),
        (lambda c: c.update(sedes=[1]), "sedes"),
    ],
)
def test_unknown_key_is_rejected_by_name(paper: dict, mutate, key: str) -> None:
    bad = copy.deepcopy(paper)
    mutate(bad)
    with pytest.raises(LnReproError, match=f"unknown key {key}"):
        cfg.validate_config(bad)


@pytest.mark.parametrize(
    "mutate, key",
    [
        (lambda c: c["defaults"]["model"].update(d_model="512"), "defaults.model.d_model"),
        (lambda c: c["defaults"]["schedule"].update(warmup="yes"), "defaults.schedule.warmup"),
        (lambda c: c["defaults"]["model"].update(norm="middle"), "defaults.model.norm"),
        (lambda c: c.update(seeds=["one"]), "seeds.0"),
    ],
)
def test_wrong_type_is_rejected_by_name(paper: dict, mutate, key: str) -> None:
    bad = copy.deepcopy(paper)
    mutate(bad)
    with pytest.raises(LnReproError, match=f"key {key}:"):
        cfg.validate_config(bad)


def test_selecting_an_undefined_run_is_rejected(paper: dict) -> None:
    bad = copy.deepcopy(paper)
    bad["select"] = ["postln_warmup_isqrt", "postln_typo"]
    with pytest.raises(LnReproError, match="postln_typo"):
        cfg.validate_config(bad)


def test_resources_fall_back_to_default(paper: dict) -> None:
    r = cfg.resources(paper, "write_run_config")
    assert r.to_dict() == paper["resources"]["default"]
    assert cfg.resources(paper, "train_run").gpus == 1


def test_resources_name_worker_rules_only(paper: dict) -> None:
    bad = copy.deepcopy(paper)
    bad["resources"]["train_runs"] = {"threads": 1}
    with pytest.raises(LnReproError, match="resources.train_runs: no such rule"):
        cfg.validate_config(bad)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda c: c["comparisons"]["figure4"].update(runs=["postln_warmup_isqrt", "nope"]), "comparisons.figure4.runs names 'nope'"),
        (lambda c: c["defaults"]["model"].update(heads=3), r"d_model \(512\) must be divisible by model.heads \(3\)"),
        (lambda c: c["defaults"]["model"].update(share_decoder_embeddings=False, share_all_embeddings=True),
         "share_all_embeddings requires"),
        (lambda c: c["defaults"]["schedule"].update(decay_epochs=[21]), r"decay_epochs \[21\] beyond the last epoch"),
        (lambda c: c["runs"]["postln_warmup_isqrt"].update(train={"epochs": 5}), "train.epochs must be the same"),
        (lambda c: c["comparisons"]["figure4"].update(factor="depth"), "comparisons.figure4.factor"),
    ],
)
def test_semantic_errors_name_the_setting(paper: dict, mutate, message: str) -> None:
    bad = copy.deepcopy(paper)
    mutate(bad)
    with pytest.raises(LnReproError, match=message):
        cfg.validate_config(bad)


def test_norm_enum_comes_from_the_registry() -> None:
    from lnrepro.norms import NORMS

    assert cfg.load_schema()["$defs"]["model"]["properties"]["norm"]["enum"] == list(NORMS)
