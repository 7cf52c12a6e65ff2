"""Fault suite, command line: a bad number on any subcommand is argparse's one-line usage error
naming the option, never a traceback from deep inside a stage."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Each subcommand with its required options (values never read: argparse refuses the number first).
COMMANDS = {
    "prepare": ["--data-config", "x", "--out", "y"],
    "bpe learn": ["--bpe-config", "x", "--out", "y", "--prepared", "z"],
    "bpe apply": ["--bpe", "x", "--prepared", "z"],
    "train": ["--config", "x", "--bpe", "y", "--run-dir", "z"],
    "evaluate": ["--manifest", "x", "--eval-config", "y", "--bpe", "z", "--prepared", "p", "--out", "o"],
    "gradinit": ["--gradinit-config", "x", "--bpe", "y", "--out", "z"],
    "bench": [],
}


def lnrepro(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lnrepro", *args], capture_output=True, text=True)


@pytest.mark.parametrize("value, expected", [("0", "expected at least 1, got 0"), ("-2", "expected at least 1, got -2"),
                                             ("two", "expected a whole number, got 'two'")])
@pytest.mark.parametrize("command", COMMANDS)
def test_a_bad_thread_count_is_one_usage_error(command: str, value: str, expected: str) -> None:
    proc = lnrepro(*command.split(), *COMMANDS[command], "--threads", value)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"error: argument --threads: {expected}" in proc.stderr.splitlines()[-1], proc.stderr


def test_a_negative_download_size_is_one_usage_error() -> None:
    proc = lnrepro("download", "--out", "x", "--size", "-1")
    assert proc.returncode == 2 and "argument --size: expected at least 0, got -1" in proc.stderr, proc.stderr


@pytest.mark.parametrize("value, expected", [("0", "expected a finite number above 0, got '0'"),
                                             ("-5", "expected a finite number above 0, got '-5'"),
                                             ("nan", "expected a finite number above 0, got 'nan'"),
                                             ("inf", "expected a finite number above 0, got 'inf'"),
                                             ("soon", "expected a number, got 'soon'")])
def test_a_part_time_that_is_not_a_positive_number_is_one_usage_error(value: str, expected: str) -> None:
    proc = lnrepro("publish", "--status", "published/demo", "--minutes", value)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"error: argument --minutes: {expected}" in proc.stderr.splitlines()[-1], proc.stderr


@pytest.mark.parametrize("command, again", [
    (["train", *COMMANDS["train"]], "training resumes from its last saved state"),
    (["prepare", *COMMANDS["prepare"]], "it writes what is missing"),
])
def test_ctrl_c_in_a_stage_is_one_line_and_the_shells_status(command: list[str], again: str, monkeypatch,
                                                              capsys) -> None:
    """Ctrl-C inside any stage (here raised by the stage itself, in this process) ends ``main`` with status 130 and
    one line that says how a rerun goes on; tests/test_faults_train.py sends a real SIGINT to a training."""
    from lnrepro import cli

    def interrupted(args) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, f"_{command[0]}", interrupted)
    assert cli.main(command) == cli.INTERRUPTED == 130
    err = capsys.readouterr().err
    assert err == (f"lnrepro {command[0]}: interrupted; the files written so far are whole: rerun the same command "
                   f"({again})\n")


def test_main_as_the_program_freezes_the_collector_and_in_process_does_not(monkeypatch) -> None:
    """Run as the program (no ``argv``: the console script, ``python -m lnrepro``), ``main`` freezes the garbage
    collector before the process exits, whatever the stage's status; called with arguments, in a process that goes
    on, it does not."""
    import gc

    from lnrepro import cli
    from lnrepro.errors import LnReproError

    def failing(args) -> None:
        raise LnReproError("no input")

    monkeypatch.setattr(cli, "_prepare", failing)
    gc.unfreeze()
    try:
        assert cli.main(["prepare", *COMMANDS["prepare"]]) == 1 and gc.get_freeze_count() == 0
        monkeypatch.setattr(sys, "argv", ["lnrepro", "prepare", *COMMANDS["prepare"]])
        assert cli.main() == 1 and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
