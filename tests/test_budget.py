"""Budgets, per-seed observations, cell means and failure rates on a hand-made epoch table
(lnrepro.analysis.stats.budget)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats

from lnrepro import config
from lnrepro.analysis.stats import budget as bu
from lnrepro.config.settings import ReportSettings
from lnrepro.errors import LnReproError

EPOCHS = 4


def epoch_rows(run: str, seed: int, bleus: list[float], cpus: list[float], statuses: list[str] | None = None):
    """A seed's epochs with its cumulative training CPU-seconds ``cpus`` (the wall-clock another 50%, which no
    budget reads: equal cost is CPU time)."""
    statuses = statuses or ["ok"] * len(bleus)
    return [{"run": run, "seed": seed, "epoch": ep, "status": st, "updates": 10.0 * ep, "train_cpu_s": c,
             "train_wall_s": 1.5 * c, "valid_bleu_tok": b if st == "ok" else math.nan,
             "valid_loss_base2": 10.0 - b if st == "ok" else math.nan}
            for ep, (b, c, st) in enumerate(zip(bleus, cpus, statuses), 1)]


def table() -> pd.DataFrame:
    return pd.DataFrame(
        epoch_rows("a", 1, [10, 20, 30, 40], [1, 2, 3, 4]) + epoch_rows("a", 2, [12, 22, 32, 42], [1, 2, 3, 4])
        + epoch_rows("b", 1, [5, 10, 15, 20], [2, 4, 6, 8])  # twice as slow, never reaches the target
        + epoch_rows("b", 2, [5, 10, math.nan, math.nan], [2, 4, 4, 4], ["ok", "ok", "diverged", "diverged"])
        + epoch_rows("c", 1, [1, 2, math.nan, math.nan], [1, 2, math.nan, math.nan],
                     ["ok", "ok", "missing", "missing"]))


def test_budgets_last_early_cpu_and_target():
    b = bu.budgets(table(), EPOCHS, ReportSettings())
    assert [(x.label, x.kind, x.epoch) for x in b] == [
        ("epoch 4", "last", 4), ("epoch 3", "early", 3), ("training CPU 4 s", "cpu", None),
        ("95% of the best BLEU", "target", None)]
    assert b[2].cpu_s == 4.0  # the smallest last-epoch training CPU time of the seeds that finished
    assert [x.epoch for x in bu.budgets(table(), EPOCHS, ReportSettings(budget_epoch=2))][:2] == [4, 2]
    assert [x.kind for x in bu.budgets(table(), EPOCHS, ReportSettings(budget_epoch=4))] == ["last", "cpu", "target"]
    # results whose checkpoints record no CPU time (an older lnrepro's) have no equal-cost budget
    no_cpu = table().assign(train_cpu_s=math.nan)
    assert [x.kind for x in bu.budgets(no_cpu, EPOCHS, ReportSettings())] == ["last", "early", "target"]
    assert (bu.three_quarters(20), bu.three_quarters(6), bu.three_quarters(1)) == (15, 5, 1)


def test_observations_at_epochs_cpu_time_and_target():
    b = bu.budgets(table(), EPOCHS, ReportSettings(target_fraction=0.5))
    target = 0.5 * bu.best_bleu(table(), "valid")
    assert target == pytest.approx(0.5 * 41)
    obs = bu.observations(table(), b, "valid", target, EPOCHS)
    obs = obs.set_index(["run", "seed", "budget", "metric"]).sort_index()
    assert obs.loc[("a", 1, "epoch 4", "valid_bleu_tok"), "value"] == 40
    assert obs.loc[("b", 2, "epoch 4", "valid_bleu_tok"), "outcome"] == "diverged"
    assert obs.loc[("c", 1, "epoch 3", "valid_bleu_tok"), "outcome"] == "missing"
    # at 4 s: run a's last checkpoint, run b's second (interpolated exactly on a checkpoint)
    assert obs.loc[("a", 2, "training CPU 4 s", "valid_bleu_tok"), "value"] == 42
    assert obs.loc[("b", 1, "training CPU 4 s", "valid_bleu_tok"), "value"] == 10
    assert obs.loc[("b", 2, "training CPU 4 s", "valid_bleu_tok"), "outcome"] == "ok"  # reached 4 s before diverging
    assert obs.loc[("c", 1, "training CPU 4 s", "valid_bleu_tok"), "outcome"] == "missing"
    hit = obs.loc[("a", 1, "50% of the best BLEU")]
    assert (hit.loc["epochs_to_target", "value"], hit.loc["cpu_s_to_target", "value"]) == (3.0, 3.0)
    assert obs.loc[("b", 1, "50% of the best BLEU", "epochs_to_target"), "outcome"] == "not reached"
    assert obs.loc[("b", 2, "50% of the best BLEU", "epochs_to_target"), "outcome"] == "diverged"
    assert obs.loc[("c", 1, "50% of the best BLEU", "epochs_to_target"), "outcome"] == "missing"


def test_cpu_time_is_interpolated_between_checkpoints():
    g = pd.DataFrame(epoch_rows("a", 1, [10, 20], [2, 6]))
    values, outcome = bu._at_cost(g, 3.0, ["valid_bleu_tok"])
    assert outcome == "ok" and values == [pytest.approx(12.5)]


def test_cell_table_intervals_only_from_two_seeds():
    b = bu.budgets(table(), EPOCHS, ReportSettings())
    obs = bu.observations(table(), b, "valid", 30.0, EPOCHS)
    cells = bu.cell_table(obs, ["a", "b", "c"], bleu_interval="t").set_index(["budget", "metric", "run"])
    a = cells.loc[("epoch 4", "valid_bleu_tok", "a")]
    half = stats.t.ppf(0.975, 1) * math.sqrt(2) / math.sqrt(2)  # sd of (40, 42) is sqrt(2)
    assert (a["n"], a["mean"], a["ci_low"], a["ci_high"]) == pytest.approx((2, 41, 41 - half, 41 + half))
    loss = cells.loc[("epoch 4", "valid_loss_base2", "a")]  # not bounded: the plain t interval either way
    assert (loss["ci_low"], loss["ci_high"]) == pytest.approx((-31 - half, -31 + half))
    b4 = cells.loc[("epoch 4", "valid_bleu_tok", "b")]
    assert (b4["n"], b4["mean"], b4["n_left_out"]) == (1, 20, 1) and math.isnan(b4["ci_low"])
    assert cells.loc[("epoch 4", "valid_bleu_tok", "c"), "n_missing"] == 1
    assert list(dict.fromkeys(cells.index.get_level_values("run"))) == ["a", "b", "c"]


def test_bleu_intervals_stay_inside_0_and_100():
    """A BLEU's interval is the t interval of its empirical logit, transformed back (never below 0);
    "t" cuts the plain t interval at the bounds; a mean far from the bounds gets about the t interval."""
    near0 = [0.0, 0.4, 2.1]
    mean, sd, lo, hi = bu.mean_interval(near0, bounds=bu.BLEU_BOUNDS)
    assert mean == pytest.approx(2.5 / 3) and 0.0 <= lo < mean < hi <= 100.0
    p = (pd.Series(near0) + 0.5) / 101
    z = (p / (1 - p)).apply(math.log)
    half = stats.t.ppf(0.975, 2) * z.std(ddof=1) / math.sqrt(3)
    assert hi == pytest.approx(101 / (1 + math.exp(-(z.mean() + half))) - 0.5)
    assert bu.mean_interval(near0, bounds=bu.BLEU_BOUNDS, clip=True)[2] == 0.0
    assert bu.mean_interval(near0)[2] < 0  # the plain t interval would go below 0
    mid = [27.6, 27.5, 29.0]
    t_lo, t_hi = bu.mean_interval(mid)[2:]
    l_lo, l_hi = bu.mean_interval(mid, bounds=bu.BLEU_BOUNDS)[2:]
    assert abs(l_lo - t_lo) < 0.3 and abs(l_hi - t_hi) < 0.3


def fate_table() -> pd.DataFrame:
    """Epoch 4: run a trains (BLEU 40, NLL 3), run p is at 80% of it (trained), run f at BLEU 4 (did not train),
    run n at a good BLEU but twice the NLL (did not train), run d diverged."""
    rows = []
    for run, bleus, nlls, status in (("a", [40, 42], [3.0, 3.0], "ok"), ("p", [32, 33], [3.5, 3.6], "ok"),
                                     ("f", [4, 0], [6.0, 7.0], "ok"), ("n", [38, 39], [6.0, 6.1], "ok"),
                                     ("d", [math.nan, 30], [math.nan, 3.2], None)):
        for seed, (b, n) in enumerate(zip(bleus, nlls), 1):
            st = status or ("diverged" if seed == 1 else "ok")
            rows.append({"run": run, "seed": seed, "epoch": 4, "status": st, "valid_bleu_tok": b,
                         "valid_nll_base2": n})
    return pd.DataFrame(rows)


def test_failure_is_relative_to_the_best_run_on_bleu_and_nll():
    fates = bu.seed_fates(fate_table(), ["a", "p", "f", "n", "d"], [("epoch 4", 4)], "valid", ReportSettings())
    by = fates.set_index(["run", "seed"])
    assert by.loc[("a", 1), "best_bleu_run"] == "a" and by.loc[("a", 1), "best_bleu"] == 41
    assert set(by.loc["a", "fate"]) == set(by.loc["p", "fate"]) == {bu.TRAINED}
    assert set(by.loc["f", "fate"]) == set(by.loc["n", "fate"]) == {bu.DID_NOT_TRAIN}
    assert by.loc[("d", 1), "fate"] == "diverged" and by.loc[("d", 2), "fate"] == bu.TRAINED
    f = bu.failure_table(fates, ["a", "f", "d"], "epoch 4").set_index("run")
    assert f.loc["a", ["n_failed", "failure_rate"]].tolist() == [0, 0.0]
    assert f.loc["f", ["n_did_not_train", "n_failed", "failure_rate"]].tolist() == [2, 2, 1.0]
    assert f.loc["d", ["n_diverged", "n_trained", "failure_rate"]].tolist() == [1, 1, 0.5]
    strict = ReportSettings(failure_bleu_fraction=0.9)  # configurable: p (80% of the best) fails too
    assert set(bu.seed_fates(fate_table(), ["a", "p"], [("epoch 4", 4)], "valid", strict)
               .set_index("run").loc["p", "fate"]) == {bu.DID_NOT_TRAIN}
    assert "0.5 x the best run's seed-mean BLEU" in bu.failure_rule(ReportSettings())


def test_failure_judged_against_a_named_reference():
    """analysis.report.failure_reference: a run listed there is judged against its reference's seed means at the
    same epoch, not the best run's (e.g. Post-LN without warm-up at the paper's lr against Post-LN with
    warm-up at it); a reference without a finished seed leaves the run without a fate."""
    slow = pd.DataFrame([{"run": run, "seed": seed, "epoch": 4, "status": "ok", "valid_bleu_tok": b + seed,
                          "valid_nll_base2": n} for run, b, n in (("w", 10, 5.0), ("nw", 8, 5.5), ("x", 1, 9.0))
                         for seed in (1, 2)])
    e = pd.concat([fate_table(), slow], ignore_index=True)
    runs = ["a", "w", "nw", "x"]
    plain = bu.seed_fates(e, runs, [("epoch 4", 4)], "valid", ReportSettings()).set_index(["run", "seed"])
    assert set(plain.loc["nw", "fate"]) == {bu.DID_NOT_TRAIN} and set(plain.loc["nw", "reference"]) == {""}
    settings = ReportSettings(failure_reference={"nw": "w", "x": "w"})
    by = bu.seed_fates(e, runs, [("epoch 4", 4)], "valid", settings).set_index(["run", "seed"])
    assert set(by.loc["nw", "fate"]) == {bu.TRAINED}  # 9.5 / 11.5 BLEU and 5.5 / 5.0 bits of w's
    assert by.loc[("nw", 1), "reference"] == "w" and by.loc[("nw", 1), "reference_bleu"] == 11.5
    assert by.loc[("nw", 1), "bleu_fraction"] == pytest.approx(9 / 11.5)
    assert by.loc[("nw", 1), "nll_ratio"] == pytest.approx(1.1) and by.loc[("nw", 1), "best_bleu_run"] == "a"
    assert set(by.loc["x", "fate"]) == {bu.DID_NOT_TRAIN}  # against w too: 2 / 11.5 BLEU
    assert set(by.loc["a", "fate"]) == {bu.TRAINED} and set(by.loc["a", "reference"]) == {""}  # the others as before
    gone = bu.seed_fates(e, ["a", "nw", "x"], [("epoch 4", 4)], "valid", settings)  # w not selected
    assert set(gone[gone["run"] == "nw"]["fate"]) == {bu.NO_REFERENCE}
    f = bu.failure_table(gone, ["nw"], "epoch 4").set_index("run")
    assert f.loc["nw", ["n_failed", "n_trained", "n_unfinished"]].tolist() == [0, 0, 2]
    rule = bu.failure_rule(settings)
    assert "analysis.report.failure_reference: nw against w; x against w" in rule
    assert "failure_reference: none named" in bu.failure_rule(ReportSettings())


def test_failure_rule_on_the_published_study():
    """At epoch 10 of the published CPU study every seed of the two Post-LN cells without warm-up did
    not train (0.0-5.3 BLEU) and every other seed, tuned trials included, trained (21.8-32.7)."""
    tables = Path(__file__).resolve().parents[1] / "published" / "study-cpu" / "report" / "tables"
    if not (tables / "epochs.csv").is_file():
        pytest.skip("the study is not published")
    e = pd.read_csv(tables / "epochs.csv")
    runs = list(dict.fromkeys(e["run"]))
    fates = bu.seed_fates(e, runs, [("epoch 10", 10)], "valid", ReportSettings())
    failed = fates["run"].isin(["postln_nowarmup_isqrt", "postln_nowarmup_step8"])
    assert (fates.loc[failed, "fate"] == bu.DID_NOT_TRAIN).all() and failed.sum() == 6
    assert (fates.loc[~failed, "fate"] == bu.TRAINED).all() and (~failed).sum() == 22


def test_budget_table_states_updates_and_tokens():
    prog = table()[["run", "seed", "epoch", "status", "updates"]].assign(target_tokens=lambda d: 1000 * d["epoch"])
    b = bu.budgets(table(), EPOCHS, ReportSettings())
    t = bu.budget_table(prog, b, ["a", "b"]).set_index("budget")
    assert t.loc["epoch 4", ["updates", "target_tokens", "same_in_every_cell"]].tolist() == ["40", "4000", True]
    assert t.loc["training CPU 4 s", "updates"] == "" and "interpolated" in t.loc["training CPU 4 s", "how"]


def test_report_settings_from_the_config(tmp_path):
    repo = Path(__file__).resolve().parents[1]
    layer = tmp_path / "report.yaml"
    layer.write_text("analysis: {report: {budget_epoch: 10, target_fraction: 0.9, failure_bleu_fraction: 0.4,"
                     " failure_nll_ratio: 1.3, covariance: hc3, bleu_interval: t, convergence_window: 5,"
                     " convergence_tolerance: 0.01}}\n")
    exp = config.experiment(config.load_config([repo / "config.yaml", layer]))
    assert exp.analysis.report == ReportSettings(budget_epoch=10, target_fraction=0.9, failure_bleu_fraction=0.4,
                                                 failure_nll_ratio=1.3, covariance="hc3", bleu_interval="t",
                                                 convergence_window=5, convergence_tolerance=0.01)
    assert config.experiment(config.load_config([repo / "config.yaml"])).analysis.report == ReportSettings()
    layer.write_text("analysis: {report: {target_fraction: 1.5}}\n")
    with pytest.raises(LnReproError, match="analysis.report.target_fraction"):
        config.load_config([repo / "config.yaml", layer])
    layer.write_text("analysis: {report: {covariance: welch}}\n")
    with pytest.raises(LnReproError, match="analysis.report.covariance"):
        config.load_config([repo / "config.yaml", layer])


def test_observations_keep_the_seeds_in_their_order():
    """Each run's seeds come out in the order the epochs table lists them, however many rows share an epoch
    (a sort that is not stable orders such ties by the CPU's sort kernel, and the report's figures with them)."""
    rows = [r for seed in range(1, 9) for r in epoch_rows("a", seed, [10 + seed] * EPOCHS, [1, 2, 3, 4])]
    b = bu.budgets(pd.DataFrame(rows), EPOCHS, ReportSettings())
    obs = bu.observations(pd.DataFrame(rows), b, "valid", 5.0, EPOCHS)
    assert list(dict.fromkeys(obs["seed"])) == list(range(1, 9))
