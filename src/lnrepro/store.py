"""A study's store (``published/{exp}/``): the records of its finished units, published part by part.

A **unit** is one run and seed: its training and every scoring of its checkpoints. A **part** is any set of units
run together on one machine (a results tree ``results/{exp}/``). ``publish(results, store)`` adds every finished
and fully scored unit of a part to the store, with what the report reads and nothing else: config.json, run.json,
summary.json, the epoch manifests, the score files, a unit of ``analysis.gradinit.after_warmup_run`` its
gradient after warm-up (``gradinit_after_warmup.csv``, measured on its weights where it was trained), and the
training log and hypotheses gzipped (``io.gzip_bytes``: equal records, equal bytes); never weights or ``state/``.
The store's layout is the results tree's, so ``lnrepro report`` reads it as it reads one.

Study-level items are stored once: the configuration slices (``experiment.json`` and the other ``*.json`` of the
tree's root), the merged config they resolve from (``study.yaml``: a ``--configfile`` for later parts), the digests
of the prepared splits, ``spm.model`` and the encoded splits, and the gradient-at-initialization tables
(``gradinit.csv``, ``gradinit_fit.csv``). The index ``store.json`` holds them and, per unit, its commit, the digest
of each stored file and its identity: per record, the digest of what determines the results (resolved config,
input digests, weights' digests, scores), not timestamps, durations or host.

A part is refused whole, the store unchanged, when it does not belong to the study: other resolved settings (a
grid extended under its ``extended:`` may grow them; comparisons of runs the study does not select are no part of
them), another study-level digest, a record from a checkout with uncommitted changes, a record failing its own
digest check, or a unit already stored with another identity. The store is rewritten as a whole folder
(``io.atomic_directory``), its index last: a publish that fails or is killed leaves it as it was, or complete.

The store is read and written as a database: every command holds its lock (``locked``: one publish at a time, no
read of a store being replaced), recovers a publish killed between its renames, and checks the stored files
against the index (``damage``); a publish repairs the damaged units whose records its part holds.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

from .config import experiment, load_config
from .config.settings import Experiment
from .errors import LnReproError
from .io import GZ, atomic_directory, exclusive_lock, file_sha256, gzip_bytes, json_text, read_json
from .paths import EXPERIMENT_JSON, STORE_CONFIG, STORE_INDEX, Paths, RunFolder
from .integrity import check_run, read_after_warmup
from .records import CheckpointScores, RunRecord

ANALYSIS = ("gradinit.csv", "gradinit_fit.csv")  # under analysis/, stored once
# The configuration slices of a results tree's root (lnrepro.paths.Paths): any other *.json there is no slice.
_SLICE = re.compile(r"(experiment|data|bpe|gradinit|gradinit_after_warmup|eval(_\w+)?)\.json")
REPORT = "report"  # the store's report folder (lnrepro report --store)
# Keys of a record that say when, where and how fast it was made: no part of a unit's identity.
# The weights' digests carry whatever the software and hardware changed in the bits.
_CIRCUMSTANCE = frozenset({"wall_s", "cpu_s", "decode_s", "sent_per_s", "where_ran", "threads", "job_checkpoints",
                           "train_s", "wall_s_all_attempts", "cpu_s_all_attempts", "train_cpu_s", "tokens_per_s",
                           "attempts", "torch", "manifest", "git_commit", "git_dirty", "host", "executions",
                           "device_name", "torch_version", "python_version", "state_digest"})


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _canonical(obj: Any) -> Any:
    """``obj`` without its circumstance keys, at every depth."""
    if isinstance(obj, dict):
        return {k: _canonical(v) for k, v in obj.items() if k not in _CIRCUMSTANCE}
    if isinstance(obj, list):
        return [_canonical(v) for v in obj]
    return obj


@dataclass(frozen=True)
class Unit:
    """One run and seed of a study."""

    run: str
    seed: int

    @property
    def key(self) -> str:
        return f"{self.run}/seed{self.seed}"

    def __str__(self) -> str:
        return f"{self.run} seed {self.seed}"


def units_of(exp: Experiment) -> list[Unit]:
    """Every unit of the study: each selected run with each of its seeds, seeds first (the order parts take)."""
    return sorted((Unit(run, seed) for run in exp.select for seed in exp.seeds_of(run)),
                  key=lambda u: (u.seed, exp.select.index(u.run)))


def unit_records(exp: Experiment, unit: Unit) -> list[str]:
    """The files of a finished, fully scored unit, relative to its run folder, as training, scoring and the
    measurement after warm-up declare them: config.json, run.json, summary.json, train.jsonl, each epoch manifest,
    each score file and hypotheses, and for a unit of the after-warm-up run its gradinit_after_warmup.csv."""
    f, last = RunFolder(), exp.last_of(unit.run)
    names = [f.config, f.run_json, f.summary, f.train_jsonl, *f.epoch_manifests(last)]
    for splits, epochs in exp.eval.groups(last).items():
        for ep in epochs:
            names += [f.score(ep), *(f.hypotheses(ep, split) for split in splits)]
    if unit.run == exp.after_warmup_run:
        names.append(f.gradinit_after_warmup)
    return names


def stored_name(name: str) -> str:
    """A record's name in the store: the training log and hypotheses gzipped (``.gz``), the rest as they are."""
    return name + GZ if name == RunFolder().train_jsonl or name.endswith(".hyp") else name


