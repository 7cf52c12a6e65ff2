"""The depth study's report (analysis/sections/depth.py) on a fabricated results tree at two learning rates:
Wilson intervals, failure against the best cell of the same depth and lr_max, the depth claims judged per lr_max,
the section's finding, the test row of a checkpoint below the valid-BLEU floor, the section only with runs of more
than one depth."""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from lnrepro import config
from lnrepro.analysis import DEPTH_FIGURES
from lnrepro.analysis.stats import budget as bu
from lnrepro.analysis.sections import depth as dp
from lnrepro.analysis.render.report import make_report
from lnrepro.config import Experiment
from lnrepro.records import CheckpointScores, EpochManifest, RunSummary
from test_report import decode

REPO = Path(__file__).resolve().parents[1]
EPOCHS, SEEDS = 2, (1, 2, 3)
LOW = "_lr1e-3"  # the preset's runs at its second, smaller lr_max
HIGH_LR, LOW_LR = 2.0e-3, 1.0e-3
HIGH = [f"{v}_{w}_isqrt_L{d}" for d in (6, 18) for v in ("postln", "preln", "deepnorm") for w in ("warmup", "nowarmup")]
RUNS = HIGH + [f"{v}_{w}_isqrt_L{d}{LOW}" for d in (6, 18) for v in ("postln", "preln") for w in ("warmup", "nowarmup")]
FLOOR = 1.0
# Post-LN without warm-up stalls near 0 BLEU at 18 layers at both rates and at 6 layers at the larger one; at 18
# layers and lr_max 2e-3 its seed 3 diverges in epoch 2.
STALLED = {"postln_nowarmup_isqrt_L18", "postln_nowarmup_isqrt_L6", f"postln_nowarmup_isqrt_L18{LOW}"}
DIVERGE = {("postln_nowarmup_isqrt_L18", 3): 2}


def experiment(runs: list[str] = RUNS) -> Experiment:
    """The depth preset's settings, its runs at lr_max 2e-3 and the same runs again at 1e-3 (``..._lr1e-3``:
    the section reads each depth and lr_max apart)."""
    c = config.load_config([REPO / "config.yaml", REPO / "presets" / "depth-cpu.yaml"])
    for run in RUNS:
        if run.endswith(LOW):
            c["runs"][run] = config.deep_merge(c["runs"][run.removesuffix(LOW)], {"optim": {"lr_max": LOW_LR}})
    c["select"], c["defaults"]["train"]["epochs"], c["seeds"] = runs, EPOCHS, list(SEEDS)
    c.pop("run_seeds")
    config.validate_config(c)
    return config.experiment(c)


def bleu(run: str, seed: int, epoch: int) -> float:
    """At lr_max 2e-3 about 20 at 6 layers and 9 at 18 (below half the 6-layer best: failed against it, trained
    against the best 18-layer cell); at lr_max 1e-3 0.4 x that (below half the best at 2e-3 of the same depth:
    failed against it, trained against the best at its own rate); a stalled cell about 0.3."""
    if run in STALLED:
        return 0.2 + 0.05 * seed
    base = (20.0 if "_L6" in run else 9.0) * (0.4 if run.endswith(LOW) else 1.0)
    return base + RUNS.index(run) * 0.1 + 0.5 * seed - (EPOCHS - epoch)


def split_scores(b: float) -> dict:
    nll = 8.0 - b / 5
    return {"loss": nll * 0.7 + 0.3, "nll": nll * 0.7, "loss_base2": nll + 0.3, "nll_base2": nll, "target_tokens": 100,
            "bleu_tok": b, "bleu_tok_detail": {}, "sacrebleu": b, "sacrebleu_signature": "s", "sacrebleu_detail": {},
            "sentences": 10, "decode_s": 1.0, "sent_per_s": 10.0}


WHERE = {"where_ran": {"host": "h", "device": "Fake CPU", "slurm_job_id": None}}


