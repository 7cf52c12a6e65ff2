"""Fault suite, configuration: each fault is a config layer a user could write, loaded as the
workflow loads it; the outcome is one LnReproError line naming the key and what was expected, or, through a
real ``snakemake -n``, one WorkflowError line and no traceback. Also: the workflow run from another folder.

Faults the older tests already trigger (tests/test_config.py): unknown keys, wrong types, an unknown run in
``select`` or a comparison, a decay epoch beyond the last epoch. They are here again on the demo preset so
that the fault suite lists every config fault in one place.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from fixtures_iwslt import build_iwslt_archive, closed_port
from lnrepro import config as cfg
from lnrepro.errors import LnReproError

DEMO = REPO / "presets" / "demo.yaml"
# A fault as a layer over config.yaml + the demo preset (3 epochs): (layer, what the message must say).
FAULTS = {
    "unknown key": ({"defaults": {"model": {"nrom": "pre"}}}, r"unknown key defaults\.model\.nrom \(allowed: "),
    "wrong type": ({"defaults": {"train": {"epochs": "three"}}},
                   r"key defaults\.train\.epochs: 'three' is not of type 'integer'"),
    "epochs as a float": ({"defaults": {"train": {"epochs": 3.0}}},
                          r"key defaults\.train\.epochs: 3\.0 is not of type 'integer'"),
    "seeds as floats": ({"seeds": [1.0, 2.0]}, r"key seeds\.0: 1\.0 is not of type 'integer'"),
    "a boolean for an integer": ({"defaults": {"model": {"d_model": True}}},
                                 r"key defaults\.model\.d_model: True is not of type 'integer'"),
    "runs as a list": ({"runs": ["postln_warmup_isqrt"]}, r"key runs: \['postln_warmup_isqrt'\] is not of type 'object'"),
    "grids as a list": ({"grids": ["tune_postln"]}, r"key grids: \['tune_postln'\] is not of type 'object'"),
    "unknown run in select": ({"select": ["postln_warmup_isqrt", "postln_typo"]},
                              r"select names 'postln_typo', which is neither a run"),
    "unknown run in a comparison": ({"comparisons": {"figure4": {"runs": ["postln_warmup_isqrt", "preln_typo"]}}},
                                    r"comparisons\.figure4\.runs names 'preln_typo', which is not a run"),
    "empty seeds": ({"seeds": []}, r"key seeds: \[\] should be non-empty"),
    "negative warm-up": ({"defaults": {"schedule": {"warmup_updates": -140}}},
                         r"key defaults\.schedule\.warmup_updates: -140 is less than the minimum of 1"),
    "decay epoch beyond the last epoch": (
        {"defaults": {"schedule": {"decay_epochs": [9]}, "train": {"epochs": 6}}},
        r"runs\.postln_warmup_step8 \(with defaults\): schedule\.decay_epochs \[9\] beyond the last epoch "
        r"\(train\.epochs = 6\): the step decay would never happen"),
    # Every beam the eval section sets (one, or one per split), as a layer: built from the config below.
    "beam 0": (None, r"key defaults\.eval\.(\S+\.)?beam: 0 is less than the minimum of 1"),
    "unknown dataset": ({"defaults": {"data": {"dataset": "wmt14"}}},
                        r"key defaults\.data\.dataset: 'wmt14' is not one of \['iwslt14', 'multi30k', 'synthetic'\]"),
    "after-warm-up run without warm-up": (
        {"analysis": {"gradinit": {"after_warmup_run": "preln_nowarmup_step8"}}},
        r"analysis\.gradinit\.after_warmup_run names 'preln_nowarmup_step8', which has no warm-up "
        r"\(schedule\.warmup false\): expected a selected run with warm-up, or null"),
    "after-warm-up run that does not exist": (
        {"analysis": {"gradinit": {"after_warmup_run": "postln_warmup_isqr"}}},
        r"analysis\.gradinit\.after_warmup_run names 'postln_warmup_isqr', which is not a run"),
    "budget epoch at the last epoch": ({"analysis": {"report": {"budget_epoch": 3}}},
                                       r"analysis\.report\.budget_epoch \(3\) must be before the last epoch "
                                       r"\(train\.epochs = 3\)"),
    "budget epoch beyond the last epoch": ({"analysis": {"report": {"budget_epoch": 15}}},
                                           r"analysis\.report\.budget_epoch \(15\) must be before the last epoch"),
    "failure reference that is not a run": (
        {"analysis": {"report": {"failure_reference": {"postln_nowarmup_isqrt": "postln_warmup_isqr"}}}},
        r"analysis\.report\.failure_reference\.postln_nowarmup_isqrt: 'postln_warmup_isqr' is not a run"),
    "failure reference for a run that does not exist": (
        {"analysis": {"report": {"failure_reference": {"postln_nowarmup": "postln_warmup_isqrt"}}}},
        r"analysis\.report\.failure_reference\.postln_nowarmup: 'postln_nowarmup' is not a run"),
    "a run its own failure reference": (
        {"analysis": {"report": {"failure_reference": {"postln_warmup_isqrt": "postln_warmup_isqrt"}}}},
        r"failure_reference\.postln_warmup_isqrt: a run cannot be its own reference"),
    "a margin of 0": ({"analysis": {"report": {"equivalence_margins": {"bleu_tok": 0}}}},
                      r"key analysis\.report\.equivalence_margins\.bleu_tok: 0 is less than or equal to the minimum"),
    "a margin for an unknown metric": ({"analysis": {"report": {"equivalence_margins": {"bleu": 1.0}}}},
                                       r"unknown key analysis\.report\.equivalence_margins\.bleu"),
    # A NaN passes every bound of the schema (a comparison with it is false): training recorded "diverged", scoring
    # ended in a traceback. Every number is checked, whatever its key.
    "a learning rate that is not a number": ({"defaults": {"optim": {"lr_max": float("nan")}}},
                                             r"key defaults\.optim\.lr_max: nan is not a finite number"),
    "an infinite learning rate": ({"defaults": {"optim": {"lr_max": float("inf")}}},
                                  r"key defaults\.optim\.lr_max: inf is not a finite number"),
    "a length limit that is not a number": (
        {"defaults": {"eval": {"splits": {"valid": {"max_len_a": float("nan")}}}}},
        r"key defaults\.eval\.splits\.valid\.max_len_a: nan is not a finite number"),
    "a grid value that is not a number": (
        {"grids": {"tune_postln": {"values": {"optim.lr_max": [1.0e-3, float("nan")]}}}},
        r"key grids\.tune_postln\.values\.optim\.lr_max\.1: nan is not a finite number"),
    # Every epoch is a declared output Snakemake plans: 20000 epochs planned for minutes, 1e9 took all memory.
    "20000 epochs": ({"defaults": {"train": {"epochs": 20000}}},
                     r"key defaults\.train\.epochs: 20000 is greater than the maximum of 1000 \(a bound: every epoch"),
    "a seed beyond 32 bits": ({"seeds": [2**32]},
                              r"key seeds\.0: 4294967296 is greater than the maximum of 2147483647"),
    # A name is part of a path component (255 bytes): a long one failed mid-run with "File name too long".
    "a run name of 300 characters": ({"runs": {"r" * 300: {"model": {"norm": "pre"}}}},
                                     r"key runs: 'r{40}'\.\.\. is 300 bytes long, over the 225 a name may have "
                                     r"\(a file system takes 255 bytes per path component"),
    "an experiment name of 300 characters": ({"name": "e" * 300}, r"key name: 'e{40}'\.\.\. is 300 bytes long"),
    "a grid run name over the bound": (
        {"runs": {"b" * 215: {"model": {"norm": "pre"}}},
         "grids": {"long": {"base": "b" * 215, "values": {"optim.lr_max": [1.0e-3]}}}},
        r"grids\.long generates run 'b{40}'\.\.\. is 230 bytes long, over the 225 a name may have"),
}


def _beams_zero(section: dict) -> dict:
    """The layer that sets every ``beam`` under ``section`` (nested) to 0."""
    return {k: 0 if k == "beam" else _beams_zero(v) for k, v in section.items() if k == "beam" or isinstance(v, dict)}


def _fault_layer(fault: str) -> dict:
    layer = FAULTS[fault][0]
    if layer is None:  # beam 0
        layer = {"defaults": {"eval": _beams_zero(cfg.load_config([REPO / "config.yaml", DEMO])["defaults"]["eval"])}}
    return layer


def _layer(tmp_path: Path, layer: dict, name: str = "fault.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(layer))
    return path


def _snakemake(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The snakemake command line on the repository's Snakefile, run from ``cwd`` (not the checkout)."""
    return subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), *args], cwd=cwd,
                          capture_output=True, text=True)


