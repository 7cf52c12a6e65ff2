"""Shared, expensive fixtures: a copy of the repository and one demo DAG run per test session; and the
project-internal data folder (``shared`` marker)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Project-internal real data (the Multi30k mirror, an IWSLT14 sample), beside the checkout on the project's
# machines and in CI, absent from a user's clone; LNREPRO_SHARED points elsewhere (CI: at an empty folder,
# to check that a clone without it skips these tests).
SHARED = Path(os.environ.get("LNREPRO_SHARED", REPO.parent / "shared"))
REQUIRE_SHARED_ENV = "LNREPRO_REQUIRE_SHARED"


def shared_required() -> bool:
    """CI sets LNREPRO_REQUIRE_SHARED=1: there a test whose shared data is missing fails instead of skipping."""
    return os.environ.get(REQUIRE_SHARED_ENV, "") not in ("", "0", "false", "no")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip (or, when required, fail) a test marked ``shared(path, ...)`` whose paths (under SHARED; the
    folder itself when none is given) are missing.

    A hook rather than ``skipif``: the check runs at setup, before any fixture, and a required-but-missing
    path fails the way a missing SLURM does in tests/slurm_cluster.py."""
    for marker in item.iter_markers("shared"):
        missing = [str(p) for p in map(Path, marker.args or (SHARED,)) if not p.exists()]
        if missing:
            reason = f"project-internal data absent: {', '.join(missing)} (LNREPRO_SHARED: the folder holding it)"
            if shared_required():
                pytest.fail(f"{REQUIRE_SHARED_ENV}=1 but {reason}", pytrace=False)
            pytest.skip(reason)


