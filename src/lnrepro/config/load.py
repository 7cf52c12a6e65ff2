"""Loading the configuration: merge the YAML layers, validate once, resolve runs into typed settings.

Validation is two steps run together, once, when the config is loaded (by the Snakefile or the CLI): the JSON
schema (``workflow/schemas/config.schema.yaml``, with the norm variants filled in from ``lnrepro.norms``) and
``check_semantics`` for what a schema cannot say (cross-references, equal epochs, a decay epoch within the
training, a width the heads divide). Nothing downstream validates again. See docs/architecture.md.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Iterable

import jsonschema
import yaml

from ..errors import LnReproError
from ..norms import NORMS
from ..stages import WORKER_RULES
from .settings import (
    FACTOR_KEYS,
    AnalysisSettings,
    BpeSettings,
    Comparison,
    DataSettings,
    EvalSettings,
    Experiment,
    ModelSettings,
    Resources,
    RunSettings,
)

REPO_ROOT = Path(__file__).resolve().parents[3]
SCHEMA_PATH = REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml"

# Where the data comes from, not what it is: changing these must not rerun preparation or training.
LOCATION_KEYS = frozenset({"urls", "url_base", "archive", "mirror", "check_counts"})


def deep_merge(base: dict, delta: dict) -> dict:
    """A copy of ``base`` with ``delta`` merged in: dicts recursively, everything else replaced."""
    out = copy.deepcopy(base)
    for key, value in delta.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_schema() -> dict:
    """The config schema, with the enums that registries own filled in (norm variants, factors)."""
    with open(SCHEMA_PATH, encoding="utf-8") as f:
        schema = yaml.safe_load(f)
    schema["$defs"]["model"]["properties"]["norm"] = {"enum": list(NORMS)}
    comparison = schema["properties"]["comparisons"]["additionalProperties"]
    comparison["properties"]["factor"] = {"enum": list(FACTOR_KEYS)}
    return schema


def _key_path(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top level)"


def validate_config(config: dict) -> None:
    """Check ``config`` against the schema and the semantic checks; raise one message naming the key."""
    validator = jsonschema.Draft202012Validator(load_schema())
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        err = errors[0]
        if err.validator == "additionalProperties":
            unknown = sorted(set(err.instance) - set(err.schema.get("properties", {})))
            where = _key_path(err)
            keys = ", ".join(f"{where}.{k}" if where != "(top level)" else k for k in unknown)
            raise LnReproError(f"config: unknown key {keys} (allowed: {', '.join(sorted(err.schema.get('properties', {})))})")
        raise LnReproError(f"config: key {_key_path(err)}: {err.message}")
    check_semantics(config)


def check_semantics(config: dict) -> None:
    """What the schema cannot express: names that must exist, and settings that must agree."""
    runs = config["runs"]
    for name in config["select"]:
        if name not in runs:
            raise LnReproError(f"config: select names run {name!r}, which is not under runs: ({', '.join(runs)})")
    for comp, spec in config["comparisons"].items():
        for name in spec["runs"]:
            if name not in runs:
                raise LnReproError(f"config: comparisons.{comp}.runs names {name!r}, which is not under runs:")
    for name in config["resources"]:
        if name != "default" and name not in WORKER_RULES:
            raise LnReproError(f"config: resources.{name}: no such rule (rules: {', '.join(WORKER_RULES)})")
    resolved = {name: resolve_run(config, name) for name in config["select"]}
    for name, run in resolved.items():
        m, s = run.model, run.schedule
        where = f"runs.{name} (with defaults)"
        if m.d_model % m.heads:
            raise LnReproError(f"config: {where}: model.d_model ({m.d_model}) must be divisible by model.heads ({m.heads})")
        if m.share_all_embeddings and not m.share_decoder_embeddings:
            raise LnReproError(f"config: {where}: model.share_all_embeddings requires model.share_decoder_embeddings")
        if s.decay == "step":
            late = [e for e in s.decay_epochs if e > run.train.epochs]
            if late:
                raise LnReproError(f"config: {where}: schedule.decay_epochs {late} beyond the last epoch "
                                   f"(train.epochs = {run.train.epochs}): the step decay would never happen")
    counts = {name: run.train.epochs for name, run in resolved.items()}
    if len(set(counts.values())) > 1:
        raise LnReproError(f"config: train.epochs must be the same for every selected run, got {counts}")


def load_config(paths: Iterable[str | Path]) -> dict:
    """Merge YAML files in order (as Snakemake's --configfile does) and validate the result."""
    config: dict = {}
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                layer = yaml.safe_load(f) or {}
        except FileNotFoundError as e:
            raise LnReproError(f"{path}: config file not found") from e
        except yaml.YAMLError as e:
            raise LnReproError(f"{path}: not valid YAML ({e})") from e
        config = deep_merge(config, layer)
    validate_config(config)
    return config


def resolve_run(config: dict, run: str) -> RunSettings:
    """The deep merge of ``defaults`` and the run's delta, typed."""
    if run not in config["runs"]:
        raise LnReproError(f"config: no run named {run!r} under runs:")
    merged = deep_merge(config["defaults"], config["runs"][run])
    return RunSettings.from_dict({k: merged[k] for k in ("model", "optim", "schedule", "train")}, "defaults")


def data_settings(config: dict) -> DataSettings:
    """The dataset's settings that determine its content (locations left out)."""
    data = config["defaults"]["data"]
    name = data["dataset"]
    return DataSettings(name, {k: v for k, v in data.get(name, {}).items() if k not in LOCATION_KEYS})


def eval_settings(config: dict) -> EvalSettings:
    return EvalSettings.from_dict({**config["defaults"]["eval"],
                                   "label_smoothing": config["defaults"]["optim"]["label_smoothing"]},
                                  "defaults.eval")


def experiment(config: dict) -> Experiment:
    """The resolved, typed experiment (what experiment.json holds)."""
    from ..deviations import DEVIATIONS

    return Experiment(
        name=config["name"],
        select=tuple(config["select"]),
        seeds=tuple(config["seeds"]),
        runs={run: resolve_run(config, run) for run in config["select"]},
        comparisons={k: Comparison.from_dict(v, f"comparisons.{k}") for k, v in config["comparisons"].items()},
        eval=eval_settings(config),
        data=data_settings(config),
        bpe=BpeSettings.from_dict(config["defaults"]["bpe"], "defaults.bpe"),
        model=ModelSettings.from_dict(config["defaults"]["model"], "defaults.model"),
        analysis=AnalysisSettings.from_dict(config.get("analysis", {}), "analysis"),
        notes=config.get("notes", ""),
        scaling=config.get("scaling"),
        deviations=tuple(DEVIATIONS),
    )


def resources(config: dict, rule: str) -> Resources:
    """The rule's threads, mem_mb, runtime and gpus: its own entry over ``resources.default``."""
    res = config["resources"]
    return Resources.from_dict({**res["default"], **res.get(rule, {})}, f"resources.{rule}")


def dataset_section(config: dict) -> dict[str, Any]:
    """The selected dataset's whole section, locations included (the download rules need them)."""
    data = config["defaults"]["data"]
    return dict(data.get(data["dataset"], {}))
