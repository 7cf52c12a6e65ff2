"""Training loop: outputs, logging, divergence, deterministic rerun, resume after a real SIGKILL (bitwise)."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from lnrepro.config import RunConfig, ScheduleSettings
from lnrepro.train.loop import train_run
from lnrepro.train.schedule import lr_at

torch.set_num_threads(1)
SRC_DIR = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory):
    """A tiny sentencepiece model (only its vocabulary size matters) and random id files."""
    import sentencepiece as spm

    out = tmp_path_factory.mktemp("bpe")
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 7))) for _ in range(300)]
    (out / "text.txt").write_text("\n".join(" ".join(rng.choice(words) for _ in range(8)) for _ in range(300)))
    spm.SentencePieceTrainer.train(input=str(out / "text.txt"), model_prefix=str(out / "spm"), vocab_size=100,
                                   model_type="bpe", bos_id=0, pad_id=1, eos_id=2, unk_id=3, minloglevel=2)
    src = [[rng.randint(4, 99) for _ in range(rng.randint(3, 14))] for _ in range(240)]
    tgt = [list(reversed(s))[: rng.randint(2, len(s))] for s in src]
    (out / "train.de.ids").write_text("".join(" ".join(map(str, s)) + "\n" for s in src))
    (out / "train.en.ids").write_text("".join(" ".join(map(str, s)) + "\n" for s in tgt))
    return out


def write_config(path: Path, **train_over) -> Path:
    cfg = {
        "run": "preln_warmup_isqrt", "seed": 3,
        "model": {"encoder_layers": 2, "decoder_layers": 2, "d_model": 32, "heads": 4, "ffn_dim": 48,
                  "dropout": 0.1, "attention_dropout": 0.1, "activation_dropout": 0.1, "norm": "pre",
                  "share_decoder_embeddings": True, "share_all_embeddings": False, "max_positions": 256},
        "optim": {"name": "adamw", "lr_max": 2e-3, "betas": [0.9, 0.98], "eps": 1e-8, "weight_decay": 1e-4, "clip_norm": 0,
                  "label_smoothing": 0.1},
        "schedule": {"warmup": True, "decay": "isqrt", "warmup_updates": 10, "anchor_updates": 10,
                     "decay_epochs": [3], "decay_factor": 0.1},
        "train": {"epochs": 4, "max_tokens": 200, "required_batch_size_multiple": 8, "log_every": 4,
                  "precision": "fp32", "diverge_loss": 1e6, "max_updates": 0,
                  "checkpoint_every": 3},
        "data": {"dataset": "synthetic"}, "bpe": {"vocab_size": 100, "character_coverage": 1.0, "seed": 1},
    }
    cfg["train"].update(train_over)
    RunConfig.from_dict(cfg).write(path)  # as the write_run_config rule writes it
    return path


def weights(run_dir: Path, epoch: int) -> dict:
    return torch.load(run_dir / "state" / "epochs" / f"epoch{epoch:03d}.pt", weights_only=True)["model"]


def assert_same_weights(a: Path, b: Path, epochs=4):
    for ep in range(1, epochs + 1):
        wa, wb = weights(a, ep), weights(b, ep)
        assert wa.keys() == wb.keys()
        for k in wa:
            assert torch.equal(wa[k], wb[k]), f"epoch {ep}: {k} differs"


def records(run_dir: Path):
    return [json.loads(line) for line in (run_dir / "train.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, bpe_dir):
    root = tmp_path_factory.mktemp("ref")
    run = root / "run"
    train_run(run, write_config(root / "config.json"), bpe_dir, threads=1)
    return run


def test_outputs_and_logging(reference):
    run = reference
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["diverged"] is None and summary["attempts"] == 1
    assert summary["epochs_completed"] == 4 and summary["updates"] > 0 and summary["train_s"] > 0
    meta = json.loads((run / "run.json").read_text())
    for key in ("config", "config_sha256", "torch_version", "device_name", "threads", "precision", "git_commit",
                "where_ran", "num_params"):
        assert key in meta
    assert meta["threads"] == 1 and meta["precision"] == "fp32"
    # the host, measured at the attempt's start: run.json's is the attempt's in train.jsonl
    assert set(meta["host"]) == {"cpu_model", "cpu_flags", "threads", "matmul_gflops"}
    assert meta["host"]["threads"] == 1 and meta["host"]["matmul_gflops"] > 0
    assert [r["host"] for r in records(run) if r["kind"] == "attempt"] == [meta["host"]]
    recs = records(run)
    steps = [r for r in recs if r["kind"] == "step"]
    cfg = json.loads((run.parent / "config.json").read_text())
    # the lr of every update is logged, and equals the schedule
    lrs = [lr for r in steps for lr in r["lrs"]]
    assert len(lrs) == summary["updates"]
    ends = {r["epoch"]: r["updates"] for r in recs if r["kind"] == "epoch"}
    t = 0
    for r in steps:
        for lr in r["lrs"]:
            epoch = min(e for e, u in ends.items() if t < u)
            assert lr == pytest.approx(lr_at(t, epoch, ScheduleSettings.from_dict(cfg["schedule"]), 2e-3), abs=0, rel=1e-12)
            t += 1
    assert steps[0]["lrs"][0] == 0.0  # warm-up: the first update at lr 0
    s = steps[0]
    for key in ("loss", "nll", "lr", "grad_norm", "tokens_per_s", "wall_s", "epoch", "update", "attempt"):
        assert key in s
    gn = s["grad_norms"]
    assert len(gn["encoder"]["self_attn"]) == 2 and len(gn["encoder"]["ffn"]) == 2
    assert len(gn["decoder"]["encoder_attn"]) == 2 and all(v > 0 for v in gn["decoder"]["ffn"])
    for ep in range(1, 5):
        m = json.loads((run / "epochs" / f"epoch{ep:03d}.json").read_text())
        assert m["status"] == "ok" and m["weights"] == f"state/epochs/epoch{ep:03d}.pt"
        from lnrepro.io import file_sha256

        assert m["sha256"] == file_sha256(run / m["weights"])
        assert m["updates"] == ends[ep]
    from lnrepro.model import load_model

    model = load_model(run / "state" / "epochs" / "epoch004.pt")
    assert model.cfg.norm == "pre" and model.cfg.vocab_size == 100


def test_the_outputs_are_the_records_text(reference):
    """Every declared JSON output reads as its record, which writes it again byte for byte; run.json names the
    optimizer and its settings from config.json's optim section."""
    from lnrepro.paths import RunFolder
    from lnrepro.records import EpochManifest, RunRecord, RunStatus, RunSummary

    folder = RunFolder(str(reference))
    for cls, path in [(RunRecord, folder.run_json), (RunSummary, folder.summary),
                      *((EpochManifest, m) for m in folder.epoch_manifests(4))]:
        assert cls.read(path).text() == Path(path).read_text()
    assert RunSummary.read(folder.summary).status is RunStatus.COMPLETED
    meta, cfg = RunRecord.read(folder.run_json), json.loads((reference.parent / "config.json").read_text())
    assert meta.optimizer_settings == {"name": "adamw", **{k: cfg["optim"][k] for k in ("betas", "eps", "weight_decay")}}


