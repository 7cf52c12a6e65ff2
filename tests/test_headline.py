"""The Answer's headline (lnrepro.analysis.render.headline): three to five sentences a researcher can quote."""

from __future__ import annotations

import dataclasses
import re

import pandas as pd
import pytest

from lnrepro.analysis.build import build
from lnrepro.analysis.results import read_results
from lnrepro.analysis.render import headline as hl
from lnrepro.analysis.sections.tuned import BRACKETED, ONE_VALUE
from lnrepro.analysis.stats import equivalence as eq
from lnrepro.config.settings import Experiment
from test_report import INTERVAL, _depth, make_tree


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    exp_dir, exp = make_tree(tmp_path_factory.mktemp("headline"))
    return build(read_results(exp_dir, exp), exp)


def _sentences(text: str) -> list[str]:
    return re.split(r"(?<=[.:;])\s+(?=[A-Z])", text)


def test_a_factorial_study_leads_with_speed_and_ends_with_the_curves(data):
    """Speed first (times fewer epochs at the middle target, with its interval), the curves' state last; every
    sentence reads aloud: at most one interval, no parentheses inside parentheses."""
    said = hl.headline(data)
    assert 2 <= len(said) <= hl.MOST
    assert said[0].startswith("Yes: Pre-LN without warm-up needs ")
    assert " times fewer epochs than Post-LN with warm-up to reach 75% of the lower arm's final validation BLEU" \
        in said[0]
    assert said[-1] == hl.curves(data) and said[-1].startswith("At epoch 3, the last, Post-LN with warm-up is ")
    pieces = [s for text in said for s in _sentences(text)]
    assert [s for s in pieces if len(INTERVAL.findall(s)) > 1] == []
    assert [s for s in pieces if _depth(s) > 1] == []


def _decided(data, verdict: str, difference: float):
    """``data`` as a study of the pair alone whose valid-BLEU end-point test came out ``verdict``."""
    table = data.equivalence.copy()
    row = table["metric"] == "valid_bleu_tok"
    table.loc[row, ["verdict", "difference", "ci90_low", "ci90_high", "n_a", "n_b", "margin"]] = \
        [verdict, difference, difference - 0.4, difference + 0.4, 8, 8, 1.0]
    answer = dataclasses.replace(data.answer, paths={})
    return dataclasses.replace(data, answer=answer, equivalence=table)


@pytest.mark.parametrize("verdict,difference,words", [
    (eq.DIFFERENT, 1.2, "ends better than Post-LN with warm-up, not merely as good: its validation BLEU is higher by "
                        "1.2 BLEU (90% interval 0.8 to 1.6, 8 and 8 seeds), not within the pre-stated equivalence "
                        "margin of ±1 BLEU and away from 0."),
    (eq.DIFFERENT, -1.2, "ends worse than Post-LN with warm-up, not merely as good: its validation BLEU is lower by "
                         "1.2 BLEU"),
    (eq.EQUIVALENT, 0.1, "ends as good as Post-LN with warm-up: the validation BLEU differs by +0.1 BLEU (90% "
                         "interval −0.3 to 0.5, 8 and 8 seeds), within the pre-stated equivalence margin of ±1 BLEU."),
])
def test_a_study_of_the_pair_whose_test_decides_leads_with_its_verdict(data, verdict, difference, words):
    """No path separates the factors and the end-point test decides: the verdict in words leads, the curves end."""
    d = _decided(data, verdict, difference)
    said = hl.headline(d)
    assert said[0].startswith("At epoch 3, the last, at a shared lr_max of 0.003, not tuned, Pre-LN without warm-up "
                              + words.split(":")[0])
    assert words in said[0]
    assert said[-1] == hl.curves(d) and len(said) <= hl.MOST


def test_an_undecided_test_leaves_speed_first(data):
    """An undetermined end-point test does not lead, even for the pair alone."""
    d = _decided(data, eq.UNDETERMINED, 0.5)
    assert hl.headline(d)[0] == hl.speed(d)


def test_runs_judged_against_a_reference_in_words(data):
    """A run of analysis.report.failure_reference: how many of its seeds trained, against its reference."""
    fates = pd.DataFrame([{"run": "postln_nowarmup_isqrt", "budget": "epoch 3", "fate": f} for f in
                          ("trained", "diverged")])
    e = data.experiment.to_dict()
    e["analysis"]["report"]["failure_reference"] = {"postln_nowarmup_isqrt": "postln_warmup_isqrt"}
    from lnrepro.config.settings import Experiment

    study = dataclasses.replace(data.study, seed_fates=fates)
    d = dataclasses.replace(data, experiment=Experiment.from_dict(e), study=study)
    [said] = hl.references(d)
    assert said.startswith("At lr_max ") and ", Post-LN without warm-up trained in 1 of 2 seeds, judged against " \
        "Post-LN with warm-up at the same lr_max" in said