# Fixtures that run a real (not dry-run) snakemake workflow: here, test_store.py, test_store_status.py, test_slurm.py.
SNAKEMAKE_FIXTURES = frozenset({"demo_run", "demo_pair_run", "parts", "encoded", "slurm_run"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``snakemake`` every test that uses one of SNAKEMAKE_FIXTURES, directly or through another fixture;
    then order the tests for pytest-xdist (``order_for_workers``)."""
    for item in items:
        if SNAKEMAKE_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.snakemake)
    order_for_workers(items)


# The two shared runs (``demo_run``, ``demo_pair_run``) are each made once per worker that runs a reader of it: a run's
# reader files are one unit of work (``pytest_xdist_make_scheduler``), so each runs once per session. A reader elsewhere
# fails collection.
SHARED_RUN_FILES: dict[str, tuple[str, ...]] = {
    "demo_run": ("tests/test_dag.py", "tests/test_report_browser.py"),
    "demo_pair_run": ("tests/test_faults_dag.py", "tests/test_faults_outputs.py", "tests/test_faults_records.py",
                      "tests/test_faults_report.py", "tests/test_host.py", "tests/test_slurm.py"),
}


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to: the shared run its file reads (SHARED_RUN_FILES), else its file (a
    file's module fixtures are then made once)."""
    path = nodeid.split("::", 1)[0]
    return next((run for run, files in SHARED_RUN_FILES.items() if path in files), path)


def order_for_workers(items: list[pytest.Item]) -> None:
    """Sort the units of work longest first, as far as known without timing: the shared runs' units, then the
    files with a real workflow run (``snakemake`` mark), then the rest, each in collection order. With
    ``--no-loadscope-reorder`` the workers take them in this order, so the long runs start first and overlap."""
    strays = [item.nodeid for item in items for run in SHARED_RUN_FILES
              if run in getattr(item, "fixturenames", ()) and work_unit(item.nodeid) != run]
    if strays:
        raise pytest.UsageError(f"a shared run read outside its SHARED_RUN_FILES (tests/conftest.py): {strays}")
    units = {item: work_unit(item.nodeid) for item in items}
    with_runs = {units[item] for item in items if item.get_closest_marker("snakemake")}
    order = {run: i for i, run in enumerate(SHARED_RUN_FILES)}
    # A stable sort by kind alone: a file's tests are contiguous in collection order, and stay so.
    items.sort(key=lambda item: order.get(units[item], len(order) + (units[item] not in with_runs)))


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """pytest-xdist's scope scheduling with ``work_unit`` as the scope: each unit goes to one worker whole."""
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnits(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return WorkUnits(config, log)


def copy_repo(dest: Path, stores: bool = False) -> Path:
    """Copy the repository's tracked and untracked-but-not-ignored files (what a clean checkout has) to ``dest``;
    the published stores (published/: thousands of records, which no workflow run reads) only with ``stores``."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, check=True, capture_output=True,
    ).stdout.decode().split("\0")
    for name in filter(None, files):
        if not stores and name.startswith("published/"):
            continue
        src = REPO / name
        if src.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    return dest


# Snakemake's text output does not mark a warning as one: with ``tag_warnings`` each record it logs at WARNING
# level is written to stderr once more, its first line behind WARNING_TAG, by a handler on the root logger
# (Snakemake's own logger keeps its handlers and propagates to the root).
WARNING_TAG = "snakemake warning: "
_TAGGING_MAIN = f"""import logging, sys
handler = logging.StreamHandler(sys.stderr)
handler.addFilter(lambda record: record.levelno == logging.WARNING)
handler.setFormatter(logging.Formatter({WARNING_TAG!r} + "%(message)s"))
logging.getLogger().addHandler(handler)
from snakemake.cli import main
main()"""


def snakemake(workdir: Path, *args: str, check: bool = True, tag_warnings: bool = False) -> subprocess.CompletedProcess:
    """Run the snakemake command line in ``workdir`` (the same Python's, so the installed package is used);
    ``tag_warnings``: Snakemake's warnings marked in stderr (WARNING_TAG). Never in the checkout itself: its
    ``results/`` is the user's (the README's demo runs there first), and a plan made there counts the jobs that
    user's results still need (``plan`` dry-runs from an empty folder)."""
    if Path(workdir).resolve() == REPO:
        raise AssertionError(f"snakemake in the checkout {REPO} would read the user's results/: use plan(), "
                             "copy_repo() or -s Snakefile from a temporary folder")
    cmd = [sys.executable, *(["-c", _TAGGING_MAIN] if tag_warnings else ["-m", "snakemake"]), *args]
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-5000:]}\n{proc.stderr[-10000:]}")
    return proc


def plan(workdir: Path, *args: str, configfiles: tuple[str | Path, ...] = ()) -> subprocess.CompletedProcess:
    """A dry run (``-n``) of the checkout's Snakefile from the empty folder ``workdir``, so that no ``results/``
    of the checkout's (a user's finished demo) changes what it plans; ``configfiles`` relative to the checkout."""
    layers = [str(REPO / f) for f in configfiles]
    return snakemake(workdir, "-s", str(REPO / "Snakefile"), "-n", *args,
                     *(["--configfile", *layers] if layers else []))


@dataclass
class DemoRun:
    workdir: Path
    exp_dir: Path
    wall_s: float
    log: str


# The layer every end-to-end run of a preset adds (tests/dag_shape.yaml): each job of the preset's DAG, on a quarter
# of the demo's corpus. DEMO: the demo preset's DAG with it, as ``demo_run`` runs it.
DAG_SHAPE = "tests/dag_shape.yaml"
DEMO: tuple[str, ...] = ("presets/demo.yaml", DAG_SHAPE)


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """The demo preset's whole DAG (DEMO: each of the README demo's 86 jobs, 24 trainings among them, on the
    DAG-shape layer), run once through the snakemake command line in a copy of the repository. Slow by nature
    (the suite's longest fixture); its readers share one xdist worker (SHARED_RUN_FILES)."""
    workdir = copy_repo(tmp_path_factory.mktemp("demo") / "repo")
    start = time.perf_counter()
    proc = snakemake(workdir, "--cores", "2", "--configfile", *DEMO)
    wall = time.perf_counter() - start
    print(f"\ndemo DAG: {wall:.1f} s wall-clock")
    return DemoRun(workdir=workdir, exp_dir=workdir / "results" / "demo", wall_s=wall, log=proc.stderr)


# A two-run, two-epoch selection of the demo (tests/demo_pair.yaml layered on DEMO): every stage in well under a
# minute, for tests that run the pipeline end to end (tests/test_faults_dag.py, tests/test_slurm.py).
DEMO_PAIR: tuple[str, ...] = (*DEMO, "tests/demo_pair.yaml")


@pytest.fixture(scope="session")
def demo_pair_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """DEMO_PAIR's whole DAG, run once through the snakemake command line in a copy of the repository. Tests
    read it; a test that changes it works on a copy (``copy_run``); its readers share one xdist worker
    (SHARED_RUN_FILES)."""
    workdir = copy_repo(tmp_path_factory.mktemp("demo_pair") / "repo")
    start = time.perf_counter()
    proc = snakemake(workdir, "--cores", "2", "--configfile", *DEMO_PAIR)
    wall = time.perf_counter() - start
    print(f"\ndemo pair DAG: {wall:.1f} s wall-clock")
    return DemoRun(workdir=workdir, exp_dir=workdir / "results" / "demo", wall_s=wall, log=proc.stderr)


def copy_run(run: DemoRun, dest: Path) -> DemoRun:
    """A copy of a finished DAG run's folder, modification times and Snakemake's metadata kept, so that
    Snakemake sees it as up to date exactly as the original."""
    workdir = Path(shutil.copytree(run.workdir, dest / "repo", symlinks=True))
    return DemoRun(workdir=workdir, exp_dir=workdir / run.exp_dir.relative_to(run.workdir), wall_s=0.0, log="")


def tiny_experiment(model: dict | None = None, gradinit: dict | None = None):
    """The demo preset's typed experiment with model and gradinit settings overridden, loaded and validated as
    the workflow loads it (what gradinit and the report read from experiment.json)."""
    import yaml

    from lnrepro.config import experiment, load_config

    layer = {"defaults": {"model": model or {}}, "analysis": {"gradinit": gradinit or {}}}
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"lnrepro-tiny-{os.getpid()}.yaml"
    tmp.write_text(yaml.safe_dump(layer))
    try:
        return experiment(load_config([REPO / "config.yaml", REPO / "presets" / "demo.yaml", tmp]))
    finally:
        tmp.unlink()


@contextmanager
def figures_unsaved() -> Iterator[list]:
    """Within it, the report's figures are drawn but not saved: ``plots._save`` collects each figure (closed on
    leaving) and returns its path, writing nothing. For tests that inspect a figure, and for tests of a report's
    text and tables, since matplotlib's layout and PNG rendering are most of a report's time; the saved figures
    are tested by tests/test_report.py's module report, tests/test_depth.py and every end-to-end run."""
    from lnrepro.analysis.render import plots

    figs: list = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plots, "_save", lambda fig, path: figs.append(fig) or Path(path))
        try:
            yield figs
        finally:
            for fig in figs:
                plots.plt.close(fig)