def test_deterministic_rerun_and_finished_state_not_resumed(reference, bpe_dir, tmp_path):
    run = tmp_path / "run"
    cfg = write_config(tmp_path / "config.json")
    train_run(run, cfg, bpe_dir, threads=1)
    assert_same_weights(reference, run)
    # a finished state is never resumed: a rerun writes the first attempt's outputs again (attempt 1), same weights
    train_run(run, cfg, bpe_dir, threads=1)
    assert json.loads((run / "summary.json").read_text())["attempts"] == 1
    assert_same_weights(reference, run)


def _spawn(run: Path, cfg: Path, bpe_dir: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{SRC_DIR}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.Popen([sys.executable, "-m", "lnrepro", "train", "--config", str(cfg), "--bpe", str(bpe_dir),
                             "--run-dir", str(run), "--threads", "1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _kill_after_checkpoint(proc: subprocess.Popen, last: Path, newer_than: float) -> None:
    deadline = time.time() + 120
    while time.time() < deadline:
        if last.exists() and last.stat().st_mtime > newer_than:
            break
        assert proc.poll() is None, "training finished before it could be killed"
        time.sleep(0.005)
    time.sleep(0.05)  # somewhere after the checkpoint: mid-update, mid-log-write, whatever comes
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def test_resume_after_sigkill_is_bitwise_identical(reference, bpe_dir, tmp_path):
    """A training killed after its first checkpoint resumes to the uninterrupted run's bits. Slow by nature: a
    real trainer process is killed and a second one trains on to the end."""
    run = tmp_path / "run"
    cfg = write_config(tmp_path / "config.json")
    last = run / "state" / "last.pt"
    proc = _spawn(run, cfg, bpe_dir)
    _kill_after_checkpoint(proc, last, 0)
    assert not (run / "state" / "finished.json").exists() and not (run / "summary.json").exists()
    first_update = torch.load(last, weights_only=True)["update"]
    proc = _spawn(run, cfg, bpe_dir)  # second attempt, killed again after its own first checkpoint
    _kill_after_checkpoint(proc, last, last.stat().st_mtime)
    assert torch.load(last, weights_only=True)["update"] > first_update
    proc = _spawn(run, cfg, bpe_dir)
    assert proc.wait(timeout=300) == 0
    assert_same_weights(reference, run)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["attempts"] == 3
    ref_summary = json.loads((reference / "summary.json").read_text())
    assert summary["updates"] == ref_summary["updates"] and summary["final_loss"] == ref_summary["final_loss"]
    assert summary["wall_s_all_attempts"] > summary["train_s"]
    assert {r["attempt"] for r in records(run)} == {1, 2, 3}
    hosts = [r["host"] for r in records(run) if r["kind"] == "attempt"]  # each attempt measured its own
    assert len(hosts) == 3 and json.loads((run / "run.json").read_text())["host"] == hosts[-1]


def test_divergence_recorded(bpe_dir, tmp_path):
    run = tmp_path / "run"
    train_run(run, write_config(tmp_path / "config.json", diverge_loss=0.5), bpe_dir, threads=1)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "diverged"
    assert summary["diverged"]["update"] == 1 and summary["diverged"]["epoch"] == 1
    assert "diverge_loss" in summary["diverged"]["detail"]
    for ep in range(1, 5):
        m = json.loads((run / "epochs" / f"epoch{ep:03d}.json").read_text())
        assert m["status"] == "diverged" and m["weights"] is None and m["sha256"] is None


def test_max_updates_stops(bpe_dir, tmp_path):
    run = tmp_path / "run"
    train_run(run, write_config(tmp_path / "config.json", max_updates=5, epochs=3), bpe_dir, threads=1)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["updates"] == 5 and summary["status"] == "max_updates"
    m1 = json.loads((run / "epochs" / "epoch001.json").read_text())
    m3 = json.loads((run / "epochs" / "epoch003.json").read_text())
    assert m1["status"] == "ok" and m1["updates"] == 5
    assert m3["status"] == "stopped" and m3["weights"] is None


def test_bf16_rerun_is_bitwise_identical(bpe_dir, tmp_path):
    """bf16 autocast through the fast paths (matmul attention, fused loss, integer-draw dropout, the decoder on
    non-padding rows, fused AdamW): a rerun gives the same weights bit for bit."""
    runs = []
    for name in ("a", "b"):
        run = tmp_path / name
        train_run(run, write_config(tmp_path / f"{name}.json", precision="bf16", epochs=2), bpe_dir, threads=1)
        runs.append(run)
    assert_same_weights(*runs, epochs=2)
    meta = json.loads((runs[0] / "run.json").read_text())
    assert meta["precision"] == "bf16" and meta["optimizer"].startswith("torch.optim.AdamW (fused")
    assert json.loads((runs[0] / "summary.json").read_text())["status"] == "completed"


def test_by_hand_training_runs_on_the_cpu_where_cuda_is_visible(bpe_dir, tmp_path, monkeypatch, capsys):
    """``lnrepro train`` without --device (a job given no GPU) trains on the CPU even where torch sees a GPU;
    run.json, its where_ran and the attempt's execution facts say so."""
    from lnrepro.cli import main
    from lnrepro.io import cpu_name

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    run = tmp_path / "run"
    config = write_config(tmp_path / "config.json", epochs=1)
    assert main(["train", "--config", str(config), "--bpe", str(bpe_dir), "--run-dir", str(run)]) == 0
    meta = json.loads((run / "run.json").read_text())
    assert (meta["device"], meta["device_name"], meta["where_ran"]["device"]) == ("cpu", cpu_name(), cpu_name())
    attempt = next(r for r in records(run) if r["kind"] == "attempt")
    assert attempt["execution"]["device"] == "cpu"


def test_cuda_where_none_is_visible_is_one_error_before_anything_is_touched(bpe_dir, tmp_path, monkeypatch, capsys):
    from lnrepro.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    run = tmp_path / "run"
    args = ["train", "--config", str(write_config(tmp_path / "config.json")), "--bpe", str(bpe_dir),
            "--run-dir", str(run), "--device", "cuda"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.startswith("lnrepro train: error: --device cuda: ") and "resources.<rule>.gpus" in err
    assert len(err.splitlines()) == 1 and not run.exists()