def make_tree(root: Path, exp: Experiment) -> Path:
    """results/{exp}/ as the stages write it, for ``exp``'s runs and seeds: a test split scored at the last epoch
    only, skipped (as lnrepro.evaluate.score writes it) where the valid BLEU is below FLOOR."""
    exp_dir = root / "results" / exp.name
    exp_dir.mkdir(parents=True)
    exp.write(exp_dir / "experiment.json")
    upe = 10
    for run in exp.select:
        for seed in exp.seeds_of(run):
            rd = exp_dir / "runs" / run / f"seed{seed}"
            (rd / "epochs").mkdir(parents=True)
            (rd / "eval").mkdir()
            config = exp.run_config(run, seed).sha256()
            (rd / "run.json").write_text(json.dumps({"run": run, "seed": seed, "config_sha256": config, "threads": 1,
                                                     "precision": "fp32", **WHERE}))
            div = DIVERGE.get((run, seed))
            last = (div - 1) * upe + 3 if div else EPOCHS * upe
            (rd / "train.jsonl").write_text("".join(json.dumps(
                {"kind": "step", "update": u, "epoch": (u - 1) // upe + 1, "loss": 7.0, "nll": 6.0, "lr": 1e-3,
                 "lrs": [1e-3], "grad_norm": 1.0, "train_s": u * 0.1, "wall_s": u * 0.1, "attempt": 1}) + "\n"
                for u in range(1, last + 1))
                + "".join(json.dumps({"kind": "epoch", "epoch": ep, "updates": ep * upe}) + "\n"
                          for ep in range(1, (div or EPOCHS + 1)))
                + json.dumps({"kind": "finished", "update": last}) + "\n")
            RunSummary.from_dict({
                **WHERE, "run": run, "seed": seed, "status": "diverged" if div else "completed", "final_loss": 7.0,
                "final_nll": 6.0, "final_loss_update": last, "updates": last, "epochs": EPOCHS,
                "epochs_completed": (div or EPOCHS + 1) - 1, "target_tokens_per_epoch": 1000,
                "target_tokens_trained": last * 100, "attempts": 1, "train_s": last * 0.1,
                "wall_s_all_attempts": last * 0.1, "tokens_per_s": None,
                "diverged": {"update": last, "epoch": div, "detail": "non-finite loss", "loss": None, "lr": 1e-3}
                if div else None}).write(rd / "summary.json")
            for ep in range(1, EPOCHS + 1):
                diverged = div is not None and ep >= div
                EpochManifest.from_dict({
                    **WHERE, "run": run, "seed": seed, "epoch": ep, "status": "diverged" if diverged else "ok",
                    "updates": min(ep * upe, last), "wall_s": min(ep * upe, last) * 0.1,
                    "weights": None if diverged else f"state/epochs/epoch{ep:03d}.pt",
                    "sha256": None if diverged else "ab" * 32, "partial": False, "config_sha256": config,
                }).write(rd / "epochs" / f"epoch{ep:03d}.json")
                ev = {**WHERE, "run": run, "seed": seed, "epoch": ep, "updates": min(ep * upe, last),
                      "weights": None if diverged else f"state/epochs/epoch{ep:03d}.pt",
                      "weights_sha256": None if diverged else "ab" * 32, "manifest": "m",
                      "decode": decode(exp, run, ep), "label_smoothing": 0.1, "threads": 1, "torch": "2",
                      "wall_s": 1.0}
                if diverged:
                    ev.update(status="diverged", splits={sp: None for sp in ev["decode"]})
                else:
                    b = bleu(run, seed, ep)
                    splits = {"valid": split_scores(b)}
                    if ep == EPOCHS:
                        skipped = b < FLOOR
                        splits["test"] = None if skipped else split_scores(b + 1)
                        if skipped:
                            ev["skipped"] = {"test": f"skipped: valid BLEU {b:.2f} below the floor {FLOOR:g} "
                                                     "(eval.valid_bleu_floor)"}
                    ev.update(status="ok", splits=splits)
                CheckpointScores.from_dict(ev).write(rd / "eval" / f"epoch{ep:03d}.json")
    return exp_dir


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    exp = experiment()
    exp_dir = make_tree(tmp_path_factory.mktemp("depth"), exp)
    index = make_report(exp_dir, exp, exp_dir / "report")
    return exp_dir, exp, index


