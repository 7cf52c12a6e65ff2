"""What a study's store lacks, and the ``snakemake`` command of a part that fits a time on this machine.

The units are every selected run x seed of the store's ``experiment.json``; those ``store.json`` does not hold
are missing. A missing unit costs its training updates (batches per epoch of a stored unit trained with the same
``max_tokens``, times its epochs) times this host's training CPU-seconds per update. That rate is **measured**
where the store holds units trained on this host (``lnrepro.host.host_key``: the CPU flags and threads of
run.json's ``host``; the median over the run's own stored units, else over all of them), and **estimated** from
the other hosts' units otherwise (their CPU flags or threads differ, or were not recorded); with no unit stored
the cost is unknown. Scoring is counted the same way: the CPU-seconds of a stored unit's score files (each
records its share of its job), the median over the run's own units of the same basis, else over all of them;
before a first part it is unknown and not counted. A part takes whole seeds first (every run of one seed on one host
keeps each per-seed comparison within a host), then single units of the next seed, while its training
CPU-seconds fit the given minutes on the given cores; Snakemake schedules its jobs. Its targets are one score
file of each of the units' scoring jobs (a job writes all its group's score files), a unit of the after-warm-up run
its ``gradinit_after_warmup.csv`` (measured on that unit's weights, in the part that trains it), the part's
``experiment.json`` (which publish reads) and, while the store lacks them, the gradient-at-initialization tables.

Before a study's first part there is no store: the study is then the one ``config.yaml`` (of the working
directory) and the given configfiles resolve to, every unit is missing, and the cost basis is **measured** here
before anything is trained (``lnrepro.train.update_cost``: updates from the encoded train split of
``results/{exp}``, CPU-seconds per update timed on a few real updates per model shape). The part's command then
names those configfiles. So does it where the configfiles extend a stored study's grids (values added under a
grid's ``extended:``): the study is then the grown one, its new units missing.
"""

from __future__ import annotations

import shlex
import statistics
from dataclasses import dataclass
from pathlib import Path

from .config import experiment, load_config, resources
from .config.settings import Experiment
from .errors import LnReproError
from .host import cpu_flags, host_key
from .io import read_json, read_yaml
from .paths import EXPERIMENT_JSON, STORE_CONFIG, Paths
from .records import RunRecord, RunSummary
from .store import Index, Unit, damage, damage_text, extension_of, units_of

@dataclass(frozen=True)
class StoredCost:
    """What one stored unit's training cost: its updates, CPU-seconds and host."""

    run: str
    max_tokens: int
    batches_per_epoch: int
    updates: int
    cpu_s_per_update: float | None
    score_cpu_s: float | None  # its score files' CPU-seconds (None: none recorded)
    host: str | None  # lnrepro.host.host_key of its run.json's host (None: not recorded)


@dataclass(frozen=True)
class Status:
    """The store's units, stored and missing, and the missing ones' cost on this host."""

    store: Path
    experiment: Experiment
    stored: list[Unit]
    missing: list[Unit]
    cost_s: dict[Unit, float | None]  # training CPU-seconds of each missing unit here (None: unknown)
    score_s: dict[Unit, float | None]  # scoring CPU-seconds of each missing unit here (None: unknown)
    rate_words: str  # how the CPU-seconds per update were found: measured, estimated or unknown
    gradinit_missing: list[str]  # analysis tables the store lacks (gradinit.csv, gradinit_fit.csv), as result paths
    commits: list[str]  # the commits the stored units were trained at ([]: no store yet)
    configfiles: list[str]  # the part's --configfile layers: the store's study.yaml, or a first part's files
    extended: bool = False  # the configfiles extend the stored study's grids (the part's command names them)


