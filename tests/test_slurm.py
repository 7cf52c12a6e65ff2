"""A two-run, two-epoch selection of the demo (conftest.DEMO_PAIR: every stage of the DAG, 19 jobs) through
`--profile profiles/slurm` on a real one-node SLURM (tests/slurm_cluster.py).

Checks that every training and scoring job went through sbatch (the SLURM job id each of their
JSON outputs records) and that the results equal those of the same selection run locally in the
session (`demo_pair_run` in conftest.py: same config, seeds and threads). Results are compared, never
timings; the wall-clocks are printed for the record. The selection rather than the whole demo (over 100 jobs)
keeps the test to minutes; every rule that is not local still goes through sbatch at least once.

Skipped when SLURM is not installed (`bash .ci/install-slurm.sh` installs it), unless
LNREPRO_REQUIRE_SLURM=1, where a missing or failing cluster is an error.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import DEMO_PAIR, copy_repo
from run_results import eval_jsons, score_diffs, table_diffs
from slurm_cluster import PARTITION, SlurmCluster, slurm_cluster  # noqa: F401  (session fixture)

PRESET = "presets/demo.yaml"  # the resources: its rules are sized here
# Only what is the test cluster's, on top of profiles/slurm/config.yaml: its partition, no
# account, small memory requests (the node may be a small CI machine; SLURM does not enforce
# memory here), fast status polling, and no retries (a failure should show at once, not be
# retried away). Threads are NOT overridden: the results must equal the local run's.
TEST_MEM_MB = 256
SNAKEMAKE_TIMEOUT_S = 1200  # the selection takes minutes; a stuck cluster should fail well within CI's budget


def _test_overrides(workdir: Path) -> list[str]:
    rules = [r for r in yaml.safe_load((workdir / PRESET).read_text()).get("resources", {}) if r != "default"]
    return [
        "--default-resources", f"slurm_partition={PARTITION}", f"mem_mb={TEST_MEM_MB}",
        "--set-resources", *[f"{rule}:mem_mb={TEST_MEM_MB}" for rule in rules],
        "--slurm-no-account",
        "--slurm-init-seconds-before-status-checks", "2",
        "--latency-wait", "10",
        "--retries", "0",
    ]


def _slurm_job_id(obj: dict) -> str | None:
    """The SLURM job id a JSON records: top-level `slurm_job_id` or `where_ran.slurm_job_id`."""
    if obj.get("slurm_job_id"):
        return str(obj["slurm_job_id"])
    where = obj.get("where_ran")
    if isinstance(where, dict) and where.get("slurm_job_id"):
        return str(where["slurm_job_id"])
    return None


def _failed_job_logs(workdir: Path, limit: int = 3, tail: int = 40) -> str:
    """Tails of the SLURM logs of jobs that failed (the plugin names them in its error messages)."""
    logs = sorted((workdir / ".snakemake" / "slurm_logs").rglob("*.log"), key=lambda p: p.stat().st_mtime)
    out = []
    for path in logs:
        text = path.read_text(errors="replace")
        if "Error in rule" in text or "Traceback" in text:
            out.append(f"---- {path} ----\n" + "\n".join(text.splitlines()[-tail:]))
    return "\n".join(out[-limit:])


@pytest.fixture(scope="module")
def slurm_run(slurm_cluster: SlurmCluster, tmp_path_factory) -> dict:  # noqa: F811
    """DEMO_PAIR's DAG run through the SLURM profile in a fresh copy of the repository. Slow by nature: every job
    goes through a real cluster's sbatch, start-up and status polling, one after another where the DAG allows."""
    workdir = copy_repo(tmp_path_factory.mktemp("slurm") / "repo")
    cmd = [
        sys.executable, "-m", "snakemake",
        "--profile", "profiles/slurm",
        "--configfile", *DEMO_PAIR,
        *_test_overrides(workdir),
    ]
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, cwd=workdir, env={**slurm_cluster.env, "PYTHONUNBUFFERED": "1"},
            capture_output=True, text=True, timeout=SNAKEMAKE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"SLURM run did not finish in {SNAKEMAKE_TIMEOUT_S} s\n"
            f"{(exc.stderr or b'')[-5000:]!r}\n{slurm_cluster.logs()}", pytrace=False,
        )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        pytest.fail(
            f"{' '.join(cmd)} failed ({proc.returncode}) in {workdir}:\n{proc.stderr[-8000:]}\n"
            f"{_failed_job_logs(workdir)}\n{slurm_cluster.logs(tail=30)}", pytrace=False,
        )
    submitted = re.findall(r"has been submitted with SLURM jobid (\d+)", proc.stderr)
    return {"workdir": workdir, "exp_dir": workdir / "results" / "demo", "wall_s": wall,
            "log": proc.stderr, "submitted": submitted}


