"""The README's results are generated from the published reports' tables (lnrepro.analysis.render.readme_results)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, figures_unsaved
from lnrepro.analysis.render import readme_results as rr
from lnrepro.analysis.render.report import make_report
from lnrepro.errors import LnReproError
from test_report import DIVERGE, make_tree

STUDY = rr.PARTS["study"]
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _section(text: str, part: str = "study") -> str:
    return text.split(rr.PARTS[part].begin, 1)[1].split(rr.PARTS[part].end, 1)[0]


def numbers(text: str, *names: str) -> list[str]:
    """The numbers a text shows, leaving out those inside ``names`` (run names, paths, the scale)."""
    for name in sorted(names, key=len, reverse=True):
        text = text.replace(name, " ")
    return NUMBER.findall(text)


@pytest.mark.parametrize("part", list(rr.PARTS))
def test_readme_results_match_the_published_report(part: str) -> None:
    """With a part's report committed where published results live (a folder no rule writes), the README's part
    is exactly what its tables generate; without it, the part is the generated line that says the study is not
    published yet (and carries no numbers but its store's unit counts, where the study has a store)."""
    readme, shown_as = REPO / "README.md", rr.PARTS[part].published
    assert rr.update_readme(readme, REPO / shown_as, shown_as, check=True, part=part)
    body = _section(readme.read_text(encoding="utf-8"), part)
    assert len(body.split()) <= 250, body
    if not (REPO / shown_as / "tables").is_dir():
        assert "not been published yet" in body, body
        counts = re.sub(r"holds \d+ of its \d+ units", "", body)
        assert (counts != body) == (REPO / rr.PARTS[part].store / "store.json").exists(), body
        assert not any(ch.isdigit() for ch in counts), body


def test_the_study_part_states_its_edition() -> None:
    """The published study's part is labelled as the second edition with the settings it ran with, and
    the README's study part leads with the Answer and links the report's headline figure and page."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    before = text.split(STUDY.begin, 1)[0]
    label = before[before.index("**The CPU study, second edition**"):]
    for fact in ("fp32", "published/study-cpu/", "first edition"):
        assert fact in label, fact
    body = _section(text)
    verdict = (REPO / STUDY.published / "answer.md").read_text(encoding="utf-8").split("\n\n")[1].strip()
    assert body.strip().startswith(verdict), body
    assert f"![Figure 4's pair per epoch]({STUDY.published}/figures/figure4_vs_epoch.png)" in body
    assert f"({STUDY.published}/index.html)" in body


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """A report of fabricated run outputs (tests/test_report.py's tree, one seed diverged)."""
    exp_dir, exp = make_tree(tmp_path_factory.mktemp("rr"), diverge=DIVERGE)
    with figures_unsaved():  # the part reads the tables and answer.md; it names the figure, never opens it
        make_report(exp_dir, exp, exp_dir / "report")
    return exp_dir / "report"


@pytest.fixture(scope="module")
def before(report: Path, tmp_path_factory) -> Path:
    """The same report's tables without answer.md: a report written before the Answer section (the published
    study's)."""
    copy = tmp_path_factory.mktemp("before") / "report"
    shutil.copytree(report / "tables", copy / "tables")
    return copy


def test_results_section_is_filled_from_the_tables(before: Path, tmp_path: Path) -> None:
    """Without answer.md: Figure 4's pair at epoch 2 and at the last epoch (seed mean ± sd), its confound
    verdict and whether each run had stopped improving, each number a cell of the report's tables; then the
    headline figure and the link."""
    body = rr.results_markdown(before, "results/x/report")
    tables = before / "tables"
    conf = pd.read_csv(tables / "confounds.csv")
    fig4 = conf[conf["comparison"] == "figure4"].iloc[0]
    assert f"The comparison is {fig4['verdict']}: besides {fig4['factor']} the pair differs in " \
           f"{fig4['also differs (confounds)']}." in body
    runs = [r.strip() for r in fig4["runs"].split(",")]
    per_epoch = pd.read_csv(tables / "run_epochs.csv")
    pair = per_epoch[per_epoch["run"].isin(runs)]
    last = int(pair["epoch"].max())
    shown = {f"{v:.2f}" for m in ("valid_bleu_tok", "valid_loss_base2") for stat in ("mean", "std")
             for v in pair[pair["epoch"].isin([2, last])][f"{m}_{stat}"]}
    for epoch in (2, last):
        for run in runs:
            r = pair[(pair["run"] == run) & (pair["epoch"] == epoch)].iloc[0]
            assert (f"`{run}` {r['valid_bleu_tok_mean']:.2f} ± {r['valid_bleu_tok_std']:.2f} "
                    f"({r['valid_loss_base2_mean']:.2f} ± {r['valid_loss_base2_std']:.2f})") in body
    conv = pd.read_csv(tables / "convergence.csv").set_index("run")
    for run in runs:
        c = conv.loc[run]
        assert (f"of `{run}` moved {100 * c['rel_slope']:.2f}% an epoch over epochs {c['epochs']} "
                f"({c['nll_first']:.2f} to {c['nll_last']:.2f} bits: {c['label']})") in body
    allowed = (shown | {str(e) for e in (2, last)} | {str(int(n)) for n in pair["n_ok"]}
               | {f"{v:.2f}" for run in runs for v in (100 * conv.loc[run, "rel_slope"], conv.loc[run, "nll_first"],
                                                       conv.loc[run, "nll_last"])}
               | {n for run in runs for n in NUMBER.findall(str(conv.loc[run, "epochs"]))}
               | {f"{100 * conv['tolerance'].dropna().iloc[0]:.1f}", "95"})  # the rule's 95% interval
    scale = pd.read_csv(tables / "claims.csv")["scale"].dropna().iloc[0]
    assert set(numbers(body, *runs, "figure4_vs_epoch", "Figure 4", scale, "IWSLT14")) <= allowed, body
    assert body.endswith("![Figure 4's pair per epoch](results/x/report/figures/figure4_vs_epoch.png)\n\n"
                         f"Scale: {scale}, not the paper's IWSLT14 setup. The full tables, figures and every deviation "
                         "from the paper: [`results/x/report/index.html`](results/x/report/index.html).\n")
    assert "|" not in body  # the tables stay in the report

    # update then check: the README copy is rewritten once, then up to date; a stale one is refused by --check
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{STUDY.begin}\nold\n{STUDY.end}\n\nafter\n", encoding="utf-8")
    assert not rr.update_readme(readme, before, "results/x/report")
    assert rr.update_readme(readme, before, "results/x/report", check=True)
    assert readme.read_text(encoding="utf-8").endswith(f"{STUDY.end}\n\nafter\n")
    readme.write_text(readme.read_text(encoding="utf-8").replace("±", "+-", 1), encoding="utf-8")
    with pytest.raises(LnReproError, match="differs"):
        rr.update_readme(readme, before, "results/x/report", check=True)


def test_a_plateau_table_gives_the_plateau_sentence(before: Path, tmp_path: Path) -> None:
    """A report with plateau.csv in place of convergence.csv (the published study's): each run's spread over
    its last three epochs, from that table."""
    copy = tmp_path / "report"
    shutil.copytree(before, copy)
    (copy / "tables" / "convergence.csv").unlink()
    runs = [r.strip() for r in pd.read_csv(copy / "tables" / "confounds.csv").set_index("comparison")
            .loc["figure4", "runs"].split(",")]
    pd.DataFrame([{"run": runs[0], "epochs": "1-3", "loss_first": 5.1234, "loss_last": 5.0012, "spread": 0.02443,
                   "plateau": False}]).to_csv(copy / "tables" / "plateau.csv", index=False)
    body = rr.results_markdown(copy, "r")
    assert f"of `{runs[0]}` moved 2.4% over epochs 1-3 (5.12 to 5.00 bits: not a plateau)" in body
    assert f"of `{runs[1]}` has fewer than three scored epochs" in body


def test_the_section_leads_with_answer_md(report: Path, before: Path) -> None:
    """A report with answer.md: the part quotes its first paragraph (the headline) and says how many more the
    report has; a report written before answer.md: the sentences from the tables in their place. Both end with
    the same figure and link."""
    body = rr.results_markdown(report, "results/x/report")
    paragraphs = (report / "answer.md").read_text(encoding="utf-8").rstrip("\n").split("\n\n")[1:]
    quoted = body.split("\n\n")
    assert quoted[0] == paragraphs[0]
    assert quoted[1] == f"(The report's Answer section, `answer.md`, has {len(paragraphs) - 1} more.)"
    assert not set(quoted[2:]) & set(paragraphs)
    older = rr.results_markdown(before, "results/x/report")
    assert older.startswith("Figure 4's pair at this scale") and paragraphs[0] not in older
    tail = "\n\n".join(body.split("\n\n")[-2:])
    assert older.endswith(tail)


def test_a_missing_table_is_named(before: Path, tmp_path: Path) -> None:
    copy = tmp_path / "report"
    shutil.copytree(before / "tables", copy / "tables")
    (copy / "tables" / "run_epochs.csv").unlink()
    with pytest.raises(LnReproError, match=r"run_epochs\.csv: missing"):
        rr.results_markdown(copy, "r")


def test_an_unpublished_part_says_so_and_a_missing_report_is_refused(tmp_path: Path) -> None:
    """The part's own published folder, while it does not exist, gives the line that says so; any other folder
    without tables is an error that names it."""
    part = rr.PARTS["depth"]
    readme = tmp_path / "README.md"
    readme.write_text(f"{part.begin}\nold\n{part.end}\n", encoding="utf-8")
    missing = tmp_path / "published" / "depth-cpu"
    assert not rr.update_readme(readme, missing, part.published, part="depth")
    assert readme.read_text(encoding="utf-8") == (
        f"{part.begin}\nThe depth study (`presets/depth-cpu.yaml`) has not been published yet.\n{part.end}\n")
    with pytest.raises(LnReproError, match="no report there"):
        rr.update_readme(readme, missing, "results/depth-cpu/report", part="depth")


def test_a_study_in_parts_says_how_far_its_store_has_grown(tmp_path: Path, monkeypatch) -> None:
    """While a study's report is not published but its store holds units, the part says how many of how many
    and which command lists the rest."""
    from lnrepro.config import experiment, load_config
    from lnrepro.io import json_text
    from lnrepro.paths import EXPERIMENT_JSON
    from lnrepro.store import Index, units_of

    part = rr.PARTS["depth"]
    monkeypatch.chdir(tmp_path)
    store = tmp_path / part.store
    store.mkdir(parents=True)
    exp = experiment(load_config([REPO / "config.yaml", REPO / "presets" / "depth-cpu.yaml"]))
    (store / EXPERIMENT_JSON).write_text(json_text(exp.to_dict()))
    (store / "store.json").write_text(Index("depth-cpu", [], {}, {}, {}, {"a/seed1": {}, "b/seed1": {}}).text())
    readme = tmp_path / "README.md"
    readme.write_text(f"{part.begin}\nold\n{part.end}\n", encoding="utf-8")
    assert not rr.update_readme(readme, Path(part.published), part.published, part="depth")
    text = readme.read_text(encoding="utf-8")
    assert f"its store `published/depth-cpu/` holds 2 of its {len(units_of(exp))} units so far" in text
    assert "`lnrepro publish --status published/depth-cpu`" in text


def test_the_endpoint_part(report: Path) -> None:
    """The end-point part: answer.md's headline, quoted as written, then the headline figure and the link. The
    tables (equivalence, grids, tuned, judged seeds) stay in the report."""
    body = rr.results_markdown(report, "published/endpoint-cpu", part="endpoint")
    paragraphs = (report / "answer.md").read_text(encoding="utf-8").rstrip("\n").split("\n\n")[1:]
    assert [p for p in body.split("\n\n") if p in paragraphs] == paragraphs[:1]
    assert "![Figure 4's pair per epoch](published/endpoint-cpu/figures/figure4_vs_epoch.png)" in body
    assert body.rstrip().endswith("[`published/endpoint-cpu/index.html`](published/endpoint-cpu/index.html).")
    assert "|" not in body


def test_the_depth_part(tmp_path_factory) -> None:
    """The depth part: the report's depth finding (answer.md's lead), how many cells have failed seeds at the last
    epoch and the design's resolution, the post-hoc reading of the rule (labelled, brief), what the study cannot
    show, the depth figure, the scale with every depth and the link; every number from the report's tables."""
    from lnrepro.analysis.sections.depth import sensitivity_words, smallest_resolved
    from test_depth import experiment as depth_experiment
    from test_depth import make_tree as depth_tree

    exp = depth_experiment()
    exp_dir = depth_tree(tmp_path_factory.mktemp("depth"), exp)
    with figures_unsaved():
        make_report(exp_dir, exp, exp_dir / "report")
    report = exp_dir / "report"
    body = rr.results_markdown(report, "published/depth-cpu", part="depth")
    rates = pd.read_csv(report / "tables" / "depth_rates.csv")
    at = rates[rates["budget"] == pd.read_csv(report / "tables" / "budgets.csv").iloc[0]["budget"]]
    assert len(at) == 20
    failed = at[at["n_failed"] > 0]
    assert set(failed["run"]) == {"postln_nowarmup_isqrt_L6", "postln_nowarmup_isqrt_L18",
                                  "postln_nowarmup_isqrt_L18_lr1e-3"}
    epoch = int(at["epoch"].iloc[0])
    assert (f"Failed seeds at epoch {epoch} (diverged, stopped or did not train): in 3 of 20 cells, each rate with "
            "its Wilson 95% interval in the report.") in body
    assert (f"resolves (Newcombe 95%): {rr._num(smallest_resolved(3, 3))} at 3 seeds a cell.") in body
    assert (f"What this cannot show: one dataset and one width, {epoch} epochs, depths 6, 18 and 3 seeds a cell; a "
            "failure is one at these learning rates, lr_max 0.002 and 0.001, and budget.") in body
    assert "![failure rate against depth](published/depth-cpu/figures/failure_rate_vs_depth.png)" in body
    # it opens with the report's depth finding (answer.md's lead), then says how much more answer.md holds
    lead = (report / "answer.md").read_text().split("\n\n")[1]
    assert lead.startswith(f"Without warm-up at 18 layers and lr_max 0.002, at epoch {epoch}: most seeds trained with")
    pointer = "(The report's depth finding, `answer.md`, has 1 more.)"
    assert body.startswith(f"{lead}\n\n{pointer}\n\n")
    assert "[`published/depth-cpu/index.html`](published/depth-cpu/index.html)" in body
    # the post-hoc reading of the rule, labelled, in the depth section's words from its tables, briefly
    post_hoc = " ".join(sensitivity_words(*(pd.read_csv(report / "tables" / f"{t}.csv") for t in (
        "depth_rule_sensitivity", "depth_claims", "depth_claims_nll_only")), brief=True))
    assert post_hoc.startswith("Post hoc, not the study's rule: by the rule's NLL part alone (NLL above 1.5 x the "
                               "best run's; BLEU not judged), the failures of 2 of 20 cells change. By it the claim")
    assert f"\n\n{post_hoc}\n\n" in body
    # the scale: the claims table's, with both depths
    scale = pd.read_csv(report / "tables" / "claims.csv")["scale"].dropna().iloc[0]
    assert "6+6 layers" in scale and f"Scale: {scale.replace('6+6 layers', '6+6 and 18+18 layers')}, not" in body
    counts = ("n_failed", "n_with_fate", "depth", "n_seeds")
    allowed = ({str(epoch), "95", "0.002", "0.001", "3", "20", rr._num(smallest_resolved(3, 3))}
               | {str(int(n)) for c in counts for n in at[c]})
    assert set(numbers(body.replace(pointer, "").replace(post_hoc, "").replace(lead, ""),
                       scale.replace("6+6 layers", "6+6 and 18+18 layers"), "IWSLT14")) <= allowed, body
    assert len(body.split()) <= 250


def test_the_readme_says_how_much_of_the_second_edition_is_stored() -> None:
    """The CPU study's store (``published/study-cpu``, grown in parts) is named in the README with the number of
    units it holds of the study's, as its index says."""
    from lnrepro.config.settings import Experiment
    from lnrepro.store import Index, units_of

    store = REPO / "published" / "study-cpu"
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    index = Index.read(store) if store.exists() else None
    if index is None:
        assert "`published/study-cpu/` holds" not in readme
        return
    n = len(units_of(Experiment.read(store / "experiment.json")))
    assert f"`published/study-cpu/` holds {len(index.units)} of its {n} units" in readme
