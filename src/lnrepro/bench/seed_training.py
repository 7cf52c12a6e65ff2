"""Seed-trainings against another commit's own ``lnrepro train``: issue 21's measure of the training's cost.

A seed-training is one run and seed trained for the study's epochs. Each commit writes the run's config.json
with its own configuration layer (``load_config`` of its config.yaml, ``presets/study-cpu.yaml`` and an overlay
of one epoch and the precision, then ``experiment(...).run_config``) and trains it with its own ``lnrepro train``
in a subprocess, on the same BPE folder of the bench's corpus, one thread; the two commits alternate seed by
seed (A, B, then B, A). A training's CPU seconds are those of its process (user + system, ``os.wait4``):
start-up, data, the epoch, checkpoints. Extrapolated to the study's epochs: the part outside the updates (the
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
from .timing import log

RUN = "postln_warmup_isqrt"  # the Figure 4 pair's Post-LN arm; every cell trains the same model size
PRESET = "presets/study-cpu.yaml"
STUDY_EPOCHS = 10  # presets/study-cpu.yaml defaults.train.epochs

# Runs in the commit's own tree (its lnrepro on PYTHONPATH): writes config.json for one seed.
_WRITE_CONFIG = """
import sys
from lnrepro.config.load import experiment, load_config
tree, overlay, run, seed, out = sys.argv[1:6]
config = load_config([f"{tree}/config.yaml", f"{tree}/{PRESET}", overlay])
experiment(config).run_config(run, int(seed)).write(out)
""".replace("{PRESET}", PRESET)


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


def _train(tree: Path, config: Path, bpe: Path, run_dir: Path) -> dict:
    """One ``lnrepro train`` of ``tree`` as a subprocess: its CPU seconds and its summary's update time."""
    log_path = run_dir.parent / f"{run_dir.name}.log"
    with open(log_path, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "lnrepro", "train", "--config", str(config), "--bpe", str(bpe),
                                 "--run-dir", str(run_dir), "--threads", "1"], env=_env(tree), stdout=out,
                                stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise LnReproError(f"bench: lnrepro train of {tree} failed ({proc.returncode}); see {log_path}")
    summary = read_json(run_dir / "summary.json")
    cpu_s = usage.ru_utime + usage.ru_stime
    train_s = float(summary["train_s"])
    return {"cpu_s": cpu_s, "train_s": train_s, "outside_updates_cpu_s": cpu_s - train_s,
            "updates": summary.get("updates"), "study_cpu_s": cpu_s - train_s + STUDY_EPOCHS * train_s}


def measure_seed_training(bpe: Path, against: str, precisions: list[str], seeds: list[int], cache: Path,
                          work: Path) -> list[dict]:
    """Per precision and seed: the seed-training's CPU seconds of ``against`` and of this checkout, one epoch
    each and extrapolated to the study's epochs, and their ratio (this / against)."""
    trees = {"against": worktree(against, cache), "this": repo_root()}
    rows = []
    for precision in precisions:
        overlay = work / f"overlay-{precision}.yaml"
        overlay.write_text(f"defaults:\n  train:\n    epochs: 1\n    precision: {precision}\nselect: [{RUN}]\n"
                           f"seeds: [{', '.join(map(str, seeds))}]\n")
        for i, seed in enumerate(seeds):
            row: dict = {"precision": precision, "seed": seed, "run": RUN}
            for label in (("against", "this") if i % 2 == 0 else ("this", "against")):
                tree = trees[label]
                folder = work / f"{label}-{precision}-seed{seed}"
                folder.mkdir(parents=True)
                config = folder / "config.json"
                made = subprocess.run([sys.executable, "-c", _WRITE_CONFIG, str(tree), str(overlay), RUN, str(seed),
                                       str(config)], env=_env(tree), capture_output=True, text=True)
                if made.returncode != 0:
                    raise LnReproError(f"bench: {label}'s configuration layer ({tree}) could not write the run's "
                                       f"config.json:\n{made.stderr.strip()}")
                log(f"seed-training {precision} seed {seed}: lnrepro train of {label} ({tree})")
                row[label] = _train(tree, config, bpe, folder / "run")
            row["ratio"] = row["this"]["study_cpu_s"] / row["against"]["study_cpu_s"]
            rows.append(row)
    return rows