def test_wilson_intervals_and_the_smallest_resolved_difference():
    rate, lo, hi = dp.wilson(0, 3)
    assert (rate, lo, hi) == (0.0, 0.0, pytest.approx(0.5615, abs=1e-4))  # [0, 0.56]
    assert dp.wilson(3, 3)[1:] == (pytest.approx(0.4385, abs=1e-4), pytest.approx(1.0))  # [0.44, 1]
    assert dp.wilson(1, 2)[0] == 0.5 and all(math.isnan(v) for v in dp.wilson(0, 0))
    # three seeds a cell: only all against none (a difference of 1) has a Newcombe interval excluding 0
    assert dp.smallest_resolved(3, 3) == 1.0 and dp.smallest_resolved(6, 6) < 1.0
    assert dp.rate_difference(3, 3, 0, 3)[1] > 0 and dp.rate_difference(2, 3, 0, 3)[1] < 0
    assert "3 of 3 seeds against 0 of 3" in dp.resolution_text([3, 3])


def epoch_rows() -> pd.DataFrame:
    """The aggregate's epoch table of ``bleu``'s seeds, every checkpoint scored."""
    return pd.DataFrame([{"run": r, "seed": s, "epoch": e, "status": "ok", "valid_bleu_tok": bleu(r, s, e),
                          "valid_nll_base2": split_scores(bleu(r, s, e))["nll_base2"]}
                         for r in RUNS for s in SEEDS for e in range(1, EPOCHS + 1)])


def test_resolution_for_cells_of_different_seeds():
    """Five seeds in the compared cells, three in the others: each count's resolution, the larger first."""
    five, three = dp.resolution_text([5]), dp.resolution_text([3])
    assert "only a difference of 0.60 or more (e.g. 3 of 5 seeds against 0 of 5)" in five
    assert "[0.00, 0.43] for 0 of 5" in five and "only a difference of 1.00 or more" in three
    both = dp.resolution_text([3, 5, 5, 0])
    assert both == (five.replace("per cell", "in both cells") + "; " + three.replace("per cell", "in both cells"))


def test_failure_is_judged_against_the_best_cell_of_the_same_depth_and_rate():
    exp = experiment()
    epochs, at = epoch_rows(), [("last", EPOCHS)]
    fates = dp.seed_fates_by_depth(epochs, exp, at, "valid", exp.analysis.report)
    deep = fates[(fates["depth"] == 18) & (fates["lr_max"] == HIGH_LR)]
    assert set(deep["best_bleu_run"]) == {"deepnorm_nowarmup_isqrt_L18"}  # the best at 18 layers, not a 6-layer run
    assert set(deep[deep["fate"] == bu.DID_NOT_TRAIN]["run"]) == {"postln_nowarmup_isqrt_L18"}
    # at the smaller lr_max: judged against the best run at that rate, not the better one at 2e-3
    low = fates[fates["lr_max"] == LOW_LR]
    assert set(low["best_bleu_run"]) == {f"preln_nowarmup_isqrt_L6{LOW}", f"preln_nowarmup_isqrt_L18{LOW}"}
    assert set(low[low["fate"] == bu.DID_NOT_TRAIN]["run"]) == {f"postln_nowarmup_isqrt_L18{LOW}"}
    # against every run of a depth at once, every run at 1e-3 would have failed; against every run, every 18-layer one
    shallow = [r for r in RUNS if "_L6" in r]
    pooled = bu.seed_fates(epochs, shallow, at, "valid", exp.analysis.report)
    assert {r for r in shallow if r.endswith(LOW)} <= set(pooled[pooled["fate"] == bu.DID_NOT_TRAIN]["run"])
    flat = bu.seed_fates(epochs, RUNS, at, "valid", exp.analysis.report)
    assert {r for r in RUNS if "_L18" in r} <= set(flat[flat["fate"] == bu.DID_NOT_TRAIN]["run"])
    rates = dp.rate_table(fates, exp).set_index("run")
    assert rates.loc["postln_nowarmup_isqrt_L18", "failure_rate"] == 1.0
    assert rates.loc[f"postln_nowarmup_isqrt_L6{LOW}", "failure_rate"] == 0.0
    assert rates.loc["deepnorm_warmup_isqrt_L18", "failure_rate"] == 0.0
    assert rates.loc["deepnorm_warmup_isqrt_L18", "failure_high"] == pytest.approx(dp.wilson(0, 3)[2])
    assert rates.loc[f"preln_warmup_isqrt_L18{LOW}", "lr_max"] == LOW_LR
    assert rates.loc["preln_warmup_isqrt_L18", "lr_max"] == HIGH_LR


