"""Shared, expensive fixtures: a copy of the repository and one demo DAG run per test session."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def copy_repo(dest: Path) -> Path:
    """Copy the repository's tracked and untracked-but-not-ignored files (what a clean checkout has) to ``dest``."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, check=True, capture_output=True,
    ).stdout.decode().split("\0")
    for name in filter(None, files):
        src = REPO / name
        if src.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    return dest


def snakemake(workdir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run the snakemake command line in ``workdir`` (the same Python's, so the installed package is used)."""
    cmd = [sys.executable, "-m", "snakemake", *args]
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-5000:]}\n{proc.stderr[-10000:]}")
    return proc


@dataclass
class DemoRun:
    workdir: Path
    exp_dir: Path
    wall_s: float
    log: str


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """The demo preset's whole DAG, run once through the snakemake command line in a copy of the repository."""
    workdir = copy_repo(tmp_path_factory.mktemp("demo") / "repo")
    start = time.perf_counter()
    proc = snakemake(workdir, "--cores", "2", "--configfile", "presets/demo.yaml")
    wall = time.perf_counter() - start
    print(f"\ndemo DAG: {wall:.1f} s wall-clock")
    return DemoRun(workdir=workdir, exp_dir=workdir / "results" / "demo", wall_s=wall, log=proc.stderr)
