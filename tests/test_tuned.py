"""Tuned baselines on hand-made tables: each grid's best by validation loss, tuned against tuned on the test
split (lnrepro.analysis.tuned)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from scipy import stats

from fixtures_grids import demo_with_grids
from lnrepro.analysis import tuned as tu

DEMO = demo_with_grids()
GRIDS = {"g_post": ["p1", "p2", "p3"], "g_pre": ["q1", "q2"], "empty": ["z"]}


def cells() -> pd.DataFrame:
    loss = {"p1": 4.2, "p2": 4.0, "p3": 4.5, "q1": 3.9, "q2": 4.1}
    rows = [{"budget": "epoch 3", "metric": "valid_loss_base2", "run": r, "n": 2, "mean": v} for r, v in loss.items()]
    rows.append({"budget": "epoch 3", "metric": "valid_loss_base2", "run": "z", "n": 0, "mean": math.nan})
    rows.append({"budget": "epoch 2", "metric": "valid_loss_base2", "run": "p3", "n": 2, "mean": 1.0})  # not the budget
    return pd.DataFrame(rows)


def test_best_of_each_grid_by_validation_loss_at_the_budget():
    assert tu.best_of(cells(), GRIDS, "epoch 3", "valid_loss_base2") == {"g_post": "p2", "g_pre": "q1"}


def test_tuned_table_compares_on_test_with_welch():
    a, b = [30.0, 31.0, 32.0], [33.0, 33.5]
    obs = pd.DataFrame([{"run": r, "seed": i, "budget": "epoch 3", "metric": "test_bleu_tok", "value": v,
                         "outcome": "ok"} for r, vals in (("p2", a), ("q1", b)) for i, v in enumerate(vals)]
                       + [{"run": "q1", "seed": 9, "budget": "epoch 3", "metric": "test_bleu_tok", "value": math.nan,
                           "outcome": "diverged"}])
    pair = tu.TunedPair("figure4", "g_post", "g_pre")
    t = tu.tuned_table(obs, [pair], {"g_post": "p2", "g_pre": "q1"}, "epoch 3", ["test_bleu_tok"])
    row = t.iloc[0]
    assert (row["run_a"], row["run_b"], row["n_a"], row["n_b"]) == ("p2", "q1", 3, 2)
    assert row["difference"] == pytest.approx(33.25 - 31.0)
    # Welch: the unequal-variance t interval of mean(b) - mean(a)
    va, vb = pd.Series(a).var() / 3, pd.Series(b).var() / 2
    df = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 1)
    half = stats.t.ppf(0.975, df) * math.sqrt(va + vb)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((2.25 - half, 2.25 + half))
    one = tu.tuned_table(obs[obs["seed"] == 0], [pair], {"g_post": "p2", "g_pre": "q1"}, "epoch 3", ["test_bleu_tok"])
    assert one.iloc[0]["difference"] == pytest.approx(3.0) and math.isnan(one.iloc[0]["ci_low"])  # one seed each


def test_pairs_and_comparisons_from_the_config():
    pairs = tu.tuned_pairs(DEMO)
    assert pairs == [tu.TunedPair("figure4", "tune_postln", "tune_preln")]  # the only comparison with a grid per run
    best = {"tune_postln": DEMO.grids["tune_postln"].runs[1], "tune_preln": DEMO.grids["tune_preln"].runs[0]}
    comps = tu.tuned_comparisons(DEMO, pairs, best)
    assert list(comps) == ["figure4_tuned"]
    assert comps["figure4_tuned"].runs == (best["tune_postln"], best["tune_preln"])
    assert comps["figure4_tuned"].factor == "norm"
    assert comps["figure4_tuned"].claim.startswith("tuned against tuned")
    assert tu.tuned_comparisons(DEMO, pairs, {"tune_postln": best["tune_postln"]}) == {}  # one grid not scored yet


def test_grid_table_shows_settings_scores_and_the_selection():
    runs = DEMO.grids["tune_postln"].runs
    c = pd.DataFrame([{"budget": "epoch 3", "metric": "valid_loss_base2", "run": r, "n": 1, "mean": 4.0 + i,
                       "ci_low": math.nan, "ci_high": math.nan} for i, r in enumerate(runs)])
    t = tu.grid_table(c, DEMO, runs, list(DEMO.grids["tune_postln"].values), "epoch 3",
                      ["valid_loss_base2", "test_bleu_tok"], runs[0])
    assert list(t["run"]) == list(runs) and list(t["selected"]) == ["best", ""]
    assert list(t["optim.lr_max"]) == [DEMO.runs[r].optim.lr_max for r in runs]
    assert list(t["valid_loss_base2 mean"]) == [4.0, 5.0] and t["test_bleu_tok mean"].isna().all()