def study_files(paths: Paths) -> list[str]:
    """The data and BPE files whose digests are the study's, relative to ``results/{exp}``: the prepared splits
    and references, ``spm.model`` and the encoded splits."""
    names = [p for p in paths.prepared_files if not p.endswith("stats.json")] + [paths.spm_model[0], *paths.bpe_ids]
    return [str(Path(p).relative_to(paths.root)) for p in names]


def _study_key(name: str) -> str:
    """Where a record's input named ``name`` (run.json's and score files' ``inputs_sha256``) lies in the tree."""
    return f"data/bpe/{name}" if name == "spm.model" or name.endswith(".ids") else f"data/prepared/{name}"


# ---- the record checks of one unit ---------------------------------------------------------------------------


def record_problems(run_dir: Path, unit: Unit, exp: Experiment, study: dict[str, str], names: list[str]) -> list[str]:
    """What is wrong with a finished unit's records in ``run_dir``: records that do not belong together or to this
    run and seed (``integrity.check_run``: run.json and manifests against the config digest the study resolves,
    score files against their manifests' weights and the study's scoring slices; the table after warm-up whole and
    this seed's: ``integrity.read_after_warmup``), config.json not the study's, an
    input's digest not the study's (``study``: data and BPE), or a record trained or scored from a checkout with
    uncommitted changes (``git_dirty``).
    Empty when they belong to the study."""
    out: list[str] = []
    expected = exp.run_config(unit.run, unit.seed).sha256()
    try:
        check_run(run_dir, unit.run, unit.seed, config_sha256=expected, experiment=exp)
    except LnReproError as e:
        out.append(str(e))
    config = run_dir / "config.json"
    digest = file_sha256(config)
    if digest != expected:
        out.append(f"{config}: sha256 {digest[:12]}... but the study resolves {unit} to {expected[:12]}... "
                   "(other run settings)")
    info = RunRecord.read(run_dir / "run.json")
    if info.git_dirty:
        out.append(f"{run_dir / 'run.json'}: git_dirty is true (trained from a checkout with uncommitted changes at "
                   f"{info.git_commit}): rerun the unit from a clean clone")
    elif info.git_commit is None:
        out.append(f"{run_dir / 'run.json'}: git_commit is null (trained from code outside a git checkout, which no "
                   "commit names): rerun the unit from a clean clone")
    out += _input_problems(run_dir / "run.json", info.inputs_sha256, study)
    if RunFolder().gradinit_after_warmup in names:
        table = run_dir / RunFolder().gradinit_after_warmup
        try:
            read_after_warmup(table, exp, unit.seed)
        except LnReproError as e:
            out.append(str(e))
    for name in names:
        if name.startswith("eval/") and name.endswith(".json"):
            scores = CheckpointScores.read(run_dir / name)
            out += _input_problems(run_dir / name, scores.inputs_sha256 or {}, study)
            if scores.git_dirty:
                out.append(f"{run_dir / name}: git_dirty is true (scored from a checkout with uncommitted changes "
                           f"at {scores.git_commit}): rescore the unit from a clean clone")
            elif scores.git_commit is None:
                out.append(f"{run_dir / name}: git_commit is null (scored from code outside a git checkout, which no "
                           "commit names): rescore the unit from a clean clone")
            out += _hypothesis_problems(run_dir / name, scores)
    return out


