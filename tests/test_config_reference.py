"""docs/configuration.md is generated from the config schema and config.yaml (lnrepro.config.reference)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from conftest import REPO
from lnrepro import cli
from lnrepro.config import SCHEMA_PATH
from lnrepro.config import reference as ref
from lnrepro.norms import NORMS
from lnrepro.optimizers import OPTIMIZERS

PAGE = REPO / "docs" / "configuration.md"


def _rows(text: str) -> dict[str, list[str]]:
    """The page's table rows: dotted key -> its Meaning, Default and Allowed values cells."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def _leaves(node: Any, key: str) -> Iterator[tuple[str, Any]]:
    """config.yaml's keys with a value that is not a mapping, dotted."""
    if isinstance(node, dict) and node:
        for name, value in node.items():
            yield from _leaves(value, f"{key}.{name}" if key else name)
    else:
        yield key, node


def test_configuration_page_is_what_the_schema_and_config_generate() -> None:
    """The committed page is exactly what the generator writes (run `lnrepro config-reference` after changing
    the schema or config.yaml)."""
    assert ref.update_reference(PAGE, check=True)


def test_every_schema_key_has_a_description() -> None:
    assert ref.undescribed_keys() == []


def test_a_key_without_a_description_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key is described by its own description or by that of the $defs mapping it refers to (defaults.model
    by $defs/model); a reference to a bare type ($defs/nonneg) needs its own."""
    text = SCHEMA_PATH.read_text(encoding="utf-8")
    lines = text.splitlines()
    drop = [i for i, line in enumerate(lines) if line.strip().startswith(("weight_decay:", "model: {$ref"))]
    assert len(drop) == 3  # $defs/optim's weight_decay, defaults.model, runs.<run>.model
    for i in drop:
        lines[i] = lines[i].split(", description:")[0] + "}"
    schema = tmp_path / "config.schema.yaml"
    schema.write_text("\n".join(lines), encoding="utf-8")
    monkeypatch.setattr(ref, "SCHEMA_PATH", schema)
    assert ref.undescribed_keys() == ["defaults.optim.weight_decay"]


def test_every_value_of_config_yaml_is_a_default_on_the_page() -> None:
    """Each key config.yaml gives outside the named maps (runs, grids, comparisons, resources: their entries'
    names are listed instead) has a row whose Default is its value, as YAML writes it."""
    config = yaml.safe_load((REPO / "config.yaml").read_text(encoding="utf-8"))
    rows = _rows(PAGE.read_text(encoding="utf-8"))
    for section in ("runs", "grids", "comparisons", "resources"):
        for name in config.pop(section):
            assert f"`{name}`" in rows[section][1], (section, name)
    checked = 0
    for key, value in _leaves(config, ""):
        sums = "defaults.data.multi30k.sha256"
        if key.startswith(sums):
            assert f"`{key.removeprefix(sums + '.')}`" in rows[sums][1]
            continue
        if key.startswith("defaults.eval.splits.test"):  # test shares valid's keys: one row with its values
            continue
        assert rows[key][1] == ref._flow(value).replace("|", "\\|"), key
        checked += 1
    assert checked > 80


def test_defaults_config_yaml_leaves_out_come_from_the_typed_layer() -> None:
    """analysis.report is not in config.yaml: its defaults are the loader's (ReportSettings')."""
    rows = _rows(PAGE.read_text(encoding="utf-8"))
    assert rows["analysis.report.target_fraction"][1] == "`0.95`"
    assert rows["analysis.report.equivalence_margins.bleu_tok"][1] == "`1.0`"
    assert rows["defaults.eval.valid_bleu_floor"][1] == "`null`"
    assert rows["run_seeds"][1] == "—"


def test_registry_enums_are_the_allowed_values() -> None:
    """The norm variants and optimizers come from their registries, as validation fills them in."""
    rows = _rows(PAGE.read_text(encoding="utf-8"))
    assert all(f"`{name}`" in rows["defaults.model.norm"][2] for name in NORMS)
    assert all(f"`{name}`" in rows["defaults.optim.name"][2] for name in OPTIMIZERS)
    assert "`optim.name`" in rows["comparisons.<comparison>.factor"][2]


def test_sections_follow_the_config() -> None:
    """One section per top-level key in config.yaml's order, then the schema's other keys."""
    config = yaml.safe_load((REPO / "config.yaml").read_text(encoding="utf-8"))
    headings = [line[4:-1] for line in PAGE.read_text(encoding="utf-8").splitlines() if line.startswith("## `")]
    assert headings[:len(config)] == list(config)
    assert "run_seeds" in headings[len(config):]


def test_cli_check_refuses_a_stale_page_and_writes_it(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "configuration.md"
    out.write_text("stale\n", encoding="utf-8")
    assert cli.main(["config-reference", "--check", "--out", str(out)]) == 1
    assert f"run: lnrepro config-reference --out {out}" in capsys.readouterr().err
    assert cli.main(["config-reference", "--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == PAGE.read_text(encoding="utf-8")
    assert cli.main(["config-reference", "--check", "--out", str(out)]) == 0