def _stored_costs(store: Path, exp: Experiment, index: Index) -> list[StoredCost]:
    paths, out = Paths(exp.name), []
    for entry in index.units.values():
        folder = store / paths.run_dir(entry["run"], entry["seed"]).removeprefix(paths.root + "/")
        info, summary = read_json(folder / "run.json"), RunSummary.read(folder / "summary.json")
        RunRecord.from_dict(info, str(folder / "run.json"))
        rate = summary.train_cpu_s / summary.updates if summary.train_cpu_s and summary.updates else None
        scores = [read_json(p).get("cpu_s") for p in sorted((folder / "eval").glob("epoch*.json"))]
        score = float(sum(scores)) if scores and all(isinstance(c, (int, float)) for c in scores) else None
        out.append(StoredCost(entry["run"], int(info["config"]["train"]["max_tokens"]), int(info["batches_per_epoch"]),
                              summary.updates, rate, score, host_key(info["host"]) if info.get("host") else None))
    return out


def status(store: Path, threads: int | None = None, configfiles: list[str] | None = None) -> Status:
    """The status of ``store``; this host's threads per training job default to the study's ``train_run``
    resources (``study.yaml``). Where ``configfiles`` extend the store's grids, the grown study's (its extension's
    units missing, the part's command naming those configfiles). Where there is no store yet, the study of
    ``config.yaml`` and ``configfiles`` before its first part (``first_part_status``)."""
    store = Path(store)
    index = Index.read(store)
    if index is None:
        if configfiles:
            return first_part_status(store, configfiles, threads)
        raise LnReproError(f"{store}: no store there (no store.json): publish a first part with `lnrepro publish "
                           "results/{name} " + f"{store} --configfile ...`; `lnrepro publish --status {store} "
                           "--configfile ...` measures what a first part costs here")
    damaged = damage(store, index)
    if damaged:
        raise LnReproError(damage_text(store, index.name, damaged))
    exp = Experiment.read(store / EXPERIMENT_JSON)
    config = read_yaml(store / STORE_CONFIG)
    grown = _grown(store, configfiles) if configfiles else None
    if grown:
        config, exp = grown
    threads = threads or resources(config, "train_run").threads
    units = units_of(exp)
    missing = [u for u in units if u.key not in index.units]
    costs = _stored_costs(store, exp, index)
    here = host_key({"cpu_flags": cpu_flags(), "threads": threads})
    same = [c for c in costs if c.host == here and c.cpu_s_per_update]
    basis = same or [c for c in costs if c.cpu_s_per_update]
    if same:
        words = f"measured: {len(same)} stored unit(s) trained on this host ({here})"
    elif basis:
        hosts = sorted({c.host or "host not recorded" for c in basis})
        words = (f"estimated: no stored unit was trained on this host ({here}); the median rate of {len(basis)} "
                 f"unit(s) of {'; '.join(hosts)}")
    else:
        words = "unknown: no stored unit records its training CPU time"
    cost_s = {u: _unit_cost(exp, u, basis, costs) for u in missing}
    score_s = {u: _median_of_run([(c.run, c.score_cpu_s) for c in basis], u.run) for u in missing}
    paths = Paths(exp.name)
    gradinit = [t for t in _gradinit_tables(exp) if str(Path(t).relative_to(paths.root)) not in index.analysis]
    commits = sorted({str(e.get("git_commit")) for e in index.units.values()})
    return Status(store, exp, [u for u in units if u.key in index.units], missing, cost_s, score_s, words, gradinit,
                  commits, list(configfiles) if grown else [str(store / STORE_CONFIG)], grown is not None)


def _grown(store: Path, configfiles: list[str]) -> tuple[dict, Experiment] | None:
    """The config and study ``config.yaml`` and ``configfiles`` resolve to where it is the store's grown by grid
    extensions the store does not record yet (its units then include the extension's); None where it is the
    store's own; an error where it is another study."""
    config = load_config(["config.yaml", *configfiles])
    new = experiment(config)
    try:
        return (config, new) if extension_of(read_json(store / EXPERIMENT_JSON), new.to_dict()) else None
    except ValueError as e:
        raise LnReproError(f"config.yaml and --configfile {' '.join(configfiles)} resolve to another study than "
                           f"{store}'s, and not by a grid's extended: values: {e}") from None


