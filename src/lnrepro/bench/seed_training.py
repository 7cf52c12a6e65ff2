"""Seed-trainings against another commit's own ``lnrepro train``: the training's cost as a user pays it.

A seed-training is one run and seed trained for the study's epochs. Each commit writes the run's config.json
with its own configuration layer (``load_config`` of its config.yaml, ``presets/study-cpu.yaml`` and an overlay
of one epoch and the precision, then ``experiment(...).run_config``) and trains it with its own ``lnrepro train``
in a subprocess, on the same BPE folder of the bench's corpus, one thread. On a machine of two cores or more the
two commits' trainings of a seed run at once, each pinned to its own core, swapping cores seed by seed, as the
study runs two trainings at once: the hosts this project runs on drift by up to 2x within minutes (another tenant
on the same hardware), which trainings of a minute each run one after the other would read as a difference;
with one core they alternate (A, B, then B, A). A training's CPU seconds are those of its process (user +
system, ``os.wait4``): start-up, data, the epoch, checkpoints. Extrapolated to the study's epochs: the part outside the updates (the
process's CPU time less its summary's ``train_s``, the updates' wall-clock, which one thread on an otherwise idle
core makes CPU time) once, plus ``train_s`` times the epochs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ..errors import LnReproError
from ..io import read_json
from ..studies import STUDIES
from .timing import log

RUN = "postln_warmup_isqrt"  # the Figure 4 pair's Post-LN arm; every cell trains the same model size
PRESET = STUDIES["study"].preset_file  # the CPU study: the training a user of the published study pays for
STUDY_EPOCHS = 10  # presets/study-cpu.yaml defaults.train.epochs

# Runs in the commit's own tree (its lnrepro on PYTHONPATH): writes config.json for one seed.
_WRITE_CONFIG = """
import sys
from lnrepro.config.load import experiment, load_config
tree, preset, overlay, run, seed, out = sys.argv[1:7]
config = load_config([f"{tree}/config.yaml", f"{tree}/{preset}", overlay])
experiment(config).run_config(run, int(seed)).write(out)
"""


def repo_root() -> Path:
    """The checkout this lnrepro runs from (src/lnrepro/bench -> the repository)."""
    return Path(__file__).resolve().parents[3]


def worktree(rev: str, cache: Path) -> Path:
    """A git worktree of ``rev`` under ``cache`` (made once; reused while it is at that commit)."""
    root = repo_root()
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--verify", f"{rev}^{{commit}}"], check=True,
                                capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as e:
        raise LnReproError(f"bench --against {rev}: not a commit of the git checkout {root} ({e})") from e
    tree = cache / f"against-{commit[:12]}"
    if not (tree / "src" / "lnrepro").is_dir():
        log(f"git worktree of {commit[:12]} into {tree}")
        subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", str(tree), commit], check=True,
                       capture_output=True, text=True)
    return tree


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(tree / "src"), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.pop("PYTHONHOME", None)
    return env


class _Training:
    """One ``lnrepro train`` of ``tree`` as a subprocess (on ``core`` when given); ``result()`` waits for it."""

    def __init__(self, tree: Path, config: Path, bpe: Path, run_dir: Path, core: int | None) -> None:
        self.tree, self.run_dir = tree, run_dir
        self.log_path = run_dir.parent / f"{run_dir.name}.log"
        pin = (lambda: os.sched_setaffinity(0, {core})) if core is not None else None
        with open(self.log_path, "w") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "lnrepro", "train", "--config", str(config), "--bpe",
                                          str(bpe), "--run-dir", str(run_dir), "--threads", "1"], env=_env(tree),
                                         stdout=out, stderr=subprocess.STDOUT, preexec_fn=pin)

    def result(self) -> dict:
        """Its CPU seconds, its summary's update time, and the two extrapolated to the study's epochs."""
        _, status, usage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        if self.proc.returncode != 0:
            raise LnReproError(f"bench: lnrepro train of {self.tree} failed ({self.proc.returncode}); see "
                               f"{self.log_path}")
        summary = read_json(self.run_dir / "summary.json")
        cpu_s = usage.ru_utime + usage.ru_stime
        train_s = float(summary["train_s"])
        return {"cpu_s": cpu_s, "train_s": train_s, "outside_updates_cpu_s": cpu_s - train_s,
                "updates": summary.get("updates"), "study_cpu_s": cpu_s - train_s + STUDY_EPOCHS * train_s}


def _cores() -> list[int] | None:
    """Two cores this process may run on, for the paired trainings; None where it has fewer (or no affinity)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    return cores[:2] if len(cores) >= 2 else None


def measure_seed_training(bpe: Path, against: str, precisions: list[str], seeds: list[int], cache: Path,
                          work: Path) -> list[dict]:
    """Per precision and seed: the seed-training's CPU seconds of ``against`` and of this checkout, one epoch
    each and extrapolated to the study's epochs, and their ratio (this / against)."""
    trees = {"against": worktree(against, cache), "this": repo_root()}
    cores = _cores()
    rows = []
    for precision in precisions:
        overlay = work / f"overlay-{precision}.yaml"
        overlay.write_text(f"defaults:\n  train:\n    epochs: 1\n    precision: {precision}\nselect: [{RUN}]\n"
                           f"seeds: [{', '.join(map(str, seeds))}]\n")
        for i, seed in enumerate(seeds):
            row: dict = {"precision": precision, "seed": seed, "run": RUN, "paired": cores is not None}
            labels = ("against", "this") if i % 2 == 0 else ("this", "against")
            configs = {label: _write_config(trees[label], label, overlay, seed,
                                            work / f"{label}-{precision}-seed{seed}") for label in labels}

            def start(label: str, core: int | None) -> _Training:
                return _Training(trees[label], configs[label], bpe, configs[label].parent / "run", core)

            if cores is not None:
                log(f"seed-training {precision} seed {seed}: lnrepro train of {labels[0]} on core {cores[0]} and of "
                    f"{labels[1]} on core {cores[1]}, at once")
                started = {label: start(label, core) for label, core in zip(labels, cores)}
                row.update({label: training.result() for label, training in started.items()})
            else:
                for label in labels:
                    log(f"seed-training {precision} seed {seed}: lnrepro train of {label} ({trees[label]})")
                    row[label] = start(label, None).result()
            row["ratio"] = row["this"]["study_cpu_s"] / row["against"]["study_cpu_s"]
            rows.append(row)
    return rows


def _write_config(tree: Path, label: str, overlay: Path, seed: int, folder: Path) -> Path:
    """The run's config.json for ``seed``, written by ``tree``'s own configuration layer into ``folder``."""
    folder.mkdir(parents=True)
    config = folder / "config.json"
    made = subprocess.run([sys.executable, "-c", _WRITE_CONFIG, str(tree), PRESET, str(overlay), RUN, str(seed),
                           str(config)], env=_env(tree), capture_output=True, text=True)
    if made.returncode != 0:
        raise LnReproError(f"bench: {label}'s configuration layer ({tree}) could not write the run's config.json:\n"
                           f"{made.stderr.strip()}")
    return config
