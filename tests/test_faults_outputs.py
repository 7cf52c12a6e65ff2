"""Fault suite, outputs of a finished DAG (the two-run selection of the demo, conftest.DEMO_PAIR, run once per
session; every test works on a copy): a deleted declared output is written again by a plain rerun, and a damaged
one that a plain rerun cannot see stops its reader with one message naming the file and the command that cures it.
That command is then run for real, and what was finished stays as it was.
"""

from __future__ import annotations

import csv
import io
import re
import subprocess
import sys
from pathlib import Path

from conftest import DEMO_PAIR, DemoRun, copy_run, snakemake

RUN = "results/demo/runs/postln_warmup_isqrt/seed1"
# "reason: Missing output files: a, b" of a dry run's job: Snakemake lists the requested outputs only.
_MISSING = re.compile(r"Missing output files: ([^;\n]*)")


def lnrepro(work: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lnrepro", *args], cwd=work, capture_output=True, text=True)


def evaluate(run: DemoRun) -> subprocess.CompletedProcess:
    """``lnrepro evaluate`` of RUN's checkpoints as its score_checkpoint job runs it."""
    return lnrepro(run.workdir, "evaluate", "--out", f"{RUN}/eval/epoch001.json", f"{RUN}/eval/epoch002.json",
                   "--eval-config", "results/demo/eval.json", "--bpe", "results/demo/data/bpe", "--prepared",
                   "results/demo/data/prepared")


def report(run: DemoRun) -> subprocess.CompletedProcess:
    """``lnrepro report`` as make_report runs it."""
    return lnrepro(run.workdir, "report", "--experiment", "results/demo/experiment.json", "--exp-dir", "results/demo",
                   "--out", "results/demo/report")


def one_error(proc: subprocess.CompletedProcess, stage: str) -> str:
    """The single error line of a failed ``lnrepro`` call (no traceback)."""
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"lnrepro {stage}: error: "), proc.stderr
    return lines[0]


def cure(run: DemoRun, line: str) -> None:
    """Run the snakemake command a message names (``snakemake --cores all --forcerun PATH``) with DEMO_PAIR."""
    target = re.search(r"snakemake --cores all --forcerun (\S+) \(with your --configfile", line)
    assert target, line
    snakemake(run.workdir, "--cores", "2", "--forcerun", target.group(1), "--configfile", *DEMO_PAIR)


def test_every_declared_output_is_wanted_so_a_deleted_one_is_written_again(demo_pair_run, tmp_path):
    """Every file the finished DAG's jobs declare (Snakemake's detailed summary), deleted: the dry run asks for
    each one back. Snakemake reruns a job for its requested outputs only, so a declared output that no job or
    target wants (the hypotheses, spm.vocab, run.json, the report's figures) stayed missing for good."""
    run = copy_run(demo_pair_run, tmp_path)
    summary = snakemake(run.workdir, "--detailed-summary", "--configfile", *DEMO_PAIR).stdout
    outputs = [row["output_file"] for row in csv.DictReader(io.StringIO(summary), delimiter="\t")]
    assert f"{RUN}/eval/epoch002.test.hyp" in outputs and len(outputs) > 60
    for name in outputs:
        (run.workdir / name).unlink()
    dry = snakemake(run.workdir, "-n", "--configfile", *DEMO_PAIR)
    wanted = {f for m in _MISSING.finditer(dry.stdout + dry.stderr) for f in m.group(1).split(", ")}
    assert sorted(set(outputs) - wanted) == []


def test_a_deleted_hypothesis_file_is_written_again_and_nothing_else_trains(demo_pair_run, tmp_path):
    run = copy_run(demo_pair_run, tmp_path)
    hyp, summary = run.workdir / RUN / "eval" / "epoch002.test.hyp", run.workdir / RUN / "summary.json"
    text, trained = hyp.read_text(), summary.stat().st_mtime_ns
    hyp.unlink()
    proc = snakemake(run.workdir, "--cores", "2", "--configfile", *DEMO_PAIR)
    assert "rule train_run" not in proc.stderr and "rule score_checkpoint" in proc.stderr
    assert hyp.read_text() == text and summary.stat().st_mtime_ns == trained
    assert "Nothing to be done" in snakemake(run.workdir, "-n", "--configfile", *DEMO_PAIR).stdout


def test_a_truncated_score_file_names_the_command_that_writes_it_again(demo_pair_run, tmp_path):
    run = copy_run(demo_pair_run, tmp_path)
    score = run.workdir / RUN / "eval" / "epoch002.json"
    whole = score.read_text()
    score.write_text(whole[: len(whole) // 2])
    line = one_error(report(run), "report")
    assert f"{RUN}/eval/epoch002.json: not valid JSON" in line
    assert f"write it again: snakemake --cores all --forcerun {RUN}/eval/epoch002.json (with your --configfile" in line
    cure(run, line)
    assert '"epoch": 2' in score.read_text()
    assert report(run).returncode == 0


def test_a_deleted_state_names_the_command_that_trains_the_run_again(demo_pair_run, tmp_path):
    """Scoring after the run's state/ (the weights) was deleted; the cure retrains the run to the same weights."""
    run = copy_run(demo_pair_run, tmp_path)
    manifest = (run.workdir / RUN / "epochs" / "epoch002.json").read_text()
    subprocess.run(["rm", "-r", str(run.workdir / RUN / "state")], check=True)
    line = one_error(evaluate(run), "evaluate")
    assert f"{RUN}/state/epochs/epoch001.pt: weights file named by {RUN}/epochs/epoch001.json not found (the run's " \
           "state/ was deleted or moved): train the run again: snakemake --cores all --forcerun " \
           f"{RUN}/summary.json (with your --configfile" in line.replace(str(run.workdir) + "/", "")
    cure(run, line)
    assert _digest((run.workdir / RUN / "epochs" / "epoch002.json").read_text()) == _digest(manifest)  # same weights
    assert evaluate(run).returncode == 0


def test_weights_that_do_not_match_the_manifest_name_the_command_that_trains_the_run_again(demo_pair_run, tmp_path):
    run = copy_run(demo_pair_run, tmp_path)
    weights = run.workdir / RUN / "state" / "epochs" / "epoch001.pt"
    weights.write_bytes(weights.read_bytes()[:-10])
    line = one_error(evaluate(run), "evaluate")
    assert "epoch001.pt: corrupt checkpoint (sha256 " in line
    assert f"train the run again: snakemake --cores all --forcerun {RUN}/summary.json (with your --configfile" in line


def _digest(manifest: str) -> str:
    """The weights' digest an epoch manifest's text records."""
    return re.search(r'"sha256": "([0-9a-f]{64})"', manifest).group(1)
