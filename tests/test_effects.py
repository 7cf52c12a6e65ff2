"""The factorial fit on fabricated observations whose effects are known (lnrepro.analysis.stats.effects)."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import pandas as pd
import pytest
from scipy import stats

from lnrepro.analysis.stats import effects as ef

CELLS = pd.DataFrame([{"run": f"{n}{w}{d}", "norm": n, "warmup": w, "decay": d}
                      for n, w, d in itertools.product([-1, 1], repeat=3)])
# Every term as 2 beta (the reported scale); the rest of the terms are zero.
TRUE = {"norm": 2.0, "warmup": -1.0, "decay": 0.5, "norm:warmup": 0.25, "norm:warmup:decay": -0.75}
FIG4_LOW = {"norm": "post", "warmup": True, "decay": "isqrt"}
FIG4_HIGH = {"norm": "pre", "warmup": False, "decay": "step"}


def observations(cells: pd.DataFrame, seeds: dict[int, float], true: dict[str, float] = TRUE,
                 outcomes: dict[tuple[str, int], str] | None = None) -> pd.DataFrame:
    """y = 10 + sum(effect / 2 x term) + the seed's offset; the offsets sum to zero within each cell, so the
    cell means, and hence the estimates, are exact."""
    outcomes = outcomes or {}
    rows = []
    for c in cells.to_dict("records"):
        mu = 10 + sum(v / 2 * ef.term_value(t, c) for t, v in true.items())
        for seed, offset in seeds.items():
            outcome = outcomes.get((c["run"], seed), "ok")
            rows.append({"run": c["run"], "seed": seed, "budget": "epoch 3", "metric": "m",
                         "value": mu + offset if outcome == "ok" else math.nan, "outcome": outcome})
    return pd.DataFrame(rows)


def table(f: ef.Fit) -> pd.DataFrame:
    return ef.effects_table({(f.metric, f.budget): f}).set_index("effect")


def test_full_design_recovers_every_effect_with_its_interval():
    delta = 0.1
    f = ef.fit(observations(CELLS, {1: delta, 2: -delta}), CELLS, "m", "epoch 3")
    assert f.terms == list(ef.TERMS) and f.interval and f.note == ""
    t = table(f)
    for term in ef.TERMS:
        assert t.loc[term, "estimate"] == pytest.approx(TRUE.get(term, 0.0), abs=1e-12)
    # residuals +-delta: sigma^2 = 16 delta^2 / 8 df, Var(beta) = sigma^2 / 16, so SE(2 beta) = delta / sqrt(2)
    half = stats.t.ppf(0.975, 8) * delta / math.sqrt(2)
    assert (t["ci_high"] - t["estimate"]).tolist() == pytest.approx([half] * 7)
    assert (t["estimate"] - t["ci_low"]).tolist() == pytest.approx([half] * 7)
    assert set(t["n_seeds"]) == {2} and set(t["n_obs"]) == {16} and set(t["n_left_out"]) == {0}


def test_main_effect_is_high_mean_minus_low_mean():
    obs = observations(CELLS, {1: 0.3, 2: -0.3})
    f = ef.fit(obs, CELLS, "m", "epoch 3")
    merged = obs.merge(CELLS, on="run")
    for factor in ef.FACTORS:
        means = merged.groupby(factor)["value"].mean()
        assert f.estimate({factor: 1.0})[0] == pytest.approx(means[1] - means[-1])


def test_one_seed_gives_point_estimates_and_no_interval():
    f = ef.fit(observations(CELLS, {1: 0.0}), CELLS, "m", "epoch 3")
    t = table(f)
    assert not f.interval and "one seed: point estimates, no interval exists" in f.note
    assert t["estimate"].tolist() == pytest.approx([TRUE.get(term, 0.0) for term in ef.TERMS], abs=1e-12)
    assert t["ci_low"].isna().all() and t["ci_high"].isna().all()


def test_incomplete_design_fits_only_the_identified_terms():
    # the demo's five cells: the Figure-4 pair, Post-LN without warm-up, Pre-LN with and without warm-up (isqrt)
    keep = {(-1, 1, -1), (1, -1, 1), (-1, -1, -1), (1, 1, -1), (1, -1, -1)}
    cells = CELLS[[(r.norm, r.warmup, r.decay) in keep for r in CELLS.itertuples()]]
    true = {"norm": 2.0, "warmup": -1.0, "decay": 0.5, "norm:warmup": 0.25}  # only identifiable terms act
    f = ef.fit(observations(cells, {1: 0.1, 2: -0.1}, true), cells, "m", "epoch 3")
    assert f.terms == ["norm", "warmup", "decay", "norm:warmup"]
    assert "5 of 8 cells with data; not identified (assumed zero): norm:decay, warmup:decay, norm:warmup:decay" \
        in f.note
    t = table(f)
    for term in f.terms:
        assert t.loc[term, "estimate"] == pytest.approx(true[term])
        assert t.loc[term, "ci_low"] < true[term] < t.loc[term, "ci_high"]
    for term in ("norm:decay", "warmup:decay", "norm:warmup:decay"):
        assert math.isnan(t.loc[term, "estimate"]) and t.loc[term, "note"] == "not identified by the cells with data"


def test_a_factor_that_does_not_vary_is_not_identified():
    cells = CELLS[CELLS["decay"] == -1]
    f = ef.fit(observations(cells, {1: 0.1, 2: -0.1}, {"norm": 1.0}), cells, "m", "epoch 3")
    assert f.terms == ["norm", "warmup", "norm:warmup"]


def test_failed_seeds_are_left_out_and_counted():
    run = CELLS["run"].iloc[0]
    obs = observations(CELLS, {1: 0.1, 2: -0.1, 3: 0.0}, outcomes={(run, 3): "diverged", (run, 2): "missing"})
    f = ef.fit(obs, CELLS, "m", "epoch 3")
    assert (f.n_obs, f.n_left_out, f.n_missing, f.n_seeds) == (22, 1, 1, 1)
    # a cell with one finished seed: point estimates only, and they stay the effects of the cell means
    assert not f.interval and f.note == "no interval: a cell has fewer than two finished seeds"
    assert math.isnan(table(f).loc["norm", "ci_low"])


def test_an_empty_cell_makes_the_design_incomplete():
    run = CELLS["run"].iloc[0]
    obs = observations(CELLS, {1: 0.1, 2: -0.1}, outcomes={(run, 1): "diverged", (run, 2): "diverged"})
    f = ef.fit(obs, CELLS, "m", "epoch 3")
    assert len(f.terms) == 6 and "norm:warmup:decay" not in f.terms and "7 of 8 cells" in f.note


def test_simple_effect_and_figure4_attribution():
    f = ef.fit(observations(CELLS, {1: 0.1, 2: -0.1}), CELLS, "m", "epoch 3")
    # warm-up for Post-LN: E_warmup + (-1) E_norm:warmup
    assert ef.simple_effect(f, "warmup", {"norm": "post"})[0] == pytest.approx(-1.0 - 0.25)
    a = ef.attribute(f, FIG4_LOW, FIG4_HIGH)
    # high - low = E_norm - E_warmup + E_decay - E_norm:warmup:decay
    assert a.difference[0] == pytest.approx(2.0 + 1.0 + 0.5 + 0.75)
    assert {g: v[0] for g, v in a.contributions.items()} == pytest.approx({"norm": 2.0, "warmup": 1.0, "decay": 0.5})
    assert a.attributed == ["norm", "warmup", "decay"]  # largest first, all on the difference's side


def test_attribution_leaves_out_factors_against_the_difference_or_with_zero_in_the_interval():
    true = {"norm": 3.0, "warmup": 1.0, "decay": 0.0}  # warm-up's share (-1) opposes the difference (+2)
    f = ef.fit(observations(CELLS, {1: 0.1, 2: -0.1}, true), CELLS, "m", "epoch 3")
    a = ef.attribute(f, FIG4_LOW, FIG4_HIGH)
    assert a.difference[0] == pytest.approx(2.0) and a.attributed == ["norm"]
    one = ef.fit(observations(CELLS, {1: 0.0}, true), CELLS, "m", "epoch 3")
    assert ef.attribute(one, FIG4_LOW, FIG4_HIGH).attributed == []  # no intervals: nothing attributed


def test_design_one_run_per_cell():
    factors = {"a": ("post", True, "isqrt"), "g": ("post", True, "isqrt"), "b": ("pre", False, "step"),
               "c": ("post", True, "constant")}
    exp = SimpleNamespace(
        select=("g", "a", "b", "c"),
        runs={r: SimpleNamespace(factors=dict(zip(ef.FACTORS, f))) for r, f in factors.items()},
        grids={"grid": SimpleNamespace(runs=("g",))})
    cells, notes = ef.design(exp)
    assert cells.to_dict("records") == [{"run": "a", "norm": -1, "warmup": 1, "decay": -1},
                                        {"run": "b", "norm": 1, "warmup": -1, "decay": 1}]
    assert any(n.startswith("c: a level outside the 2x2x2 design") for n in notes)
    assert "g: same cell as a" in notes  # the run of its own, not the grid's, stands for the cell


def test_cell_covariance_is_welch_with_welch_satterthwaite_df():
    """Unequal spreads: with the default covariance each estimate's variance is sum(w^2 s_i^2 / n_i)
    over the cells (Welch's variance of a contrast of cell means) with the Welch-Satterthwaite degrees of freedom;
    "hc3" inflates each cell's variance by n/(n-1); "pooled" is the OLS interval with the residual df."""
    spread = {c: (2.0 if c == "-1-1-1" else 0.1) for c in CELLS["run"]}  # one cell spreads 20x the others
    obs = observations(CELLS, {1: 1.0, 2: 0.0, 3: -1.0})
    mu = obs.groupby("run")["value"].transform("mean")
    obs["value"] = mu + (obs["value"] - mu) * obs["run"].map(spread)
    s2 = obs.groupby("run")["value"].var(ddof=1)
    parts = (1 / 4) ** 2 * s2 / 3  # a main effect: +-1/4 on every cell mean
    var, df = parts.sum(), parts.sum() ** 2 / (parts ** 2 / 2).sum()
    f = ef.fit(obs, CELLS, "m", "epoch 3")
    est, lo, hi, got_df = f.estimate_df({"norm": 1.0})
    assert got_df == pytest.approx(df) and 2 < got_df < 3  # the wide cell dominates: about n - 1
    assert hi - est == pytest.approx(stats.t.ppf(0.975, df) * math.sqrt(var))
    hc3 = ef.fit(obs, CELLS, "m", "epoch 3", "hc3").estimate_df({"norm": 1.0})
    assert hc3[2] - hc3[0] == pytest.approx(stats.t.ppf(0.975, df) * math.sqrt(var * 3 / 2))
    pooled = ef.fit(obs, CELLS, "m", "epoch 3", "pooled")
    p = pooled.estimate_df({"norm": 1.0})
    assert p[3] == 16 and p[2] - p[0] == pytest.approx(stats.t.ppf(0.975, 16) * math.sqrt(s2.mean() * 8 / 16 / 3))
    t = table(f)
    assert set(t["covariance"]) == {"cell"} and t.loc["norm", "df"] == pytest.approx(df)


def test_welch_contrast_of_two_runs():
    a, b = [1.0, 1.2, 0.8], [3.0, 5.0, 1.0, 3.0]
    d, lo, hi, df = ef.welch(a, b)
    va, vb = pd.Series(a).var() / 3, pd.Series(b).var() / 4
    assert d == pytest.approx(2.0) and df == pytest.approx((va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 3))
    assert hi - d == pytest.approx(stats.t.ppf(0.975, df) * math.sqrt(va + vb))
    assert math.isnan(ef.welch([1.0], b)[1])


def test_effects_at_every_epoch_with_simple_effects():
    """effects_by_epoch: every term and the simple effects of SIMPLE, each the difference of the cell means it
    names, at every scored epoch."""
    rows = []
    for ep in (1, 2):
        obs = observations(CELLS, {1: 0.1, 2: -0.1}, {k: v * ep for k, v in TRUE.items()})
        for r in obs.to_dict("records"):
            rows.append({"run": r["run"], "seed": r["seed"], "epoch": ep, "status": "ok", "valid_bleu_tok": r["value"],
                         "valid_loss_base2": r["value"], "valid_nll_base2": r["value"]})
    fits = ef.epoch_fits(pd.DataFrame(rows), CELLS, "valid", [1, 2])
    t = ef.effects_by_epoch(fits)
    assert set(t["epoch"]) == {1, 2} and set(t["metric"]) == {"valid_bleu_tok", "valid_loss_base2", "valid_nll_base2"}
    at = t[(t["epoch"] == 2) & (t["metric"] == "valid_bleu_tok")].set_index("effect")
    assert at.loc["norm", "estimate"] == pytest.approx(4.0) and at.loc["norm", "kind"] == "main"
    means = pd.DataFrame(rows).query("epoch == 2").groupby("run")["valid_bleu_tok"].mean()
    cell = {(n, w, d): means[f"{n}{w}{d}"] for n, w, d in itertools.product([-1, 1], repeat=3)}
    warm_post = sum(cell[(-1, 1, d)] - cell[(-1, -1, d)] for d in (-1, 1)) / 2
    assert at.loc["warmup | Post-LN", "estimate"] == pytest.approx(warm_post)
    norm_on = sum(cell[(1, 1, d)] - cell[(-1, 1, d)] for d in (-1, 1)) / 2
    assert at.loc["norm | warm-up on", "estimate"] == pytest.approx(norm_on)
    decay_post_on = cell[(-1, 1, 1)] - cell[(-1, 1, -1)]
    assert at.loc["decay | Post-LN, warm-up on", "estimate"] == pytest.approx(decay_post_on)
    assert (at["ci_low"] < at["estimate"]).all() and at.loc["decay | Pre-LN", "kind"] == "simple"


def test_an_effect_that_is_zero_but_for_rounding_is_zero():
    """Terms the data leave at zero (here every effect but the intercept, with values like a loss's) are
    reported as exactly 0, not as the fit's rounding of about 1e-15, which differs between CPU kinds."""
    f = ef.fit(observations(CELLS, {1: 0.37, 2: -0.37}, true={}), CELLS, "m", "epoch 3")
    t = table(f)
    assert all(t.loc[term, "estimate"] == 0.0 for term in ef.TERMS), t["estimate"].tolist()