def test_a_ratio_whose_interval_reaches_1_is_not_clearly_faster(data):
    """The middle target's ratio of epochs with an upper bound at or above 1: "Not clearly", with the interval."""
    t = data.answer.time_to_quality.copy()
    head = ((t["pair"] == hl.FIGURE4) & (t["arm"] == "ratio") & (t["metric"] == f"{data.agg.split}_bleu_tok")
            & (t["fraction"] == hl.middle_fraction(data.answer.settings)))
    assert head.sum() == 1
    t.loc[head, ["status", "epochs", "epochs_low", "epochs_high"]] = [hl.REACHED, 0.9, 0.7, 1.2]
    d = dataclasses.replace(data, answer=dataclasses.replace(data.answer, time_to_quality=t))
    said = hl.speed(d)
    assert said.startswith("Not clearly: to reach 75% of the lower arm's final validation BLEU")
    assert "Pre-LN without warm-up needs 0.9 of the epochs Post-LN with warm-up needs" in said
    assert said.endswith("a ratio whose interval does not lie below 1.")


def _tuned(data, pair_lr: float, best_lr: dict[str, float]):
    """``data`` with both arms of the pair at ``pair_lr`` and a bracketed lr_max grid per arm whose best trial
    has ``best_lr[arm run]`` (a grid of one value beside them, which tunes nothing)."""
    e = data.experiment.to_dict()
    rows = []
    for run, lr in best_lr.items():
        e["runs"][run]["optim"]["lr_max"] = pair_lr
        e["runs"][f"{run}__best"] = {**e["runs"][run], "optim": {**e["runs"][run]["optim"], "lr_max": lr}}
        rows.append({"grid": f"tune_{run}", "axis": "optim.lr_max", "best_run": f"{run}__best", "best_value": lr,
                     "position": BRACKETED})
    rows.append({"grid": "one", "axis": "optim.lr_max", "best_run": "postln_nowarmup_isqrt", "best_value": 1e-3,
                 "position": ONE_VALUE})
    study = dataclasses.replace(data.study, brackets=pd.DataFrame(rows))
    return dataclasses.replace(data, experiment=Experiment.from_dict(e), study=study)


def test_the_verdict_says_whether_each_arm_is_at_its_tuned_rate(data):
    """The verdict's condition: a shared rate that neither arm's grid chose is called untuned, with where each
    grid puts its best; arms at their grids' best are called tuned; a grid of one value tunes nothing."""
    pair = [data.answer.pair.from_run, data.answer.pair.to_run]
    assert hl.rates(_tuned(data, 2e-3, {r: 4e-3 for r in pair})) == \
        ", at a shared lr_max of 0.002, untuned (each arm's grid does best at 0.004),"
    assert hl.rates(_tuned(data, 2e-3, dict(zip(pair, (4e-3, 2e-3))))) == \
        (", at a shared lr_max of 0.002, untuned (Post-LN with warm-up's grid does best at 0.004; Pre-LN without "
         "warm-up's grid does best at 0.002),")
    assert hl.rates(_tuned(data, 4e-3, {r: 4e-3 for r in pair})) == ", each arm at its tuned lr_max (0.004 and 0.004),"
    d = _decided(_tuned(data, 2e-3, {r: 4e-3 for r in pair}), eq.DIFFERENT, 1.2)
    assert hl.verdict(d, "valid_bleu_tok", True).startswith(
        "At epoch 3, the last, at a shared lr_max of 0.002, untuned (each arm's grid does best at 0.004), Pre-LN "
        "without warm-up ends better than ")


def test_the_summary_states_the_verdict_before_the_counts(data):
    """The line under the title opens with the headline's first sentence, then the claims' tally, then the runs
    grouped by how many seeds each trains (every selected run counted once)."""
    from collections import Counter

    from lnrepro.analysis.numbers import first_sentence
    from lnrepro.analysis.render.report import summary

    e = data.experiment
    text = summary(data)
    assert text.startswith(first_sentence(hl.headline(data)[0]))
    assert text.index("Of the paper's") > len(first_sentence(hl.headline(data)[0]))
    groups = Counter(len(e.seeds_of(run)) for run in e.select)
    stated = {int(k): int(n) for n, k in re.findall(r"(\d+) runs? of (\d+) seeds?", text)}
    assert stated == dict(groups) and text.endswith(f" on {e.data.dataset}.")