def test_the_depth_claims_are_judged_per_learning_rate():
    """Post-LN without warm-up fails at both depths at lr_max 2e-3 (3/3 against 3/3: no depth effect) and only at
    18 layers at 1e-3 (3/3 against 0/3): two rows, judged apart; pooled they would read 6/6 against 3/6."""
    exp = experiment()
    fates = dp.seed_fates_by_depth(epoch_rows(), exp, [("last", EPOCHS)], "valid", exp.analysis.report)
    claims = dp.claim_table(dp.rate_table(fates, exp), "last", None, [6, 18])
    post = claims[claims["id"] == "depth_postln_nowarmup"].set_index("lr_max")
    assert list(post.index) == [HIGH_LR, LOW_LR]
    assert post.loc[HIGH_LR, "measured"] == 0.0 and post.loc[HIGH_LR, "status"] == "inconclusive"
    assert post.loc[HIGH_LR, "n_seeds"] == "3/3" and "(3/3) minus that of" in post.loc[HIGH_LR, "measured_as"]
    assert post.loc[LOW_LR, "measured"] == 1.0 and post.loc[LOW_LR, "status"] == "reproduced"
    assert f"postln_nowarmup_isqrt_L18{LOW} (3/3)" in post.loc[LOW_LR, "measured_as"]
    pre = claims[claims["id"] == "depth_pre_warmup"]
    assert list(pre["lr_max"]) == [HIGH_LR, LOW_LR]
    deepnorm = claims[claims["id"] == "depth_deepnorm_warmup"]  # DeepNorm at the larger rate only
    assert list(deepnorm["lr_max"]) == [HIGH_LR] and deepnorm["status"].item() == "inconclusive"  # 0 of 3
    admin = claims[claims["id"] == "depth_admin_warmup"]  # not selected: one row without a rate that says so
    assert math.isnan(admin["lr_max"].item()) and admin["note"].item() == (
        "no selected run is Admin with warm-up at 18 layers")
    assert claims.loc[claims["id"] == "depth_prenofinal_vs_pre", "status"].item() == dp.OPEN


def test_a_claim_whose_cells_share_no_rate_says_so():
    """Post-LN without warm-up at 6 layers at lr_max 1e-3 only, at 18 layers at 2e-3 only: no common rate."""
    runs = [r for r in RUNS if r not in ("postln_nowarmup_isqrt_L6", f"postln_nowarmup_isqrt_L18{LOW}")]
    exp = experiment(runs)
    epochs = epoch_rows()
    fates = dp.seed_fates_by_depth(epochs[epochs["run"].isin(runs)], exp, [("last", EPOCHS)], "valid",
                                   exp.analysis.report)
    claims = dp.claim_table(dp.rate_table(fates, exp), "last", None, [6, 18])
    row = claims[claims["id"] == "depth_postln_nowarmup"]
    assert len(row) == 1 and math.isnan(row["lr_max"].item()) and math.isnan(row["measured"].item())
    assert row["note"].item() == ("the cells compared are selected at no common lr_max: Post-LN without warm-up at "
                                  "18 layers at lr_max 0.002; Post-LN without warm-up at 6 layers at lr_max 0.001")
    assert row["status"].item() != "reproduced"


