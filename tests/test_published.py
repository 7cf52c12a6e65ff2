"""Published results live where no rule writes (docs/architecture.md, "Published results"): every path the
planned DAG of every preset writes (outputs, logs, benchmarks) lies under ``results/``, no committed file
does, and the README's study command plans the whole study on a fresh clone. Planning any of them prints no
Snakemake warning."""

from __future__ import annotations

import functools
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO, WARNING_TAG, copy_repo, snakemake
from lnrepro import config as cfg
from lnrepro.studies import STUDIES

# The config files a user runs: the paper's experiment alone and each preset layered on it.
PRESETS = [None, *sorted(p.name for p in (REPO / "presets").glob("*.yaml"))]
MIRROR = 'defaults={"data": {"multi30k": {"mirror": "/path/to/multi30k"}}}'  # the README's study command


@dataclass(frozen=True)
class Plan:
    """What a dry run prints: the paths its jobs write, its job counts per rule, Snakemake's warnings."""

    paths: set[str]
    counts: dict[str, int]
    warnings: list[str]


@functools.cache  # a preset's plan is read by every test below that needs it: one dry run each
def planned(workdir: Path, preset: str | None) -> Plan:
    """The dry run of config.yaml, with ``preset`` layered on it (and the README's mirror) when given."""
    args = ["-n", "--cores", "2"] + (["--configfile", f"presets/{preset}", "--config", MIRROR] if preset else [])
    proc = snakemake(workdir, *args, tag_warnings=True)
    text = proc.stdout + proc.stderr
    paths = {p.strip() for line in re.findall(r"^\s+(?:output|log|benchmark): (.+)$", text, flags=re.M)
             for p in line.split(",")}
    stats = text.split("Job stats:", 1)[1].split("Reasons:", 1)[0] if "Job stats:" in text else ""
    counts = {m[0]: int(m[1]) for m in re.findall(r"^(\w+)\s+(\d+)$", stats, flags=re.M)}
    warnings = [line for line in proc.stderr.splitlines() if line.startswith(WARNING_TAG)]
    return Plan(paths, counts, warnings)


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_repo(tmp_path_factory.mktemp("published") / "repo", stores=True)


def test_no_committed_file_lies_under_results() -> None:
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "results"], capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    assert listed.stdout.split() == [], "committed files under results/, which the DAG writes"


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p or "config.yaml")
def test_every_planned_path_lies_under_results(fresh_clone: Path, preset: str | None) -> None:
    plan = planned(fresh_clone, preset)
    assert plan.counts.get("all") == 1 and plan.paths, f"the dry run planned nothing: {plan.counts}"
    outside = sorted(p for p in plan.paths if not p.startswith("results/") or ".." in Path(p).parts)
    assert outside == [], outside


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p or "config.yaml")
def test_planning_prints_no_snakemake_warning(fresh_clone: Path, preset: str | None) -> None:
    """A user's first command of any preset is quiet: a warning there is a defect of the workflow (a rule
    declared but not defined, a deprecated directive), never something the user is to read past."""
    plan = planned(fresh_clone, preset)
    assert plan.counts.get("all") == 1, f"the dry run planned nothing: {plan.counts}"
    assert plan.warnings == [], "\n".join(plan.warnings)


# The published studies whose README command must plan them whole on a fresh clone.
README_STUDIES = [s.preset for s in STUDIES.values()]


def test_each_published_study_is_its_preset_and_one_entry() -> None:
    """studies.yaml's entries: each names a preset whose study has that name (so its store is
    published/{preset}/), and the README has the part that quotes it."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for study in STUDIES.values():
        x = cfg.experiment(cfg.load_config([REPO / "config.yaml", REPO / study.preset_file]))
        assert x.name == study.preset and study.store == f"published/{study.preset}"
        assert f"<!-- results:{study.part}: begin" in readme and f"<!-- results:{study.part}: end -->" in readme


@pytest.mark.parametrize("name", README_STUDIES)
def test_the_readme_study_command_plans_the_whole_study(fresh_clone: Path, name: str) -> None:
    """On a fresh clone the README's command for a published study plans every training and the report (the
    published copy in published/ is not the DAG's output, so Snakemake cannot take it as built), as many jobs as
    the README says."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"--configfile presets/{name}.yaml --config '{MIRROR}'" in readme
    counts = planned(fresh_clone, f"{name}.yaml").counts
    x = cfg.experiment(cfg.load_config([REPO / "config.yaml", REPO / "presets" / f"{name}.yaml"]))
    assert counts.get("make_report") == 1, counts
    trainings = sum(n for rule, n in counts.items() if rule.startswith("train_run"))
    assert trainings == sum(len(x.seeds_of(run)) for run in x.select), counts
    stated = re.findall(rf"plans and runs the whole\s+study,\s+(\d+)\s+jobs,\s+into\s+`results/{name}/`", readme)
    assert stated == [str(counts.get("total"))], f"README.md says {stated} jobs, the dry run lists {counts}"
