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

PUBLISHED = REPO / "published" / "study-cpu"  # where published results live: no rule writes there
SHOWN_AS = "published/study-cpu"


def _section(text: str) -> str:
    return text.split(rr.BEGIN, 1)[1].split(rr.END, 1)[0]


def test_readme_results_match_the_published_report() -> None:
    """With the study's report committed, the README's section is exactly what its tables generate; without
    it, the section says the study is not published yet (and carries no numbers of its own)."""
    readme = REPO / "README.md"
    if (PUBLISHED / "tables").is_dir():
        assert rr.update_readme(readme, PUBLISHED, SHOWN_AS, check=True)
    else:
        body = _section(readme.read_text(encoding="utf-8"))
        assert "not been published yet" in body, body
        assert not any(ch.isdigit() for ch in body.replace("study-cpu", "")), body


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
    readme.write_text(f"# x\n\n{rr.BEGIN}\nold\n{rr.END}\n\nafter\n", encoding="utf-8")
    assert not rr.update_readme(readme, report, "results/x/report")
    assert rr.update_readme(readme, report, "results/x/report", check=True)
    assert readme.read_text(encoding="utf-8").endswith(f"{rr.END}\n\nafter\n")
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