def fit_rows() -> pd.DataFrame:
    """Figure 3(c)'s rows of a gradinit fit: Post-LN flat, Pre-LN shrinking, DeepNorm growing with depth."""
    from lnrepro.analysis.stats.gradinit_fit import HEADLINE

    values = {"post": (0.18, -0.11, 0.48, 0.0), "pre": (-0.38, -0.65, -0.11, -0.5),
              "deepnorm": (-0.48, -0.64, -0.31, math.nan)}
    return pd.DataFrame([{**HEADLINE, "norm": n, "b": b, "b_low": lo, "b_high": hi, "theory_b": theory,
                          "note": math.nan} for n, (b, lo, hi, theory) in values.items()])


def test_the_finding_names_the_variants_that_trained_deep_at_each_rate():
    """Per lr_max, which variants trained at 18 layers without warm-up; per variant and rate, its failure rate
    with a Wilson interval; per variant, what its gradient at initialization predicted. One interval a sentence,
    no nested parentheses, words for variants."""
    exp = experiment()
    fates = dp.seed_fates_by_depth(epoch_rows(), exp, [("last", EPOCHS)], "valid", exp.analysis.report)
    said = dp.finding(dp.rate_table(fates, exp), "last", fit_rows(), 18)
    assert said[:2] == [
        f"Without warm-up at 18 layers and lr_max 0.002, at epoch {EPOCHS}: most seeds trained with Pre-LN and "
        "DeepNorm; most failed with Post-LN.",
        f"Without warm-up at 18 layers and lr_max 0.001, at epoch {EPOCHS}: most seeds trained with Pre-LN; most "
        "failed with Post-LN."]
    assert ("Post-LN at 18 layers without warm-up and lr_max 0.002: 0 of 3 seeds trained, a failure rate of "
            "1.00 [0.44, 1.0] by Wilson's 95% interval.") in said
    assert ("Pre-LN at 18 layers without warm-up and lr_max 0.001: 3 of 3 seeds trained, a failure rate of "
            "0 [0, 0.56] by Wilson's 95% interval.") in said
    assert ("Post-LN's gradient at initialization predicted a need for warm-up: its last decoder layer's W2 "
            "gradient does not shrink with depth, b = 0.18 [\u22120.11, 0.48], Theorem 1's being 0.") in said
    assert ("Pre-LN's gradient at initialization predicted training without warm-up: its last decoder layer's W2 "
            "gradient shrinks with depth, b = \u22120.38 [\u22120.65, \u22120.11], Theorem 1's being \u22120.5."
            ) in said
    assert ("DeepNorm's gradient at initialization predicted training without warm-up: its last decoder layer's W2 "
            "gradient shrinks with depth, b = \u22120.48 [\u22120.64, \u22120.31], as Pre-LN's does in Theorem 1."
            ) in said
    grows = pd.Series({"b": 0.3, "b_low": 0.1, "b_high": 0.5, "note": math.nan})
    assert dp.prediction("X", grows) == ("X's gradient at initialization predicted a need for warm-up: its last "
                                         "decoder layer's W2 gradient grows with depth, b = 0.30 [0.10, 0.50].")
    for s in said:
        assert s.count("[") <= 1 and "((" not in s and not re.search(r"\([^)]*\(", s), s
        assert "deepnorm" not in s and "postln" not in s
    # without a fit, one sentence says so; ReZero's zero gradient predicts nothing
    assert "The gradient at initialization was not fitted: no prediction from it." in dp.finding(
        dp.rate_table(fates, exp), "last", None, 18)
    zero = pd.Series({"b": math.nan, "b_low": math.nan, "b_high": math.nan, "note": "undefined at initialization"})
    assert dp.prediction("ReZero", zero) == ("ReZero's gradient at initialization predicted nothing: its last decoder "
                                             "layer's W2 gradient is exactly 0, so it has no exponent b.")