def _hypothesis_problems(score: Path, scores: CheckpointScores) -> list[str]:
    """The hypothesis files beside ``score`` whose line count is not the sentences the score file says were decoded
    (a split not decoded: none), or whose digest is not the one the score file recorded when it wrote them (a
    score file of an older lnrepro records none): hypotheses cut or replaced after scoring, which BLEU would no
    longer match."""
    out = []
    again = f"score it again: snakemake --cores all --forcerun {score}"
    for split, result in (scores.splits or {}).items():
        hyp = RunFolder.hypotheses_beside(score, split)
        data = hyp.read_bytes()
        lines, expected = data.count(b"\n"), result.sentences if result is not None else 0
        recorded = (scores.hypotheses_sha256 or {}).get(split)
        if lines != expected:
            out.append(f"{hyp}: {lines} lines, but {score} scored {expected} sentences of {split}: the hypotheses "
                       f"were cut or replaced after scoring; {again}")
        elif recorded is not None and hashlib.sha256(data).hexdigest() != recorded:
            out.append(f"{hyp}: not the hypotheses {score} recorded (sha256 {recorded[:12]}...): they were "
                       f"changed after scoring; {again}")
    return out


def _input_problems(where: Path, inputs: dict[str, str], study: dict[str, str]) -> list[str]:
    """The inputs of a record (run.json's, a score file's ``inputs_sha256``) whose data or BPE digest is not the
    study's."""
    out = []
    for name, digest in sorted(inputs.items()):
        expected = study.get(_study_key(name))
        if expected is not None and expected != digest:
            out.append(f"{where}: input {name} has sha256 {digest[:12]}... but the study's is {expected[:12]}...")
    return out


# ---- identity ------------------------------------------------------------------------------------------------


def record_identity(name: str, data: bytes) -> str:
    """The digest of what in record ``name`` (its bytes ``data``, uncompressed) determines the unit's results: a
    JSON record without its circumstance keys (``_CIRCUMSTANCE``); a hypothesis file whole. The training log has
    none of its own (it repeats the losses beside wall-clock times): ""."""
    if name == RunFolder().train_jsonl:
        return ""
    if name.endswith(".json"):
        return _sha256(json_text(_canonical(json.loads(data))).encode("utf-8"))
    return _sha256(data)


# ---- the index -----------------------------------------------------------------------------------------------


@dataclass
class Index:
    """``store.json``: the study's digests and each unit's commit, files and identity."""

    name: str
    configfiles: list[str]
    study: dict[str, str]  # data and BPE file under results/{exp} -> sha256
    slices: dict[str, str]  # configuration slice (experiment.json, eval.json, ...) -> sha256
    analysis: dict[str, str]  # analysis/gradinit.csv and gradinit_fit.csv -> sha256
    units: dict[str, dict[str, Any]] = field(default_factory=dict)  # run/seedN -> commit, files, identity

    @classmethod
    def read(cls, store: Path) -> Index | None:
        path = store / STORE_INDEX
        if not path.exists():
            if store.exists() and any(store.iterdir()):
                raise LnReproError(f"{store}: not a store (no {STORE_INDEX}) and not empty: name an empty or new "
                                   "folder")
            return None
        data = read_json(path)
        try:
            return cls(**data)
        except TypeError as e:
            raise LnReproError(f"{path}: not a store index ({e})") from e

    def text(self) -> str:
        return json_text(self.__dict__)


# ---- the lock, recovery and verification ------------------------------------------------------------------------


def _leftovers(store: Path, kind: str) -> list[Path]:
    """The folders ``io.atomic_directory`` leaves beside ``store`` when killed: its staging (``tmp``) or the
    store renamed aside (``old``)."""
    pattern = re.compile(rf"\.{re.escape(store.name)}\.[A-Za-z0-9_]{{8}}\.{kind}")
    return sorted(p for p in store.parent.iterdir() if pattern.fullmatch(p.name)) if store.parent.is_dir() else []


