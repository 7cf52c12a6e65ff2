"""Results bound to the inputs that made them, and no finished work lost to a bad setting,
through the real ``lnrepro train`` and ``lnrepro evaluate`` command lines on a tiny run: a config.json
edited by hand, a BPE folder of another experiment, a setting the data cannot meet on a finished run, a change
of inputs and back, a resume under another thread count. Each fault is triggered for real and its outcome
asserted: the message, the finished state untouched (digests of its files), the rerun equal to a clean run.
The same faults through Snakemake: tests/test_faults_dag.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import fake_bpe
from lnrepro.config import RunConfig
from test_train import SRC_DIR, write_config

EPOCHS = 4  # write_config's
DECLARED = ["run.json", "train.jsonl", "summary.json"] + [f"epochs/epoch{ep:03d}.json" for ep in range(1, EPOCHS + 1)]
ENV = {**os.environ, "PYTHONPATH": f"{SRC_DIR}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def lnrepro(*args: str | Path) -> subprocess.CompletedProcess:
    """One real ``lnrepro`` command line; its exit status and output returned, never raised."""
    return subprocess.run([sys.executable, "-m", "lnrepro", *map(str, args)], env=ENV, capture_output=True,
                          text=True)


def train(run: Path, cfg: Path, bpe: Path, threads: int = 1, sha: str | None = None) -> subprocess.CompletedProcess:
    """``lnrepro train``; with ``sha``, as the workflow calls it: with the digest of the config.json the
    experiment resolves the run to."""
    check = ["--config-sha256", sha] if sha else []
    return lnrepro("train", "--config", cfg, "--bpe", bpe, "--run-dir", run, "--threads", threads, *check)


def trained(run: Path, cfg: Path, bpe: Path, threads: int = 1) -> str:
    """Train to the end (it must succeed); its stderr."""
    proc = train(run, cfg, bpe, threads)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stderr


def snapshot(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder`` by relative path (the lock's content, a pid, left out)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "lock"}


def outputs(run: Path) -> dict[str, bytes]:
    return {name: (run / name).read_bytes() for name in DECLARED}


def attempts(run: Path) -> list[dict]:
    return [r for r in map(json.loads, (run / "train.jsonl").read_text().splitlines()) if r["kind"] == "attempt"]


def config_with(path: Path, **changes: dict) -> Path:
    """A copy of write_config's config.json with sections updated (``optim={"lr_max": ...}``)."""
    settings = json.loads(write_config(path).read_text())
    for section, values in changes.items():
        settings[section].update(values)
    RunConfig.from_dict(settings).write(path)
    return path


@pytest.fixture(scope="module")
def bpe(tmp_path_factory) -> Path:
    return fake_bpe(tmp_path_factory.mktemp("bpe"), vocab=40, n=96)


@pytest.fixture(scope="module")
def finished(tmp_path_factory, bpe) -> Path:
    """One finished run through the command line (tests copy it before changing it)."""
    root = tmp_path_factory.mktemp("finished")
    trained(root / "run", write_config(root / "config.json"), bpe)
    return root


def copy_finished(finished: Path, tmp_path: Path) -> tuple[Path, Path]:
    shutil.copytree(finished, tmp_path / "copy")
    return tmp_path / "copy" / "run", tmp_path / "copy" / "config.json"


# ---- a config.json edited by hand ------------------------------------------------------------------------------