@pytest.fixture
def drawn() -> Iterator[list]:
    """The figures the plot functions draw during the test, in order, none saved (``figures_unsaved``)."""
    with figures_unsaved() as figs:
        yield figs


def fake_bpe(path: Path, vocab: int = 40, n: int = 96, seed: int = 0) -> Path:
    """A BPE folder: random train.{de,en}.ids (ids in [4, vocab)) and a real sentencepiece model of ``vocab``
    pieces (only its size matters to the readers)."""
    import random

    import sentencepiece as spm

    rng = random.Random(seed)
    path.mkdir(parents=True, exist_ok=True)
    de, en = [], []
    for _ in range(n):
        k = rng.randint(3, 12)
        de.append(" ".join(str(rng.randrange(4, vocab)) for _ in range(k)))
        en.append(" ".join(str(rng.randrange(4, vocab)) for _ in range(k + rng.randint(-2, 2))))
    (path / "train.de.ids").write_text("\n".join(de) + "\n")
    (path / "train.en.ids").write_text("\n".join(en) + "\n")
    text = path / "spm.txt"
    text.write_text("\n".join(f"das haus ist klein nummer {i} the house is small" for i in range(50)) + "\n")
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(path / "spm"), vocab_size=vocab,
                                   model_type="bpe", bos_id=0, pad_id=1, eos_id=2, unk_id=3, minloglevel=2)
    text.unlink()
    return path
