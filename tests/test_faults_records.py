"""Fault suite, records: a record that is not the run's, seed's, epoch's or settings' it is read for, or a log or
table that is not whole, stops ``lnrepro report`` / ``lnrepro evaluate`` with one message naming the file and the
way out, never a silent input. Each fault is made for real on a copy of a finished run of DEMO_PAIR."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DEMO_PAIR, DemoRun, copy_run, snakemake
from lnrepro.config import Experiment
from lnrepro.io import json_text

POST, PRE = "postln_warmup_isqrt", "preln_nowarmup_step8"  # DEMO_PAIR's runs, one seed, two epochs


def lnrepro(*args: str | Path) -> subprocess.CompletedProcess:
    """One real ``lnrepro`` command line; its exit status and output returned, never raised."""
    return subprocess.run([sys.executable, "-m", "lnrepro", *map(str, args)], capture_output=True, text=True)


def report(run: DemoRun) -> subprocess.CompletedProcess:
    return lnrepro("report", "--experiment", run.exp_dir / "experiment.json", "--exp-dir", run.exp_dir,
                   "--out", run.exp_dir / "report")


def refused(proc: subprocess.CompletedProcess, *parts: str) -> str:
    """The one error line of a refused command, which holds every one of ``parts``."""
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (line,) = [x for x in proc.stderr.splitlines() if ": error: " in x]
    for part in parts:
        assert part in line, line
    return line


def run_dir(run: DemoRun, name: str) -> Path:
    return run.exp_dir / "runs" / name / "seed1"


@pytest.fixture
def run(demo_pair_run: DemoRun, tmp_path: Path) -> DemoRun:
    return copy_run(demo_pair_run, tmp_path)


@pytest.mark.parametrize("cut", ["at a line break", "mid-line"])
def test_a_training_log_cut_short_stops_the_report_until_written_again(run: DemoRun, cut: str) -> None:
    folder = run_dir(run, POST)
    log = folder / "train.jsonl"
    whole = log.read_bytes()
    kept = whole[: len(whole) * 2 // 3]
    log.write_bytes(kept[: kept.rfind(b"\n") + 1] if cut == "at a line break" else kept)
    refused(report(run), f"{log}", "--forcerun train_run")
    # the way out: the trainer writes the declared outputs again from its finished state, without training
    train = lnrepro("train", "--config", folder / "config.json", "--bpe", run.exp_dir / "data" / "bpe",
                    "--run-dir", folder)
    assert train.returncode == 0 and log.read_bytes() == whole, train.stderr[-2000:]
    assert report(run).returncode == 0


def test_another_runs_scores_copied_into_a_run_folder_stop_the_report(run: DemoRun) -> None:
    for p in (run_dir(run, PRE) / "eval").glob("epoch002.*"):
        shutil.copy(p, run_dir(run, POST) / "eval" / p.name)
    score = run_dir(run, POST) / "eval" / "epoch002.json"
    refused(report(run), f"{score}: the record of run {PRE} seed 1, read as run {POST} seed 1", "rm ")


def test_records_of_an_earlier_longer_training_stop_the_report_until_deleted(run: DemoRun) -> None:
    """A three-epoch training left epoch003's manifest and scores in the folder a two-epoch run now uses."""
    folder = run_dir(run, POST)
    longer = dataclasses.replace(
        Experiment.read(run.exp_dir / "experiment.json").run_config(POST, 1), train=dataclasses.replace(
            Experiment.read(run.exp_dir / "experiment.json").runs[POST].train, epochs=3))
    manifest = json.loads((folder / "epochs" / "epoch002.json").read_text())
    stale = [folder / "epochs" / "epoch003.json", folder / "eval" / "epoch003.json"]
    stale[0].write_text(json_text({**manifest, "epoch": 3, "updates": manifest["updates"] + 261,
                                   "config_sha256": longer.sha256()}))
    score = json.loads((folder / "eval" / "epoch002.json").read_text())
    stale[1].write_text(json_text({**score, "epoch": 3, "updates": manifest["updates"] + 261}))
    for split in ("valid", "test"):
        shutil.copy(folder / "eval" / f"epoch002.{split}.hyp", folder / "eval" / f"epoch003.{split}.hyp")
    line = refused(report(run), "epoch(s) 3 beyond the run's 2 configured epochs", *map(str, stale))
    subprocess.run(line.split("delete them: ", 1)[1], shell=True, check=True)  # the way out, as the message says
    assert report(run).returncode == 0
    assert "epoch 3" not in (run.exp_dir / "report" / "answer.md").read_text()


