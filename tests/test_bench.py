"""`lnrepro bench --quick` on the synthetic corpus: it runs every section and writes the JSON it promises.

Only the structure is checked: durations depend on the machine and its load.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lnrepro import cli


def run_bench(argv: list[str]) -> None:
    """``lnrepro bench ARGV`` through the command line's parser and error handling."""
    assert cli.main(["bench", *argv]) == 0


def _positive(stats: dict) -> None:
    assert stats["median"] > 0 and stats["min"] <= stats["median"] <= stats["max"]
    assert stats["spread"] >= 0 and len(stats["values"]) >= 1


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    tmp = tmp_path_factory.mktemp("bench")
    out = tmp / "bench.json"
    profile = tmp / "profile"
    run_bench(["--quick", "--reps", "1", "--data", "synthetic", "--cache", str(tmp / "cache"), "--out", str(out),
               "--profile", str(profile)])
    return json.loads(out.read_text()), str(profile)


def test_header(quick: tuple[dict, str]) -> None:
    result, _ = quick
    assert result["corpus"]["name"] == "synthetic"
    assert result["options"]["quick"] is True and result["options"]["sizes"] == ["tiny"]
    assert result["machine"]["threads"] == 1
    assert set(result) >= {"train", "mfu", "score", "prepare", "growth", "profile", "padding", "wall_s"}


def test_train_and_mfu(quick: tuple[dict, str]) -> None:
    result, _ = quick
    rows = result["train"]
    assert [(r["size"], r["precision"]) for r in rows] == [("tiny", "fp32"), ("tiny", "bf16")]
    for r in rows:
        for impl in ("project", "reference"):
            _positive(r["tokens_per_s"][impl])
            assert len(r["seconds"][impl]) == result["options"]["reps"]
            assert 0 < r["mfu"][impl]["mfu"] <= r["mfu"][impl]["mfu_padded_flops"]
        assert r["params"]["project"] == r["params"]["reference"]  # same shape, same model FLOPs
        assert r["ratio"] > 0 and len(r["batches"]) == len(r["target_tokens"]) == result["options"]["reps"]
        assert all(p >= u > 0 for p, u in zip(r["flops"]["padded"], r["flops"]["unpadded"]))
        assert 0 <= r["padding"]["all"] < 1
    assert set(result["mfu"]["peak"]) == {"fp32", "bf16"}
    assert 0 <= result["padding"]["tiny"]["all"] < 1


def test_score(quick: tuple[dict, str]) -> None:
    score = quick[0]["score"]
    pair = score["beam_pair"]
    _positive(pair["sent_per_s"]["cached"])
    _positive(pair["sent_per_s"]["uncached"])
    assert pair["identical_outputs"] is True  # the uncached decoder is the same search
    assert [j["model"] for j in score["jobs"]] == ["trained-ish", "trained-ish-subset", "untrained-subset"]
    assert set(score["jobs"][0]["splits"]) == {"valid", "test"}
    assert all(j["wall_s"] > 0 and j["sentences"] > 0 for j in score["jobs"])


def test_prepare_and_growth(quick: tuple[dict, str]) -> None:
    result, _ = quick
    prep = result["prepare"]
    _positive(prep["lines_per_s"]["one_process"])
    _positive(prep["lines_per_s"]["all_cores"])
    epochs = result["growth"]["epoch"]
    assert [r["pairs"] for r in epochs] == [100, 200, 400]
    assert all(r["epoch_s"]["median"] > 0 and r["updates"] >= 1 for r in epochs)
    assert [r["checkpoints"] for r in result["growth"]["scoring"]] == [1, 2]


def test_profiles(quick: tuple[dict, str]) -> None:
    result, folder = quick
    names = [p["name"] for p in result["profile"]]
    assert names == ["train-tiny-fp32", "train-tiny-bf16", "score-beam5-8"]
    for p in result["profile"]:
        assert Path(p["file"]).parent == Path(folder) and Path(p["file"]).read_text().strip()
        assert 0 < len(p["top"]) <= 15 and abs(sum(e["share"] for e in p["top"])) <= 1 + 1e-9


def test_only_and_bad_options(tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    run_bench(["--quick", "--data", "synthetic", "--only", "prepare", "--reps", "1", "--cache", str(tmp_path),
               "--out", str(out)])
    result = json.loads(out.read_text())
    assert "prepare" in result and not {"train", "score", "growth"} & set(result)
    with pytest.raises(SystemExit):
        run_bench(["--only", "train,nonsense"])
