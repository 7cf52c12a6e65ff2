"""The host of a job (lnrepro.host) and what the report makes of it: the where-ran table, and cost compared across
hosts flagged as confounded by the host while quality per epoch is compared as before (on the demo pair's
records, one unit's CPU flags edited)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from lnrepro.analysis.build import build
from lnrepro.analysis.render.report import make_report
from lnrepro.analysis.results import read_results
from lnrepro.config import Experiment
from lnrepro.host import CPU_FLAGS, cpu_flags, host_identity, host_key
from lnrepro.paths import EXPERIMENT_JSON
from lnrepro.records import CheckpointScores, RunRecord

INTEL = "fpu vme sse2 avx avx2 fma avx512f avx512bw avx512_vnni avx512_bf16 amx_tile amx_bf16 amx_int8 sha_ni"


def test_cpu_flags_lists_the_known_flags_of_proc_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: {INTEL}\n\nprocessor\t: 1\nflags\t\t: avx2\n")
    assert cpu_flags(str(info)) == ["amx_bf16", "amx_int8", "amx_tile", "avx2", "avx512_bf16", "avx512_vnni",
                                    "avx512f"]
    info.write_text("processor\t: 0\nFeatures\t: fp asimd sve\n")  # an ARM cpuinfo names no x86 flags
    assert cpu_flags(str(info)) == []
    assert cpu_flags(str(tmp_path / "absent")) == []


def test_host_key_is_the_flags_and_threads_only():
    a = {"cpu_model": "AMD EPYC", "cpu_flags": ["avx2"], "threads": 2, "matmul_gflops": 50.0}
    assert host_key(a) == "avx2, 2 threads"
    assert host_key({**a, "cpu_model": "Intel Xeon", "matmul_gflops": 90.0}) == host_key(a)
    assert host_key({**a, "cpu_flags": ["avx2", "avx512f"]}) != host_key(a)
    assert host_key({**a, "threads": 4}) != host_key(a)
    assert host_key({**a, "cpu_flags": [], "threads": 1}) == "no listed flags, 1 thread"


def test_host_identity_measures_without_touching_the_rng_or_the_threads():
    torch.set_num_threads(2)
    torch.manual_seed(0)
    expected = torch.rand(4)
    torch.manual_seed(0)
    identity = host_identity(1)
    assert torch.equal(torch.rand(4), expected) and torch.get_num_threads() == 2
    assert list(identity) == ["cpu_model", "cpu_flags", "threads", "matmul_gflops"]
    assert identity["threads"] == 1 and identity["matmul_gflops"] > 0
    assert set(identity["cpu_flags"]) <= CPU_FLAGS and identity["cpu_flags"] == sorted(identity["cpu_flags"])


@pytest.fixture()
def pair_tree(demo_pair_run, tmp_path) -> tuple[Path, Experiment]:
    """A copy of the demo pair's results tree (which the other tests read as it is) and its experiment."""
    exp_dir = Path(shutil.copytree(demo_pair_run.exp_dir, tmp_path / "demo", symlinks=True))
    return exp_dir, Experiment.read(exp_dir / EXPERIMENT_JSON)


def _run_json(exp_dir: Path, run: str) -> Path:
    return exp_dir / "runs" / run / "seed1" / "run.json"


def test_every_unit_records_its_host_and_commit(pair_tree):
    exp_dir, exp = pair_tree
    for run in exp.select:
        record = RunRecord.read(_run_json(exp_dir, run))
        assert record.host is not None and record.host["threads"] == record.threads
        for score in sorted((exp_dir / "runs" / run / "seed1" / "eval").glob("epoch*.json")):
            scores = CheckpointScores.read(score)
            assert scores.host is not None and scores.host["threads"] == scores.threads
            assert scores.git_commit == record.git_commit and scores.git_commit is not None


@pytest.mark.usefixtures("drawn")
def test_cost_across_hosts_is_confounded_by_the_host_quality_per_epoch_is_not(pair_tree, tmp_path):
    exp_dir, exp = pair_tree
    before = build(read_results(exp_dir, exp), exp)
    figure4 = next(c for c in before.confounds["comparisons"] if c["name"] == "figure4")
    assert figure4["cost_confounds"] == []  # every job of the demo ran here
    # the second run's unit trained on a host of other CPU flags (AVX2 only, or AVX-512 where this one has AVX2 only)
    run = exp.select[1]
    path = _run_json(exp_dir, run)
    rj = json.loads(path.read_text())
    other = ["avx2", "avx512f"] if rj["host"]["cpu_flags"] == ["avx2"] else ["avx2"]
    rj["host"] = {**rj["host"], "cpu_flags": other}
    path.write_text(json.dumps(rj))
    after = build(read_results(exp_dir, exp), exp)
    moved = next(c for c in after.confounds["comparisons"] if c["name"] == "figure4")
    assert moved["cost_confounds"] == ["train_hosts"]
    assert moved["cost_values"]["train_hosts"][run] == [host_key({"cpu_flags": other, "threads": rj["threads"]})]
    assert "Its cost (CPU time, wall-clock, time to quality in seconds" in moved["sentence"]
    assert "compare its cost within a host or in updates and epochs" in moved["sentence"]
    # quality per epoch: the same verdict, confounds and execution facts, the same per-epoch scores
    for key in ("verdict", "confounds", "execution_confounds"):
        assert moved[key] == figure4[key]
    assert after.agg.epochs.equals(before.agg.epochs)
    # the where-ran table lists each unit's host per job: the edited flags for its training only
    hosts = after.agg.hosts
    train = hosts[(hosts["run"] == run) & (hosts["job"] == "train")].iloc[0]
    assert (train["cpu_flags"], train["threads"]) == ("+".join(other), rj["threads"])
    assert train["git_commit"] == rj["git_commit"] and train["matmul_gflops"] == rj["host"]["matmul_gflops"]
    assert set(hosts["job"]) == {"train", "score"} and set(hosts["run"]) == set(exp.select)
    # the report: tables/hosts.csv, the where-ran table, the cost confound in confounds.md and the wall-clock text
    index = make_report(exp_dir, exp, tmp_path / "report")
    html, md = index.read_text(), (tmp_path / "report" / "confounds.md").read_text()
    assert 'id="where-ran"' in html and "fp32 matmul GFLOP/s" in html and rj["git_commit"][:12] in html
    assert "The trainings ran on 2 hosts" in html
    assert "cost confounds" in md and "the training hosts (" in md
    assert (tmp_path / "report" / "tables" / "hosts.csv").exists()
