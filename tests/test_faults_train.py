"""The training fault suite: each test injects one real fault into a tiny run — a SIGKILL, a full file
system, a truncated or bit-flipped state, a second trainer, deleted outputs of a finished run, a huge learning
rate — and asserts the outcome: the result of an uninterrupted run, byte for byte, or one message naming the file.
"""

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import fake_bpe
from lnrepro.config import RunConfig
from lnrepro.errors import LnReproError
from lnrepro.io import atomic_torch_save, file_sha256
from lnrepro.train.loop import train_run
from test_train import SRC_DIR, write_config

torch.set_num_threads(1)
EPOCHS = 4  # write_config's
DECLARED = ["run.json", "train.jsonl", "summary.json"] + [f"epochs/epoch{ep:03d}.json" for ep in range(1, EPOCHS + 1)]


@pytest.fixture(scope="module")
def bpe(tmp_path_factory) -> Path:
    return fake_bpe(tmp_path_factory.mktemp("bpe"), vocab=40, n=96)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, bpe) -> Path:
    """One uninterrupted training: what every faulted run must end equal to."""
    root = tmp_path_factory.mktemp("ref")
    train_run(root / "run", write_config(root / "config.json"), bpe, threads=1)
    return root / "run"


def manifest(run: Path, ep: int) -> dict:
    return json.loads((run / "epochs" / f"epoch{ep:03d}.json").read_text())


def assert_same_result(run: Path, ref: Path) -> None:
    """Byte-identical epoch weights, equal manifest digests (of the files they name), equal final loss."""
    for ep in range(1, EPOCHS + 1):
        m, r = manifest(run, ep), manifest(ref, ep)
        assert m["status"] == r["status"] == "ok"
        assert (run / m["weights"]).read_bytes() == (ref / r["weights"]).read_bytes(), f"epoch {ep} weights differ"
        assert m["sha256"] == r["sha256"] == file_sha256(run / m["weights"])
    s, r = (json.loads((d / "summary.json").read_text()) for d in (run, ref))
    assert s["status"] == "completed" and (s["updates"], s["final_loss"]) == (r["updates"], r["final_loss"])


def no_leftovers(run: Path) -> None:
    """Nothing that looks finished after a failure: no declared output, no finished marker, no temporary file."""
    assert not any((run / name).exists() for name in DECLARED)
    assert not (run / "state" / "finished.json").exists()
    assert not list(run.rglob("*.tmp"))


def _interruptible() -> None:
    """Ctrl-C's default action in the child, as in a terminal: a test run in the background inherits SIGINT
    ignored, and a Python started so never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def spawn(run: Path, cfg: Path, bpe: Path, stderr: Path) -> subprocess.Popen:
    """A real `lnrepro train` process, its stderr in a file."""
    env = {**os.environ, "PYTHONPATH": f"{SRC_DIR}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    with open(stderr, "wb") as err:
        return subprocess.Popen([sys.executable, "-m", "lnrepro", "train", "--config", str(cfg), "--bpe", str(bpe),
                                 "--run-dir", str(run), "--threads", "1"], env=env, stdout=subprocess.DEVNULL,
                                stderr=err, preexec_fn=_interruptible)


def wait_for(pred, what: str, timeout: float = 600) -> None:  # generous: a loaded machine is slow, not wrong
    deadline = time.time() + timeout
    while not pred():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


class Interrupted(Exception):
    pass


def train_interrupted(run: Path, cfg: Path, bpe: Path, monkeypatch, saves: int) -> None:
    """Train in-process and stop right after the ``saves``-th training state is written, as a kill would."""
    from lnrepro.train.checkpoint import StateDir

    real, count = StateDir.save_last, [0]

    def save_then_stop(self, state):
        real(self, state)
        count[0] += 1
        if count[0] == saves:
            raise Interrupted

    monkeypatch.setattr(StateDir, "save_last", save_then_stop)
    with pytest.raises(Interrupted):
        train_run(run, cfg, bpe, threads=1)
    monkeypatch.undo()


# ---- 1. reproducible digests ---------------------------------------------------------------------------------


def test_identical_trainings_give_identical_files_and_digests(reference, bpe, tmp_path):
    """torch.save named the archive's records after the temporary file, so equal weights had different SHA-256."""
    train_run(tmp_path / "run", write_config(tmp_path / "config.json"), bpe, threads=1)
    assert_same_result(tmp_path / "run", reference)
    obj = {"w": torch.arange(6.0)}
    atomic_torch_save(obj, tmp_path / "a.pt")
    atomic_torch_save(obj, tmp_path / "sub" / "b.pt")
    assert (tmp_path / "a.pt").read_bytes() == (tmp_path / "sub" / "b.pt").read_bytes()