def test_the_deepest_cells_as_a_table():
    """Per variant and lr_max at 18 layers without warm-up: seeds trained, failure rate with Wilson's interval,
    the gradient exponent at initialization and what it predicts, as the finding's sentences say them."""
    exp = experiment()
    fates = dp.seed_fates_by_depth(epoch_rows(), exp, [("last", EPOCHS)], "valid", exp.analysis.report)
    t = dp.deep_table(dp.rate_table(fates, exp), "last", fit_rows(), 18).set_index(["variant", "lr_max"])
    post = t.loc[("Post-LN", "0.002")]
    assert (post["seeds trained"], post["failure rate [Wilson 95%]"]) == ("0 of 3", "1.00 [0.44, 1.0]")
    assert post["gradient exponent b at init [95%]"] == "0.18 [\u22120.11, 0.48]"
    assert post["b predicts"] == "a need for warm-up"
    assert t.loc[("Pre-LN", "0.001"), "b predicts"] == "training without warm-up"
    assert set(dp.deep_table(dp.rate_table(fates, exp), "last", None, 18)["b predicts"]) == {"nothing"}


def test_the_depth_section_and_its_tables(report):
    exp_dir, exp, index = report
    text = index.read_text()
    assert 'id="depth"' in text and "Depth: which variants train deep" in text
    tables = exp_dir / "report" / "tables"
    rates = pd.read_csv(tables / "depth_rates.csv")
    last = rates[rates["epoch"] == EPOCHS].set_index("run")
    r = last.loc["postln_nowarmup_isqrt_L18"]
    assert (r["n_diverged"], r["n_failed"], r["n_with_fate"], r["lr_max"]) == (1, 3, 3, HIGH_LR)
    assert r["divergence_rate"] == pytest.approx(1 / 3) and r["divergence_low"] == pytest.approx(dp.wilson(1, 3)[1])
    assert last.loc["deepnorm_nowarmup_isqrt_L18", "failure_rate"] == 0.0
    assert last.loc[f"postln_nowarmup_isqrt_L6{LOW}", "failure_rate"] == 0.0
    assert (exp_dir / "report" / "figures" / DEPTH_FIGURES["depth"]).exists()
    # quality at the budget: the trained seeds only (none of Post-LN without warm-up at 18 layers)
    q = pd.read_csv(tables / "depth_quality.csv")
    assert q[(q["run"] == "postln_nowarmup_isqrt_L18")]["n_trained"].eq(0).all()
    assert q[(q["run"] == "preln_warmup_isqrt_L18") & (q["metric"] == "valid_bleu_tok")]["n_trained"].item() == 3
    assert set(q["lr_max"]) == {HIGH_LR, LOW_LR}
    ttq = pd.read_csv(tables / "depth_time_to_quality.csv")
    assert set(ttq["depth"]) == {6, 18} and (ttq["n_reached"] <= ttq["n_trained"]).all()
    assert set(ttq["lr_max"]) == {HIGH_LR, LOW_LR}
    # the claims per lr_max: Post-LN without warm-up fails more at 18 than at 6 only at 1e-3 (3/3 against 0/3)
    claims = pd.read_csv(tables / "depth_claims.csv")
    post = claims[claims["id"] == "depth_postln_nowarmup"].set_index("lr_max")["status"]
    assert post.to_dict() == {HIGH_LR: "inconclusive", LOW_LR: "reproduced"}
    deepnorm = claims[claims["id"] == "depth_deepnorm_warmup"]
    assert deepnorm["status"].item() == "inconclusive"  # 0 of 3: Wilson up to 0.56
    assert claims.loc[claims["id"] == "depth_prenofinal_vs_pre", "status"].item() == dp.OPEN  # not selected here
    assert "Post-LN without warm-up fails more often at 18 layers than at 6, at lr_max 0.001" in text
    # the finding opens the section: which variants trained at 18 layers without warm-up, at which rate
    finding = text.split('id="depth"', 1)[1].split('<p class="finding">', 1)[1].split("</p>", 1)[0]
    assert finding.startswith(f"Without warm-up at 18 layers and lr_max 0.002, at epoch {EPOCHS}: most seeds "
                              "trained with Pre-LN and DeepNorm; most failed with Post-LN.")
    assert "Wilson" not in finding  # the cells follow as a table, read at a glance; the sentences in answer.md
    deepest = text.split('id="depth"', 1)[1].split('id="depth-deepest"', 1)[1].split("</table>", 1)[0]
    assert "Post-LN" in deepest and "not measured" in deepest  # no gradient fit in this tree
    conf = pd.read_csv(tables / "depth_confounds.csv").set_index("variant")
    assert "residual scaling" in conf.loc["deepnorm", "differences"]
    assert conf.loc["post", "differences"] == "nothing beside the norm position"