def _train_jsons(exp_dir: Path) -> list[Path]:
    return sorted(p for name in ("run.json", "summary.json") for p in exp_dir.glob(f"runs/*/seed*/{name}"))


@pytest.mark.slurm
def test_every_train_and_score_job_ran_through_sbatch(slurm_run, demo_pair_run):
    exp_dir, submitted = slurm_run["exp_dir"], set(slurm_run["submitted"])
    assert submitted, "snakemake reported no SLURM submission"
    assert len(submitted) == len(slurm_run["submitted"]), "a SLURM job id was reported twice"

    train, evals = _train_jsons(exp_dir), eval_jsons(exp_dir)
    # as many as the local run made (which is the whole DAG)
    local = demo_pair_run.exp_dir
    assert [p.relative_to(exp_dir) for p in train] == [p.relative_to(local) for p in _train_jsons(local)]
    assert [p.relative_to(exp_dir) for p in evals] == [p.relative_to(local) for p in eval_jsons(local)]
    assert train and evals

    ids: dict[Path, str | None] = {p: _slurm_job_id(json.loads(p.read_text())) for p in train + evals}
    missing = [str(p.relative_to(exp_dir)) for p, i in ids.items() if i is None]
    assert not missing, f"no SLURM job id recorded in: {missing}"
    unknown = {str(p.relative_to(exp_dir)): i for p, i in ids.items() if i not in submitted}
    assert not unknown, f"job ids not among those snakemake submitted ({sorted(submitted, key=int)}): {unknown}"
    # run.json and summary.json of one run come from the same job, and so do the score files of one run and
    # group of splits (one scoring job per training and group); different runs and groups from different ones
    run_ids = {p.parent: ids[p] for p in train}
    for p in train:
        assert ids[p] == run_ids[p.parent], f"{p}: run.json and summary.json written by different jobs"
    groups: dict[tuple, set] = {}
    for p in evals:
        groups.setdefault((p.parent.parent, tuple(json.loads(p.read_text())["splits"])), set()).add(ids[p])
    assert all(len(g) == 1 for g in groups.values()), f"one group's score files from several jobs: {groups}"
    distinct = list(run_ids.values()) + [next(iter(g)) for g in groups.values()]
    assert len(set(distinct)) == len(distinct), "two trainings/scoring jobs share a SLURM job"

    # the local run recorded none
    local_ids = [_slurm_job_id(json.loads(p.read_text())) for p in eval_jsons(local) + _train_jsons(local)]
    assert not any(local_ids), "the local demo run recorded SLURM job ids"

    # the SLURM logs are kept (profile: slurm-keep-successful-logs)
    kept = list((slurm_run["workdir"] / ".snakemake" / "slurm_logs").rglob("*.log"))
    assert len(kept) >= len(submitted)

    print(
        f"\nSLURM run of the demo pair: {len(submitted)} SLURM jobs submitted "
        f"({len(run_ids)} trainings, {len(evals)} scorings, {len(submitted) - len(run_ids) - len(evals)} other); "
        f"wall-clock {slurm_run['wall_s']:.1f} s through SLURM vs {demo_pair_run.wall_s:.1f} s local (--cores 2)"
    )


@pytest.mark.slurm
def test_slurm_results_equal_local_results(slurm_run, demo_pair_run):
    """Validation loss and BLEU of every checkpoint and split, bit for bit, and the report tables'."""
    exp_dir, local = slurm_run["exp_dir"], demo_pair_run.exp_dir
    for path in eval_jsons(local):
        rel = path.relative_to(local)
        threads = [json.loads(p.read_text())["threads"] for p in (path, exp_dir / rel)]
        assert threads[0] == threads[1], f"{rel}: different thread counts"
    diffs = score_diffs(local, exp_dir)
    assert not diffs, "results differ (local != SLURM):\n" + "\n".join(diffs[:20])
    diffs = table_diffs(local, exp_dir)
    assert not diffs, "report tables differ (local != SLURM):\n" + "\n".join(diffs[:20])


@pytest.mark.parametrize("profile", ["profiles/slurm", "profiles/local"])
def test_profile_is_accepted_by_snakemake(profile, tmp_path):
    """Every option in the profile exists (a typo in a `slurm-...` key would stop every real run).
    A dry run never submits, so this needs no cluster."""
    workdir = copy_repo(tmp_path / "repo")
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--profile", profile, "--configfile", PRESET,
         "--dry-run", "--quiet", "rules"],
        cwd=workdir, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"snakemake --profile {profile} -n failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
