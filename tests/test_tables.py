"""The tidy tables: per-epoch training facts, the long score table and the run facts (lnrepro.analysis.tables)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from fixtures_grids import demo_with_grids
from lnrepro.analysis import aggregate as ag
from lnrepro.analysis import tables as tb
from lnrepro.io import csv_text
from lnrepro.train.schedule import lr_at

EXP = demo_with_grids()
RUN = "postln_warmup_isqrt"
SPLITS = ("valid", "test")


def epochs() -> pd.DataFrame:
    """Seed 1 trains three epochs of 10 updates; seed 2 diverges at update 13 in epoch 2."""
    rows = []
    for seed, statuses in ((1, ["ok", "ok", "not evaluated"]), (2, ["ok", "diverged", "diverged"])):
        for ep, st in enumerate(statuses, 1):
            row = {"run": RUN, "seed": seed, "epoch": ep, "status": st,
                   "train_status": "diverged" if st == "diverged" else "ok",
                   "updates": 12.0 if st == "diverged" else 10.0 * ep, "train_wall_s": 1.5 * ep}
            row.update({f"{sp}_{m}": (ep + 0.123456789 if st == "ok" else math.nan)
                        for sp in SPLITS for m in ag.SPLIT_METRICS})
            rows.append(row)
    return pd.DataFrame(rows)


SUMMARIES = pd.DataFrame([
    {"run": RUN, "seed": 1, "status": "completed", "updates": 30.0, "diverged_update": math.nan,
     "target_tokens_per_epoch": 1000.0, "target_tokens_trained": 3000.0},
    {"run": RUN, "seed": 2, "status": "diverged", "updates": 12.0, "diverged_update": 13.0,
     "target_tokens_per_epoch": 1000.0, "target_tokens_trained": 1210.0},
])


def test_progress_tokens_lr_and_status():
    p = tb.progress(epochs(), SUMMARIES, EXP).set_index(["seed", "epoch"])
    assert p.loc[(1, 2), "target_tokens"] == 2000 and p.loc[(1, 3), "target_tokens"] == 3000
    assert p.loc[(2, 2), "target_tokens"] == 1210  # where training ended
    s = EXP.runs[RUN]
    assert p.loc[(1, 2), "lr"] == lr_at(19, 2, s.schedule, s.optim.lr_max)  # the epoch's last update
    assert math.isnan(p.loc[(2, 2), "lr"])  # not trained
    assert p.loc[(2, 2), "status"] == "diverged at update 13" and p.loc[(1, 3), "status"] == "not evaluated"
    assert p.loc[(1, 1), "status"] == "ok"
    assert math.isnan(tb.progress(epochs(), SUMMARIES.iloc[0:0], EXP).loc[0, "target_tokens"])  # no summary yet


def test_scores_long_has_every_run_seed_epoch_split_metric():
    e = epochs()
    long = tb.scores_long(e, tb.progress(e, SUMMARIES, EXP), EXP)  # both splits at every epoch
    assert list(long.columns) == tb.LONG_COLUMNS
    assert len(long) == len(e) * (len(SPLITS) * len(ag.SPLIT_METRICS) + len(tb.TRAIN_METRICS))
    first = long[(long["seed"] == 1) & (long["epoch"] == 1)]
    assert list(first["split"]) == ["valid"] * 6 + ["test"] * 6 + ["train"] * 5
    assert list(first["metric"]) == [*ag.SPLIT_METRICS] * 2 + list(tb.TRAIN_METRICS)
    v = long.set_index(["seed", "epoch", "split", "metric"])["value"]
    assert v[(1, 1, "valid", "bleu_tok")] == 1.12346  # 6 significant digits, as every table
    assert v[(1, 1, "train", "updates")] == 10 and isinstance(v[(1, 1, "train", "updates")], int)
    assert v[(2, 2, "train", "status")] == "diverged at update 13"
    assert math.isnan(v[(2, 2, "valid", "loss")])
    text = csv_text(long)
    assert text.startswith("run,seed,epoch,split,metric,value\n")
    assert f"{RUN},2,2,train,status,diverged at update 13\n" in text


def test_run_facts_config_and_execution():
    wall = pd.DataFrame([{"run": RUN, "seed": s, "train_wall_s": w, "s_per_update": w / 30, "tokens_per_s": 100.0}
                         for s, w in ((1, 3.0), (2, 5.0))])
    execution = {RUN: {"seeds": [1, 2], "device": "Fake CPU", "torch": "2.13.0", "threads": "1", "precision": "fp32"}}
    f = tb.run_facts(EXP, execution, wall).set_index("run")
    assert list(f.index) == list(EXP.select)
    assert list(f.columns[:4]) == ["grid", "model.norm", "schedule.warmup", "schedule.decay"]
    row = f.loc[RUN]
    facts = (row["device"], row["torch"], row["seeds_trained"], row["train_wall_s"])
    assert facts == ("Fake CPU", "2.13.0", "1 2", 4.0)
    assert row["optim.betas"] == "0.9 0.98" and row["seeds"] == " ".join(map(str, EXP.seeds_of(RUN)))
    grid_runs = [r for r in EXP.select if tb.grid_of(EXP, r)]
    assert grid_runs and all(f.loc[r, "grid"] for r in grid_runs)
    other = next(r for r in EXP.select if r not in execution)
    assert f.loc[other, "seeds_trained"] == "" and math.isnan(f.loc[other, "train_wall_s"])
    assert f.loc[RUN, "schedule.warmup_updates"] == pytest.approx(EXP.runs[RUN].schedule.warmup_updates)


def test_convergence_by_the_slope_of_the_validation_nll():
    """Per seed the least-squares slope of the validation NLL over the last window, their mean with a
    t interval over seeds; converged only when the interval lies within the tolerance, "annealed" when a step
    decay cut the learning rate (the flat curve is the annealing), "still improving" below it; an epoch with no
    valid score is skipped rather than counted."""
    from types import SimpleNamespace

    def sched(decay: str, epochs=None):
        return SimpleNamespace(schedule=SimpleNamespace(decay=decay, decay_epochs=epochs, decay_factor=0.1))

    exp = SimpleNamespace(select=["flat", "step", "falling", "short"],
                          runs={"flat": sched("isqrt"), "step": sched("step", (3,)), "falling": sched("isqrt"),
                                "short": sched("isqrt")})
    rows = []
    curves = {"flat": [6.0, 5.0, 4.002, 4.001, 4.0], "step": [6.0, 5.0, 4.002, 4.001, 4.0],
              "falling": [6.0, 5.0, 4.4, 4.2, 4.0], "short": [5.0, 4.0, math.nan, math.nan, math.nan]}
    for run, losses in curves.items():
        for seed, noise in ((1, 0.001), (2, -0.001)):
            rows += [{"run": run, "seed": seed, "epoch": ep, "status": "ok" if not math.isnan(v) else "not evaluated",
                      "valid_nll_base2": v + noise * (ep % 2)} for ep, v in enumerate(losses, 1)]
    rows.append({"run": "flat", "seed": 1, "epoch": 6, "status": "ok", "valid_nll_base2": math.nan})
    c = ag.convergence_table(pd.DataFrame(rows), exp, "valid", 3, 0.005).set_index("run")
    assert c.loc["flat", "epochs"] == "3-5" and c.loc["flat", "label"] == ag.CONVERGED
    assert c.loc["flat", "slope"] == pytest.approx(-0.001) and c.loc["flat", "n_seeds"] == 2
    assert c.loc["flat", "slope_low"] < -0.001 < c.loc["flat", "slope_high"]
    assert c.loc["step", "label"] == ag.ANNEALED and c.loc["step", "lr_cut"] == "x0.1 from epoch 3"
    assert c.loc["falling", "label"] == ag.IMPROVING
    assert c.loc["falling", "rel_slope"] == pytest.approx(-0.2 / 4.2)
    assert c.loc["short", "label"] == "" and pd.isna(c.loc["short", "slope"])
    assert "+-0.5% an epoch" in ag.convergence_rule(3, 0.005)