def test_evaluate_refuses_another_experiments_references(run: DemoRun, tmp_path: Path) -> None:
    data = json.loads((run.exp_dir / "data.json").read_text())
    other_json, other = tmp_path / "other_data.json", tmp_path / "other_prepared"
    other_json.write_text(json_text({**data, "options": {**data["options"], "seed": 4321}}))
    assert lnrepro("prepare", "--data-config", other_json, "--out", other).returncode == 0

    def evaluate(prepared: Path) -> subprocess.CompletedProcess:
        return lnrepro("evaluate", "--manifest", run_dir(run, POST) / "epochs" / "epoch002.json",
                       "--eval-config", run.exp_dir / "eval.json", "--bpe", run.exp_dir / "data" / "bpe",
                       "--prepared", prepared, "--out", tmp_path / "scores" / "epoch002.json")

    refused(evaluate(other), f"{other}/", "not the references", "apply_bpe")
    assert not (tmp_path / "scores" / "epoch002.json").exists()
    assert evaluate(run.exp_dir / "data" / "prepared").returncode == 0  # the experiment's own references pass


def test_a_hand_edited_scoring_slice_is_refused_by_scoring_and_by_the_report(run: DemoRun) -> None:
    eval_json = run.exp_dir / "eval.json"
    settings = json.loads(eval_json.read_text())
    settings["splits"]["test"]["beam"] = 3
    eval_json.write_text(json_text(settings))
    # the workflow: every scoring job refuses the slice before scoring anything (--keep-going: each one runs,
    # whichever Snakemake starts first)
    proc = snakemake(run.workdir, "--cores", "1", "--keep-going", "--configfile", *DEMO_PAIR, check=False)
    assert proc.returncode != 0
    relative = eval_json.relative_to(run.workdir)  # the workflow names it relative to its working directory
    for name in (POST, PRE):
        log = (run.exp_dir / "logs" / "score_checkpoint" / f"{name}.seed1.log").read_text()
        assert f"{relative}: not the scoring slice the experiment's eval settings give" in log, name
        assert "Traceback" not in log
    # checkpoints rescored with it all the same (an lnrepro without the check): the report refuses their scores
    folder = run_dir(run, POST)
    scores = [folder / "eval" / f"epoch00{ep}.json" for ep in (1, 2)]
    rescored = lnrepro("evaluate", "--eval-config", eval_json, "--bpe", run.exp_dir / "data" / "bpe",
                       "--prepared", run.exp_dir / "data" / "prepared", "--out", *scores)
    assert rescored.returncode == 0, rescored.stderr[-2000:]
    refused(report(run), f"{scores[0]}: test decoded with beam 3", "eval.splits.test.beam", "eval*.json")


def test_a_cut_study_table_stops_the_report(run: DemoRun) -> None:
    table = run.exp_dir / "analysis" / "gradinit.csv"
    text = table.read_text()
    kept = text[: len(text) * 2 // 3]
    table.write_text(kept[: kept.rfind("\n") + 1])
    refused(report(run), f"{table}: not the table its settings give", "missing", "--forcerun gradinit")


def test_a_cut_table_after_warmup_stops_the_report(run: DemoRun) -> None:
    """A seed's gradinit_after_warmup.csv without its last row: its last layer has fewer rows than the others."""
    table = run_dir(run, POST) / "gradinit_after_warmup.csv"
    table.write_text("".join(table.read_text().splitlines(keepends=True)[:-1]))
    refused(report(run), f"{table}: combinations of stack, layer with fewer rows than their like",
            "--forcerun gradinit_after_warmup")