# ---- 2. disk full while checkpointing ------------------------------------------------------------------------


def test_disk_full_names_the_file_and_a_rerun_resumes(reference, bpe, tmp_path, monkeypatch):
    """A writer failing with ENOSPC as torch.save does (a RuntimeError raised while handling the OSError)."""
    run, cfg = tmp_path / "run", write_config(tmp_path / "config.json")
    real_save, calls = torch.save, [0]

    def full_disk_save(obj, f, *args, **kwargs):
        calls[0] += 1
        if calls[0] < 5:
            return real_save(obj, f, *args, **kwargs)
        f.write(b"PK\x03\x04 half an archive")
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    monkeypatch.setattr(torch, "save", full_disk_save)
    with pytest.raises(LnReproError, match="no space left on device") as err:
        train_run(run, cfg, bpe, threads=1)
    monkeypatch.undo()
    assert str(run / "state") in str(err.value) and ".pt: no space left on device" in str(err.value)
    no_leftovers(run)
    train_run(run, cfg, bpe, threads=1)  # space freed
    assert_same_result(run, reference)
    assert json.loads((run / "summary.json").read_text())["attempts"] == 2


def test_a_file_size_limit_names_the_file_and_a_rerun_resumes(reference, bpe, tmp_path):
    """``lnrepro train`` under a file-size limit (ulimit -f) below one weights file: torch.save fails with EFBIG
    inside its own RuntimeError; the command says which file and why in one line, and a rerun resumes."""
    import resource

    run, cfg = tmp_path / "run", write_config(tmp_path / "config.json")
    limit = (reference / "state" / "epochs" / "epoch001.pt").stat().st_size // 2

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {**os.environ, "PYTHONPATH": f"{SRC_DIR}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-m", "lnrepro", "train", "--config", str(cfg), "--bpe", str(bpe),
                           "--run-dir", str(run), "--threads", "1"], env=env, capture_output=True, text=True,
                          preexec_fn=limited)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("lnrepro train: error: ")]
    assert len(errors) == 1 and f"{run / 'state'}" in errors[0], proc.stderr[-3000:]
    assert ".pt: file too large for this process's file-size limit (EFBIG: ulimit -f)" in errors[0], errors
    no_leftovers(run)
    train_run(run, cfg, bpe, threads=1)  # the limit lifted
    assert_same_result(run, reference)