def first_part_status(store: Path, configfiles: list[str], threads: int | None = None) -> Status:
    """The status of a study with no store yet: the one ``config.yaml`` (of the working directory) and
    ``configfiles`` resolve to, every unit missing, its cost measured here on the encoded train split of
    ``results/{exp}`` (``lnrepro.train.update_cost``; an error naming the ``snakemake --until apply_bpe`` command
    that makes it, where it is absent)."""
    from .train.update_cost import WARMUP, measure, missing_inputs

    config = load_config(["config.yaml", *configfiles])
    exp = experiment(config)
    threads = threads or resources(config, "train_run").threads
    paths = Paths(exp.name)
    bpe = Path(paths.bpe)
    absent = missing_inputs(bpe)
    if absent:
        make = shlex.join(["snakemake", "--until", "apply_bpe", "--cores", "1", "--configfile", *configfiles])
        raise LnReproError(f"{store}: no store there, and the encoded train split the cost is measured on is missing "
                           f"({', '.join(map(str, absent))}); make it first (a few minutes at most, nothing is "
                           f"trained), from the root of this checkout: {make}")
    units = units_of(exp)
    cost = measure(exp, [(u.run, u.seed) for u in units], bpe, threads)
    here = host_key({"cpu_flags": cpu_flags(), "threads": threads})
    words = (f"measured here ({here}): {cost.timed} updates timed after {WARMUP} warm-up, per model shape "
             f"({cost.shapes} shape(s)), on the first batches of {bpe}/train.*.ids")
    cost_s = {u: cost.updates[(u.run, u.seed)] * cost.cpu_s_per_update[u.run] for u in units}
    return Status(store, exp, [], units, cost_s, {u: None for u in units}, words, _gradinit_tables(exp), [],
                  list(configfiles))


def _gradinit_tables(exp: Experiment) -> list[str]:
    """The study's gradient-at-initialization tables, as result paths."""
    paths = Paths(exp.name)
    return [paths.gradinit_csv, paths.gradinit_fit_csv]


def _unit_cost(exp: Experiment, unit: Unit, basis: list[StoredCost], costs: list[StoredCost]) -> float | None:
    """Training CPU-seconds of ``unit``: its updates (from a stored unit of the same run, else batches per epoch of
    one with the same max_tokens times its epochs) times the median rate of its run's units in ``basis``, else
    of all of ``basis``."""
    train = exp.runs[unit.run].train
    own = [c for c in costs if c.run == unit.run]
    batches = [c.batches_per_epoch for c in costs if c.max_tokens == train.max_tokens]
    if own:
        updates = own[0].updates
    elif batches:
        updates = batches[0] * train.epochs
        updates = min(updates, train.max_updates) if train.max_updates else updates
    else:
        return None
    rate = _median_of_run([(c.run, c.cpu_s_per_update) for c in basis], unit.run)
    return None if rate is None else updates * rate


def _median_of_run(values: list[tuple[str, float | None]], run: str) -> float | None:
    """The median of ``run``'s recorded values, else of all recorded values (None: none recorded)."""
    known = [(r, v) for r, v in values if v is not None]
    own = [v for r, v in known if r == run] or [v for _, v in known]
    return statistics.median(own) if own else None


def part(st: Status, minutes: float | None, cores: int) -> list[Unit]:
    """The missing units of a part that fits ``minutes`` on ``cores`` (all of them without a limit): whole seeds
    first, in seed order, then single units of the next seed; at least one unit. A unit costs its training and
    scoring; an unknown cost counts as nothing."""
    if minutes is None:
        return list(st.missing)
    budget = minutes * 60 * cores
    seeds = sorted({u.seed for u in st.missing})
    chosen: list[Unit] = []
    spent = 0.0
    for seed in seeds:
        units = [u for u in st.missing if u.seed == seed]
        cost = sum(_cost(st, u) for u in units)
        if spent + cost <= budget:
            chosen += units
            spent += cost
            continue
        for u in units:
            if spent + _cost(st, u) <= budget:
                chosen.append(u)
                spent += _cost(st, u)
        break
    return chosen or st.missing[:1]


