"""Tuned baselines on hand-made tables: each grid's best by validation loss, tuned against tuned on the test
split (lnrepro.analysis.sections.tuned)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from scipy import stats

from conftest import REPO
from fixtures_grids import demo_with_grids
from lnrepro import config
from lnrepro.analysis.sections import tuned as tu
from lnrepro.config import Experiment

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


def test_bracket_position_on_an_axis():
    assert tu.bracket_position([2.0e-3, 4.0e-3, 1.0e-3], 2.0e-3) == tu.BRACKETED  # in any order of the values
    assert tu.bracket_position([2.0e-3, 4.0e-3], 4.0e-3) == tu.EDGE_UP
    assert tu.bracket_position([2.0e-3, 4.0e-3, 8.0e-3], 2.0e-3) == tu.EDGE_DOWN
    assert tu.bracket_position([[6], [10], [8]], [8]) == tu.BRACKETED  # decay epochs: lists of numbers
    assert tu.bracket_position([[6], [8]], [8]) == tu.EDGE_UP
    assert tu.bracket_position([500], 500) == tu.ONE_VALUE
    assert tu.bracket_position([True, False], True) == tu.UNORDERED  # a switch has no upward


def test_bracket_table_and_sentences_from_the_grids():
    """The demo preset's grids: lr_max 1.5e-3 or 6.0e-3, one warm-up length, one decay epoch; the best by
    validation loss at the edge of lr_max says which way to extend."""
    preset = config.experiment(config.load_config([REPO / "config.yaml", REPO / "presets" / "demo.yaml"]))
    post, pre = preset.grids["tune_postln"].runs, preset.grids["tune_preln"].runs
    best = {"tune_postln": post[1], "tune_preln": pre[0]}  # lr_max 6.0e-3 and 1.5e-3
    t = tu.bracket_table(preset, best, "the lowest seed-mean valid_loss_base2 at epoch 3")
    assert list(t.columns) == tu.BRACKET_COLUMNS
    by = t.set_index(["grid", "axis"])
    assert by.loc[("tune_postln", "optim.lr_max"), ["best_run", "best_value", "values", "n_values", "position"]
                  ].tolist() == [post[1], 0.006, "0.0015; 0.006", 2, tu.EDGE_UP]
    assert by.loc[("tune_preln", "optim.lr_max"), "position"] == tu.EDGE_DOWN
    assert by.loc[("tune_postln", "schedule.warmup_updates"), "position"] == tu.ONE_VALUE
    assert by.loc[("tune_preln", "schedule.decay_epochs"), ["best_value", "position"]].tolist() == ["2", tu.ONE_VALUE]
    assert (t["extensions"] == 0).all() and (t["extended_with"] == "").all()  # the demo's grids: none extended
    words = tu.bracket_sentences(t)
    assert words[0] == (f"Grid tune_postln: its best trial {post[1]} (the lowest seed-mean valid_loss_base2 at epoch "
                        "3): optim.lr_max 0.006 of 2 tried (0.0015; 0.006): the highest (edge: extend upward); "
                        "schedule.warmup_updates 140 of 1 tried (140): the only one (not tuned); its optimum may "
                        "lie beyond the grid on 1 axis; the grid as first planned (no extension).")
    unscored = tu.bracket_table(preset, {"tune_postln": post[0]}, "x").set_index(["grid", "axis"])
    assert unscored.loc[("tune_preln", "optim.lr_max"), ["best_run", "position"]].tolist() == ["", tu.NOT_SCORED]
    assert tu.bracket_sentences(unscored.reset_index())[1] == "Grid tune_preln: no trial scored yet."


def test_brackets_say_how_many_extensions_were_needed():
    """An extended grid (config grids.<name>.extended): per axis the values added, in the order they were added."""
    exp = DEMO.to_dict()
    exp["grids"]["tune_postln"]["extended"] = {"optim.lr_max": [6.0e-3]}
    exp["grids"]["tune_preln"]["extended"] = {"optim.lr_max": [6.0e-3, 1.5e-3]}  # in the order added, not sorted
    extended = Experiment.from_dict(exp)
    post, pre = extended.grids["tune_postln"].runs, extended.grids["tune_preln"].runs
    t = tu.bracket_table(extended, {"tune_postln": post[1], "tune_preln": pre[0]}, "x")
    by = t.set_index("grid")
    assert by.loc["tune_postln", ["extensions", "extended_with", "position"]].tolist() == [1, "0.006", tu.EDGE_UP]
    assert by.loc["tune_preln", ["extensions", "extended_with"]].tolist() == [2, "0.006; 0.0015"]
    words = tu.bracket_sentences(t)
    assert words[0] == (f"Grid tune_postln: its best trial {post[1]} (x): optim.lr_max 0.006 of 2 tried (0.0015; "
                        "0.006): the highest (edge: extend upward), after 1 extension (added 0.006); its "
                        "optimum may lie beyond the grid on 1 axis.")
    assert "of 2 tried (0.0015; 0.006): the lowest (edge: extend downward), after 2 extensions (added 0.006; 0.0015);" \
        in words[1]
    assert "first planned" not in " ".join(words)


def test_a_grid_brackets_only_along_axes_with_an_order():
    """A switch (True / False) has no order: the best of it brackets nothing, and a grid whose ordered axes are
    bracketed says so for those alone."""
    def sentence(*positions: str) -> str:
        rows = [{"grid": "g", "axis": f"a{i}", "best_run": "r", "best_value": "v", "values": "v; w", "n_values": 2,
                 "position": p, "selected_by": "x", "extensions": 0, "extended_with": ""}
                for i, p in enumerate(positions)]
        return tu.bracket_sentences(pd.DataFrame(rows))[0]

    assert "it brackets its optimum on every tuned axis" in sentence(tu.BRACKETED, tu.ONE_VALUE)
    assert "on every ordered axis (the others have no order)" in sentence(tu.BRACKETED, tu.UNORDERED)
    assert "no axis has values on both sides" in sentence(tu.UNORDERED)
    assert "a0 v of 2 tried (v; w): among values without an order (nothing to bracket)" in sentence(tu.UNORDERED)
    assert "beyond the grid on 1 axis" in sentence(tu.EDGE_UP, tu.UNORDERED)
