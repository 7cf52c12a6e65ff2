"""The demo DAG end to end through the snakemake command line (one shared run per session)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from conftest import DEMO, REPO, DemoRun, plan, snakemake
from lnrepro.analysis import FIGURES
from lnrepro import config as cfg
from lnrepro.config import Experiment


def _demo(demo_run: DemoRun) -> Experiment:
    """The demo's experiment as the DAG resolved it (its selected runs, seeds and epochs)."""
    return Experiment.read(demo_run.exp_dir / "experiment.json")


def _section(html: str, anchor: str) -> str:
    """The report's HTML from the ``<h2 id=anchor>`` heading to the next ``<h2>`` (the table of contents
    also names every anchor, so the whole page proves nothing about a section)."""
    match = re.search(rf'<h2 id="{anchor}">.*?(?=<h2|\Z)', html, flags=re.S)
    assert match, f"no section {anchor!r} in the report"
    return match.group(0)


def _table_rows(html: str, table_id: str) -> list[list[str]]:
    """The cell texts, row by row (header first), of the pandas-rendered ``<table id=table_id>``; a cell that names
    a run or a metric in words gives its identifier (its ``title``)."""
    match = re.search(rf'<table[^>]*id="{table_id}".*?</table>', html, flags=re.S)
    assert match, f"no table {table_id!r}"
    return [[(title or cell).strip() for title, cell in
             re.findall(r'<t[hd](?: title="([^"]*)")?[^>]*>(.*?)</t[hd]>', row, flags=re.S)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", match.group(0), flags=re.S)]


def test_report_has_one_bleu_per_run_per_epoch(demo_run: DemoRun) -> None:
    report = demo_run.exp_dir / "report"
    figure4 = _section((report / "index.html").read_text(encoding="utf-8"), "figure4")
    images = re.findall(r'<img src="([^"]+)"', figure4)
    assert {f"figures/{FIGURES['figure4']}", f"figures/{FIGURES['figure4_time']}"} <= set(images), images
    for src in images:
        assert (report / src).read_bytes().startswith(b"\x89PNG"), src
    # BLEU per epoch: a row per epoch, a column per run, a number in every cell (every demo run is scored)
    x = _demo(demo_run)
    header, *rows = _table_rows(figure4, "bleu-per-epoch")
    assert header == ["epoch", *x.select]
    assert [row[0] for row in rows] == [str(ep) for ep in range(1, x.epochs + 1)]
    assert all(re.fullmatch(r"\d+(\.\d+)?( ± \d+(\.\d+)?)?", cell) for row in rows for cell in row[1:]), rows
    table = pd.read_csv(report / "tables" / "epochs.csv")
    for run in x.select:
        run_rows = table[table["run"] == run]
        assert sorted(run_rows["epoch"].unique().tolist()) == list(range(1, x.epochs + 1)), run
        assert run_rows["valid_bleu_tok"].notna().all(), run


def test_the_readme_counts_the_jobs_and_trainings_the_demo_ran(demo_run: DemoRun) -> None:
    """The README's demo paragraph names the demo's jobs, its trainings and Snakemake's last line; the demo's
    DAG ran exactly those."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    jobs, trainings = re.search(r"It plans (\d+) jobs \((\d+) trainings", readme).groups()
    done = f"{jobs} of {jobs} steps (100%) done"
    assert done in readme and done in demo_run.log
    assert len(list(demo_run.exp_dir.glob("runs/*/seed*/summary.json"))) == int(trainings)


def test_every_epoch_was_scored(demo_run: DemoRun) -> None:
    x = _demo(demo_run)
    for run, seed in ((run, seed) for run in x.select for seed in x.seeds_of(run)):
        rd = demo_run.exp_dir / "runs" / run / f"seed{seed}"
        for ep in range(1, x.epochs + 1):
            result = json.loads((rd / "eval" / f"epoch{ep:03d}.json").read_text())
            manifest = json.loads((rd / "epochs" / f"epoch{ep:03d}.json").read_text())
            assert result["status"] == manifest["status"]
            if result["status"] == "ok":
                assert 0.0 <= result["splits"]["valid"]["bleu_tok"] <= 100.0


def test_confounds_flag_figure4_schedule(demo_run: DemoRun) -> None:
    text = (demo_run.exp_dir / "report" / "confounds.md").read_text(encoding="utf-8")
    line = next(line for line in text.splitlines() if "figure4" in line)
    assert "schedule.warmup" in line and "schedule.decay" in line


def test_second_invocation_has_nothing_to_do(demo_run: DemoRun) -> None:
    proc = snakemake(demo_run.workdir, "-n", "--configfile", *DEMO)
    assert re.search(r"Nothing to be done", proc.stdout + proc.stderr), proc.stdout + proc.stderr


def test_named_target_builds_only_that_far(tmp_path: Path) -> None:
    from conftest import copy_repo

    work = copy_repo(tmp_path / "repo")
    proc = snakemake(work, "bpe", "-n", "--configfile", "presets/demo.yaml")
    out = proc.stdout + proc.stderr
    assert "apply_bpe" in out and "train_run" not in out and "score_checkpoint" not in out


def test_paper_dag_lists_every_job(tmp_path: Path) -> None:
    proc = plan(tmp_path, "--quiet", "rules")
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", proc.stdout + proc.stderr, flags=re.M))
    assert counts["fetch_archive"] == "1" and counts["prepare_corpus"] == "1"
    assert counts["train_run"] == "24"  # 8 runs x 3 seeds
    assert counts["score_checkpoint"] == "24"  # one per training: its 20 checkpoints in one process
    assert counts["make_report"] == "1" and counts["gradinit"] == "1"
    assert counts["gradinit_after_warmup"] == "3"  # one per seed of postln_warmup_isqrt, beside its training


def _jobs(out: str) -> list[tuple[str, list[str]]]:
    """(rule, outputs) of every job a dry run lists."""
    return [(rule, outputs.split(", ")) for rule, outputs in
            re.findall(r"^(?:local)?rule (\w+):\n(?:    (?!output:).*\n)*    output: (.*)$", out, flags=re.M)]


def test_per_split_dag_lists_exactly_the_scorings(tmp_path: Path) -> None:
    """valid at every epoch, test with beam 5 at epoch 2 and the last: per training one scoring job for the
    epochs where both are due and one for the others, whose outputs are the score files of exactly those epochs
    and the hypotheses of exactly the splits due there, each group reading its own slice."""
    layer = tmp_path / "per_split.yaml"
    layer.write_text("defaults: {eval: {splits: {test: {beam: 5, epochs: [2, last]}}}}\n")
    proc = plan(tmp_path, configfiles=("presets/demo.yaml", layer))
    jobs = _jobs(proc.stdout + proc.stderr)
    x = cfg.experiment(cfg.load_config([REPO / "config.yaml", REPO / "presets" / "demo.yaml", layer]))
    trainings = sum(len(x.seeds_of(run)) for run in x.select)
    scorings = [(rule, outputs) for rule, outputs in jobs if rule.startswith("score_checkpoint")]
    assert sorted(rule for rule, _ in scorings) == ["score_checkpoint"] * trainings + ["score_checkpoint_valid"] * trainings
    for rule, outputs in scorings:
        scores = [o for o in outputs if o.endswith(".json")]
        epochs = [int(re.search(r"epoch(\d{3})\.json$", o).group(1)) for o in scores]
        due = ("valid", "test") if rule == "score_checkpoint" else ("valid",)
        assert epochs == ([2, x.epochs] if len(due) == 2 else [ep for ep in range(1, x.epochs + 1) if ep not in (2, x.epochs)])
        hyps = [o for o in outputs if o.endswith(".hyp")]
        assert hyps == [s[:-len(".json")] + f".{split}.hyp" for s in scores for split in due], outputs
    slices = {outputs[0] for rule, outputs in jobs if rule == "write_slice"}
    assert {"results/demo/eval.json", "results/demo/eval_valid.json"} <= slices


def test_changing_one_splits_epochs_rescores_only_its_checkpoints(demo_run: DemoRun, tmp_path: Path) -> None:
    """After the demo (both splits at every epoch), scoring test at the last epoch only rewrites no slice of the
    last epoch's jobs: the dry run rescores epochs 1 and 2 (valid alone now) and neither the last epoch nor any
    training."""
    layer = tmp_path / "test_last.yaml"
    layer.write_text("defaults: {eval: {splits: {test: {epochs: last}}}}\n")
    proc = snakemake(demo_run.workdir, "-n", "--configfile", *DEMO, str(layer))
    jobs = _jobs(proc.stdout + proc.stderr)
    rules = {rule for rule, _ in jobs}
    assert "train_run" not in rules and "score_checkpoint" not in rules, sorted(rules)
    x = _demo(demo_run)
    rescored = [o for rule, outputs in jobs if rule == "score_checkpoint_valid" for o in outputs if o.endswith(".json")]
    assert len(rescored) == sum(len(x.seeds_of(run)) for run in x.select) * (x.epochs - 1)
    assert not any(o.endswith(f"epoch{x.epochs:03d}.json") for o in rescored)
    slices = {outputs[0] for rule, outputs in jobs if rule == "write_slice"}
    assert "results/demo/eval.json" not in slices and "results/demo/eval_valid.json" in slices


def test_runs_of_two_lengths_each_declare_their_own_epochs(tmp_path: Path) -> None:
    """Figure 4's pair (and the grid runs based on it) trains 5 epochs, every other run the demo's 3, test scored
    at each run's last epoch: one training rule and one scoring rule per group and length (train_run_e3,
    train_run_e5, score_checkpoint_e5, score_checkpoint_valid_e5, ...), each training declaring its own epoch
    manifests, each scoring job the score files of its own epochs and test's hypotheses at its own last."""
    layer = tmp_path / "longer_pair.yaml"
    layer.write_text("runs: {postln_warmup_isqrt: {train: {epochs: 5}}, preln_nowarmup_step8: {train: {epochs: 5}}}\n"
                     "defaults: {eval: {splits: {test: {epochs: last}}}}\n")
    proc = plan(tmp_path, configfiles=("presets/demo.yaml", layer))
    jobs = _jobs(proc.stdout + proc.stderr)
    x = cfg.experiment(cfg.load_config([REPO / "config.yaml", REPO / "presets" / "demo.yaml", layer]))
    assert x.lengths == (3, 5) and {"postln_warmup_isqrt", "preln_nowarmup_step8"} <= set(x.runs_of_length(5))

    def run_of(outputs: list[str]) -> str:
        return re.search(r"/runs/([^/]+)/seed\d+/", outputs[0]).group(1)

    trainings = [(rule, outputs) for rule, outputs in jobs if rule.startswith("train_run")]
    assert len(trainings) == sum(len(x.seeds_of(run)) for run in x.select)
    for rule, outputs in trainings:
        n, run_dir = x.last_of(run_of(outputs)), outputs[0].rsplit("/", 1)[0]
        assert rule == f"train_run_e{n}"
        manifests = [f"{run_dir}/epochs/epoch{ep:03d}.json" for ep in range(1, n + 1)]
        assert [o for o in outputs if "/epochs/" in o] == manifests
    scorings = [(rule, outputs) for rule, outputs in jobs if rule.startswith("score_checkpoint")]
    scored: dict[tuple[str, str], list[int]] = {}
    for rule, outputs in scorings:
        run, n = run_of(outputs), x.last_of(run_of(outputs))
        due = ("valid", "test") if rule == f"score_checkpoint_e{n}" else ("valid",)
        assert rule in (f"score_checkpoint_e{n}", f"score_checkpoint_valid_e{n}")
        scores = [o for o in outputs if o.endswith(".json")]
        epochs = [int(re.search(r"epoch(\d{3})\.json$", o).group(1)) for o in scores]
        assert epochs == ([n] if len(due) == 2 else list(range(1, n)))
        hyps = [s[:-len(".json")] + f".{sp}.hyp" for s in scores for sp in due]
        assert [o for o in outputs if o.endswith(".hyp")] == hyps
        scored.setdefault((run, outputs[0].rsplit("/eval/", 1)[0]), []).extend(epochs)
    assert len(scored) == len(trainings)  # every checkpoint of every training scored, once
    assert all(sorted(eps) == list(range(1, x.last_of(run) + 1)) for (run, _), eps in scored.items())
    slices = {outputs[0] for rule, outputs in jobs if rule == "write_slice"}
    assert {"results/demo/eval.json", "results/demo/eval_valid.json"} <= slices
