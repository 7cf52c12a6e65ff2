"""The fates rule (analysis/fates.py) on synthetic training curves, one per fate and each boundary of the rule; H on
a tiny ids file counted by hand; ``lnrepro fates`` on a fabricated store (tests/test_depth.py's tree)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Callable

import pandas as pd
import pytest

from lnrepro import cli
from lnrepro.analysis import fates as fa
from lnrepro.io import file_sha256
from test_depth import experiment, make_tree

V = 4000
LOG_V = math.log(V)
H = 5.66
DISTINCT = [f"sentence {i}" for i in range(100)]
ONE = ["a man in a blue shirt ."] * 100


def curve(nll: Callable[[int], float], last: int = 825, every: int = 20) -> list[fa.Step]:
    """Step records every ``every`` updates and at ``last``, NLL ``nll(update)``, loss 0.3 above it."""
    updates = [*range(every, last, every), last]
    return [fa.Step(u, nll(u) + 0.3, nll(u)) for u in updates]


def learning(u: int) -> float:
    """6 nats falling to 3.5 by update 400."""
    return max(3.5, 6.0 - 2.5 * u / 400)


def test_unigram_entropy_counts_one_eos_per_sentence(tmp_path: Path) -> None:
    ids = tmp_path / "train.en.ids"
    ids.write_text("4 5\n4\n\n")  # 3 sentences: 4 x2, 5 x1, EOS x3
    p = [2 / 6, 1 / 6, 3 / 6]
    assert fa.unigram_entropy(ids) == pytest.approx(-sum(x * math.log(x) for x in p))


def test_a_learning_unit_that_reads_its_source_trained() -> None:
    f = fa.classify(curve(learning), DISTINCT, V, H)
    assert (f.fate, f.read_at, f.reached) == (fa.TRAINED, 825, 240)
    assert f.final_nll == pytest.approx(3.5) and f.distinct_share == 1.0


def test_a_non_finite_loss_anywhere_diverged() -> None:
    steps = curve(learning)
    steps[3] = fa.Step(steps[3].update, math.nan, math.nan)
    f = fa.classify(steps, DISTINCT, V, H)
    assert f.fate == fa.DIVERGED and "non-finite" in f.why
    # the log writes a non-finite number as null
    assert math.isnan(fa.steps_of({20: {"update": 20, "loss": None, "nll": 6.0}})[0].loss)


def test_a_run_stopped_as_diverged_diverged() -> None:
    f = fa.classify(curve(learning, last=300), None, V, H, diverged_update=301)
    assert f.fate == fa.DIVERGED and "stopped" in f.why
    # read before it stopped, the unit is judged by its curve
    assert fa.classify(curve(learning, last=300), DISTINCT, V, H, read_at=200, diverged_update=301).fate == fa.TRAINED


def spike(at: int, back: int | None) -> Callable[[int], float]:
    """``learning`` with NLL 9 (above ln V) from ``at``, below H again from ``back`` (None: never)."""
    return lambda u: 9.0 if u >= at and (back is None or u < back) else learning(u)


def test_a_spike_above_ln_v_that_recovers_within_the_window_is_not_divergence() -> None:
    assert fa.classify(curve(spike(300, 480)), DISTINCT, V, H).fate == fa.TRAINED


def test_a_spike_that_does_not_recover_diverged() -> None:
    late = fa.classify(curve(spike(300, 520)), DISTINCT, V, H)  # back 220 updates later: too late
    assert late.fate == fa.DIVERGED and "above ln V" in late.why
    assert fa.classify(curve(spike(300, None)), DISTINCT, V, H).fate == fa.DIVERGED
    # a spike near the read point must come back by the read point
    assert fa.classify(curve(spike(300, 380)), DISTINCT, V, H, read_at=340).fate == fa.DIVERGED
    assert fa.classify(curve(spike(300, 380)), DISTINCT, V, H, read_at=500).fate == fa.TRAINED


def test_a_spike_before_the_rule_starts_is_not_judged() -> None:
    start = lambda u: 25.0 if u <= fa.RULE_START else learning(u)  # noqa: E731: a fresh model above ln V
    assert fa.classify(curve(start), DISTINCT, V, H).fate == fa.TRAINED


def test_a_flat_curve_at_the_unigram_loss_stalled() -> None:
    f = fa.classify(curve(lambda u: H + 0.05 * math.sin(u)), ONE, V, H)
    assert f.fate == fa.STALLED and f.speed == "not reached by 825"
    # the margin: within 0.3 nats of H stalls, below it does not
    assert fa.classify(curve(lambda u: H - 0.29), DISTINCT, V, H).fate == fa.STALLED
    assert fa.classify(curve(lambda u: H - 0.31), DISTINCT, V, H).fate == fa.TRAINED


def test_only_the_last_window_decides_a_stall() -> None:
    late = lambda u: learning(u) if u <= 700 else H  # noqa: E731: learned, then back at the unigram loss
    assert fa.classify(curve(late), DISTINCT, V, H).fate == fa.STALLED
    assert fa.classify(curve(late), DISTINCT, V, H, read_at=700).fate == fa.TRAINED


def test_a_unit_that_learns_but_emits_one_sentence_ignores_the_source() -> None:
    f = fa.classify(curve(learning), ONE, V, H)
    assert f.fate == fa.SOURCE_IGNORING and f.distinct_share == 0.01
    half = DISTINCT[:50] + ONE[:50]  # 51 distinct of 100
    assert fa.classify(curve(learning), half, V, H).fate == fa.TRAINED


def test_speed_is_reported_and_censored_never_a_failure() -> None:
    slow = lambda u: 6.0 - 1.6 * u / 825  # noqa: E731: reaches 4.5 only at update 775
    f = fa.classify(curve(slow), DISTINCT, V, H)
    assert (f.fate, f.reached, f.speed) == (fa.TRAINED, 780, "780")
    censored = fa.classify(curve(slow), DISTINCT, V, H, read_at=700)
    assert (censored.fate, censored.reached, censored.speed) == (fa.TRAINED, None, "not reached by 700")


# ---- lnrepro fates on a fabricated store ------------------------------------------------------------------------

RUNS = ["postln_warmup_isqrt_L6", "deepnorm_nowarmup_isqrt_L6", "postln_nowarmup_isqrt_L18"]
OLD = {"postln_warmup_isqrt_L6": "did not train", "deepnorm_nowarmup_isqrt_L6": "did not train",
       "postln_nowarmup_isqrt_L18": "did not train"}


def _store(tmp_path: Path) -> tuple[Path, Path]:
    """test_depth's tree for RUNS (2 epochs of 10 updates; postln_nowarmup_isqrt_L18 seed 3 diverges), with
    curves (NLL 6 / update, or H) and hypotheses per run: Post-LN with warm-up learns, DeepNorm without warm-up
    learns but emits one sentence, Post-LN without warm-up stays at H; and the data folder, bpe.json, store.json
    and the report's fates."""
    exp = experiment(RUNS)
    store = make_tree(tmp_path, exp)
    data = tmp_path / "data"
    (data / "bpe").mkdir(parents=True)
    (data / "bpe" / "train.en.ids").write_text("4 5 6 7\n" * 3)  # 5 symbols, equally often: H = ln 5
    (store / "bpe.json").write_text(json.dumps({"vocab_size": V, "character_coverage": 1.0, "seed": 1}))
    (store / "store.json").write_text(json.dumps({"study": {"data/bpe/train.en.ids":
                                                            file_sha256(data / "bpe" / "train.en.ids")}}))
    h = math.log(5)
    nll = {RUNS[0]: lambda u: 6.0 / u, RUNS[1]: lambda u: 6.0 / u, RUNS[2]: lambda u: h}
    hyps = {RUNS[0]: DISTINCT, RUNS[1]: ONE, RUNS[2]: ONE}
    for run in RUNS:
        for seed in exp.seeds_of(run):
            unit = store / "runs" / run / f"seed{seed}"
            log = unit / "train.jsonl"
            records = [json.loads(line) for line in log.read_text().splitlines()]
            for r in records:
                if r["kind"] == "step":
                    r["nll"] = nll[run](r["update"])
            log.write_text("".join(json.dumps(r) + "\n" for r in records))
            (unit / "eval" / "epoch002.valid.hyp").write_text("".join(f"{x}\n" for x in hyps[run]))
    tables = store / "report" / "tables"
    tables.mkdir(parents=True)
    pd.DataFrame([{"budget": "epoch 2", "epoch": 2, "run": run, "seed": seed, "fate": OLD[run]}
                  for run in RUNS for seed in exp.seeds_of(run)]).to_csv(tables / "depth_seed_fates.csv", index=False)
    return store, data


