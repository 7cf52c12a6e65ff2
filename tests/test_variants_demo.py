"""presets/variants-demo.yaml, a layer on the demo preset: B2T, Sandwich-LN and DyT each with and without warm-up
beside Post-LN's and Pre-LN's same arms, two seeds; gradinit measures the variants the layer lists. The dry run
lists its jobs; every stage of its DAG runs through the snakemake command line, on the DAG-shape layer
(conftest.DAG_SHAPE) with each variant's arm without warm-up at one seed (``SHORT``, with Post-LN's and Pre-LN's as
the bases the variants are contrasted with): each variant trained, scored, measured and reported."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from conftest import DAG_SHAPE, REPO, copy_repo, plan, snakemake
from lnrepro import config as cfg

LAYERS = ("presets/demo.yaml", "presets/variants-demo.yaml")
VARIANTS = ("postln", "preln", "tfixup", "resi_dual", "b2t", "sandwich", "dyt")
RUNS = {f"{v}_{w}_isqrt" for v in VARIANTS for w in ("warmup", "nowarmup")}
SHORT_RUNS = sorted(f"{v}_nowarmup_isqrt" for v in VARIANTS)
SHORT = f"seeds: [1]\nselect: [{', '.join(SHORT_RUNS)}]\n"


def test_the_preset_is_the_demo_with_the_variants_arms():
    x = cfg.experiment(cfg.load_config([REPO / "config.yaml", *(REPO / p for p in LAYERS)]))
    demo = cfg.experiment(cfg.load_config([REPO / "config.yaml", REPO / LAYERS[0]]))
    assert x.name == "variants-demo" and set(x.select) == RUNS and x.seeds == (1, 2)
    assert x.analysis.gradinit.measured_norms == ("post", "pre", "tfixup", "resi_dual", "b2t", "sandwich", "dyt")
    assert {x.runs[r].model.norm for r in x.select} == {"post", "pre", "tfixup", "resi_dual", "b2t", "sandwich", "dyt"}
    assert all(x.runs[r].schedule.warmup == ("_warmup_" in r) for r in x.select)
    ref = demo.runs["postln_warmup_isqrt"]
    assert all(x.runs[r].model.d_model == ref.model.d_model and x.runs[r].train == ref.train for r in x.select)
    for v in ("tfixup", "resi_dual", "b2t", "sandwich", "dyt"):  # each variant's warm-up comparison
        assert set(x.comparisons[f"warmup_{v}_isqrt"].runs) == {f"{v}_nowarmup_isqrt", f"{v}_warmup_isqrt"}


def test_the_dry_run_lists_every_training(tmp_path):
    proc = plan(tmp_path, configfiles=LAYERS)
    out = proc.stdout + proc.stderr
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", out, flags=re.M))
    assert counts["train_run"] == "28" and counts["score_checkpoint"] == "28"  # 14 runs x 2 seeds
    assert counts["gradinit"] == "1" and counts["make_report"] == "1"
    assert {run for run, _ in re.findall(r"wildcards: run=(\w+), seed=(\d)", out)} == RUNS


@pytest.mark.snakemake
def test_the_preset_runs_through_snakemake(tmp_path):
    """Slow by nature: seven trainings, their scoring, the gradient at initialization of seven norms and the
    report, through the snakemake command line."""
    workdir = copy_repo(tmp_path / "repo")
    (workdir / "short.yaml").write_text(SHORT)
    snakemake(workdir, "--cores", "2", "--configfile", *LAYERS, DAG_SHAPE, "short.yaml")
    exp = workdir / "results" / "variants-demo"
    gradinit = pd.read_csv(exp / "analysis" / "gradinit.csv")
    assert list(dict.fromkeys(gradinit["norm"])) == ["post", "pre", "tfixup", "resi_dual", "b2t", "sandwich", "dyt"]
    assert sorted(p.parent.parent.name for p in exp.glob("runs/*/seed*/summary.json")) == SHORT_RUNS
    report = (exp / "report" / "index.html").read_text(encoding="utf-8")
    assert all(label in report for label in ("B2T", "Sandwich-LN", "DyT"))