def _recover(store: Path, say: Callable[[str], None]) -> None:
    """Finish or undo a publish killed while it replaced ``store`` (called under the lock, so none is running):
    its staging is removed; a store renamed aside comes back where none took its place, and is removed where the
    new one did."""
    for tmp in _leftovers(store, "tmp"):
        shutil.rmtree(tmp)
    olds = _leftovers(store, "old")
    if olds and not store.exists():
        if len(olds) > 1:
            raise LnReproError(f"{store}: missing, and {len(olds)} earlier stores beside it "
                               f"({', '.join(map(str, olds))}): restore the one to keep with `mv <it> {store}`")
        os.replace(olds[0], store)
        say(f"{store}: restored as it was before a publish that was killed while it replaced the store")
        return
    for old in olds:
        shutil.rmtree(old)
        say(f"{store}: removed {old.name}, the previous store that a killed publish left after replacing it")


@contextmanager
def locked(store: str | os.PathLike, say: Callable[[str], None], create: bool = False) -> Iterator[Path]:
    """Hold the store's lock (``fcntl.flock`` on ``.{name}.lock`` beside it) for a whole publish or read, so that
    publishes are serialized and none reads a store being replaced; a second waits, saying for which pid. A publish
    killed while it replaced the store is recovered first (``_recover``). Yields the store's path, a symbolic
    link resolved (the folder it names is the store). ``create``: make the folder the store goes in (a publish)."""
    store = Path(os.path.realpath(store))
    if create:
        store.parent.mkdir(parents=True, exist_ok=True)
    elif not store.parent.is_dir():  # no store to read, nothing beside it to recover
        yield store
        return
    lock = store.parent / f".{store.name}.lock"
    with exclusive_lock(lock, say, f"{store}: another lnrepro (pid {{pid}}) holds the store's lock {lock}; waiting "
                        "until it ends", f"{store}: the other lnrepro ended; going on with the store it left"):
        _recover(store, say)
        yield store


def damage(store: Path, index: Index) -> dict[str, list[str]]:
    """What in ``store`` differs from its index: per unit key (``run/seedN``; ``""`` for the study's slices and
    tables), each stored file that is missing or whose sha256 is not the one ``store.json`` records. Empty when
    the store is whole."""
    out: dict[str, list[str]] = {}

    def check(owner: str, name: str, expected: str) -> None:
        path = store / name
        if not path.is_file():
            out.setdefault(owner, []).append(f"{name} (missing)")
        elif (digest := file_sha256(path)) != expected:
            out.setdefault(owner, []).append(f"{name} (sha256 {digest[:12]}..., store.json records {expected[:12]}...)")

    for name, digest in sorted({**index.slices, **index.analysis}.items()):
        check("", name, digest)
    paths = Paths(index.name)
    for key, entry in sorted(index.units.items()):
        folder = paths.run_dir(entry["run"], entry["seed"]).removeprefix(paths.root + "/")
        for name, digest in sorted(entry["files"].items()):
            check(key, f"{folder}/{name}", digest)
    return out


def damage_text(store: Path, name: str, damaged: dict[str, list[str]]) -> str:
    """One line naming what in the store of study ``name`` differs from its index, and the command that repairs
    it."""
    files = [f for owner in sorted(damaged) for f in damaged[owner]]
    units = sorted(k for k in damaged if k)
    more = f" and {len(files) - 4} more" if len(files) > 4 else ""
    parts = f"the part that holds {', '.join(units)}" if units else "any part"
    return (f"{store}: stored files differ from its index {STORE_INDEX}: {'; '.join(files[:4])}{more}; repair them by "
            f"publishing {parts} again: lnrepro publish results/{name} {store}")


def read_whole(store: Path) -> Index:
    """The index of an existing ``store`` whose files all match it (else one error naming what differs)."""
    index = Index.read(store)
    if index is None:
        raise LnReproError(f"{store}: no store there (no {STORE_INDEX}): publish a part first (lnrepro publish)")
    damaged = damage(store, index)
    if damaged:
        raise LnReproError(damage_text(store, index.name, damaged))
    return index