def test_the_page_and_answer_md_lead_with_the_depth_finding(report):
    """Without Figure 4's pair, the depth question is the experiment's: the summary under the title opens with the
    finding's lead (which variants trained at 18 layers without warm-up, per lr_max), the depth section comes first,
    and answer.md holds the finding (its lead, then each variant's rate and prediction), not "No answer"."""
    exp_dir, exp, index = report
    text = index.read_text()
    lead = (f"Without warm-up at 18 layers and lr_max 0.002, at epoch {EPOCHS}: most seeds trained with Pre-LN and "
            "DeepNorm; most failed with Post-LN.")
    summary = text.split('<p class="summary">', 1)[1].split("</p>", 1)[0]
    assert summary.startswith(lead) and "No answer" not in summary
    assert text.index('<section class="question lead">\n<h2 id="depth">') < text.index('id="answer"')
    answer = (exp_dir / "report" / "answer.md").read_text().split("\n\n")
    assert answer[0] == f"# The answer: {exp.name}"
    assert answer[1].startswith(lead) and "lr_max 0.001" in answer[1]
    assert answer[2].startswith("The gradient at initialization was not fitted")
    assert "Wilson's 95% interval" in answer[2]
    assert len(answer) == 3 and "No answer" not in "".join(answer)


def test_the_post_hoc_reading_judges_the_nll_part_alone():
    """The rule's NLL part alone (``nll_only``), beside the study's rule and labelled post hoc: here a stalled
    seed's NLL (8 - BLEU/5: 7.9) is within 1.5 x the best 18-layer cell's (about 5.9) but not the best 6-layer
    one's (about 3.7), so by it Post-LN without warm-up trains at 18 layers and still fails at 6; the table gives
    both counts, the words name the cells and the claims whose status changes."""
    exp = experiment()
    epochs, at, settings = epoch_rows(), [("last", EPOCHS)], exp.analysis.report
    nll = dp.nll_only(settings)
    assert (nll.failure_bleu_fraction, nll.failure_nll_ratio) == (0.0, settings.failure_nll_ratio)
    rates = dp.rate_table(dp.seed_fates_by_depth(epochs, exp, at, "valid", settings), exp)
    rates_nll = dp.rate_table(dp.seed_fates_by_depth(epochs, exp, at, "valid", nll), exp)
    table = dp.sensitivity_table(rates, rates_nll, "last", settings.failure_nll_ratio)
    assert list(table.columns) == dp.SENSITIVITY_COLUMNS and list(table["run"]) == RUNS
    changed = table[table["n_failed"] != table["n_failed_nll_only"]].set_index("run")
    assert set(changed.index) == {"postln_nowarmup_isqrt_L18", f"postln_nowarmup_isqrt_L18{LOW}"}
    assert changed["n_failed"].eq(3).all() and changed["n_failed_nll_only"].eq(0).all()
    assert table.set_index("run").loc["postln_nowarmup_isqrt_L6", "n_failed_nll_only"] == 3
    words = dp.sensitivity_words(table, dp.claim_table(rates, "last", None, [6, 18]),
                                 dp.claim_table(rates_nll, "last", None, [6, 18]))
    assert words[0].startswith("Post hoc, not the study's rule: by the rule's NLL part alone (a seed fails when it "
                               "diverged, stopped or its NLL is above 1.5 x the best run's")
    assert words[0].endswith("the failures of 2 of 20 cells change: Post-LN without warm-up at 18 layers and "
                             "lr_max 0.002 (3 → 0 of 3); Post-LN without warm-up at 18 layers and lr_max 0.001 "
                             "(3 → 0 of 3).")
    claim = 'the claim "Post-LN without warm-up fails more often at 18 layers than at 6"'
    assert words[1].startswith(f"By it {claim} at lr_max 0.002 is not reproduced, −1.00 [")
    assert words[1].endswith("where the study's rule finds it inconclusive.")
    assert words[2].startswith(f"By it {claim} at lr_max 0.001 is inconclusive, 0 [")
    assert words[2].endswith("where the study's rule finds it reproduced.") and len(words) == 3