@pytest.mark.parametrize("fault", FAULTS)
def test_a_config_fault_is_one_message_naming_the_key(tmp_path: Path, fault: str) -> None:
    layer, expected = _fault_layer(fault), FAULTS[fault][1]
    with pytest.raises(LnReproError, match=expected) as e:
        cfg.load_config([REPO / "config.yaml", DEMO, _layer(tmp_path, layer)])
    assert str(e.value).startswith("config: ") and "\n" not in str(e.value)


@pytest.mark.parametrize("layer", [
    {"defaults": {"schedule": {"decay_epochs": [3]}}},  # the first update of the last epoch decays
    {"analysis": {"report": {"budget_epoch": 2}}},
    {"analysis": {"gradinit": {"after_warmup_run": None}}},
    # Named, but not selected: not measured (the rule is left out), so its schedule does not matter.
    {"analysis": {"gradinit": {"after_warmup_run": "preln_nowarmup_step8"}}, "select": ["postln_warmup_isqrt"]},
    # A grid run judged against another grid run (as the end-point preset's Post-LN runs at the paper's learning rate).
    {"analysis": {"report": {"failure_reference": {"postln_warmup_isqrt__lr_max=6.0e-3__warmup_updates=140":
                                                   "postln_warmup_isqrt__lr_max=1.5e-3__warmup_updates=140"}}}},
], ids=["decay at the last epoch", "budget before the last epoch", "no after-warm-up run", "unselected",
        "grid runs as failure reference"])
