"""Loading the configuration: merge the YAML layers, validate once, resolve runs into typed settings.

Validation is two steps run together, once, when the config is loaded (by the Snakefile or the CLI): the JSON
schema (``lnrepro/config/config.schema.yaml``, with the norm variants filled in from ``lnrepro.norms`` and the
optimizers from ``lnrepro.optimizers``) and ``check_semantics`` for what a schema cannot say (cross-references,
a decay epoch within the run's training, a width the heads divide, grid references, names and extensions (each
among its grid's values), an after-warm-up run with warm-up, an earlier budget before the shortest run's last
epoch, each split's scored epochs within every run's training). Selected runs may train different numbers of
epochs (``train.epochs`` per run, as any run setting). Nothing downstream validates again.

A grid (``grids:``) is expanded here, when runs are resolved, into runs named
``{base}__{key}={value}__...``; everything downstream sees them as runs. See docs/architecture.md.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import math
import re
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import jsonschema
import yaml

from ..errors import LnReproError
from ..io import read_yaml
from ..norms import NORMS
from ..paths import DOWNLOADS, MAX_NAME, NAME_ROOM
from ..stages import WORKER_RULES
from ..optimizers import OPTIMIZERS
from .settings import (
    FACTOR_KEYS,
    AnalysisSettings,
    BpeSettings,
    Comparison,
    DataSettings,
    EvalSettings,
    Experiment,
    GridSettings,
    ModelSettings,
    Resources,
    RunSettings,
    VALID,
)

REPO_ROOT = Path(__file__).resolve().parents[3]
SCHEMA_PATH = Path(__file__).with_name("config.schema.yaml")  # package data: a plain install validates too

# Where the data comes from, not what it is: changing these must not rerun preparation or training.
LOCATION_KEYS = frozenset({"urls", "url_base", "archive", "mirror", "check_counts"})

# The sections a run overrides (and a grid varies, by dotted key: ``optim.lr_max``).
RUN_SECTIONS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(RunSettings))
# A grid's run name: the base, then ``key=value`` per varied key (the key's last part), joined by GRID_SEP.
GRID_SEP = "__"
GRID_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.=-]*")  # the schema's pattern of run names
# Varying T_warmup in a grid sets the isqrt anchor to the same value (fairseq's --warmup-updates sets both),
# and T_warmup 0 stands for no warm-up (the paper's warm-up study); outside grids both are as configured.
WARMUP_KEY, ANCHOR_KEY, WARMUP_SWITCH = "schedule.warmup_updates", "schedule.anchor_updates", "schedule.warmup"
# Run settings that are no more, each with what took its place: a config that still sets one is refused with
# this message rather than as an unknown key.
REMOVED_RUN_KEYS: dict[str, str] = {
    "train.device": "the device follows the GPUs a job is given: resources.<rule>.gpus (0: the CPU, 1: CUDA), "
                    "e.g. resources.train_run.gpus, resources.score_checkpoint.gpus, resources.gradinit.gpus",
}


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
    """The config schema, with the enums that registries own filled in (norm variants, optimizers, factors)."""
    schema = read_yaml(SCHEMA_PATH)
    schema["$defs"]["model"]["properties"]["norm"] = {"enum": list(NORMS)}
    schema["$defs"]["optim"]["properties"]["name"] = {"enum": list(OPTIMIZERS)}
    for names in (schema["properties"]["name"], schema["properties"]["runs"]["propertyNames"]):
        names["maxLength"] = MAX_NAME
    comparison = schema["properties"]["comparisons"]["additionalProperties"]
    run_keys = [f"{section}.{key}" for section in RUN_SECTIONS for key in schema["$defs"][section]["properties"]]
    # A comparison studies a factor of the design or any run setting, dotted (optim.name).
    comparison["properties"]["factor"] = {"enum": [*FACTOR_KEYS, *run_keys]}
    # A grid's keys are the run settings, dotted; each takes a list of what that setting takes, in values and
    # in extended (the values added later) alike.
    grid = schema["properties"]["grids"]["additionalProperties"]["properties"]
    for part in ("values", "extended"):
        grid[part]["properties"] = {key: _grid_values_schema(key) for key in run_keys}
        grid[part]["additionalProperties"] = False
    return schema


# JSON Schema counts 3.0 an integer; the config's integers (epochs, seeds, widths) index and name things, where a
# float gives a Python error or a "seed1.0" folder: an integer here is an int (and never a bool).
_STRICT_INTEGERS = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda checker, value: isinstance(value, int) and not isinstance(value, bool)))


@functools.lru_cache(maxsize=4)
def _validator(norms: tuple[str, ...], optimizers: tuple[str, ...]) -> jsonschema.Draft202012Validator:
    """The schema's validator, made once per set of registered norms and optimizers (the enums ``load_schema``
    fills in: the key of the cache): ``load_schema`` parses the schema's YAML, a tenth of a second a call."""
    return _STRICT_INTEGERS(load_schema())


