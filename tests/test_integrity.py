"""lnrepro.integrity: a run folder's records checked for whose they are and whether they are whole, and a
study-level table checked against its settings (the faults through the real CLI: tests/test_faults_records.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from lnrepro.errors import LnReproError
from lnrepro.integrity import check_run, check_table
from lnrepro.io import file_sha256, json_text
from lnrepro.records import RunStatus

RUN, SEED, EPOCHS, PER_EPOCH = "postln", 1, 2, 30


def _manifest(ep: int, config: str, run: str = RUN) -> dict:
    return {"epoch": ep, "status": "ok", "weights": f"state/epochs/epoch{ep:03d}.pt", "sha256": f"{ep:064x}",
            "updates": ep * PER_EPOCH, "wall_s": 1.0 * ep, "partial": False, "run": run, "seed": SEED,
            "config_sha256": config, "where_ran": {}, "data_sha256": {"spm.model": "a" * 64}}


def _score(ep: int, run: str = RUN) -> dict:
    return {"epoch": ep, "status": "ok", "run": run, "seed": SEED, "updates": ep * PER_EPOCH,
            "weights": f"state/epochs/epoch{ep:03d}.pt", "weights_sha256": f"{ep:064x}",
            "manifest": f"epochs/epoch{ep:03d}.json", "decode": {}, "label_smoothing": 0.1, "threads": 1,
            "torch": "2", "where_ran": {}, "wall_s": 1.0, "splits": {"valid": None}}


def _log(updates: int) -> str:
    lines = [{"kind": "attempt", "attempt": 1}]
    for u in range(10, updates + 1, 10):
        lines.append({"kind": "step", "attempt": 1, "update": u, "epoch": (u - 1) // PER_EPOCH + 1, "loss": 1.0,
                      "lrs": [0.1] * 10})
        if u % PER_EPOCH == 0:
            lines.append({"kind": "epoch", "attempt": 1, "epoch": u // PER_EPOCH, "updates": u})
    lines.append({"kind": "finished", "attempt": 1, "status": "completed", "update": updates})
    return "".join(json.dumps(x) + "\n" for x in lines)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A finished, scored run folder of two epochs (records only: no weights)."""
    d = tmp_path / "runs" / RUN / f"seed{SEED}"
    (d / "epochs").mkdir(parents=True)
    (d / "eval").mkdir()
    (d / "config.json").write_text(json_text({"run": RUN, "seed": SEED, "train": {"epochs": EPOCHS}}))
    config = file_sha256(d / "config.json")
    (d / "run.json").write_text(json_text({"run": RUN, "seed": SEED, "config_sha256": config}))
    for ep in range(1, EPOCHS + 1):
        (d / f"epochs/epoch{ep:03d}.json").write_text(json_text(_manifest(ep, config)))
        (d / f"eval/epoch{ep:03d}.json").write_text(json_text(_score(ep)))
    updates = EPOCHS * PER_EPOCH
    (d / "summary.json").write_text(json_text({
        "run": RUN, "seed": SEED, "status": "completed", "final_loss": 1.0, "final_nll": 1.0,
        "final_loss_update": updates, "updates": updates, "epochs_completed": EPOCHS, "epochs": EPOCHS,
        "diverged": None, "train_s": 1.0, "wall_s_all_attempts": 1.0, "attempts": 1, "target_tokens_per_epoch": 1,
        "target_tokens_trained": 2, "tokens_per_s": 1.0, "where_ran": {}}))
    (d / "train.jsonl").write_text(_log(updates))
    return d


def test_a_whole_folder_passes(folder: Path) -> None:
    check = check_run(folder, RUN, SEED)
    assert check.config_sha256 == file_sha256(folder / "config.json")
    assert (check.epochs, check.epochs_trained, check.epochs_ok, check.epochs_scored) == (2, (1, 2), (1, 2), (1, 2))
    assert check.training_complete and check.status == RunStatus.COMPLETED


def test_a_folder_still_training_or_unscored_is_partial_not_an_error(folder: Path) -> None:
    for p in folder.glob("eval/*"):
        p.unlink()
    check = check_run(folder, RUN, SEED)
    assert check.epochs_scored == () and check.training_complete
    for name in ("summary.json", "train.jsonl", "run.json"):
        (folder / name).unlink()
    for p in folder.glob("epochs/*"):
        p.unlink()
    check = check_run(folder, RUN, SEED)
    assert (check.epochs_trained, check.training_complete, check.status) == ((), False, None)