# ---- publish -------------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What a publish did, unit by unit."""

    name: str  # the study's
    added: list[Unit] = field(default_factory=list)
    kept: list[Unit] = field(default_factory=list)
    left_out: list[tuple[Unit, str]] = field(default_factory=list)  # unfinished or partly done, and why
    study: list[str] = field(default_factory=list)  # study-level items added
    repaired: list[str] = field(default_factory=list)  # stored files that differed from the index, written again
    damaged: dict[str, list[str]] = field(default_factory=dict)  # what still differs (``damage``): not in the part

    def text(self, store: Path) -> str:
        lines = [f"{store}: added {len(self.added)}, kept {len(self.kept)} (already stored, same identity), left "
                 f"out {len(self.left_out)}" + (f", repaired {len(self.repaired)}" if self.repaired else "")]
        lines += [f"  study: added {item}" for item in self.study]
        lines += [f"  added {u}" for u in self.added] + [f"  kept {u}" for u in self.kept]
        lines += [f"  repaired {item} (it differed from {STORE_INDEX})" for item in self.repaired]
        lines += [f"  left out {u}: {why}" for u, why in self.left_out]
        return "\n".join(lines) + "\n"


def _refuse(store: Path, why: str) -> LnReproError:
    return LnReproError(f"refused: {why}; {store} is unchanged")


def _slices(results: Path) -> dict[str, str]:
    """The configuration slices of a results tree's root, by name, with their digests (other files left alone)."""
    return {p.name: file_sha256(p) for p in sorted(results.glob("*.json")) if _SLICE.fullmatch(p.name)}


def _study_settings(exp: dict[str, Any]) -> dict[str, Any]:
    """A resolved experiment (experiment.json) as the study's identity: without the comparisons that name a run it
    does not select, which neither train nor score anything of it (config.yaml lists comparisons of every run it
    defines, so one added there for a new run leaves a stored study's identity alone)."""
    ran = set(exp["runs"])
    return {**exp, "comparisons": {name: c for name, c in exp.get("comparisons", {}).items()
                                   if set(c["runs"]) <= ran}}