def test_the_page_shows_the_post_hoc_reading_apart(report):
    """The page and the tables carry the post-hoc reading under its own heading; a diverged seed fails by it too."""
    exp_dir, _, index = report
    text = index.read_text()
    tables = exp_dir / "report" / "tables"
    table = pd.read_csv(tables / "depth_rule_sensitivity.csv").set_index("run")
    assert table.loc["postln_nowarmup_isqrt_L18", ["n_failed", "n_failed_nll_only"]].tolist() == [3, 1]
    claims = pd.read_csv(tables / "depth_claims_nll_only.csv")
    assert list(claims.columns) == dp.CLAIM_COLUMNS
    section = html.unescape(text).split("<h3>Post hoc: the failure rule's NLL part alone</h3>", 1)[1]
    assert "never the study's finding" in section and "Post hoc, not the study's rule" in section
    assert 'id="depth-rule-sensitivity"' in section and 'id="depth-claims-nll-only"' in section


def test_a_test_row_below_the_floor_says_why(report):
    exp_dir, _, index = report
    test = pd.read_csv(exp_dir / "report" / "tables" / "depth_test.csv")
    post = test[test["run"] == "postln_nowarmup_isqrt_L18"].set_index("seed")
    assert post.loc[1, "test"] == "skipped: valid BLEU 0.25 below the floor 1 (eval.valid_bleu_floor)"
    assert math.isnan(post.loc[1, "bleu_tok"]) and post.loc[3, "test"] == "diverged"
    assert test[test["run"] == "preln_warmup_isqrt_L6"]["test"].eq("scored").all()
    assert "skipped: valid BLEU 0.25 below the floor 1" in index.read_text()


def test_one_depth_has_no_depth_section(tmp_path):
    exp = experiment()
    one = Experiment.from_dict({**exp.to_dict(), "select": [r for r in RUNS if r.endswith("_L6")],
                                "runs": {r: s.to_dict() for r, s in exp.runs.items() if r.endswith("_L6")}})
    exp_dir = make_tree(tmp_path, one)
    index = make_report(exp_dir, one, exp_dir / "report")
    assert 'id="depth"' not in index.read_text()
    assert not list((exp_dir / "report" / "tables").glob("depth_*.csv"))
    assert not (exp_dir / "report" / "figures" / DEPTH_FIGURES["depth"]).exists()