@pytest.mark.parametrize("cut", ["line", "mid-line"])
def test_a_training_log_shorter_than_the_summary_is_refused(folder: Path, cut: str) -> None:
    log = folder / "train.jsonl"
    text = log.read_text()
    kept = text[: len(text) * 2 // 3]
    log.write_text(kept[: kept.rfind("\n") + 1] if cut == "line" else kept)
    with pytest.raises(LnReproError, match=r"train\.jsonl.*(incomplete|not a whole).*forcerun train_run"):
        check_run(folder, RUN, SEED)


def test_another_runs_score_file_is_refused(folder: Path) -> None:
    (folder / "eval/epoch002.json").write_text(json_text(_score(2, run="preln")))
    with pytest.raises(LnReproError, match=r"epoch002\.json: the record of run preln seed 1, read as run postln"):
        check_run(folder, RUN, SEED)


def test_a_score_file_of_other_weights_is_refused(folder: Path) -> None:
    score = _score(2)
    score["weights_sha256"] = "f" * 64
    (folder / "eval/epoch002.json").write_text(json_text(score))
    with pytest.raises(LnReproError, match=r"scores another checkpoint than .*epoch002\.json"):
        check_run(folder, RUN, SEED)


def test_records_beyond_the_configured_epochs_are_refused_by_name(folder: Path) -> None:
    shutil.copy(folder / "epochs/epoch002.json", folder / "epochs/epoch003.json")
    shutil.copy(folder / "eval/epoch002.json", folder / "eval/epoch003.json")
    (folder / "eval/epoch003.valid.hyp").write_text("x\n")
    with pytest.raises(LnReproError, match=r"epoch\(s\) 3 beyond the run's 2 configured epochs.*delete them: rm "
                                           r".*epoch003\.json .*epoch003\.json .*epoch003\.valid\.hyp"):
        check_run(folder, RUN, SEED)


def test_a_manifest_of_another_config_is_refused(folder: Path) -> None:
    (folder / "epochs/epoch001.json").write_text(json_text(_manifest(1, "b" * 64)))
    with pytest.raises(LnReproError, match=r"epoch001\.json: trained from another config\.json"):
        check_run(folder, RUN, SEED)
    with pytest.raises(LnReproError, match=r"run\.json: trained from another config\.json"):
        check_run(folder, RUN, SEED, config_sha256="b" * 64)


def test_a_summary_of_another_training_is_refused(folder: Path) -> None:
    summary = json.loads((folder / "summary.json").read_text())
    (folder / "summary.json").write_text(json_text({**summary, "updates": 90}))
    with pytest.raises(LnReproError, match=r"epoch002\.json: 60 updates at the end of training, but .*90"):
        check_run(folder, RUN, SEED)


def _gradinit(seeds: tuple[int, ...], depths: tuple[int, ...] = (2, 3)) -> pd.DataFrame:
    rows = [{"norm": n, "depth": d, "seed": s, "layer": layer, "value": 1.0}
            for s in seeds for d in depths for n in ("post", "pre") for layer in range(d)]
    return pd.DataFrame(rows)


def test_a_whole_table_passes() -> None:
    check_table("g.csv", _gradinit((1, 2)), {"norm": ["post", "pre"], "depth": [2, 3], "seed": [1, 2]},
                rule="gradinit", per=["norm", "depth"], filled=["value"])


def test_a_table_missing_seeds_or_rows_is_refused() -> None:
    keys = {"norm": ["post", "pre"], "depth": [2, 3], "seed": [1, 2, 3]}
    with pytest.raises(LnReproError, match=r"g\.csv: not the table its settings give.*missing 4 of 12.*forcerun "
                                           r"gradinit"):
        check_table("g.csv", _gradinit((1, 2)), keys, rule="gradinit", per=["norm", "depth"])
    cut = _gradinit((1, 2, 3)).iloc[:-1]
    with pytest.raises(LnReproError, match="fewer rows than their like"):
        check_table("g.csv", cut, keys, rule="gradinit", per=["norm", "depth"])
    damaged = _gradinit((1, 2, 3))
    damaged.loc[len(damaged) - 1, "value"] = float("nan")
    with pytest.raises(LnReproError, match="rows without value"):
        check_table("g.csv", damaged, keys, rule="gradinit", per=["norm", "depth"], filled=["value"])


def test_the_module_is_torch_free() -> None:
    import subprocess
    import sys

    code = "import sys, lnrepro.integrity; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