def test_the_edges_of_the_new_checks_are_accepted(tmp_path: Path, layer: dict) -> None:
    cfg.experiment(cfg.load_config([REPO / "config.yaml", DEMO, _layer(tmp_path, layer)]))


def test_equivalence_margins_and_failure_references_typed_with_their_defaults(tmp_path: Path) -> None:
    """A margin the config gives replaces its default only; the references are carried as given."""
    report = cfg.experiment(cfg.load_config([REPO / "config.yaml", DEMO])).analysis.report
    assert (report.equivalence_margins.bleu_tok, report.equivalence_margins.nll_base2) == (1.0, 0.05)
    assert report.failure_reference == {}
    layer = {"analysis": {"report": {"equivalence_margins": {"nll_base2": 0.1},
                                     "failure_reference": {"postln_nowarmup_isqrt": "postln_warmup_isqrt"}}}}
    report = cfg.experiment(cfg.load_config([REPO / "config.yaml", DEMO, _layer(tmp_path, layer)])).analysis.report
    assert (report.equivalence_margins.bleu_tok, report.equivalence_margins.nll_base2) == (1.0, 0.1)
    assert report.failure_reference == {"postln_nowarmup_isqrt": "postln_warmup_isqrt"}


def test_only_a_given_after_warmup_run_must_exist() -> None:
    """The settings' default names config.yaml's run: a config without the key and without that run is valid;
    one that names it, without such a run, is refused (a typo would silently skip the measurement)."""
    c = cfg.load_config([REPO / "config.yaml", DEMO])
    c["runs"] = {"only": {"model": {"norm": "pre"}}}
    c.update(select=["only"], comparisons={}, grids={}, run_seeds={})
    with pytest.raises(LnReproError, match=r"after_warmup_run names 'postln_warmup_isqrt', which is not a run"):
        cfg.validate_config(c)
    del c["analysis"]["gradinit"]["after_warmup_run"]
    cfg.validate_config(c)


@pytest.mark.parametrize("fault", ["decay epoch beyond the last epoch", "unknown key", "budget epoch at the last epoch",
                                   "a learning rate that is not a number", "20000 epochs",
                                   "a run name of 300 characters", "epochs as a float", "seeds as floats",
                                   "runs as a list"])
def test_snakemake_reports_a_config_fault_in_one_line(tmp_path: Path, fault: str) -> None:
    layer, expected = _fault_layer(fault), FAULTS[fault][1]
    proc = _snakemake(tmp_path, "-n", "--configfile", str(DEMO), str(_layer(tmp_path, layer)))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "WorkflowError" in out and "Traceback" not in out
    lines = [line for line in out.splitlines() if line.startswith("config: ")]
    assert len(lines) == 1 and re.search(expected, lines[0]), out
    assert not (tmp_path / "results").exists()


def test_the_workflow_runs_from_another_folder(tmp_path: Path) -> None:
    """`snakemake -s /path/to/Snakefile --configfile /path/to/presets/demo.yaml` from elsewhere: config.yaml is
    found beside the Snakefile and the results go to the working directory (Snakemake's convention)."""
    proc = _snakemake(tmp_path, "-n", "--configfile", str(DEMO))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "results/demo/report/index.html" in out and "'runs' is a required property" not in out
    assert "rule train_run" in out
    assert not (tmp_path / "results").exists()  # a dry run writes nothing


