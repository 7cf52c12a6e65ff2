"""The README's numbers that the code decides: checked here so that they stay true when the DAG changes."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import REPO, copy_repo, snakemake


def test_readme_states_the_paper_dag_job_count(tmp_path: Path) -> None:
    """`snakemake -n` on config.yaml in a fresh checkout (a copy: no results/ of earlier runs) lists as many
    jobs as the README says. A dry run downloads nothing."""
    stated = re.findall(r"`snakemake -n`[^(]*\((\d+)\s+jobs\)", (REPO / "README.md").read_text())
    assert len(stated) == 1, "README.md should state the job count of `snakemake -n` exactly once"
    proc = snakemake(copy_repo(tmp_path / "repo"), "-n", "--quiet", "rules")
    # the "Job stats" table ends with its total
    total = re.findall(r"^total\s+(\d+)$", proc.stdout + proc.stderr, flags=re.M)
    assert total, proc.stdout + proc.stderr
    assert total[-1] == stated[0], f"README.md says {stated[0]} jobs, `snakemake -n` lists {total[-1]}"


def test_the_readme_reads_in_five_minutes() -> None:
    """The README holds at most 1,200 words: what the project reproduces, the answers, the two commands and short
    tables; everything else lives in the docs and the reports."""
    words = len((REPO / "README.md").read_text(encoding="utf-8").split())
    assert words <= 1200, f"README.md has {words} words, more than 1,200"
