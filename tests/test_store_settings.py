"""A store resolved before ``analysis.gradinit.norms`` and the runs of B2T, Sandwich-LN and DyT existed
(``published/study-cpu``) keeps its settings: the key absent is the six variants measured then, left out of every
slice, so the study's config resolves to the stored gradinit slices byte for byte and to the stored experiment up
to the comparisons of runs it does not select (config.yaml's new ones); a later part is accepted,
``publish --status`` plans it, and the report reads the store with the same gradinit tables."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import REPO
from lnrepro import cli
from lnrepro.config import experiment, load_config
from lnrepro.config.settings import GRADINIT_NORMS, Experiment
from lnrepro.errors import LnReproError
from lnrepro.io import json_text, read_json
from lnrepro.paths import EXPERIMENT_JSON, STORE_CONFIG, STORE_INDEX
from lnrepro.store import Index, Outcome, _check_study, _slices, units_of

STORE = REPO / "published" / "study-cpu"
pytestmark = pytest.mark.skipif(not (STORE / "store.json").exists(), reason="no published CPU study store")


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return Path(shutil.copytree(STORE, tmp_path / "study-cpu"))


def test_the_stored_settings_have_no_norms_key_and_mean_the_six():
    stored = read_json(STORE / EXPERIMENT_JSON)
    assert "norms" not in stored["analysis"]["gradinit"]
    exp = Experiment.read(STORE / EXPERIMENT_JSON)
    assert exp.analysis.gradinit.norms is None and exp.analysis.gradinit.measured_norms == GRADINIT_NORMS
    assert GRADINIT_NORMS == ("post", "pre", "pre_nofinal", "deepnorm", "admin", "rezero")
    assert json_text(exp.to_dict()) == (STORE / EXPERIMENT_JSON).read_text(encoding="utf-8")


def test_a_later_part_resolves_to_the_stored_slices_and_is_accepted(store: Path, tmp_path: Path):
    """The part's gradinit slices, as the workflow writes them from config.yaml and the store's study.yaml, are
    the store's byte for byte, its experiment.json the store's but for comparisons of runs it does not select,
    and the store's check of a part's study takes them (no refusal, nothing grown)."""
    x = experiment(load_config([REPO / "config.yaml", store / STORE_CONFIG]))
    stored = read_json(store / EXPERIMENT_JSON)
    added = set(x.comparisons) - set(stored["comparisons"])
    assert json_text({**x.to_dict(), "comparisons": {k: v for k, v in x.to_dict()["comparisons"].items()
                                                     if k not in added}}) == json_text(stored)
    assert all(not set(x.comparisons[k].runs) <= set(x.select) for k in added)
    written = {"gradinit.json": x.gradinit_config().to_dict(),
               "gradinit_after_warmup.json": x.gradinit_config(after_warmup=True).to_dict()}
    part = tmp_path / "results" / "study-cpu"
    part.mkdir(parents=True)
    for stored in sorted(store.glob("*.json")):
        if stored.name != "store.json":
            shutil.copyfile(stored, part / stored.name)
    for name, data in written.items():
        assert json_text(data) == (store / name).read_text(encoding="utf-8"), name
    (part / EXPERIMENT_JSON).write_text(json_text(x.to_dict()), encoding="utf-8")
    index = Index.read(store)
    outcome = Outcome("study-cpu")
    assert _check_study(index, store, read_json(part / EXPERIMENT_JSON), dict(index.study), _slices(part), None,
                        None, outcome) is None
    assert outcome.study == []


def test_publish_status_plans_the_missing_units(store: Path, capsys):
    """The complete store plans nothing; with one unit taken out of its index, the plan names that unit and the
    store's study.yaml."""
    assert cli.main(["publish", "--status", str(store)]) in (0, None)
    assert "complete: every unit is stored" in capsys.readouterr().out
    index = Index.read(store)
    unit = units_of(Experiment.read(store / EXPERIMENT_JSON))[0]
    del index.units[unit.key]
    (store / STORE_INDEX).write_text(index.text(), encoding="utf-8")
    assert cli.main(["publish", "--status", str(store)]) in (0, None)
    out = capsys.readouterr().out
    assert f"--configfile {store / STORE_CONFIG}" in out and f"missing: {unit} (" in out


def test_the_report_reads_the_store_with_its_gradinit_tables(store: Path):
    assert cli.main(["report", "--store", str(store)]) in (0, None)
    for table in ("gradinit_by_depth.csv", "gradinit_fit.csv", "gradinit_summary.csv"):
        ours = (store / "report" / "tables" / table).read_bytes()
        assert ours == (STORE / "report" / "tables" / table).read_bytes(), table


def test_a_comparison_of_selected_runs_is_still_part_of_the_study(store: Path, tmp_path: Path):
    part = tmp_path / "results" / "study-cpu"
    shutil.copytree(store, part, ignore=shutil.ignore_patterns("store.json", "runs", "analysis", "report"))
    changed = read_json(store / EXPERIMENT_JSON)
    changed["comparisons"]["figure4"]["claim"] = "another claim"
    (part / EXPERIMENT_JSON).write_text(json_text(changed), encoding="utf-8")
    index = Index.read(store)
    with pytest.raises(LnReproError, match="differ from the study's"):
        _check_study(index, store, changed, dict(index.study), _slices(part), None, None, Outcome("study-cpu"))