def _cost(st: Status, u: Unit) -> float:
    return (st.cost_s[u] or 0.0) + (st.score_s[u] or 0.0)


def targets(st: Status, units: list[Unit]) -> list[str]:
    """The part's Snakemake targets: experiment.json, the gradinit tables the store lacks, and of each unit one
    score file of each of its scoring jobs (the last epoch of each group of splits scored together) and, for a unit
    of the after-warm-up run, its gradinit_after_warmup.csv."""
    exp, paths = st.experiment, Paths(st.experiment.name)
    out = [paths.experiment_json, *st.gradinit_missing]
    for u in units:
        last = exp.last_of(u.run)
        out += [paths.score(u.run, u.seed, f"{max(epochs):03d}") for epochs in exp.eval.groups(last).values()]
        if u.run == exp.after_warmup_run:
            out.append(paths.gradinit_after_warmup_csv(u.run, u.seed))
    return out


def command(st: Status, units: list[Unit], cores: int) -> str:
    """The snakemake command of a part: run from the root of a clean clone of the store's commit (the targets
    first: ``--configfile`` takes every word after it)."""
    args = ["snakemake", *targets(st, units), "--cores", str(cores), "--configfile", *st.configfiles]
    return shlex.join(args)


def _minutes(seconds: float | None) -> str:
    return "unknown" if seconds is None else f"{seconds / 60:.1f} CPU-min"


def _cost_words(train: list[float | None], score: list[float | None]) -> str:
    """'T CPU-min of training and S of scoring' (scoring left out where unknown for any unit)."""
    t = _minutes(sum(c for c in train if c is not None)) if train and all(c is not None for c in train) else "unknown"
    if not score or any(c is None for c in score):
        return f"{t} of training (scoring not counted: no stored score records its CPU time)"
    return f"{t} of training and {sum(score) / 60:.1f} of scoring"


def report(st: Status, minutes: float | None, cores: int) -> str:
    """The status as printed: stored and missing units, their cost, and the command of the next part."""
    n, k = len(st.stored) + len(st.missing), len(st.stored)
    lines = [f"{st.store}: study {st.experiment.name}, {k} of {n} units stored"
             + ("" if st.commits else " (no store yet: the study of config.yaml and --configfile)")
             + (" (with the grid extensions of --configfile, which the store records once a part of them is "
                "published)" if st.extended else "")]
    lines += [f"  stored: {u}" for u in st.stored]
    lines += [f"  missing: {u} ({_cost_words([st.cost_s[u]], [st.score_s[u]])})" for u in st.missing]
    lines += [f"  gradinit: {Path(t).name} not stored" for t in st.gradinit_missing]
    if not st.missing:
        lines.append("complete: every unit is stored")
        return "\n".join(lines) + "\n"
    lines.append(f"cost of the missing units here: {_cost_words(list(st.cost_s.values()), list(st.score_s.values()))}"
                 f" (CPU-seconds per update {st.rate_words})")
    chosen = part(st, minutes, cores)
    limit = (f"a part that fits {minutes:g} minutes on {cores} core(s)" if minutes is not None
             else "a part of every missing unit")
    cost = _cost_words([st.cost_s[u] for u in chosen], [st.score_s[u] for u in chosen])
    lines.append(f"{limit}: {len(chosen)} unit(s), {cost}: " + ", ".join(map(str, chosen)))
    if st.commits:
        lines.append(f"run it from the root of a clean clone whose training and scoring are bitwise those of the "
                     f"store's commit ({', '.join(st.commits)}: the exact-result tests say so), in its own virtual "
                     "environment:")
    else:
        lines.append("run it from the root of a clean clone of this checkout's commit (the store's, once published), "
                     "in its own virtual environment:")
    lines.append(command(st, chosen, cores))
    return "\n".join(lines) + "\n"