def _grid_values_schema(key: str) -> dict:
    """The schema of one grid key's list of values (``values`` and ``extended``): what the setting takes."""
    section, name = key.split(".")
    item: dict = {"$ref": f"#/$defs/{section}/properties/{name}"}
    if key == WARMUP_KEY:
        item = {"anyOf": [{"const": 0, "description": "no warm-up"}, item]}
    return {"type": "array", "items": item, "minItems": 1, "uniqueItems": True}


def _key_path(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top level)"


def non_finite(value: Any, where: str = "") -> Iterator[tuple[str, float]]:
    """Every float of ``value`` (nested mappings and lists) that is not finite, with its dotted key: YAML reads
    ``.nan`` and ``.inf`` as floats, which pass every bound of the schema (a comparison with NaN is false)."""
    if isinstance(value, float) and not math.isfinite(value):
        yield where or "(top level)", value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from non_finite(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from non_finite(item, f"{where}.{i}" if where else str(i))


def validate_config(config: dict) -> None:
    """Check ``config`` against the schema and the semantic checks; raise one message naming the key. Every
    number must be finite (``non_finite``), whatever its key."""
    _check_removed(config)
    for key, value in non_finite(config):
        raise LnReproError(f"config: key {key}: {value} is not a finite number (every number of the config must be "
                           "finite)")
    validator = _validator(tuple(NORMS), tuple(OPTIMIZERS))
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        err = errors[0]
        if err.validator == "additionalProperties":
            unknown = sorted(set(err.instance) - set(err.schema.get("properties", {})))
            where = _key_path(err)
            keys = ", ".join(f"{where}.{k}" if where != "(top level)" else k for k in unknown)
            raise LnReproError(f"config: unknown key {keys} (allowed: {', '.join(sorted(err.schema.get('properties', {})))})")
        if err.validator == "maxLength":
            raise LnReproError(f"config: key {_key_path(err)}: {_too_long(err.instance)}")
        why = f" ({err.schema['description']})" if err.validator == "maximum" and "description" in err.schema else ""
        raise LnReproError(f"config: key {_key_path(err)}: {err.message}{why}")
    check_semantics(config)


def _removed_key_uses(config: dict) -> Iterable[tuple[str, str]]:
    """(where, removed key) for every place ``config`` sets a key of REMOVED_RUN_KEYS: the defaults, a run, a
    grid's values or extensions, a comparison's factor."""
    def sections() -> Iterable[tuple[str, Any]]:
        yield "defaults", config.get("defaults")
        runs = config.get("runs")
        for name, run in (runs.items() if isinstance(runs, dict) else ()):  # another type: the schema names it
            yield f"runs.{name}", run
    for where, section in sections():
        for key in REMOVED_RUN_KEYS:
            part, name = key.split(".")
            if isinstance(section, dict) and isinstance(section.get(part), dict) and name in section[part]:
                yield f"{where}.{key}", key
    grids = config.get("grids")
    for grid, spec in (grids.items() if isinstance(grids, dict) else ()):
        for part in ("values", "extended"):
            for key in REMOVED_RUN_KEYS:
                if isinstance(spec, dict) and isinstance(spec.get(part), dict) and key in spec[part]:
                    yield f"grids.{grid}.{part}.{key}", key
    for comp, spec in (config.get("comparisons") or {}).items():
        if isinstance(spec, dict) and spec.get("factor") in REMOVED_RUN_KEYS:
            yield f"comparisons.{comp}.factor", spec["factor"]


def _check_removed(config: dict) -> None:
    """Refuse a removed run setting, naming where it is set (the first place) and what replaced it."""
    use = next(iter(_removed_key_uses(config)), None)
    if use is not None:
        where, key = use
        raise LnReproError(f"config: {where}: {key} was removed; {REMOVED_RUN_KEYS[key]}. Delete the key")


def check_semantics(config: dict) -> None:
    """What the schema cannot express: names that must exist, and settings that must agree."""
    if f"results/{config['name']}" == DOWNLOADS:
        raise LnReproError(f"config: name {config['name']!r} is the folder {DOWNLOADS}, which holds the downloads "
                           "every experiment shares: choose another name")
    _check_grids(config)
    runs, grids = run_deltas(config), config.get("grids", {})
    for name in config["select"]:
        if name not in runs and name not in grids:
            raise LnReproError(f"config: select names {name!r}, which is neither a run (under runs: "
                               f"({', '.join(config['runs'])}) or generated by a grid) nor a grid ({', '.join(grids)})")
    for name in config.get("run_seeds", {}):
        if name not in runs:
            raise LnReproError(f"config: run_seeds names {name!r}, which is not a run (under runs: or generated by a grid)")
    for comp, spec in config["comparisons"].items():
        for name in spec["runs"]:
            if name not in runs:
                raise LnReproError(f"config: comparisons.{comp}.runs names {name!r}, which is not a run "
                                   "(under runs: or generated by a grid)")
    for name in config["resources"]:
        if name != "default" and name not in WORKER_RULES:
            raise LnReproError(f"config: resources.{name}: no such rule (rules: {', '.join(WORKER_RULES)})")
    resolved = resolve_runs(config, selected_runs(config))
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
    eval_settings(config, resolved)  # resolving each split's epochs checks them against every run's length
    _check_analysis(config, runs, resolved)


def _check_analysis(config: dict, runs: dict[str, dict], resolved: dict[str, RunSettings]) -> None:
    """The analysis settings that name a run or an epoch: refused here rather than after hours of training
    (gradinit after warm-up) or silently left out of the report (an earlier budget that is not earlier)."""
    given = config.get("analysis", {})
    analysis = AnalysisSettings.from_dict(given, "analysis")
    run = analysis.gradinit.after_warmup_run
    key = "config: analysis.gradinit.after_warmup_run"
    # The default names a run of config.yaml; only a name the config gives must exist (an unselected run is
    # not measured, by design).
    if "after_warmup_run" in given.get("gradinit", {}) and run is not None and run not in runs:
        raise LnReproError(f"{key} names {run!r}, which is not a run (under runs: or generated by a grid); "
                           "expected a run with warm-up, or null")
    if run in resolved and not resolved[run].schedule.warmup:
        raise LnReproError(f"{key} names {run!r}, which has no warm-up (schedule.warmup false): expected a "
                           "selected run with warm-up, or null")
    for run, reference in analysis.report.failure_reference.items():
        where = f"config: analysis.report.failure_reference.{run}"
        for name in (run, reference):
            if name not in runs:
                raise LnReproError(f"{where}: {name!r} is not a run (under runs: or generated by a grid); expected "
                                   "a run mapped to the run it is judged against")
        if run == reference:
            raise LnReproError(f"{where}: a run cannot be its own reference")
    # Every comparison ends at its runs' common last epoch, so an earlier budget must be before the shortest's.
    budget, shortest = analysis.report.budget_epoch, min(resolved.values(), key=lambda r: r.train.epochs)
    epochs = shortest.train.epochs
    if budget is not None and budget >= epochs:
        of = "" if len({r.train.epochs for r in resolved.values()}) == 1 else " of the shortest selected run"
        raise LnReproError(f"config: analysis.report.budget_epoch ({budget}) must be before the last epoch{of} "
                           f"(train.epochs = {epochs}); the last epoch is always a budget of the report")


def _check_grids(config: dict) -> None:
    """A grid's base is a run, its keys leave T_warmup's couplings alone, its extensions are among its values,
    its run names are valid and new.

    A name determines its run's settings (the base, and the value of each key: the last parts of the run
    settings' keys differ), so a name that two grids generate is one run (tests/test_config.py checks the
    premise)."""
    runs = config["runs"]
    for grid, spec in config.get("grids", {}).items():
        where, keys = f"config: grids.{grid}", set(spec["values"])
        if grid in runs:
            raise LnReproError(f"{where}: a grid may not have the name of a run under runs: (select names either)")
        if spec["base"] not in runs:
            raise LnReproError(f"{where}.base names run {spec['base']!r}, which is not under runs:")
        coupled = {ANCHOR_KEY, WARMUP_SWITCH} & keys if WARMUP_KEY in keys else set()
        if coupled:
            raise LnReproError(f"{where}.values: {', '.join(sorted(coupled))} with {WARMUP_KEY}, which sets them "
                               "(T_anchor = T_warmup; T_warmup 0: no warm-up)")
        _check_extended(grid, spec["values"], spec.get("extended", {}))
    for grid, grid_deltas in grid_runs(config).items():
        for name in grid_deltas:
            if not GRID_RUN_NAME.fullmatch(name):
                raise LnReproError(f"config: grids.{grid}: run name {name!r} holds characters outside "
                                   "[A-Za-z0-9_.=-] (a float is written as 1.0e-3)")
            if name in runs:
                raise LnReproError(f"config: grids.{grid} generates run {name!r}, which is also under runs:")
            if len(name) > MAX_NAME:
                raise LnReproError(f"config: grids.{grid} generates run {_too_long(name)} (shorten the base run's name "
                                   "or the grid's keys and values)")


def _too_long(name: str) -> str:
    """Why ``name`` (ASCII: the schema's pattern) cannot name an experiment or a run."""
    return (f"{name[:40]!r}... is {len(name)} bytes long, over the {MAX_NAME} a name may have (a file system takes "
            f"255 bytes per path component, and a job's log adds up to {NAME_ROOM} to a run name)")


def _check_extended(grid: str, values: dict[str, list], extended: dict[str, list]) -> None:
    """Each key of a grid's ``extended`` is a key of its ``values``, each value added is one of that key's values,
    as its run names write it (``_name_text``: 8.0e-3 and 0.008 are one value, [5] is decay epoch 5), and at least
    one of them was in the grid's first run."""
    key = f"grids.{grid}"
    for name, added in extended.items():
        if name not in values:
            raise LnReproError(f"config: {key}.extended.{name}: not a key of {key}.values ({', '.join(values)}): "
                               "an extension adds a value to a key the grid varies")
        tried, named = [_name_text(v) for v in values[name]], [_name_text(v) for v in added]
        missing = [v for v in named if v not in tried]
        if missing:
            raise LnReproError(f"config: {key}.extended.{name}: {', '.join(missing)} not in {key}.values.{name} "
                               f"({', '.join(tried)}): an extension is also one of the grid's values (add it there "
                               "too)")
        if set(tried) <= set(named):
            raise LnReproError(f"config: {key}.extended.{name}: every value of {key}.values.{name} is listed as added "
                               "later: the values of the grid's first run are not extensions (list only those added "
                               "after it)")


def load_config(paths: Iterable[str | Path]) -> dict:
    """Merge YAML files in order (as Snakemake's --configfile does) and validate the result."""
    config: dict = {}
    for path in paths:
        try:
            layer = read_yaml(path) or {}
        except FileNotFoundError as e:
            raise LnReproError(f"{path}: config file not found") from e
        except yaml.YAMLError as e:
            raise LnReproError(f"{path}: not valid YAML ({e})") from e
        if not isinstance(layer, dict):
            raise LnReproError(f"{path}: config: the file's top level is a {type(layer).__name__}, not a mapping "
                               "of config keys")
        config = deep_merge(config, layer)
    validate_config(config)
    return config


def _name_text(value: Any) -> str:
    """A grid value as its run name writes it: a list's items joined by ``-``, booleans as YAML writes them,
    a float below 1 with a dot and an exponent (``1.0e-3``: YAML reads ``1e-3`` as a string)."""
    if isinstance(value, (list, tuple)):
        return "-".join(map(_name_text, value))
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and 0 < abs(value) < 1:
        sign, digits, exponent = Decimal(repr(value)).as_tuple()  # repr: the shortest exact digits
        mantissa = f"{digits[0]}.{''.join(map(str, digits[1:])) or '0'}"
        return f"{'-' * sign}{mantissa}e{int(exponent) + len(digits) - 1}"
    return str(value)


def _grid_delta(combination: dict[str, Any]) -> dict:
    """The nested override of one combination of a grid's values (dotted key -> value)."""
    delta: dict = {}
    for key, value in combination.items():
        section, name = key.split(".")
        if key == WARMUP_KEY:
            update = {"warmup": False} if value == 0 else {"warmup_updates": value, "anchor_updates": value}
        else:
            update = {name: value}
        delta.setdefault(section, {}).update(update)
    return delta


def grid_runs(config: dict) -> dict[str, dict[str, dict]]:
    """Every grid's runs, ``{grid: {run name: delta over defaults}}``: the base run's delta with one
    combination of the grid's values each (the first key varying slowest)."""
    out = {}
    for grid, spec in config.get("grids", {}).items():
        base, keys = spec["base"], list(spec["values"])
        out[grid] = {}
        for combination in itertools.product(*spec["values"].values()):
            parts = [f"{key.rsplit('.', 1)[-1]}={_name_text(value)}" for key, value in zip(keys, combination)]
            name = GRID_SEP.join([base, *parts])
            out[grid][name] = deep_merge(config["runs"][base], _grid_delta(dict(zip(keys, combination))))
    return out


def run_deltas(config: dict) -> dict[str, dict]:
    """Every run's delta over ``defaults``: the runs under ``runs:`` and the grids' (a name that two grids
    generate is one run)."""
    deltas = dict(config["runs"])
    for grid_deltas in grid_runs(config).values():
        deltas.update(grid_deltas)
    return deltas


def selected_runs(config: dict) -> tuple[str, ...]:
    """The runs ``select`` names, a grid standing for its runs, each once, in order."""
    grids = grid_runs(config)
    return tuple(dict.fromkeys(run for name in config["select"] for run in grids.get(name, [name])))


def resolve_run(config: dict, run: str) -> RunSettings:
    """The deep merge of ``defaults`` and the run's delta (under runs: or from a grid), typed."""
    return resolve_runs(config, [run])[run]


def resolve_runs(config: dict, runs: Iterable[str]) -> dict[str, RunSettings]:
    """``resolve_run`` of each of ``runs``, in order, the grids expanded once."""
    deltas, out = run_deltas(config), {}
    for run in runs:
        if run not in deltas:
            raise LnReproError(f"config: no run named {run!r} under runs: or generated by a grid")
        merged = deep_merge(config["defaults"], deltas[run])
        out[run] = RunSettings.from_dict({k: merged[k] for k in RUN_SECTIONS}, "defaults")
    return out


def data_settings(config: dict) -> DataSettings:
    """The dataset's settings that determine its content (locations left out)."""
    data = config["defaults"]["data"]
    name = data["dataset"]
    return DataSettings(name, {k: v for k, v in data.get(name, {}).items() if k not in LOCATION_KEYS})


def _split_epochs(spec: str | list) -> tuple[bool, tuple[int, ...]]:
    """A split's ``epochs`` (all, last, a list of numbers and last) as ``SplitEval``'s (every, listed)."""
    if spec in ("all", "last"):
        return spec == "all", ()
    return False, tuple(sorted(e for e in spec if e != "last"))


def _check_split_epochs(spec: str | list, last: int, key: str, runs: str) -> None:
    """A listed epoch outside the training of a run of ``last`` epochs, or a list without that last epoch, is
    an error naming the key (``runs``: which runs have that length, "" when every selected run has it)."""
    if isinstance(spec, str):
        return
    listed = [e for e in spec if e != "last"]
    outside = [e for e in listed if not 1 <= e <= last]
    if outside:
        raise LnReproError(f"config: {key}: epoch(s) {outside} outside the training (1..{last}, train.epochs{runs})")
    if spec and "last" not in spec and last not in listed:
        raise LnReproError(f"config: {key}: {spec} does not hold the last epoch ({last}{runs}): every scored split "
                           "is scored there, where the report compares the runs (add last)")


def eval_settings(config: dict, resolved: Mapping[str, RunSettings]) -> EvalSettings:
    """defaults.eval resolved: each split's epochs (a split scored at none left out), the validation loss's label
    smoothing from defaults.optim. The epochs are checked against the length of every selected run (``resolved``:
    each one's settings; ``all`` and ``last`` are each run's own): a listed epoch outside a run's training, a list
    without the last epoch, or an epoch of some run that scores no split (each checkpoint has one scoring job) is
    an error naming the key."""
    spec, where = config["defaults"]["eval"], "defaults.eval.splits"
    lengths: dict[int, list[str]] = {}
    for run, settings in resolved.items():
        lengths.setdefault(settings.train.epochs, []).append(run)
    splits = {}
    for name, split in spec["splits"].items():
        every, listed = _split_epochs(split["epochs"])
        if every or split["epochs"]:
            splits[name] = {**{k: v for k, v in split.items() if k != "epochs"}, "every": every, "listed": listed}
    floor = spec.get("valid_bleu_floor")
    settings = EvalSettings.from_dict({"splits": splits, "max_tokens": spec["max_tokens"], "valid_bleu_floor": floor,
                                       "label_smoothing": config["defaults"]["optim"]["label_smoothing"]},
                                      "defaults.eval")
    for last, runs in sorted(lengths.items()):
        more = f" and {len(runs) - 1} more run(s)" if len(runs) > 1 else ""
        of = "" if len(lengths) == 1 else f" of {runs[0]}{more}"
        for name, split in spec["splits"].items():
            _check_split_epochs(split["epochs"], last, f"{where}.{name}.epochs", of)
        unscored = sorted(set(range(1, last + 1)) - {e for eps in settings.scored(last).values() for e in eps})
        if unscored:
            raise LnReproError(f"config: {where}: no split is scored at epoch(s) {unscored}{of}: every checkpoint "
                               "has one scoring job, which scores at least one split (e.g. valid: {epochs: all})")
        if floor is not None:
            _check_floor(settings.scored(last), f"{where.rsplit('.', 1)[0]}.valid_bleu_floor", of)
    return settings


def _check_floor(scored: dict[str, tuple[int, ...]], key: str, of: str = "") -> None:
    """The floor reads the checkpoint's own valid BLEU, from the same scoring job: valid must be scored wherever
    another split is (``scored``: each split's epochs in a run of one length; ``of`` names such a run)."""
    valid = set(scored.get(VALID, ()))
    unread = sorted({e for name, eps in scored.items() if name != VALID for e in eps} - valid)
    if unread:
        raise LnReproError(f"config: {key}: the floor reads the checkpoint's valid BLEU, but valid is not scored at "
                           f"epoch(s) {unread}{of}, where another split is (score valid there, or set the floor null)")


def experiment(config: dict) -> Experiment:
    """The resolved, typed experiment (what experiment.json holds)."""
    select = selected_runs(config)
    runs = resolve_runs(config, select)
    return Experiment(
        name=config["name"],
        select=select,
        seeds=tuple(config["seeds"]),
        run_seeds={r: tuple(v) for r, v in config.get("run_seeds", {}).items() if r in select},
        runs=runs,
        comparisons={k: Comparison.from_dict(v, f"comparisons.{k}") for k, v in config["comparisons"].items()},
        eval=eval_settings(config, runs),
        data=data_settings(config),
        bpe=BpeSettings.from_dict(config["defaults"]["bpe"], "defaults.bpe"),
        model=ModelSettings.from_dict(config["defaults"]["model"], "defaults.model"),
        analysis=AnalysisSettings.from_dict(config.get("analysis", {}), "analysis"),
        grids=_grid_settings(config, select),
        notes=config.get("notes", ""),
        scaling=config.get("scaling"),
    )


def _grid_settings(config: dict, select: tuple[str, ...]) -> dict[str, GridSettings]:
    """The grids with a selected run, each with its seeds (the experiment's by default) and its selected runs. A
    run counts for a grid when ``select`` names the grid or the run itself: a run that an unselected grid shares
    with a selected one (warmup_study's and tune_postln's) trains the selected grid's seeds only."""
    out = {}
    named = set(config.get("select", ()))
    for grid, runs in grid_runs(config).items():
        spec = config["grids"][grid]
        selected = [run for run in runs if run in select and (grid in named or run in named)]
        if selected:
            out[grid] = GridSettings.from_dict({**spec, "seeds": spec.get("seeds", config["seeds"]), "runs": selected},
                                               f"grids.{grid}")
    return out


def resources(config: dict, rule: str) -> Resources:
    """The rule's threads, mem_mb, runtime and gpus: its own entry over ``resources.default``."""
    res = config["resources"]
    return Resources.from_dict({**res["default"], **res.get(rule, {})}, f"resources.{rule}")


def dataset_section(config: dict) -> dict[str, Any]:
    """The selected dataset's whole section, locations included (the download rules need them)."""
    data = config["defaults"]["data"]
    return dict(data.get(data["dataset"], {}))
