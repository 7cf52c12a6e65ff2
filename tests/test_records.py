"""The typed run records: each writes the JSON it reads back byte for byte, and rejects a missing or unknown key,
or a status outside its own, with one LnReproError naming the file and the key; the module needs no torch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lnrepro.errors import LnReproError
from lnrepro.records import (CheckpointScores, Divergence, EpochManifest, RunRecord, RunStatus, RunSummary,
                             SplitScores)

WHERE = {"host": "h", "device": "cpu", "slurm_job_id": None}
MANIFEST = {"epoch": 2, "status": "ok", "weights": "state/epochs/epoch002.pt", "sha256": "ab" * 32, "updates": 40,
            "wall_s": 1.5, "partial": False, "run": "pre", "seed": 1, "config_sha256": "cd" * 32, "where_ran": WHERE}
SPLIT = {"loss": 2.0, "nll": 1.5, "loss_base2": 2.88, "nll_base2": 2.16, "target_tokens": 100, "bleu_tok": 30.0,
         "bleu_tok_detail": {"score": 30.0}, "sacrebleu": 29.0, "sacrebleu_signature": "nrefs:1",
         "sacrebleu_detail": {"score": 29.0}, "sentences": 10, "decode_s": 0.5, "sent_per_s": 20.0}
SCORES = {"epoch": 2, "status": "ok", "run": "pre", "seed": 1, "updates": 40, "weights": "w", "weights_sha256": "s",
          "manifest": "m", "decode": {"valid": {"beam": 5}}, "label_smoothing": 0.1, "model_config": {"d_model": 8},
          "threads": 1, "torch": "2", "where_ran": WHERE, "wall_s": 3.0, "splits": {"valid": SPLIT, "test": None}}
SUMMARY = {"run": "pre", "seed": 1, "status": "diverged", "final_loss": None, "final_nll": None,
           "final_loss_update": None, "updates": 3, "epochs_completed": 0, "epochs": 2,
           "diverged": {"update": 3, "epoch": 1, "detail": "non-finite loss", "loss": None, "lr": 0.1},
           "train_s": 1.0, "wall_s_all_attempts": 2.0, "attempts": 1, "target_tokens_per_epoch": 50,
           "target_tokens_trained": 20, "tokens_per_s": 20.0, "where_ran": WHERE}


def _file(tmp_path, name, obj):
    path = tmp_path / name
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    return path


@pytest.mark.parametrize("cls, obj", [(EpochManifest, MANIFEST), (CheckpointScores, SCORES), (RunSummary, SUMMARY),
                                      (EpochManifest, {**MANIFEST, "status": "stopped", "weights": None,
                                                       "sha256": None, "reason": "max_updates"}),
                                      (CheckpointScores, {k: v for k, v in SCORES.items() if k != "model_config"})])
def test_a_record_writes_the_bytes_it_read(tmp_path, cls, obj):
    path = _file(tmp_path, "in.json", obj)
    record = cls.read(path)
    record.write(tmp_path / "out.json")
    assert (tmp_path / "out.json").read_bytes() == path.read_bytes()


def test_fields_are_typed():
    m = EpochManifest.from_dict(MANIFEST)
    assert m.status is RunStatus.OK and m.reason is None and "reason" not in m.to_dict()
    s = CheckpointScores.from_dict(SCORES)
    assert isinstance(s.splits["valid"], SplitScores) and s.splits["test"] is None
    summary = RunSummary.from_dict(SUMMARY)
    assert summary.status is RunStatus.DIVERGED and isinstance(summary.diverged, Divergence)


def test_a_non_finite_float_of_the_summary_is_written_as_null():
    summary = RunSummary.from_dict({**SUMMARY, "tokens_per_s": float("nan")})
    assert json.loads(summary.text())["tokens_per_s"] is None


@pytest.mark.parametrize("change, message", [
    (lambda m: m.pop("sha256"), "missing key(s) sha256"),
    (lambda m: m.update(extra=1), "unknown key(s) extra"),
    (lambda m: m.update(status="completed"), "status 'completed'; expected 'ok' or 'diverged' or 'stopped'"),
    (lambda m: m.update(status="fine"), ": status: 'fine' is not a status"),
])
def test_a_bad_manifest_names_the_file_and_key(tmp_path, change, message):
    obj = dict(MANIFEST)
    change(obj)
    path = _file(tmp_path, "epoch002.json", obj)
    with pytest.raises(LnReproError, match="epoch002.json") as e:
        EpochManifest.read(path)
    assert message in str(e.value)


def test_a_bad_nested_key_names_its_path(tmp_path):
    path = _file(tmp_path, "epoch002.json", {**SCORES, "splits": {"valid": {**SPLIT, "bleu": 1}}})
    with pytest.raises(LnReproError, match=r"epoch002.json: splits.valid: unknown key\(s\) bleu"):
        CheckpointScores.read(path)
    path = _file(tmp_path, "run.json", {"run": "pre"})
    with pytest.raises(LnReproError, match="run.json: missing key"):
        RunRecord.read(path)


def test_the_records_import_without_torch():
    code = "import sys, lnrepro.records; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_run_folder_names_its_files_once():
    from lnrepro.paths import Paths, RunFolder

    names, folder = RunFolder(), Paths("demo").run_folder("pre", 2)
    assert names.train_outputs(2) == ["run.json", "train.jsonl", "summary.json", "epochs/epoch001.json",
                                      "epochs/epoch002.json"]
    assert folder.train_outputs(1)[0] == "results/demo/runs/pre/seed2/run.json"
    assert (names.epoch_weights(3), names.score(3), names.hypotheses(3, "test")) == (
        "state/epochs/epoch003.pt", "eval/epoch003.json", "eval/epoch003.test.hyp")
    assert Paths("demo").hypotheses(("valid",)) == ["results/demo/runs/{run}/seed{seed}/eval/epoch{ep}.valid.hyp"]
    assert [names.is_epoch_manifest(n) for n in ("epochs/epoch012.json", "run.json", "epochs/epoch1.json")] == [
        True, False, False]
    assert str(RunFolder.hypotheses_beside("x/eval/epoch004.json", "valid")) == "x/eval/epoch004.valid.hyp"
    assert str(RunFolder.manifest_scored_by(folder.score(7))) == folder.epoch_manifest(7)
    with pytest.raises(LnReproError, match="not a score file"):
        RunFolder.manifest_scored_by("x/out.json")
