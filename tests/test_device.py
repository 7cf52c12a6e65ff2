"""The device follows the GPUs a job is given: the mapping, the CLI's choice by hand, the config key it replaced,
and the commands the workflow runs (dry runs of the demo). The stages' own choice under a visible CUDA device:
tests/test_train.py, tests/test_score.py, tests/test_gradinit.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from conftest import DEMO_PAIR, REPO, snakemake
from lnrepro import config as cfg
from lnrepro.cli import build_parser
from lnrepro.config import Resources
from lnrepro.device import device_for, select_device
from lnrepro.errors import LnReproError

TORCH_STAGES = ("train_run", "score_checkpoint", "gradinit")  # the rules of the torch stages the paper sizes


def test_a_job_computes_on_cuda_exactly_when_it_is_given_a_gpu() -> None:
    assert [device_for(gpus) for gpus in (0, 1, 2)] == ["cpu", "cuda", "cuda"]
    assert Resources(threads=4, mem_mb=1000, runtime=10, gpus=0).device == "cpu"
    assert Resources(threads=4, mem_mb=1000, runtime=10, gpus=1).device == "cuda"


def test_the_config_resources_decide_each_rules_device() -> None:
    paper, demo = cfg.load_config([REPO / "config.yaml"]), cfg.load_config([REPO / "config.yaml", *DEMO_PAIR])
    assert {rule: cfg.resources(paper, rule).device for rule in TORCH_STAGES} == dict.fromkeys(TORCH_STAGES, "cuda")
    assert {rule: cfg.resources(demo, rule).device for rule in TORCH_STAGES} == dict.fromkeys(TORCH_STAGES, "cpu")


def test_cpu_is_selected_although_cuda_is_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert select_device("cpu") == torch.device("cpu")
    assert select_device("cuda") == torch.device("cuda")


def test_cuda_without_a_visible_cuda_device_is_one_error_naming_the_resource(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(LnReproError, match=r"--device cuda: .*resources\.<rule>\.gpus.*no CUDA device.*gpus: 0"):
        select_device("cuda")


@pytest.mark.parametrize("stage, args", [
    ("train", ["--config", "c.json", "--bpe", "bpe", "--run-dir", "run"]),
    ("evaluate", ["--eval-config", "eval.json", "--bpe", "bpe", "--prepared", "prepared", "--out", "e.json"]),
    ("gradinit", ["--gradinit-config", "gradinit.json", "--bpe", "bpe", "--out", "gradinit.csv"]),
])
def test_by_hand_a_stage_computes_on_the_cpu_unless_asked(stage: str, args: list[str]) -> None:
    parser = build_parser()
    assert parser.parse_args([stage, *args]).device == "cpu"
    assert parser.parse_args([stage, *args, "--device", "cuda"]).device == "cuda"
    with pytest.raises(SystemExit):
        parser.parse_args([stage, *args, "--device", "auto"])


@pytest.mark.parametrize("layer, where", [
    ({"defaults": {"train": {"device": "auto"}}}, "defaults.train.device"),
    ({"runs": {"preln_warmup_isqrt": {"train": {"device": "cuda"}}}}, "runs.preln_warmup_isqrt.train.device"),
    ({"grids": {"tune_preln": {"values": {"train.device": ["cpu", "cuda"]}}}},
     "grids.tune_preln.values.train.device"),
    ({"comparisons": {"devices": {"runs": ["preln_warmup_isqrt", "postln_warmup_isqrt"], "factor": "train.device",
                                  "claim": "the same"}}}, "comparisons.devices.factor"),
])
def test_a_config_that_sets_train_device_names_its_replacement(tmp_path: Path, layer: dict, where: str) -> None:
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(layer))
    with pytest.raises(LnReproError, match=rf"{where}: train\.device was removed; .*resources\.<rule>\.gpus"):
        cfg.load_config([REPO / "config.yaml", REPO / "presets" / "demo.yaml", tmp_path / "old.yaml"])


def _torch_commands(workdir: Path, *configfiles: Path) -> dict[str, list[str]]:
    """The shell commands of the demo pair's torch stages in a dry run, by stage (train, evaluate, gradinit)."""
    proc = snakemake(workdir, "-s", str(REPO / "Snakefile"), "-n", "-p", "--configfile",
                     *(str(REPO / f) for f in DEMO_PAIR), *map(str, configfiles))
    commands: dict[str, list[str]] = {}
    for line in (proc.stdout + proc.stderr).splitlines():
        words = line.split()
        if words[:1] == ["lnrepro"] or words[:3] == ["Shell", "command:", "lnrepro"]:
            words = words[words.index("lnrepro"):]
            if words[1] in ("train", "evaluate", "gradinit"):
                commands.setdefault(words[1], []).append(" ".join(words))
    assert set(commands) == {"train", "evaluate", "gradinit"}, proc.stdout + proc.stderr
    return commands


def test_the_workflow_passes_each_job_the_device_of_its_gpus(tmp_path: Path) -> None:
    cpu = _torch_commands(tmp_path)
    assert all(" --device cpu " in c for cs in cpu.values() for c in cs), cpu
    rules = (*TORCH_STAGES, "gradinit_after_warmup")  # the demo pair measures postln_warmup_isqrt after warm-up
    (tmp_path / "gpu.yaml").write_text(yaml.safe_dump({"resources": {rule: {"gpus": 1} for rule in rules}}))
    gpu = _torch_commands(tmp_path, tmp_path / "gpu.yaml")
    assert all(" --device cuda " in c for cs in gpu.values() for c in cs), gpu
