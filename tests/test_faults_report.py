"""Fault suite, report: a report that cannot be written leaves the previous one whole, with one
message naming the path; under Snakemake (which deletes the declared page and figures first) the tables end
wholly old."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import lnrepro.analysis.render.report as report_module
from conftest import copy_run, snakemake
from lnrepro.analysis.render.report import make_report
from lnrepro.errors import LnReproError
from test_faults_dag import DEMO_PAIR
from test_report import make_tree


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_failed_report_leaves_the_previous_one_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exp_dir, exp = make_tree(tmp_path)
    out = exp_dir / "report"
    make_report(exp_dir, exp, out)
    before = _files(out)

    def refuse(data, folder: Path):  # the figures' folder cannot be written (a full or read-only disk)
        raise PermissionError(13, "Permission denied", str(folder / "figure4_vs_epoch.png"))

    monkeypatch.setattr(report_module, "make_figures", refuse)
    with pytest.raises(LnReproError, match=r"figure4_vs_epoch\.png: cannot write it \(Permission denied\); "
                                           rf"{out} was left as it was") as e:
        make_report(exp_dir, exp, out)
    assert "\n" not in str(e.value)
    assert _files(out) == before  # tables, figures, page and confounds all the old ones
    assert sorted(p.name for p in exp_dir.iterdir() if p.name.startswith(".report")) == []  # no staging left


@pytest.fixture
def immutable(tmp_path: Path):
    """Make a folder immutable (chattr +i: not even root may add entries to it), undone after the test."""
    made: list[Path] = []

    def make(folder: Path) -> None:
        if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
            pytest.skip("chattr +i is not available on this file system")
        made.append(folder)

    yield make
    for folder in made:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def test_snakemake_report_that_cannot_be_written_keeps_the_old_tables(demo_pair_run, tmp_path: Path,
                                                                      immutable) -> None:
    run = copy_run(demo_pair_run, tmp_path)
    tables = _files(run.exp_dir / "report" / "tables")
    immutable(run.exp_dir)  # the report's folder can be neither replaced nor staged beside
    proc = snakemake(run.workdir, "--cores", "1", "--configfile", *DEMO_PAIR, "--forcerun", "make_report", check=False)
    assert proc.returncode != 0
    log = (run.exp_dir / "logs" / "make_report.log").read_text()
    errors = [line for line in log.splitlines() if line.startswith("lnrepro report: error: ")]
    assert len(errors) == 1 and "cannot write there" in errors[0] and "Traceback" not in log, log
    assert _files(run.exp_dir / "report" / "tables") == tables


def test_an_experiment_folder_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    """A mistyped --exp-dir once gave exit 0 and a whole report saying "No data yet"."""
    _, exp = make_tree(tmp_path / "tree")
    exp.write(tmp_path / "experiment.json")
    missing = tmp_path / "results" / "dmeo"
    proc = subprocess.run([sys.executable, "-m", "lnrepro", "report", "--experiment", str(tmp_path / "experiment.json"),
                           "--exp-dir", str(missing), "--out", str(missing / "report")], capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [f"lnrepro report: error: {missing}: no such experiment folder (expected "
                                        f"results/{exp.name}, where the workflow writes this experiment: check the "
                                        "path, or run snakemake first)"]
    assert not missing.exists()


def _report_cli(exp_dir: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lnrepro", "report", "--experiment", str(exp_dir / "experiment.json"),
                           "--exp-dir", str(exp_dir), "--out", str(out)], capture_output=True, text=True)


def test_report_out_never_replaces_a_folder_that_is_not_a_report(tmp_path: Path) -> None:
    """--out at the results tree itself, or at a folder of the user's, is refused before anything is written; an
    empty folder and an earlier report are written."""
    exp_dir, _ = make_tree(tmp_path)
    before = _files(exp_dir)
    proc = _report_cli(exp_dir, exp_dir)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        f"lnrepro report: error: {exp_dir}: not a report folder (it holds experiment.json, runs), and this command "
        "replaces its folder whole; name a new or empty folder, or a report folder"]
    assert _files(exp_dir) == before
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    assert _report_cli(exp_dir, mine).returncode == 1 and (mine / "notes.txt").read_text() == "mine\n"
    (tmp_path / "a_file").write_text("x\n")
    proc = _report_cli(exp_dir, tmp_path / "a_file")
    assert proc.returncode == 1 and "exists and is not a folder" in proc.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _report_cli(exp_dir, empty).returncode == 0 and (empty / "index.html").exists()
    assert _report_cli(exp_dir, empty).returncode == 0  # its own report again


def test_a_record_after_the_finished_record_stops_the_report(tmp_path: Path) -> None:
    """A step appended to a finished training's log would move the report's curves: the report refuses it, naming
    the line."""
    exp_dir, _ = make_tree(tmp_path)
    log = exp_dir / "runs" / "postln_warmup_isqrt" / "seed1" / "train.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join([*lines, '{"kind": "step", "update": 3, "epoch": 1, "loss": 0.5, "attempt": 2}']) + "\n")
    proc = _report_cli(exp_dir, tmp_path / "report")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert (f"{log}:{len(lines) + 1}: a record after the finished record (line {len(lines)}), which training writes "
            "last: the log was changed after training wrote it") in proc.stderr
    assert not (tmp_path / "report").exists()