def test_a_hand_edited_config_is_refused_before_anything_is_touched(finished, bpe, tmp_path):
    run, cfg = copy_finished(finished, tmp_path)
    resolved = hashlib.sha256(cfg.read_bytes()).hexdigest()  # what the experiment resolves the run to
    before, first = snapshot(run), outputs(run)
    settings = json.loads(cfg.read_text())
    settings["optim"]["lr_max"] = 1e-4  # an edit by hand
    cfg.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")
    proc = train(run, cfg, bpe, sha=resolved)
    assert proc.returncode == 1
    assert f"{cfg}: not the config.json the experiment resolves this run to" in proc.stderr
    assert "experiment.json" in proc.stderr and "snakemake --forcerun write_run_config" in proc.stderr
    assert snapshot(run) == before and outputs(run) == first  # nothing trained, nothing cleared
    write_config(cfg)  # written again from the configuration: the finished run's outputs, without training
    proc = train(run, cfg, bpe, sha=resolved)
    assert proc.returncode == 0 and "already trained with these inputs" in proc.stderr, proc.stderr[-3000:]
    assert outputs(run) == first and len(attempts(run)) == 1


# ---- a BPE folder other than the one the checkpoint was trained with -----------------------------------------


def _scoring_folder(bpe: Path, dest: Path) -> tuple[Path, Path, Path]:
    """A BPE folder as apply_bpe leaves it (valid ids, stats.json), prepared references, and a valid-only slice."""
    shutil.copytree(bpe, dest / "bpe")
    b, prepared = dest / "bpe", dest / "prepared"
    prepared.mkdir()
    for side in ("de", "en"):
        lines = (b / f"train.{side}.ids").read_text().splitlines()[:8]
        (b / f"valid.{side}.ids").write_text("\n".join(lines) + "\n")
    refs = "".join(f"sentence {i} .\n" for i in range(8))
    (prepared / "valid.en").write_text(refs)
    (prepared / "valid.raw.en").write_text(refs)
    (b / "stats.json").write_text(json.dumps({"spm_model_sha256": hashlib.sha256((b / "spm.model").read_bytes())
                                             .hexdigest()}))
    eval_json = dest / "eval.json"
    eval_json.write_text(json.dumps({"splits": {"valid": {"beam": 1, "lenpen": 1.0, "max_len_a": 0, "max_len_b": 5,
                                                          "precision": "fp32"}},
                                     "max_tokens": 400, "label_smoothing": 0.1}))
    return b, prepared, eval_json


def _other_spm(bpe: Path, vocab: int = 40) -> None:
    """Replace ``bpe``'s spm.model by one of the same size learned on other text (another experiment's)."""
    import sentencepiece as spm

    text = bpe / "other.txt"
    text.write_text("\n".join(f"ein anderer satz {i} another sentence here" for i in range(60)) + "\n")
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(bpe / "spm"), vocab_size=vocab,
                                   model_type="bpe", bos_id=0, pad_id=1, eos_id=2, unk_id=3, minloglevel=2)
    text.unlink()


def evaluate(run: Path, bpe: Path, prepared: Path, eval_json: Path, out: Path) -> subprocess.CompletedProcess:
    return lnrepro("evaluate", "--manifest", run / "epochs" / "epoch004.json", "--eval-config", eval_json,
                   "--bpe", bpe, "--prepared", prepared, "--out", out, "--threads", 1)


def test_evaluate_refuses_the_bpe_model_of_another_experiment(finished, bpe, tmp_path):
    own, prepared, eval_json = _scoring_folder(bpe, tmp_path / "own")
    ok = evaluate(finished / "run", own, prepared, eval_json, tmp_path / "own.json")
    assert ok.returncode == 0, ok.stderr[-3000:]
    scores = json.loads((tmp_path / "own.json").read_text())
    digests = scores.get("inputs_sha256") or {}
    assert digests.get("spm.model") == hashlib.sha256((own / "spm.model").read_bytes()).hexdigest()
    assert set(digests) == {"eval.json", "spm.model", "valid.de.ids", "valid.en.ids", "valid.en", "valid.raw.en"}
    assert scores["weights_sha256"] == json.loads((finished / "run" / "epochs" / "epoch004.json").read_text())["sha256"]

    foreign, _, _ = _scoring_folder(bpe, tmp_path / "foreign")
    _other_spm(foreign)  # the same vocabulary size, other pieces; its folder consistent, as another experiment's
    (foreign / "stats.json").write_text(json.dumps({"spm_model_sha256": hashlib.sha256(
        (foreign / "spm.model").read_bytes()).hexdigest()}))
    out = tmp_path / "foreign.json"
    proc = evaluate(finished / "run", foreign, prepared, eval_json, out)
    assert proc.returncode == 1
    assert (f"{foreign / 'spm.model'}: not the BPE model {finished / 'run' / 'epochs' / 'epoch004.json'} was "
            "trained with") in proc.stderr
    assert "rule train_run" in proc.stderr and not out.exists()


