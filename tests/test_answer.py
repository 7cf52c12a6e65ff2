"""The Answer section's tables (lnrepro.analysis.sections.answer) on fabricated paper-config epochs: time to quality by
interpolation, the decomposition of Figure 4's gap along every order of the factors, the end point."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from lnrepro import config
from lnrepro.analysis import aggregate as ag
from lnrepro.analysis.sections import answer as an

REPO = Path(__file__).resolve().parents[1]
PAPER = config.experiment(config.load_config([REPO / "config.yaml"]))
E = PAPER.epochs  # 20
OFFSETS = {1: -0.2, 2: 0.0, 3: 0.2}


def bleu(run: str, ep: int) -> float:
    """Pre-LN without warm-up climbs twice as fast as Post-LN with warm-up to the same 30; Post-LN without warm-up
    fails (ends at 2); every other cell climbs at 1.5 BLEU an epoch to 30."""
    if run == "postln_warmup_isqrt":
        return 1.5 * ep
    if run.startswith("postln_nowarmup"):
        return 0.1 * ep
    if run == "preln_nowarmup_step8":
        return min(3.0 * ep, 30.0)
    return min(2.0 * ep, 30.0)


def loss(run: str, ep: int) -> float:
    return 10.0 - 0.25 * ep if run.startswith("post") else max(10.0 - 0.5 * ep, 5.0)


def epochs_table() -> pd.DataFrame:
    return pd.DataFrame([{"run": r, "seed": s, "epoch": ep, "status": "ok", "updates": 100 * ep,
                          "train_wall_s": 10.0 * ep + (5.0 if r.startswith("pre") else 0.0),
                          "train_cpu_s": 8.0 * ep + (4.0 if r.startswith("pre") else 0.0),
                          "valid_bleu_tok": bleu(r, ep) + off, "valid_loss_base2": loss(r, ep) + off / 10}
                         for r in PAPER.select for s, off in OFFSETS.items() for ep in range(1, E + 1)])


@pytest.fixture(scope="module")
def answer() -> an.Answer:
    return an.answer(PAPER, epochs_table(), "valid")


def test_welch_and_ratio_intervals():
    d, lo, hi, _ = an.welch([1.0, 2.0, 3.0], [4.0, 6.0, 8.0])
    assert d == pytest.approx(4.0) and lo < 4.0 < hi
    # the Welch degrees of freedom: se^2 = 1/3 + 4/3, df = se^4 / ((1/3)^2/2 + (4/3)^2/2)
    from scipy import stats
    se2 = 1 / 3 + 4 / 3
    df = se2 ** 2 / ((1 / 3) ** 2 / 2 + (4 / 3) ** 2 / 2)
    assert hi - d == pytest.approx(stats.t.ppf(0.975, df) * math.sqrt(se2))
    assert all(math.isnan(v) for v in an.welch([1.0], [2.0, 3.0])[1:])  # no interval from one seed
    assert an.welch([2.0, 2.0], [3.0, 3.0])[:3] == (1.0, 1.0, 1.0)
    r, lo, hi = an.ratio_interval([0.5, 0.5, 0.5])
    assert (r, lo, hi) == pytest.approx((0.5, 0.5, 0.5))
    r, lo, hi = an.ratio_interval([0.25, 1.0])
    assert r == pytest.approx(0.5) and 0 < lo < 0.5 < hi  # geometric mean, interval on the log scale


def test_crossing_interpolates_and_censors():
    curve = pd.DataFrame({"epoch": [1, 2, 3], "updates": [10, 20, 30], "train_cpu_s": [4.0, 8.0, 12.0],
                          "train_wall_s": [5.0, 10.0, 15.0], "v": [1.0, 3.0, 7.0]})
    at, censored = an.crossing(curve, "v", 5.0, True)
    assert at == pytest.approx({"epochs": 2.5, "updates": 25.0, "train_cpu_s": 10.0, "train_wall_s": 12.5})
    assert not censored
    at, censored = an.crossing(curve, "v", 0.5, True)
    assert at["epochs"] == 1 and censored  # met at the first checkpoint: an upper bound
    assert math.isnan(an.crossing(curve, "v", 8.0, True)[0]["epochs"])
    at, _ = an.crossing(curve.assign(v=[9.0, 7.0, 5.0]), "v", 6.0, False)  # a loss falls to its target
    assert at["epochs"] == pytest.approx(2.5)


def test_pairs_and_paths(answer):
    assert answer.pair == an.Pair("figure4", "postln_warmup_isqrt", "preln_nowarmup_step8",
                                  ("norm", "warmup", "decay"))
    assert set(answer.paths) == {">".join(p) for p in __import__("itertools").permutations(
        ("norm", "warmup", "decay"))}
    assert [p.to_run for p in answer.paths["norm>warmup>decay"]] == [
        "preln_warmup_isqrt", "preln_nowarmup_isqrt", "preln_nowarmup_step8"]
    assert len(answer.pairs) == 1 + 12  # Figure 4's pair and the cube's twelve edges
    assert an.main_path(answer) == "norm>warmup>decay"


def test_time_to_quality_of_figure4(answer):
    t = answer.time_to_quality
    t = t[(t["pair"] == "figure4") & (t["metric"] == "valid_bleu_tok") & (t["fraction"] == 0.5)].set_index("arm")
    # the lower arm's final seed mean is 30 (Post-LN with warm-up at epoch 20): the target is 15
    assert t.loc["from", "target"] == pytest.approx(15.0) and t.loc["from", "target_of"] == "lower"
    assert t.loc["from", "epochs"] == pytest.approx(10.0, abs=0.2)  # 1.5 an epoch
    assert t.loc["to", "epochs"] == pytest.approx(5.0, abs=0.1)  # 3 an epoch
    assert t.loc["to", "updates"] == pytest.approx(100 * t.loc["to", "epochs"])
    assert t.loc["ratio", "epochs"] == pytest.approx(0.5, abs=0.02)
    assert t.loc["ratio", "epochs_low"] <= t.loc["ratio", "epochs"] <= t.loc["ratio", "epochs_high"]


def test_a_failed_arm_is_not_reached_with_its_best_value(answer):
    t = answer.time_to_quality
    t = t[(t["pair"] == "postln_warmup_isqrt > postln_nowarmup_isqrt") & (t["metric"] == "valid_bleu_tok")]
    assert set(t["target_of"]) == {"higher"}  # 2 BLEU is below half of 30: the targets are the higher arm's
    to = t[t["arm"] == "to"].iloc[0]
    assert to["status"] == "not reached" and to["best"] == pytest.approx(2.0) and math.isnan(to["epochs"])
    assert (t[t["arm"] == "ratio"]["status"] == "not reached").all()
    view = an.pairs_view(answer, PAPER)
    row = view[(view["pair"] == "postln_warmup_isqrt > postln_nowarmup_isqrt") & (view["metric"] == "valid_bleu_tok")]
    assert row["epochs (to)"].iloc[0] == "not reached (best 2)"


def test_decomposition_adds_up_to_the_gap(answer):
    d, g = answer.decomposition, answer.gap
    assert list(d.columns) == an.DECOMPOSITION_COLUMNS
    assert len(d) == 2 * E * 6 * 3  # metrics x epochs x paths x steps
    for (ep, metric, path), steps in d.groupby(["epoch", "metric", "path"]):
        total = g[(g["epoch"] == ep) & (g["metric"] == metric)]["change"].iloc[0]
        assert steps["change"].sum() == pytest.approx(total)
        assert list(steps["step"]) == [1, 2, 3] and set(steps["factor"]) == {"norm", "warmup", "decay"}
    at10 = d[(d["epoch"] == 10) & (d["metric"] == "valid_bleu_tok") & (d["path"] == "norm>warmup>decay")]
    assert list(at10["change"]) == pytest.approx([20 - 15, 0.0, 30 - 20])
    assert (at10["seeds"] == "3/3").all() and (at10["ci_low"] <= at10["change"]).all()


def test_end_point(answer):
    e = answer.endpoint.set_index(["run", "metric"])
    post = e.loc[("postln_warmup_isqrt", "valid_loss_base2")]
    assert post["slope"] == pytest.approx(-0.25) and post["state"] == ag.IMPROVING and not post["annealed"]
    pre = e.loc[("preln_nowarmup_step8", "valid_loss_base2")]  # flat at 5 and step-decayed: annealed
    assert pre["slope"] == pytest.approx(0.0, abs=1e-9) and pre["annealed"] and pre["state"] == an.ANNEALED
    flat = e.loc[("preln_warmup_isqrt", "valid_loss_base2")]  # flat, isqrt: converged
    assert flat["state"] == ag.CONVERGED and flat["epochs"] == "17-20"  # analysis.report.convergence_window 4
    gap = answer.endpoint_gap.set_index(["pair", "metric"]).loc[("figure4", "valid_loss_base2")]
    assert gap["gap"] == pytest.approx(5.0 - 5.0) and gap["could_change"] == pytest.approx(5 * 0.25)
    assert bool(gap["could_change_sign"])


def test_sentences_quote_the_tables(answer):
    text = an.sentences(answer, PAPER, "valid")
    assert text[0].startswith("To reach 75% of the lower arm's final validation BLEU")
    assert "The other arm, Post-LN with 4000 warm-up updates and isqrt decay, needs" in text[0]  # from the config
    assert "Pre-LN without warm-up and a step decay x0.1 at the start of epoch 8 needs" in text[0]
    assert any(s.startswith("At epoch") and "splits, changing one factor at a time" in s for s in text)
    assert any("annealed" in s for s in text) and any("could still change sign" in s for s in text)


def test_no_figure4_pair_says_so(tmp_path):
    (tmp_path / "one.yaml").write_text("select: [postln_warmup_isqrt]\n")
    exp = config.experiment(config.load_config([REPO / "config.yaml", tmp_path / "one.yaml"]))
    a = an.answer(exp, epochs_table().query("run == 'postln_warmup_isqrt'"), "valid")
    assert a.pair is None and all(t.empty for t in a.tables().values())
    assert "not selected" in an.sentences(a, exp, "valid")[0]


def test_an_arm_that_diverged_everywhere_is_said_not_a_crash():
    """Every seed of Pre-LN without warm-up diverged (no score at any epoch): the Answer says so."""
    t = epochs_table()
    dead = t["run"] == "preln_nowarmup_step8"
    t.loc[dead, "status"] = "diverged"
    t.loc[dead, ["valid_bleu_tok", "valid_loss_base2"]] = float("nan")
    a = an.answer(PAPER, t, "valid")
    text = " ".join(an.sentences(a, PAPER, "valid"))
    assert "No validation BLEU gap: an arm has no finished seed at any scored epoch." in text


def test_seeds_not_run_yet_neither_reach_nor_fail_a_target():
    """A study stored in parts: seed 3 of every run has no record yet (every checkpoint missing). The times to
    quality count the seeds that ran, and the Answer says which are not run; a seed that diverged still counts."""
    t = epochs_table()
    t.loc[t["seed"] == 3, "status"] = ag.STATUS_MISSING
    t.loc[t["seed"] == 3, ["valid_bleu_tok", "valid_loss_base2"]] = float("nan")
    a = an.answer(PAPER, t, "valid")
    fig4 = a.time_to_quality[(a.time_to_quality["pair"] == "figure4") & (a.time_to_quality["metric"] == "valid_bleu_tok")]
    assert (fig4["status"] == "reached").all() and (fig4["n_seeds"] == 2).all()
    assert a.not_run.startswith("These records hold 16 of the 24 trainings") and "seed 3 of each run" in a.not_run
    assert an.sentences(a, PAPER, "valid")[0] == a.not_run
    dead = (t["run"] == "preln_nowarmup_step8") & (t["seed"] == 2)
    t.loc[dead, "status"] = "diverged"
    t.loc[dead, ["valid_bleu_tok", "valid_loss_base2"]] = float("nan")
    t2 = an.answer(PAPER, t, "valid").time_to_quality
    to = t2[(t2["pair"] == "figure4") & (t2["metric"] == "valid_bleu_tok") & (t2["arm"] == "to")]
    assert (to["status"] == "not reached").all() and (to["n_seeds"] == 2).all() and (to["n_reached"] == 1).all()
    assert an.answer(PAPER, epochs_table(), "valid").not_run == ""


def test_runs_of_two_lengths_are_compared_at_the_epochs_both_have():
    """Figure 4's pair trains 30 epochs, the other cells 20: the pair's gap, times to quality and final gap run to
    epoch 30, every step of the decomposition (through 20-epoch cells) to epoch 20, the end point each run's own."""
    pair = ("postln_warmup_isqrt", "preln_nowarmup_step8")
    longer = {"runs": {r: {"train": {"epochs": 30}} for r in pair}}
    c = config.deep_merge(config.load_config([REPO / "config.yaml"]), longer)
    config.validate_config(c)
    x = config.experiment(c)
    t = pd.DataFrame([{"run": r, "seed": s, "epoch": ep, "status": "ok", "updates": 100 * ep, "train_wall_s": 10.0 * ep,
                       "train_cpu_s": 8.0 * ep, "valid_bleu_tok": bleu(r, ep) + off,
                       "valid_loss_base2": loss(r, ep) + off / 10}
                      for r in x.select for s, off in OFFSETS.items() for ep in range(1, x.last_of(r) + 1)])
    a = an.answer(x, t, "valid")
    assert a.gap["epoch"].max() == 30 and a.decomposition["epoch"].max() == 20
    ttq = a.time_to_quality
    fig = ttq[(ttq["pair"] == "figure4") & (ttq["metric"] == "valid_bleu_tok") & (ttq["fraction"] == 0.5)]
    assert fig["target"].iloc[0] == pytest.approx(15.0)  # half the lower arm's 30 at epoch 30 (Post-LN: 45)
    e = a.endpoint.set_index(["run", "metric"])["epochs"]
    assert e[("postln_warmup_isqrt", "valid_loss_base2")] == "27-30"
    assert e[("preln_warmup_isqrt", "valid_loss_base2")] == "17-20"
    gaps = a.endpoint_gap.set_index(["pair", "metric"])["epoch"]
    assert gaps[("figure4", "valid_bleu_tok")] == 30
    assert gaps[("postln_warmup_isqrt > preln_warmup_isqrt", "valid_bleu_tok")] == 20  # a 30- and a 20-epoch run
    text = an.sentences(a, x, "valid")
    assert any("each pair is compared at the epochs both its runs have" in s and "up to epoch 30" in s for s in text)
    assert not any("each run over its own last scored epochs" in s for s in text)  # both arms end at 30
