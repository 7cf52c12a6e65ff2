"""The depth study's report (analysis/sections/depth.py) on a fabricated results tree: Wilson intervals, failure
against the best cell of the same depth, the test row of a checkpoint below the valid-BLEU floor, the section only
with runs of more than one depth."""

from __future__ import annotations

import json
import math
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
RUNS = [f"{v}_{w}_isqrt_L{d}" for d in (6, 18) for v in ("postln", "preln", "deepnorm") for w in ("warmup", "nowarmup")]
FLOOR = 1.0
# Post-LN without warm-up at 18 layers: seed 3 diverges in epoch 2, seeds 1 and 2 stay near 0 BLEU.
DIVERGE = {("postln_nowarmup_isqrt_L18", 3): 2}


def experiment() -> Experiment:
    c = config.load_config([REPO / "config.yaml", REPO / "presets" / "depth-cpu.yaml"])
    c["select"], c["defaults"]["train"]["epochs"], c["seeds"] = RUNS, EPOCHS, list(SEEDS)
    config.validate_config(c)
    return config.experiment(c)


def bleu(run: str, seed: int, epoch: int) -> float:
    """At 6 layers about 20, at 18 about 9 (below half the 6-layer best: failed against it, trained against the
    best 18-layer cell), Post-LN without warm-up at 18 layers about 0.3."""
    if run == "postln_nowarmup_isqrt_L18":
        return 0.2 + 0.05 * seed
    base = 20.0 if run.endswith("_L6") else 9.0
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


def test_failure_is_judged_against_the_best_cell_of_the_same_depth():
    exp = experiment()
    rows = [{"run": r, "seed": s, "epoch": e, "status": "ok", "valid_bleu_tok": bleu(r, s, e),
             "valid_nll_base2": split_scores(bleu(r, s, e))["nll_base2"]}
            for r in RUNS for s in SEEDS for e in range(1, EPOCHS + 1)]
    epochs = pd.DataFrame(rows)
    at = [("last", EPOCHS)]
    fates = dp.seed_fates_by_depth(epochs, exp, at, "valid", exp.analysis.report)
    deep = fates[fates["depth"] == 18]
    assert set(deep["best_bleu_run"]) == {"deepnorm_nowarmup_isqrt_L18"}  # the best at 18 layers, not a 6-layer run
    failed = set(deep[deep["fate"] == bu.DID_NOT_TRAIN]["run"])
    assert failed == {"postln_nowarmup_isqrt_L18"}
    # against every run at once (the study's rule without depths) every 18-layer run would have failed
    flat = bu.seed_fates(epochs, RUNS, at, "valid", exp.analysis.report)
    assert set(flat[flat["fate"] == bu.DID_NOT_TRAIN]["run"]) == {r for r in RUNS if r.endswith("_L18")}
    rates = dp.rate_table(fates, exp).set_index("run")
    assert rates.loc["postln_nowarmup_isqrt_L18", "failure_rate"] == 1.0
    assert rates.loc["deepnorm_warmup_isqrt_L18", "failure_rate"] == 0.0
    assert rates.loc["deepnorm_warmup_isqrt_L18", "failure_high"] == pytest.approx(dp.wilson(0, 3)[2])


def test_the_depth_section_and_its_tables(report):
    exp_dir, exp, index = report
    text = index.read_text()
    assert 'id="depth"' in text and "Depth: which variants train deep" in text
    tables = exp_dir / "report" / "tables"
    rates = pd.read_csv(tables / "depth_rates.csv")
    last = rates[rates["epoch"] == EPOCHS].set_index("run")
    r = last.loc["postln_nowarmup_isqrt_L18"]
    assert (r["n_diverged"], r["n_failed"], r["n_with_fate"]) == (1, 3, 3)
    assert r["divergence_rate"] == pytest.approx(1 / 3) and r["divergence_low"] == pytest.approx(dp.wilson(1, 3)[1])
    assert last.loc["deepnorm_nowarmup_isqrt_L18", "failure_rate"] == 0.0
    assert (exp_dir / "report" / "figures" / DEPTH_FIGURES["depth"]).exists()
    # quality at the budget: the trained seeds only (none of Post-LN without warm-up at 18 layers)
    q = pd.read_csv(tables / "depth_quality.csv")
    assert q[(q["run"] == "postln_nowarmup_isqrt_L18")]["n_trained"].eq(0).all()
    assert q[(q["run"] == "preln_warmup_isqrt_L18") & (q["metric"] == "valid_bleu_tok")]["n_trained"].item() == 3
    ttq = pd.read_csv(tables / "depth_time_to_quality.csv")
    assert set(ttq["depth"]) == {6, 18} and (ttq["n_reached"] <= ttq["n_trained"]).all()
    # the claims: Post-LN without warm-up fails more at 18 than at 6 (3/3 against 0/3: resolved)
    claims = pd.read_csv(tables / "depth_claims.csv").set_index("id")
    assert claims.loc["depth_postln_nowarmup", "status"] == "reproduced"
    assert claims.loc["depth_deepnorm_warmup", "status"] == "inconclusive"  # 0 of 3: Wilson up to 0.56
    assert claims.loc["depth_prenofinal_vs_pre", "status"] == dp.OPEN  # pre_nofinal not selected here
    conf = pd.read_csv(tables / "depth_confounds.csv").set_index("variant")
    assert "residual scaling" in conf.loc["deepnorm", "differences"]
    assert conf.loc["post", "differences"] == "nothing beside the norm position"


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
