"""``lnrepro publish --status`` before a study's first part (no store yet): the study of config.yaml and the
configfiles, every unit missing, its cost measured here on the encoded train split, and the command of a part."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DEMO_PAIR, copy_repo, snakemake
from lnrepro.paths import Paths

P = Paths("demo")
UNITS = ("postln_warmup_isqrt seed 1", "preln_nowarmup_step8 seed 1")


def _status(work: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lnrepro", "publish", "--status", "published/demo", "--configfile",
                           *DEMO_PAIR, "--cores", "2", *extra], cwd=work, capture_output=True, text=True)


@pytest.fixture(scope="module")
def encoded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh working directory with the demo pair's encoded splits (``snakemake --until apply_bpe``) only."""
    work = copy_repo(tmp_path_factory.mktemp("first_part") / "repo")
    snakemake(work, "--until", "apply_bpe", "--cores", "2", "--configfile", *DEMO_PAIR)
    assert not (work / P.root / "runs").exists()
    return work


def _jobs(log: str) -> dict[str, int]:
    """Snakemake's job counts by rule, from its "Job stats" table."""
    table = log.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}


def test_first_part_status_measures_here_and_its_command_plans_its_units(encoded: Path) -> None:
    proc = _status(encoded)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "0 of 2 units stored" in out and "no store yet" in out
    assert all(f"missing: {u} (" in out and "unknown" not in out for u in UNITS)
    assert "measured here" in out and "updates timed" in out
    assert "a part of every missing unit: 2 unit(s)" in out  # no --minutes: every missing unit
    command = shlex.split(out.strip().splitlines()[-1])
    assert command[0] == "snakemake" and command[-len(DEMO_PAIR) - 1:] == ["--configfile", *DEMO_PAIR]
    assert P.experiment_json in command and P.gradinit_csv in command
    assert P.gradinit_after_warmup_csv("postln_warmup_isqrt", 1) in command  # the unit's own, made by its part
    plan = snakemake(encoded, *command[1:], "-n").stdout
    jobs = _jobs(plan)
    assert jobs["train_run"] == 2 and jobs["gradinit"] >= 1 and "apply_bpe" not in jobs


def test_a_part_that_fits_fewer_minutes_plans_only_its_units(encoded: Path) -> None:
    out = _status(encoded, "--minutes", "0.01").stdout
    assert "1 unit(s)" in out and UNITS[0] in out.split("a part that", 1)[1]
    command = shlex.split(out.strip().splitlines()[-1])
    jobs = _jobs(snakemake(encoded, *command[1:], "-n").stdout)
    assert jobs["train_run"] == 1
    assert not any("preln_nowarmup_step8" in c for c in command)


def test_without_the_encoded_split_it_names_the_command_that_makes_it(tmp_path: Path) -> None:
    work = copy_repo(tmp_path / "repo")
    proc = _status(work)
    assert proc.returncode == 1 and proc.stdout == ""
    assert "encoded train split" in proc.stderr
    assert shlex.join(["snakemake", "--until", "apply_bpe", "--cores", "1", "--configfile", *DEMO_PAIR]) in proc.stderr
    assert not (work / "published" / "demo").exists() and not (work / "results").exists()


def test_a_part_counts_scoring_beside_training() -> None:
    """Two units of 30 CPU-minutes of training each fit one hour on one core; with 5 minutes of scoring each, only
    one does. A unit whose scoring is unknown counts its training alone."""
    from lnrepro.store import Unit
    from lnrepro.store_status import Status, part
    units = [Unit("a", 1), Unit("b", 1)]

    def status(score_s: float | None) -> Status:
        return Status(Path("store"), None, [], units, {u: 1800.0 for u in units}, {u: score_s for u in units},
                      "measured", [], ["c"], [])

    assert part(status(None), 60, 1) == units
    assert part(status(300.0), 60, 1) == units[:1]


def test_over_a_store_configfiles_that_extend_a_grid_list_the_extension(tmp_path: Path, monkeypatch) -> None:
    """A store of the demo (no unit stored yet): its status lists the demo's units; with configfiles that add a value
    under a grid's extended:, also the extension's, and the part's command names those configfiles; configfiles of
    another study are refused by name."""
    import yaml

    from conftest import REPO
    from lnrepro.config import experiment, load_config
    from lnrepro.errors import LnReproError
    from lnrepro.io import json_text
    from lnrepro.paths import EXPERIMENT_JSON, STORE_CONFIG, STORE_INDEX
    from lnrepro.store import Index
    from lnrepro.store_status import command, report, status

    monkeypatch.chdir(REPO)
    config = load_config(["config.yaml", "presets/demo.yaml"])
    store = tmp_path / "demo"
    store.mkdir()
    (store / EXPERIMENT_JSON).write_text(json_text(experiment(config).to_dict()))
    (store / STORE_CONFIG).write_text(yaml.safe_dump(config))
    (store / STORE_INDEX).write_text(Index("demo", ["presets/demo.yaml"], {}, {}, {}).text())
    values = {"optim.lr_max": [1.5e-3, 6.0e-3, 1.2e-2], "schedule.warmup_updates": [140]}
    ext = tmp_path / "extension.yaml"
    ext.write_text(yaml.safe_dump({"grids": {"tune_postln": {"values": values, "extended": {"optim.lr_max": [1.2e-2]}}}}))
    new_run = "postln_warmup_isqrt__lr_max=1.2e-2__warmup_updates=140"

    plain = status(store)
    assert new_run not in {u.run for u in plain.missing} and plain.configfiles == [str(store / STORE_CONFIG)]
    grown = status(store, configfiles=["presets/demo.yaml", str(ext)])
    assert {u.run for u in grown.missing} - {u.run for u in plain.missing} == {new_run}
    assert grown.configfiles == ["presets/demo.yaml", str(ext)]
    assert command(grown, grown.missing, 2).endswith(shlex.join(["--configfile", "presets/demo.yaml", str(ext)]))
    assert "with the grid extensions of --configfile" in report(grown, None, 2)
    assert status(store, configfiles=["presets/demo.yaml"]).configfiles == [str(store / STORE_CONFIG)]
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({"defaults": {"optim": {"lr_max": 1.0e-3}}}))
    with pytest.raises(LnReproError, match="another study.*optim"):
        status(store, configfiles=["presets/demo.yaml", str(other)])
