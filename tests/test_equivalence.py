"""The end point's equivalence tests of Figure 4's arms (lnrepro.analysis.stats.equivalence) on fabricated seed
values: the resolution arithmetic, the three verdicts, the direction of the difference, an arm that failed."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import pytest
from scipy import stats

from conftest import REPO
from lnrepro import config
from lnrepro.analysis.numbers import sig
from lnrepro.analysis.stats import budget as bu
from lnrepro.analysis.stats import equivalence as eq

DEMO = config.experiment(config.load_config([REPO / "config.yaml", REPO / "presets" / "demo.yaml"]))
POST, PRE = DEMO.comparisons["figure4"].runs  # arm a, arm b
E = DEMO.epochs
OFFSETS = [-0.6, -0.3, 0.0, 0.3, 0.6]  # five seeds, standard deviation 0.474


def epochs_table(pre_bleu: float, post_bleu: float = 30.0, spread: float = 1.0, nll_gap: float = 0.0,
                 seeds: int = 5) -> pd.DataFrame:
    """Both arms' seeds at the last epoch: BLEU ``post_bleu`` (and ``pre_bleu``) + ``spread`` x OFFSETS, validation
    NLL 4 bits (Pre-LN's ``nll_gap`` higher) spread 0.01 a step; test 1 BLEU above validation."""
    rows = []
    for run, b, n in ((POST, post_bleu, 4.0), (PRE, pre_bleu, 4.0 + nll_gap)):
        for seed, off in zip(range(1, seeds + 1), OFFSETS):
            bleu, nll = b + spread * off, n + off / 30
            rows.append({"run": run, "seed": seed, "epoch": E, "status": "ok", "valid_bleu_tok": bleu,
                         "valid_nll_base2": nll, "test_bleu_tok": bleu + 1, "test_nll_base2": nll})
    return pd.DataFrame(rows)


def table(epochs: pd.DataFrame, experiment=DEMO) -> pd.DataFrame:
    fates = bu.seed_fates(epochs, [POST, PRE], [(f"epoch {E}", E)], "valid", experiment.analysis.report)
    return eq.equivalence(experiment, epochs, fates, "valid").set_index("metric")


def test_resolution_arithmetic():
    """Five seeds per arm and a seed standard deviation of 0.75 BLEU give a 90% half-width near
    0.9, so a margin of 1 BLEU establishes equivalence only for a true difference under about 0.1."""
    half = eq.expected_half_width(0.75, 5, 5)
    assert half == pytest.approx(stats.t.ppf(0.95, 8) * 0.75 * math.sqrt(2 / 5))
    assert half == pytest.approx(0.882, abs=1e-3)
    assert eq.largest_equivalent(1.0, half) == pytest.approx(1.0 - half)
    assert eq.largest_equivalent(0.5, half) == eq.NONE and eq.largest_equivalent(half, half) == eq.NONE
    assert math.isnan(eq.largest_equivalent(1.0, math.nan))
    # pooled over both arms with n_a + n_b - 2 degrees of freedom
    assert eq.pooled_sd([1.0, 3.0], [2.0, 2.0, 2.0]) == pytest.approx(math.sqrt(2 / 3))
    assert math.isnan(eq.pooled_sd([1.0], [2.0])) and math.isnan(eq.expected_half_width(math.nan, 2, 2))


def test_equivalent_different_and_undetermined():
    equivalent = table(epochs_table(30.1, spread=0.5)).loc["valid_bleu_tok"]
    assert equivalent["verdict"] == eq.EQUIVALENT and equivalent["tost_p"] < 0.05
    assert -1 < equivalent["ci90_low"] < equivalent["ci90_high"] < 1
    different = table(epochs_table(32.5)).loc["valid_bleu_tok"]
    assert different["verdict"] == eq.DIFFERENT and different["ci95_low"] > 0 and different["ci90_high"] > 1
    undetermined = table(epochs_table(30.5, spread=3.0)).loc["valid_bleu_tok"]
    assert undetermined["verdict"] == eq.UNDETERMINED and undetermined["ci95_low"] < 0 < undetermined["ci95_high"]
    # a difference the 95% interval tells from 0 but whose 90% interval lies within the margin: equivalent
    small = table(epochs_table(30.5, spread=0.2)).loc["valid_bleu_tok"]
    assert small["ci95_low"] > 0 and small["ci90_high"] < 1 and small["verdict"] == eq.EQUIVALENT
    assert eq.verdict((0.2, 1.2), (0.1, 1.3), 0.3, 1.0) == eq.DIFFERENT
    assert eq.verdict((-0.2, 1.2), (-0.3, 1.3), 0.3, 1.0) == eq.UNDETERMINED


def test_difference_is_pre_minus_post_with_welch_intervals_and_tost():
    t = table(epochs_table(31.0, spread=1.0, nll_gap=-0.02))
    r = t.loc["valid_bleu_tok"]
    assert (r["run_a"], r["run_b"]) == (POST, PRE) and r["difference_of"] == f"Pre-LN minus Post-LN ({PRE} - {POST})"
    assert r["difference"] == pytest.approx(1.0) and (r["n_a"], r["n_b"]) == (5, 5)
    sd = pd.Series(OFFSETS).std()
    assert r["pooled_sd"] == pytest.approx(sd) and r["sd_a"] == pytest.approx(sd)
    assert r["half_width_90"] == pytest.approx(eq.expected_half_width(sd, 5, 5))
    se, df = sd * math.sqrt(2 / 5), 8.0  # equal variances: Welch's degrees of freedom are n_a + n_b - 2
    assert r["df"] == pytest.approx(df)
    assert (r["ci90_low"], r["ci90_high"]) == pytest.approx((1 - stats.t.ppf(0.95, df) * se,
                                                             1 + stats.t.ppf(0.95, df) * se))
    assert (r["ci95_low"], r["ci95_high"]) == pytest.approx((1 - stats.t.ppf(0.975, df) * se,
                                                             1 + stats.t.ppf(0.975, df) * se))
    # TOST: the larger of the two one-sided p-values against -1 and +1
    p = max(stats.t.sf((1.0 + 1.0) / se, df), stats.t.cdf((1.0 - 1.0) / se, df))
    assert r["tost_p"] == pytest.approx(p)
    assert t.loc["valid_nll_base2", "difference"] == pytest.approx(-0.02) and t.loc["valid_nll_base2", "margin"] == 0.05
    assert list(t.index) == ["valid_bleu_tok", "valid_nll_base2", "test_bleu_tok", "test_nll_base2"]  # headline first
    assert t.loc["test_bleu_tok", "difference"] == pytest.approx(1.0)


def test_margins_come_from_the_config():
    report = dataclasses.replace(DEMO.analysis.report, equivalence_margins=config.settings.EquivalenceMargins(
        bleu_tok=3.0, nll_base2=0.05))
    wide = dataclasses.replace(DEMO, analysis=dataclasses.replace(DEMO.analysis, report=report))
    r = table(epochs_table(31.0), wide).loc["valid_bleu_tok"]
    assert r["margin"] == 3.0 and r["verdict"] == eq.EQUIVALENT
    assert r["largest_equivalent"] == pytest.approx(3.0 - r["half_width_90"])


def test_a_failed_or_missing_arm_is_not_tested():
    e = epochs_table(30.0)
    failed = e.copy()
    failed.loc[(failed["run"] == PRE) & (failed["seed"] == 2), "status"] = "diverged"
    t = table(failed)
    assert set(t["verdict"]) == {eq.NOT_TESTED} and t["difference"].isna().all()
    assert t.loc["valid_bleu_tok", "note"] == f"{PRE} failed at epoch {E} (1 of 5 seeds: 1 diverged)"
    low = e.copy()
    low.loc[low["run"] == POST, "valid_bleu_tok"] = 2.0  # far below the best run: did not train
    assert "did not train" in table(low).loc["valid_bleu_tok", "note"]
    missing = table(e[e["run"] != POST]).loc["valid_bleu_tok"]
    assert missing["verdict"] == eq.NOT_TESTED and missing["note"] == f"{POST} has no finished seed at epoch {E}"
    words = eq.sentences(t.reset_index())
    assert words == [f"No equivalence test of validation BLEU, validation NLL, test BLEU and test NLL at epoch {E}: "
                     f"{PRE} failed at epoch {E} (1 of 5 seeds: 1 diverged)."]


def test_one_seed_gives_no_interval_and_no_verdict_beyond_undetermined():
    t = table(epochs_table(30.0, seeds=1))
    r = t.loc["valid_bleu_tok"]
    assert r["verdict"] == eq.UNDETERMINED and math.isnan(r["ci90_low"]) and "fewer than two seeds" in r["note"]
    assert math.isnan(r["half_width_90"])
    assert eq.resolution_sentence(t.reset_index().iloc[0]).endswith(": too few seeds for an interval.")


def test_sentences_state_the_resolution_first():
    t = table(epochs_table(30.1, spread=0.5)).reset_index()
    words = eq.sentences(t)
    assert len(words) == 2 * len(t)
    first, second = words[:2]
    r = t.iloc[0]
    assert first.startswith(f"Resolution of the validation BLEU test at epoch {E}: 5 seeds of Pre-LN and 5 seeds of "
                            f"Post-LN, a pooled seed standard deviation of {sig(r['pooled_sd'])} BLEU")
    assert f"true difference under {sig(r['largest_equivalent'])} BLEU" in first
    assert "analysis.report.equivalence_margins.bleu_tok" in first
    assert second.startswith(f"Validation BLEU at epoch {E}, Pre-LN minus Post-LN: +0.1 BLEU")
    assert "so equivalent" in second
    coarse = table(epochs_table(30.0, spread=4.0)).reset_index()
    assert "no true difference can be established as equivalent (none)" in eq.sentences(coarse)[0]
    assert eq.sentences(pd.DataFrame(columns=eq.COLUMNS), "the configuration has no comparisons.figure4") == [
        "No equivalence test of Figure 4's arms: the configuration has no comparisons.figure4."]


def test_no_pair_no_rows():
    lone = dataclasses.replace(DEMO, comparisons={})
    assert table(epochs_table(30.0), lone).empty
