"""The README's Results section is generated from the published report's tables (lnrepro.analysis.readme_results)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO
from lnrepro.analysis import readme_results as rr
from lnrepro.analysis.report import make_report
from lnrepro.config import Experiment
from lnrepro.errors import LnReproError
from test_report import DIVERGE, TUNED_GRIDS, make_tree

STUDY = rr.PARTS["study"]


def _section(text: str, part: str = "study") -> str:
    return text.split(rr.PARTS[part].begin, 1)[1].split(rr.PARTS[part].end, 1)[0]


@pytest.mark.parametrize("part", list(rr.PARTS))
def test_readme_results_match_the_published_report(part: str) -> None:
    """With a part's report committed where published results live (a folder no rule writes), the README's part
    is exactly what its tables generate; without it, the part says the study is not published yet (and carries
    no numbers of its own)."""
    readme, shown_as = REPO / "README.md", rr.PARTS[part].published
    if (REPO / shown_as / "tables").is_dir():
        assert rr.update_readme(readme, REPO / shown_as, shown_as, check=True, part=part)
    else:
        body = _section(readme.read_text(encoding="utf-8"), part)
        assert "not been published yet" in body, body
        assert not any(ch.isdigit() for ch in body), body


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """A report of fabricated run outputs (tests/test_report.py's tree, with a tuned pair and a gradinit fit)."""
    root = tmp_path_factory.mktemp("rr")
    exp_dir, exp = make_tree(root, diverge=DIVERGE)
    exp = Experiment.from_dict({**exp.to_dict(), "grids": TUNED_GRIDS})
    make_report(exp_dir, exp, exp_dir / "report")
    pd.DataFrame([{"norm": "post", "stack": "dec", "layer": "last", "param": "fc2", "statistic": "expected_grad_fro",
                   "b": 0.0123, "b_low": -0.05, "b_high": 0.07, "c": 0.4, "depths": "2;3;4", "seeds": "1;2;3",
                   "n": 9, "theory_b": 0.0, "interval": "OLS"}]).to_csv(exp_dir / "report" / "tables" / "gradinit_fit.csv",
                                                                           index=False)
    return exp_dir / "report"


def test_results_section_is_filled_from_the_tables(report: Path, tmp_path: Path) -> None:
    """Each item's numbers are cells of the report's tables."""
    body = rr.results_markdown(report, "results/x/report")
    tables = report / "tables"
    conf = pd.read_csv(tables / "confounds.csv")
    fig4 = conf[conf["comparison"] == "figure4"].iloc[0]
    assert f"**Confound verdict for `figure4`**: {fig4['verdict']}" in body
    runs = [r.strip() for r in fig4["runs"].split(",")]
    per_epoch = pd.read_csv(tables / "run_epochs.csv")
    first = per_epoch[(per_epoch["run"] == runs[0]) & (per_epoch["epoch"] == 1)].iloc[0]
    assert f"{first['valid_bleu_tok_mean']:.2f} ± {first['valid_bleu_tok_std']:.2f}" in body
    effects = pd.read_csv(tables / "effects.csv")
    budget = pd.read_csv(tables / "budgets.csv").iloc[0]["budget"]
    norm = effects[(effects["budget"] == budget) & (effects["effect"] == "norm")
                   & (effects["metric"] == "valid_loss_base2")].iloc[0]
    assert f"| norm | {norm['estimate']:.2f} " in body
    tuned = pd.read_csv(tables / "tuned.csv").iloc[0]
    assert f"| {tuned['run_a']} | {tuned['run_b']} | {tuned['metric']} |" in body
    assert "| post | dec last fc2 | 0.012 | [-0.050, 0.070] | 0.0 | 2;3;4 |" in body
    for run in pd.read_csv(tables / "failures.csv")["run"]:
        assert f"| {run} |" in body
    conv = pd.read_csv(tables / "convergence.csv").set_index("run")
    for run in runs:
        c = conv.loc[run]
        if pd.isna(c["slope"]):
            assert f"{run}: fewer scored epochs than the window" in body
        else:
            assert (f"{run} {c['nll_first']:.2f} to {c['nll_last']:.2f} bits over epochs {c['epochs']}, "
                    f"{100 * c['rel_slope']:.2f}% an epoch") in body and c["label"] in body

    # update then check: the README copy is rewritten once, then up to date; a stale one is refused by --check
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{STUDY.begin}\nold\n{STUDY.end}\n\nafter\n", encoding="utf-8")
    assert not rr.update_readme(readme, report, "results/x/report")
    assert rr.update_readme(readme, report, "results/x/report", check=True)
    assert readme.read_text(encoding="utf-8").endswith(f"{STUDY.end}\n\nafter\n")
    readme.write_text(readme.read_text(encoding="utf-8").replace("±", "+-", 1), encoding="utf-8")
    with pytest.raises(LnReproError, match="differs"):
        rr.update_readme(readme, report, "results/x/report", check=True)


def test_the_section_leads_with_answer_md(report: Path, tmp_path: Path) -> None:
    """A report with answer.md: the section starts with its sentences, under "The answer at this scale"; a report
    written before answer.md (the published study's): the same section without them, nothing in their place."""
    body = rr.results_markdown(report, "results/x/report")
    paragraphs = (report / "answer.md").read_text(encoding="utf-8").rstrip("\n").split("\n\n")[1:]
    assert body.startswith("**The answer at this scale** (`answer.md`, the report's Answer section):\n\n"
                           + "\n\n".join(paragraphs) + "\n\nGenerated from `results/x/report`")
    assert any(p.startswith("No equivalence test of validation BLEU") for p in paragraphs)
    before = tmp_path / "before"
    shutil.copytree(report / "tables", before / "tables")
    older = rr.results_markdown(before, "results/x/report")
    assert older.startswith("Generated from `results/x/report`") and "The answer at this scale" not in older
    assert body.endswith(older)


def test_a_missing_table_is_named(report: Path, tmp_path: Path) -> None:
    copy = tmp_path / "report"
    shutil.copytree(report / "tables", copy / "tables")
    (copy / "tables" / "effects.csv").unlink()
    with pytest.raises(LnReproError, match=r"effects\.csv: missing"):
        rr.results_markdown(copy, "r")


@pytest.fixture(scope="module")
def endpoint_report(tmp_path_factory) -> Path:
    """The fabricated report with tuning grids and a run judged against a named one (as the end-point preset
    judges Post-LN without warm-up at the paper's learning rate against Post-LN with warm-up)."""
    root = tmp_path_factory.mktemp("ep")
    exp_dir, exp = make_tree(root, diverge=DIVERGE)
    d = exp.to_dict()
    d["analysis"]["report"]["failure_reference"] = {"postln_nowarmup_isqrt": "postln_warmup_isqrt"}
    exp = Experiment.from_dict({**d, "grids": TUNED_GRIDS})
    make_report(exp_dir, exp, exp_dir / "report")
    return exp_dir / "report"


def test_the_endpoint_part(endpoint_report: Path) -> None:
    """The end-point part: the Answer, Figure 4's pair, the equivalence table, whether each grid brackets its
    best trial, tuned against tuned, and the seeds judged against a named run, each from its table."""
    body = rr.results_markdown(endpoint_report, "published/endpoint-cpu", part="endpoint")
    tables = endpoint_report / "tables"
    assert body.startswith("**The answer at this scale**")
    assert "**Figure 4 at this scale**" in body
    eq = pd.read_csv(tables / "equivalence.csv")
    assert f"**Equivalence at the last epoch** ({eq['difference_of'].iloc[0]};" in body
    for r in eq.itertuples():
        assert f"| {r.metric} | {r.epoch} |" in body and r.verdict in body
    brackets = pd.read_csv(tables / "tuned_brackets.csv", keep_default_na=False)
    for grid in brackets["grid"].unique():
        assert f"- Grid {grid}: its best trial" in body
    assert "**Tuned against tuned**" in body
    fates = pd.read_csv(tables / "seed_fates.csv")
    last = pd.read_csv(tables / "budgets.csv").iloc[0]["budget"]
    judged = fates[(fates["budget"] == last) & (fates["reference"].fillna("") != "")]
    assert set(judged["run"]) == {"postln_nowarmup_isqrt"}
    for r in judged.itertuples():
        assert (f"| {r.run} | {r.seed} | {rr._num(r.bleu)} | {rr._num(r.nll)} | postln_warmup_isqrt | "
                f"{rr._num(r.reference_bleu)} | {rr._num(r.reference_nll)} | {r.fate} |") in body
    assert "**Divergence and failure per run**" in body


def test_a_long_run_shows_its_milestone_epochs() -> None:
    assert rr.milestone_epochs(list(range(1, 26))) == [1, 2, 5, 10, 15, 20, 25]
    assert rr.milestone_epochs(list(range(1, 13))) == [1, 2, 5, 10, 12]
    assert rr.milestone_epochs([1, 2, 3]) == [1, 2, 3]


def test_the_depth_part(tmp_path_factory) -> None:
    """The depth part: the failure and divergence rates at the last epoch with their intervals and the design's
    resolution, the quality of the seeds that trained, the claims, and what the study cannot show."""
    from lnrepro.analysis.depth import resolution_text
    from test_depth import experiment as depth_experiment
    from test_depth import make_tree as depth_tree

    exp = depth_experiment()
    exp_dir = depth_tree(tmp_path_factory.mktemp("depth"), exp)
    make_report(exp_dir, exp, exp_dir / "report")
    report = exp_dir / "report"
    body = rr.results_markdown(report, "published/depth-cpu", part="depth")
    rates = pd.read_csv(report / "tables" / "depth_rates.csv")
    at = rates[rates["budget"] == pd.read_csv(report / "tables" / "budgets.csv").iloc[0]["budget"]]
    assert len(at) == 12
    r = at[at["run"] == "postln_nowarmup_isqrt_L18"].iloc[0]
    assert (f"| {r['label']} | 18 | off | {r['n_diverged']} of {r['n_with_fate']} [{rr._num(r['divergence_low'])}, "
            f"{rr._num(r['divergence_high'])}] | {r['n_failed']} of {r['n_with_fate']} [{rr._num(r['failure_low'])}, "
            f"{rr._num(r['failure_high'])}] |") in body
    assert f"Resolution: {resolution_text(at['n_with_fate'].tolist())}." in body
    for claim in pd.read_csv(report / "tables" / "depth_claims.csv")["claim"]:
        assert f"| {claim} |" in body
    assert "**Quality of the seeds that trained**" in body
    assert "What this cannot show: one dataset and one width" in body and "depths 6, 18 and 3 seeds a cell" in body