def _grown_by_extension(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether experiment ``new`` is ``old`` with values added to its grids' ``extended:`` (and their runs)."""
    old_grids, new_grids = old.get("grids", {}), new.get("grids", {})
    if set(old_grids) != set(new_grids) or not set(old["runs"]) <= set(new["runs"]):
        return False
    for name, g in new_grids.items():
        before = old_grids[name]
        for key, values in g["values"].items():
            was, ext, ext_was = before["values"].get(key, []), g["extended"].get(key, []), \
                before["extended"].get(key, [])
            if ext[:len(ext_was)] != ext_was or [v for v in values if v not in was] != ext[len(ext_was):]:
                return False
    trimmed = {**new, "grids": old_grids, "runs": {r: new["runs"][r] for r in old["runs"]},
               "select": [r for r in new["select"] if r in old["runs"]]}
    return json_text(_study_settings(trimmed)) == json_text(_study_settings(old))


def extension_of(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether experiment ``new`` is the study ``old`` grown by values added to its grids' ``extended:`` (False: the
    same study); a ValueError naming the keys where they differ, where it is another study."""
    if json_text(_study_settings(old)) == json_text(_study_settings(new)):
        return False
    if not _grown_by_extension(old, new):
        raise ValueError(_differing_keys(old, new))
    return True


def _resolved_config(configfiles: list[str], part_experiment: dict[str, Any], results: Path) -> dict[str, Any]:
    """The merged config of ``config.yaml`` (of the working directory: the part's clone) and ``configfiles``,
    checked to resolve to the part's experiment.json."""
    config = load_config(["config.yaml", *configfiles])
    if json_text(experiment(config).to_dict()) != json_text(part_experiment):
        raise LnReproError(f"config.yaml and --configfile {' '.join(configfiles)} resolve to another experiment than "
                           f"{results / EXPERIMENT_JSON}: give the configfiles the part was run with")
    return config


# Builds a store's report from its records: (the store's folder, its experiment, the report folder) -> index.html.
# The caller passes lnrepro.analysis.render.report.make_report: the store sits below the analysis, which reads it.
ReportBuilder = Callable[[Path, Experiment, Path], Path]


def publish(results: Path, store: Path, configfiles: list[str] | None, report: ReportBuilder,
            say: Callable[[str], None] = print) -> Outcome:
    """Add the finished, fully scored units of the results tree ``results`` (``results/{exp}``) to ``store``, under
    the store's lock (``locked``: ``say`` tells of a wait or a recovery). Stored files that differ from the index
    (``damage``) are written again where the part holds their records with the same identity; what the part cannot
    repair is in the outcome's ``damaged``. A store with a report has it rebuilt by ``report`` with the records."""
    with locked(store, say, create=True) as real:
        return _publish(Path(results), real, configfiles, report)


def _publish(results: Path, store: Path, configfiles: list[str] | None, report: ReportBuilder) -> Outcome:
    """``publish`` with the lock held."""
    index = Index.read(store)
    damaged = damage(store, index) if index is not None else {}
    exp_path = results / EXPERIMENT_JSON
    if not exp_path.exists():
        raise LnReproError(f"{exp_path}: not found; a part writes it with its targets (`lnrepro publish --status "
                           f"{store}` prints them)")
    part = read_json(exp_path)
    exp = Experiment.from_dict(part, str(exp_path))
    paths = Paths(exp.name)
    missing = [n for n in study_files(paths) if not (results / n).exists()]
    if missing:
        raise LnReproError(f"{results}: data or BPE files missing ({', '.join(missing[:3])}...): rebuild them with "
                           f"`snakemake --until apply_bpe` and the part's configfiles")
    study = {n: file_sha256(results / n) for n in study_files(paths)}
    slices = _slices(results)
    config = _resolved_config(configfiles, part, results) if configfiles else None
    outcome = Outcome(name=exp.name)
    if index is None:
        if config is None:
            raise LnReproError(f"{store}: a new store needs the part's --configfile layers (as given to snakemake) "
                               "to record the study's config")
        index = Index(exp.name, list(configfiles or []), study, slices, {})
        outcome.study += [STORE_CONFIG, *slices, "data and BPE digests"]
    else:
        config = _check_study(index, store, part, study, slices, config, configfiles, outcome)
    if config is not None:
        config_text = yaml.safe_dump(config, sort_keys=True)
    else:
        config_text = (store / STORE_CONFIG).read_text(encoding="utf-8")
    broken = {f.split(" (", 1)[0]: f for f in damaged.pop("", [])}  # the study's damaged slices and tables
    analysis = {}
    for n in ANALYSIS:
        path, key = results / "analysis" / n, f"analysis/{n}"
        if path.exists() and (key not in index.analysis
                              or (key in broken and file_sha256(path) == index.analysis[key])):
            analysis[n] = path
    outcome.study += [f"analysis/{n}" for n in analysis if f"analysis/{n}" not in index.analysis]
    rewritten = set(slices) | {f"analysis/{n}" for n in analysis}  # slices equal the study's (_check_study)
    outcome.repaired += [f for name, f in broken.items() if name in rewritten]
    study_damage = [f for name, f in broken.items() if name not in rewritten]

    adds: list[tuple[Unit, dict[str, bytes]]] = []
    repairing: set[str] = set()  # stored units written again: their files differed from the index
    for unit in units_of(exp):
        run_dir = results / paths.run_dir(unit.run, unit.seed).removeprefix(paths.root + "/")
        if not run_dir.exists():
            continue
        names = unit_records(exp, unit)
        absent = [n for n in names if not (run_dir / n).is_file()]
        if absent:
            outcome.left_out.append((unit, "unfinished or partly done: no " + ", ".join(absent[:4])
                                     + (f" and {len(absent) - 4} more" if len(absent) > 4 else "")))
            continue
        problems = record_problems(run_dir, unit, exp, index.study, names)
        if problems:
            raise _refuse(store, f"{unit}'s records do not belong to the study:\n  " + "\n  ".join(problems))
        data = {n: (run_dir / n).read_bytes() for n in names}
        identity = {n: record_identity(n, b) for n, b in data.items()}
        stored = index.units.get(unit.key)
        if stored is not None:
            differ = sorted(n for n in names if stored["identity"].get(n) != identity[n])
            if differ:
                raise _refuse(store, f"{unit} is already stored with another identity; these records differ: "
                              + ", ".join(str(run_dir / n) for n in differ))
            if unit.key not in damaged:
                outcome.kept.append(unit)
                continue
            outcome.repaired += damaged.pop(unit.key)
            repairing.add(unit.key)
        info = RunRecord.read(run_dir / "run.json")
        index.units[unit.key] = {"run": unit.run, "seed": unit.seed, "git_commit": info.git_commit,
                                 "identity": identity, "files": {}}
        adds.append((unit, data))
    outcome.damaged = {**({"": study_damage} if study_damage else {}), **damaged}
    if not adds and not outcome.study and not outcome.repaired:
        return outcome
    with atomic_directory(store) as staging:
        if (store / STORE_INDEX).exists():
            _copy_store(store, staging)
        (staging / STORE_CONFIG).write_text(config_text, encoding="utf-8")
        for name in slices:
            shutil.copyfile(results / name, staging / name)
        for name, path in analysis.items():
            (staging / "analysis").mkdir(exist_ok=True)
            shutil.copyfile(path, staging / "analysis" / name)
            index.analysis[f"analysis/{name}"] = file_sha256(path)
        for unit, data in adds:
            _add_unit(staging / paths.run_dir(unit.run, unit.seed).removeprefix(paths.root + "/"), data,
                      index.units[unit.key])
            if unit.key not in repairing:
                outcome.added.append(unit)
        (staging / STORE_INDEX).write_text(index.text(), encoding="utf-8")  # last: the store is whole
        if (store / REPORT).is_dir():  # the store's report follows its records
            report(staging, Experiment.read(staging / EXPERIMENT_JSON), staging / REPORT)
    return outcome


def _copy_store(store: Path, staging: Path) -> None:
    """Copy ``store``'s files but its index into ``staging``, file by file (so that a full disk is the OSError of
    the file that did not fit, which ``io.atomic_directory`` names)."""
    for src in sorted(store.rglob("*")):
        target = staging / src.relative_to(store)
        if src.is_dir():
            target.mkdir(exist_ok=True)
        elif src != store / STORE_INDEX:
            shutil.copy2(src, target)


def _add_unit(folder: Path, data: dict[str, bytes], entry: dict[str, Any]) -> None:
    """Write one unit's records into ``folder`` (the training log and hypotheses gzipped), their digests into
    its index ``entry``."""
    for name, content in data.items():
        target = folder / stored_name(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        stored = gzip_bytes(content) if target.name.endswith(GZ) else content
        target.write_bytes(stored)
        entry["files"][stored_name(name)] = _sha256(stored)


def _check_study(index: Index, store: Path, part: dict[str, Any], study: dict[str, str], slices: dict[str, str],
                 config: dict[str, Any] | None, configfiles: list[str] | None, outcome: Outcome
                 ) -> dict[str, Any] | None:
    """Refuse a part of another study; a part whose experiment extends a grid replaces the study's settings
    (its configfiles needed). Returns the config to store (None: the stored one stays)."""
    differ = sorted(n for n in study if index.study.get(n) != study[n])
    if differ:
        more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
        raise _refuse(store, f"the part's data or BPE differ from the study's ({', '.join(differ[:3])}{more}): "
                      "another corpus or vocabulary")
    try:
        grown = extension_of(read_json(store / EXPERIMENT_JSON), part)
    except ValueError as e:
        raise _refuse(store, f"the part's resolved settings ({EXPERIMENT_JSON}) differ from the study's, and not by "
                      f"a grid's extended: values: {e}") from None
    other = sorted(n for n in slices if n != EXPERIMENT_JSON and n in index.slices and index.slices[n] != slices[n])
    if other and not grown:
        raise _refuse(store, f"the part's configuration slices differ from the study's: {', '.join(other)}")
    if grown:
        if config is None:
            raise _refuse(store, "the part extends a grid of the study: give its --configfile layers to record the "
                          "extended settings")
        index.configfiles = list(configfiles or [])
        outcome.study.append(f"{EXPERIMENT_JSON} extended")
    added = [n for n in slices if n not in index.slices]
    outcome.study += added
    index.slices.update(slices)
    return config if grown else None


def _differing_keys(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> str:
    """The dotted keys where two mappings differ (the first few)."""
    keys = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            sub = _differing_keys(a, b, f"{prefix}{k}.")
            keys += [sub] if sub else []
        elif a != b:
            keys.append(f"{prefix}{k}")
    return ", ".join(keys[:6])