def test_evaluate_refuses_encoded_splits_not_made_with_the_model(finished, bpe, tmp_path):
    b, prepared, eval_json = _scoring_folder(bpe, tmp_path)
    (b / "stats.json").write_text(json.dumps({"spm_model_sha256": "0" * 64}))  # encoded by another model
    proc = evaluate(finished / "run", b, prepared, eval_json, tmp_path / "o.json")
    assert proc.returncode == 1
    assert f"{b}: its encoded splits were not made with {b / 'spm.model'}" in proc.stderr
    assert "rule apply_bpe" in proc.stderr


# ---- a setting the data cannot meet, on a finished run --------------------------------------------------------


@pytest.mark.parametrize("section, key, message", [
    ("train", "max_tokens", "train.max_tokens: sentence pair"),
    ("model", "max_positions", "pair longer than model.max_positions=8"),
])
def test_a_setting_the_data_cannot_meet_leaves_the_finished_run_whole(finished, bpe, tmp_path, section, key,
                                                                      message):
    """Shorter than the longest pair (16 on the demo): refused before the finished state is touched;
    reverting the setting writes the finished run's outputs again without training."""
    run, cfg = copy_finished(finished, tmp_path)
    before, first = snapshot(run / "state"), outputs(run)
    config_with(cfg, **{section: {key: 8}})
    proc = train(run, cfg, bpe)
    assert proc.returncode == 1 and message in proc.stderr, proc.stderr[-3000:]
    assert snapshot(run / "state") == before  # the finished weights and state, every file as it was
    write_config(cfg)
    assert "already trained with these inputs" in trained(run, cfg, bpe)
    assert outputs(run) == first and len(attempts(run)) == 1  # no new training attempt


# ---- other inputs, then the first ones again ------------------------------------------------------------------