def test_the_command_prints_each_unit_and_the_confusion_table(tmp_path: Path, capsys) -> None:
    store, data = _store(tmp_path)
    out = tmp_path / "fates.csv"
    assert cli.main(["fates", "--store", str(store), "--data", str(data), "--csv", str(out)]) == 0
    text = capsys.readouterr().out
    units = pd.read_csv(out)
    fates = units.set_index(["run", "seed"])["fate"].to_dict()
    assert fates == {**{(RUNS[0], s): "trained" for s in (1, 2, 3)},
                     **{(RUNS[1], s): "source-ignoring" for s in (1, 2, 3)},
                     (RUNS[2], 1): "stalled", (RUNS[2], 2): "stalled", (RUNS[2], 3): "diverged"}
    assert set(units["read_at"]) == {20, 13} and set(units["old_fate"]) == {"did not train"}
    assert units.loc[units["run"] == RUNS[0], "reached"].tolist() == [2, 2, 2]  # 6 / u <= 4.5 from u = 2
    assert f"H = {math.log(5):.4f} nats" in text and "depth_seed_fates.csv" in text
    confusion = text.split("x new fate:")[1]
    assert "did not train" in confusion and "diverged" in confusion
    assert "new fates per run:" in text


def test_data_not_the_studys_is_refused_naming_the_file(tmp_path: Path, capsys) -> None:
    store, data = _store(tmp_path)
    ids = data / "bpe" / "train.en.ids"
    ids.write_text("4 5\n")
    assert cli.main(["fates", "--store", str(store), "--data", str(data)]) == 1
    err = capsys.readouterr().err
    assert str(ids) in err and "not the study's" in err and len(err.strip().splitlines()) == 1
    ids.unlink()
    assert cli.main(["fates", "--store", str(store), "--data", str(data)]) == 1
    assert f"{ids}: not found" in capsys.readouterr().err
