"""Run resolution: defaults + a named run's delta -> the resolved config of one run (design.md, "The configuration").

The same functions serve the Snakefile (which slices the config into per-run files) and the CLI, so a run's
resolved config is computed in one place only.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any, Iterable

import jsonschema
import yaml

from .errors import LnReproError

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml"

# The sections a run may override; data, bpe and eval are the experiment's, shared by every run.
RUN_SECTIONS = ("model", "optim", "schedule", "train")
# What training depends on (design.md: the slice written to config.json).
TRAIN_SECTIONS = ("model", "optim", "schedule", "train", "data", "bpe")
# Where the data comes from, not what it is: changing these must not retrain anything.
LOCATION_KEYS = frozenset({"urls", "url_base", "archive", "mirror", "check_counts"})
# The config key each studied factor varies.
FACTOR_KEYS = {"norm": "model.norm", "warmup": "schedule.warmup", "decay": "schedule.decay"}


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
    with open(SCHEMA_PATH, encoding="utf-8") as f:
        return yaml.safe_load(f)


def _key_path(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top level)"


def validate_config(config: dict) -> None:
    """Check ``config`` against the schema and its cross-references; raise one message naming the key."""
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
    check_references(config)


def check_references(config: dict) -> None:
    """Names that must exist: selected runs, comparison runs; the factor's key must exist in the defaults."""
    runs = config["runs"]
    for name in config["select"]:
        if name not in runs:
            raise LnReproError(f"config: select names run {name!r}, which is not under runs: ({', '.join(runs)})")
    for comp, spec in config["comparisons"].items():
        for name in spec["runs"]:
            if name not in runs:
                raise LnReproError(f"config: comparisons.{comp}.runs names {name!r}, which is not under runs:")
    for name in config["resources"]:
        if name != "default" and name not in RESOURCE_RULES:
            raise LnReproError(f"config: resources.{name}: no such rule (rules: {', '.join(sorted(RESOURCE_RULES))})")


RESOURCE_RULES = frozenset(
    {"prepare_corpus", "learn_bpe", "apply_bpe", "train_run", "score_checkpoint", "gradinit", "make_report", "fetch_archive"}
)


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


def selected_runs(config: dict) -> list[str]:
    return list(config["select"])


def epochs(config: dict) -> int:
    """The number of epochs (= checkpoints) of every selected run; the static DAG needs one number."""
    counts = {run: resolve_run(config, run)["train"]["epochs"] for run in selected_runs(config)}
    if len(set(counts.values())) > 1:
        raise LnReproError(f"config: runs.*.train.epochs must be the same for every selected run, got {counts}")
    return next(iter(counts.values()))


def resolve_run(config: dict, run: str) -> dict:
    """The deep merge of ``defaults`` and the run's delta."""
    if run not in config["runs"]:
        raise LnReproError(f"config: no run named {run!r} under runs:")
    return deep_merge(config["defaults"], config["runs"][run])


def data_slice(config: dict) -> dict:
    """The dataset's settings that determine its content (locations left out)."""
    data = config["defaults"]["data"]
    name = data["dataset"]
    section = {k: v for k, v in data.get(name, {}).items() if k not in LOCATION_KEYS}
    return {"dataset": name, name: section}


def run_slice(config: dict, run: str, seed: int) -> dict:
    """What ``runs/{run}/seed{seed}/config.json`` holds: only what training depends on."""
    resolved = resolve_run(config, run)
    out: dict[str, Any] = {"run": run, "seed": int(seed)}
    for section in TRAIN_SECTIONS:
        out[section] = resolved[section]
    out["data"] = data_slice(config)
    return out


def eval_slice(config: dict) -> dict:
    """What ``eval.json`` holds: decoding and scoring settings, shared by every checkpoint."""
    out = dict(config["defaults"]["eval"])
    out["label_smoothing"] = config["defaults"]["optim"]["label_smoothing"]
    return out


def experiment_slice(config: dict) -> dict:
    """What the report needs: resolved selected runs, seeds, comparisons, notes and known deviations."""
    from .deviations import DEVIATIONS

    return {
        "name": config["name"],
        "select": selected_runs(config),
        "seeds": list(config["seeds"]),
        "runs": {run: resolve_run(config, run) for run in selected_runs(config)},
        "comparisons": config["comparisons"],
        "eval": eval_slice(config),
        "notes": config.get("notes", ""),
        "scaling": config.get("scaling"),
        "deviations": DEVIATIONS,
        "model": config["defaults"]["model"],
        "analysis": config.get("analysis", {}),
    }


def resources(config: dict, rule: str) -> dict:
    """The rule's threads, mem_mb, runtime and gpus: its own entry over ``resources.default``."""
    res = config["resources"]
    return {**res["default"], **res.get(rule, {})}


def digest(obj: Any) -> str:
    """SHA-256 of the canonical JSON of ``obj``."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