def test_real_full_tmpfs_names_the_file_and_a_rerun_resumes(reference, bpe, tmp_path):
    """A real full file system: a tmpfs with room for two training states and 1.5 epoch weights files."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "fs"
    mnt.mkdir()
    state = reference / "state"
    size = 2 * (state / "last.pt").stat().st_size + 3 * (state / "epochs" / "epoch001.pt").stat().st_size // 2
    size += (state / "log.jsonl").stat().st_size + 16 * 4096  # the log, digest.json, lock: a few pages
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.decode().strip()}")
    try:
        run, cfg = mnt / "run", write_config(tmp_path / "config.json")
        with pytest.raises(LnReproError, match="no space left on device") as err:
            train_run(run, cfg, bpe, threads=1)
        assert str(run / "state") in str(err.value) and ".pt: no space left on device" in str(err.value)
        no_leftovers(run)
        subprocess.run(["mount", "-o", "remount,size=64m", str(mnt)], check=True)  # space freed
        train_run(run, cfg, bpe, threads=1)
        assert_same_result(run, reference)
        assert json.loads((run / "summary.json").read_text())["attempts"] == 2
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


# ---- 3. SIGKILL mid-epoch ------------------------------------------------------------------------------------


def test_sigkill_mid_epoch_then_rerun_gives_the_same_weights_and_digests(reference, bpe, tmp_path):
    run, cfg = tmp_path / "run", write_config(tmp_path / "config.json")
    last = run / "state" / "last.pt"
    proc = spawn(run, cfg, bpe, tmp_path / "a.err")
    wait_for(lambda: last.exists(), "the first checkpoint")
    os.kill(proc.pid, signal.SIGKILL)  # at once: the first checkpoint is mid-epoch 1, and so is the kill
    assert proc.wait() == -signal.SIGKILL
    assert torch.load(last, weights_only=True)["pos"] > 0, "not killed mid-epoch"
    no_leftovers(run)
    train_run(run, cfg, bpe, threads=1)
    assert_same_result(run, reference)


# ---- 4. a damaged resumable state ----------------------------------------------------------------------------


def test_truncated_last_state_falls_back_to_the_previous_one(reference, bpe, tmp_path, monkeypatch, capsys):
    run, cfg = tmp_path / "run", write_config(tmp_path / "config.json")
    train_interrupted(run, cfg, bpe, monkeypatch, saves=3)
    last, prev = run / "state" / "last.pt", run / "state" / "prev.pt"
    assert prev.exists()
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])
    capsys.readouterr()
    train_run(run, cfg, bpe, threads=1)
    err = capsys.readouterr().err
    assert f"{last}: unreadable training state" in err and f"resuming from {prev}" in err
    assert_same_result(run, reference)
    attempts = [r for r in map(json.loads, (run / "train.jsonl").read_text().splitlines()) if r["kind"] == "attempt"]
    assert attempts[-1]["resumed_from"] == "prev.pt"


def test_both_states_damaged_trains_from_the_start(reference, bpe, tmp_path, monkeypatch, capsys):
    """A flipped byte loads silently with torch.load; the archive's CRC-32s catch it."""
    run, cfg = tmp_path / "run", write_config(tmp_path / "config.json")
    train_interrupted(run, cfg, bpe, monkeypatch, saves=3)
    last, prev = run / "state" / "last.pt", run / "state" / "prev.pt"
    data = bytearray(last.read_bytes())
    data[len(data) // 2] ^= 0xFF
    last.write_bytes(bytes(data))
    torch.load(last, weights_only=True)  # the fault is one that loads
    prev.write_bytes(prev.read_bytes()[:100])
    capsys.readouterr()
    train_run(run, cfg, bpe, threads=1)
    err = capsys.readouterr().err
    assert "fails its CRC-32" in err and f"{prev}: unreadable training state" in err
    assert "training this run from the start" in err
    assert_same_result(run, reference)


# ---- 5. a second trainer on one state ------------------------------------------------------------------------


def stopped_holder_and_waiter(bpe, tmp_path):
    """A first trainer stopped (SIGSTOP) while it holds the lock, and a second one waiting for it."""
    run, cfg = tmp_path / "run", write_config(tmp_path / "config.json")
    a = spawn(run, cfg, bpe, tmp_path / "a.err")
    wait_for(lambda: (run / "state" / "last.pt").exists(), "the first checkpoint")
    os.kill(a.pid, signal.SIGSTOP)
    b = spawn(run, cfg, bpe, tmp_path / "b.err")
    wait_for(lambda: "waiting until it ends" in (tmp_path / "b.err").read_text(), "the second trainer to wait")
    return run, a, b


def test_second_trainer_waits_for_the_lock_then_reuses_the_finished_run(reference, bpe, tmp_path):
    """The first trainer is stopped (SIGSTOP) while it holds the lock, so the second one surely meets it."""
    run, a, b = stopped_holder_and_waiter(bpe, tmp_path)
    assert f"(pid {a.pid})" in (tmp_path / "b.err").read_text()
    os.kill(a.pid, signal.SIGCONT)
    assert a.wait(timeout=300) == 0 and b.wait(timeout=300) == 0
    assert "already trained with these inputs" in (tmp_path / "b.err").read_text()
    log = [json.loads(line) for line in (run / "state" / "log.jsonl").read_text().splitlines()]
    assert [r["attempt"] for r in log if r["kind"] == "attempt"] == [1]  # the second trainer never trained
    assert_same_result(run, reference)


def test_second_trainer_resumes_when_the_holder_is_killed(reference, bpe, tmp_path):
    """An orphan of a killed Snakemake, killed in turn: its lock dies with it, the waiting trainer resumes."""
    run, a, b = stopped_holder_and_waiter(bpe, tmp_path)
    os.kill(a.pid, signal.SIGKILL)
    a.wait()
    assert b.wait(timeout=300) == 0
    assert json.loads((run / "summary.json").read_text())["attempts"] == 2
    assert_same_result(run, reference)


# ---- 6. finished trainings are not retrained -----------------------------------------------------------------


def test_finished_run_rewrites_deleted_outputs_byte_for_byte_without_training(reference, bpe, tmp_path, capsys):
    """What --rerun-incomplete does to a run an orphan finished: deletes its declared outputs and reruns it."""
    run, cfg = tmp_path / "run", write_config(tmp_path / "config.json")
    train_run(run, cfg, bpe, threads=1)
    first = {name: (run / name).read_bytes() for name in DECLARED}
    log = (run / "state" / "log.jsonl").read_bytes()
    weights_mtime = (run / "state" / "epochs" / "epoch004.pt").stat().st_mtime_ns
    for name in DECLARED:
        (run / name).unlink()
    capsys.readouterr()
    train_run(run, cfg, bpe, threads=1)
    assert "already trained with these inputs" in capsys.readouterr().err
    assert {name: (run / name).read_bytes() for name in DECLARED} == first
    assert (run / "state" / "log.jsonl").read_bytes() == log
    assert (run / "state" / "epochs" / "epoch004.pt").stat().st_mtime_ns == weights_mtime
    assert_same_result(run, reference)


def test_finished_run_with_damaged_weights_is_trained_again(reference, bpe, tmp_path, capsys):
    run, cfg = tmp_path / "run", write_config(tmp_path / "config.json")
    train_run(run, cfg, bpe, threads=1)
    weights = run / "state" / "epochs" / "epoch002.pt"
    weights.write_bytes(weights.read_bytes()[:-10])
    capsys.readouterr()
    train_run(run, cfg, bpe, threads=1)
    assert f"{weights}: missing or not the weights epochs/epoch002.json lists" in capsys.readouterr().err
    assert_same_result(run, reference)


# ---- 7. divergence -------------------------------------------------------------------------------------------


def test_huge_learning_rate_divergence_is_recorded(bpe, tmp_path):
    cfg = write_config(tmp_path / "config.json")
    settings = RunConfig.read(cfg).to_dict()
    settings["optim"]["lr_max"] = 1e6
    RunConfig.from_dict(settings).write(cfg)
    run = tmp_path / "run"
    train_run(run, cfg, bpe, threads=1)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["diverged"]["epoch"] == 1
    assert summary["diverged"]["lr"] > 0  # the warm-up's first update runs at lr 0 and cannot diverge
    records = [json.loads(line) for line in (run / "train.jsonl").read_text().splitlines()]
    assert [r["update"] for r in records if r["kind"] == "diverged"] == [summary["diverged"]["update"]]
    for ep in range(1, EPOCHS + 1):
        m = manifest(run, ep)
        assert m["status"] == "diverged" and m["weights"] is None and m["reason"] == summary["diverged"]["detail"]


# ---- 8. Ctrl-C and a read-only results folder: one line, never a traceback -----------------------------------


def test_ctrl_c_is_one_line_and_a_rerun_resumes_to_the_same_result(reference, bpe, tmp_path):
    run, cfg = tmp_path / "run", write_config(tmp_path / "config.json")
    proc = spawn(run, cfg, bpe, tmp_path / "a.err")
    wait_for(lambda: (run / "state" / "last.pt").exists(), "the first checkpoint")
    os.kill(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=300) == 130
    err = (tmp_path / "a.err").read_text()
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.splitlines()[-1] == ("lnrepro train: interrupted; the files written so far are whole: rerun the same "
                                    "command (training resumes from its last saved state)"), err
    no_leftovers(run)
    rerun = spawn(run, cfg, bpe, tmp_path / "b.err")
    assert rerun.wait(timeout=600) == 0, (tmp_path / "b.err").read_text()
    assert_same_result(run, reference)
    assert json.loads((run / "summary.json").read_text())["attempts"] == 2


def test_a_read_only_results_folder_is_one_line_naming_the_file(bpe, tmp_path):
    """A run folder on a read-only file system (root: a tmpfs remounted read-only; else a folder without write
    permission): the trainer cannot take state/lock."""
    run, cfg = tmp_path / "fs" / "run", write_config(tmp_path / "config.json")
    (run / "state").mkdir(parents=True)
    if os.geteuid() == 0:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(tmp_path / "fs")],
                                 capture_output=True)
        if mounted.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.decode().strip()}")
        (run / "state").mkdir(parents=True)
        subprocess.run(["mount", "-o", "remount,ro", str(tmp_path / "fs")], check=True)
        expected = f"lnrepro train: error: {run / 'state' / 'lock'}: Read-only file system"
    else:
        (run / "state").chmod(0o555)
        expected = f"lnrepro train: error: {run / 'state' / 'lock'}: Permission denied"
    try:
        proc = spawn(run, cfg, bpe, tmp_path / "a.err")
        assert proc.wait(timeout=300) == 1
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", str(tmp_path / "fs")], check=True)
        else:
            (run / "state").chmod(0o755)
    err = (tmp_path / "a.err").read_text()
    assert "Traceback" not in err and len(err.splitlines()) == 1 and err.startswith(expected), err