@pytest.mark.snakemake
def test_relative_paths_resolve_in_the_working_directory(tmp_path: Path) -> None:
    """From another folder, a relative --configfile and a relative archive path inside it are the working
    directory's; the data stages really run there (offline: the archive is the only source)."""
    work = tmp_path / "work"
    (work / "local").mkdir(parents=True)
    archive = build_iwslt_archive(work / "local" / "de-en.tgz")
    layer = {"name": "elsewhere", "defaults": {"data": {"dataset": "iwslt14", "iwslt14": {
        "urls": [f"http://127.0.0.1:{closed_port()}/de-en.tgz"], "archive": "local/de-en.tgz",
        "md5": archive.md5, "size": archive.size, "expected_counts": archive.counts}}}}
    _layer(work, layer, "mine.yaml")
    proc = _snakemake(work, "data", "--cores", "1", "--configfile", "mine.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (work / "results" / "downloads" / "de-en.tgz").read_bytes() == archive.path.read_bytes()
    stats = yaml.safe_load((work / "results" / "elsewhere" / "data" / "prepared" / "stats.json").read_text())
    assert stats["counts"] == archive.counts
    assert not (REPO / "results" / "elsewhere").exists()


# Names that would escape results/ or break a rule's shell command: every one is refused at load.
HOSTILE_NAMES = ["..", ".", "-x", "a b", "a/b", "a;b", "$(id)", "a*b", "a'b", "tab\there", ""]


@pytest.mark.parametrize("name", [*HOSTILE_NAMES, "downloads", "a=b"])
def test_a_hostile_experiment_name_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(LnReproError, match=r"^config: (key name: .* does not match|name 'downloads' is the folder)") as e:
        cfg.load_config([REPO / "config.yaml", DEMO, _layer(tmp_path, {"name": name})])
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_hostile_run_or_grid_name_is_refused(tmp_path: Path, name: str) -> None:
    run = {"runs": {name: {"model": {"norm": "pre"}}}, "select": [name]}
    with pytest.raises(LnReproError, match=r"^config: key runs: .* does not match"):
        cfg.load_config([REPO / "config.yaml", DEMO, _layer(tmp_path, run)])
    grid = {"grids": {name: {"base": "postln_warmup_isqrt", "values": {"optim.lr_max": [1.0e-3]}}}}
    with pytest.raises(LnReproError, match=r"^config: key grids: .* does not match"):
        cfg.load_config([REPO / "config.yaml", DEMO, _layer(tmp_path, grid)])


def test_safe_names_are_accepted(tmp_path: Path) -> None:
    layer = {"name": "demo-2.v1_x", "runs": {"pre_lr=2e-3": {"model": {"norm": "pre"}}}, "select": ["pre_lr=2e-3"],
             "comparisons": {}}
    assert cfg.experiment(cfg.load_config([REPO / "config.yaml", DEMO, _layer(tmp_path, layer)])).name == "demo-2.v1_x"


def test_snakemake_refuses_an_escaping_name_and_writes_nothing(tmp_path: Path) -> None:
    """`name: ..` once wrote data.json, data/ and logs/ beside results/ (into the checkout's root)."""
    proc = _snakemake(tmp_path, "data", "--cores", "1", "--configfile", str(DEMO), str(_layer(tmp_path, {"name": ".."})))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in out
    assert [line for line in out.splitlines() if line.startswith("config: key name: ")], out
    assert sorted(p.name for p in tmp_path.iterdir()) == [".snakemake", "fault.yaml"]  # Snakemake's own metadata


def test_a_configfile_naming_a_folder_ends_as_the_docs_say(tmp_path: Path) -> None:
    """Snakemake reads --configfile before lnrepro loads anything: its traceback is documented beside the other
    configuration-file messages, with the way out."""
    (tmp_path / "presets").mkdir()
    proc = _snakemake(tmp_path, "-n", "--configfile", "presets")
    assert proc.returncode != 0 and not (tmp_path / "results").exists()
    last = (proc.stdout + proc.stderr).strip().splitlines()[-1]
    assert last == "IsADirectoryError: [Errno 21] Is a directory: 'presets'"
    running = " ".join((REPO / "docs" / "running.md").read_text().split())
    assert ("names a folder in a traceback whose last line is `IsADirectoryError: [Errno 21] Is a directory: "
            "'the/folder'` (name a YAML file in it") in running