def test_a_state_of_other_inputs_moves_to_previous_and_is_taken_back(finished, bpe, tmp_path):
    """A finished run trained on other inputs (lr_max) keeps its state in state/previous/; back on the first
    inputs it is taken back and its outputs written again without training; then the other inputs again,
    interrupted mid-training and taken back in turn: resumed, to a clean run's weights."""
    run, cfg = copy_finished(finished, tmp_path)
    first, state_a = outputs(run), snapshot(run / "state")
    other = config_with(tmp_path / "other.json", optim={"lr_max": 1e-3})

    killed = subprocess.Popen([sys.executable, "-m", "lnrepro", "train", "--config", str(other), "--bpe", str(bpe),
                               "--run-dir", str(run), "--threads", "1"], env=ENV, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    last = run / "state" / "last.pt"
    while not (last.exists() and (run / "state" / "previous").exists()):  # a checkpoint of the other inputs
        assert killed.poll() is None, killed.stderr.read()[-3000:]
        time.sleep(0.01)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    assert "belongs to other inputs: moved to" in killed.stderr.read()
    assert snapshot(run / "state" / "previous") == state_a  # the finished state, whole, beside the new one

    err = trained(run, write_config(tmp_path / "copy" / "config.json"), bpe)
    assert "taken back" in err and "already trained with these inputs" in err
    assert outputs(run) == first and len(attempts(run)) == 1
    assert {k: v for k, v in snapshot(run / "state").items() if not k.startswith("previous/")} == state_a

    err = trained(run, other, bpe)
    assert "taken back" in err
    resumed = attempts(run)
    assert len(resumed) == 2 and resumed[-1]["resumed_update"] > 0  # resumed, not trained afresh
    clean = tmp_path / "clean"
    trained(clean, other, bpe)
    for ep in range(1, EPOCHS + 1):
        m, c = (json.loads((d / "epochs" / f"epoch{ep:03d}.json").read_text()) for d in (run, clean))
        assert m["sha256"] == c["sha256"], f"epoch {ep}"


# ---- a resume under other execution facts ---------------------------------------------------------------------


def test_a_resume_with_another_thread_count_is_logged_and_recorded(bpe, tmp_path):
    run, cfg = tmp_path / "run", write_config(tmp_path / "config.json")
    proc = subprocess.Popen([sys.executable, "-m", "lnrepro", "train", "--config", str(cfg), "--bpe", str(bpe),
                             "--run-dir", str(run), "--threads", "1"], env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    while not (run / "state" / "last.pt").exists():  # the first checkpoint, mid-epoch 1
        assert proc.poll() is None
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    err = trained(run, cfg, bpe, threads=2)
    assert "under other execution facts than attempt 1: threads 1 -> 2" in err
    assert [a["execution"]["threads"] for a in attempts(run)] == [1, 2]
    executions = json.loads((run / "run.json").read_text())["executions"]
    assert [(e["attempt"], e["threads"]) for e in executions] == [(1, 1), (2, 2)]
    assert executions[1]["resumed_update"] > 0


def test_a_move_to_previous_cut_short_by_a_kill_is_finished_by_the_next_trainer(finished, bpe, tmp_path):
    """A kill halfway through moving the finished state aside (some files in state/.to_previous/, the rest still
    in state/): the next trainer finishes the move, so that state is whole in previous/ and taken back later."""
    run, cfg = copy_finished(finished, tmp_path)
    first, state_a = outputs(run), snapshot(run / "state")
    moving = run / "state" / ".to_previous"
    moving.mkdir()
    for name in ("epochs", "last.pt"):
        os.replace(run / "state" / name, moving / name)
    other = config_with(tmp_path / "other.json", optim={"lr_max": 1e-3})
    trained(run, other, bpe)
    assert snapshot(run / "state" / "previous") == state_a and not moving.exists()
    assert "already trained with these inputs" in trained(run, cfg, bpe)
    assert outputs(run) == first and len(attempts(run)) == 1


# ---- another run's config.json --------------------------------------------------------------------------------


def test_another_runs_config_is_refused_for_this_run_folder(bpe, tmp_path):
    """``--config`` of one run with ``--run-dir`` of another: refused before the folder is touched, whether the
    folder holds its own config.json or only its name says which run and seed it is."""
    runs = tmp_path / "results" / "x" / "runs"
    mine, other = runs / "preln_warmup_isqrt" / "seed3", runs / "postln_warmup_isqrt" / "seed3"
    mine.mkdir(parents=True)
    other.mkdir(parents=True)
    write_config(mine / "config.json")
    theirs = config_with(other / "config.json", optim={"lr_max": 1e-3})
    before = snapshot(mine)
    proc = train(mine, theirs, bpe)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        f"lnrepro train: error: {theirs}: not the config.json of --run-dir {mine} ({mine / 'config.json'} differs): "
        "a run trains in its own folder from its own config.json; nothing was trained or changed"]
    assert snapshot(mine) == before and not (mine / "state").exists()
    (mine / "config.json").unlink()  # no config.json of its own: the folder's name says which run it is
    settings = json.loads(theirs.read_text())
    settings["run"] = "postln_warmup_isqrt"
    theirs.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")
    proc = train(mine, theirs, bpe)
    assert proc.returncode == 1 and proc.stderr.splitlines() == [
        f"lnrepro train: error: {theirs}: the config of run postln_warmup_isqrt seed3, but --run-dir {mine} is the "
        "folder of run preln_warmup_isqrt seed3; nothing was trained or changed"]
    assert not (mine / "state").exists()
