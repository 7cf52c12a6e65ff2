"""The undeclared ``state/`` folder of a run (docs/architecture.md, "Stages and their contracts").

state/lock          flock'ed by the trainer for its lifetime: one trainer per state/ (the OS frees it on any exit)
state/digest.json   the digest this state belongs to (config.json + training inputs)
state/last.pt       newest complete training state: model, optimizer, updates, epoch, position in the epoch's
                    batch order, RNG states, epoch records, retained training time; written atomically
state/prev.pt       the state before it, the fallback when last.pt fails its CRC-32s or does not load
                    (deleted when the training finishes)
state/epochs/epochNNN.pt  per-epoch weights {"model_config", "model"} (no optimizer state)
state/log.jsonl     the log of every attempt so far (append-only; a line cut by a kill is dropped)
state/outputs/      the bytes of every declared output (run.json, train.jsonl, summary.json, epochs/*.json)
state/finished.json written after outputs/: {"digest", "time", "outputs": {name: sha256}}
state/previous/     the state of the inputs before (every file above but the lock): one generation, moved
                    there, never deleted, when the trainer starts on other inputs; an older one is replaced
state/.to_previous/, state/.from_previous/  a move to or from previous/ in progress (finished by the next
                    trainer when a kill cut it short)

A finished state with the same digest, whose outputs/ and epoch weights match their digests, writes the
declared outputs again from outputs/ without training (Snakemake's --rerun-incomplete deletes outputs that a
trainer orphaned by a killed Snakemake finished). An unfinished state with the same digest is resumed (from
last.pt, else prev.pt, else from the start). A state of other inputs is moved to previous/ (only after the
new inputs were checked against the data) and training starts fresh; when previous/ holds the state of the
current inputs, the two swap places first, so going back to earlier inputs resumes, or re-emits, their
training. A finished state of the same digest that fails its checks is cleared and trained again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import torch

from ..errors import LnReproError
from ..paths import RunFolder
from ..records import EpochManifest
from ..io import (atomic_path, atomic_write_bytes, atomic_write_json, exclusive_lock, file_sha256, finite_json,
                  naming_full_disk, read_json, torch_save_file)


def say(message: str) -> None:
    """A line on stderr (the job's log under Snakemake) about what the trainer decided for its state."""
    print(f"lnrepro train: {message}", file=sys.stderr, flush=True)


def run_digest(config_json: Path, inputs: list[Path]) -> dict[str, Any]:
    """Digest of config.json and the training inputs (by name and content)."""
    parts = {"config.json": file_sha256(config_json)}
    parts.update({p.name: file_sha256(p) for p in inputs})
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
    return {"digest": digest, "parts": parts}


def capture_rng() -> dict[str, Any]:
    """Every RNG training draws from: torch's CPU generator (dropout, init) and CUDA's when used.
    (Batch order comes from numpy RandomState(seed + epoch), rebuilt from (seed, epoch), so it needs no state.)"""
    rng: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return rng


def restore_rng(rng: dict[str, Any]) -> None:
    torch.set_rng_state(rng["torch"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])


class StateDir:
    """Paths, the lock and the resume/re-emit/clear decision for one run's state/ folder."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.folder = RunFolder(str(self.run_dir))
        self.root = Path(self.folder.state)
        self.lock_file = self.root / "lock"
        self.last = self.root / "last.pt"
        self.prev = self.root / "prev.pt"
        self.digest_file = self.root / "digest.json"
        self.finished = self.root / "finished.json"
        self.log = self.root / "log.jsonl"
        self.outputs = self.root / "outputs"
        self.previous = self.root / "previous"
        # a move in progress: the state going to previous/, and the one coming back from it
        self.to_previous, self.from_previous = self.root / ".to_previous", self.root / ".from_previous"
        self.resumed_from: str | None = None  # the file prepare() resumed from

    def epoch_weights(self, epoch: int) -> Path:
        return Path(self.folder.epoch_weights(epoch))

    @contextmanager
    def locked(self) -> Iterator[StateDir]:
        """Hold an exclusive flock on state/lock for the block. A second trainer of the run waits (saying which
        pid holds it) rather than refusing: after Snakemake is killed its trainers live on, and a rerun's trainer
        that waits then resumes or re-emits what the orphan left, so the rerun ends correct in one go. The lock
        file is never deleted (clearing keeps it), or two trainers could hold locks on different files."""
        self.root.mkdir(parents=True, exist_ok=True)
        with exclusive_lock(self.lock_file, say,
                            f"{self.root} is held by another trainer of this run (pid {{pid}}); waiting until it ends",
                            f"{self.root}: the other trainer ended; continuing from what it left"):
            yield self

    def _state_files(self) -> list[Path]:
        """The current state's files and folders: everything in state/ but the lock, previous/ and a move."""
        keep = {self.lock_file, self.previous, self.to_previous, self.from_previous}
        return sorted(child for child in self.root.iterdir() if child not in keep)

    def _clear(self) -> None:
        """Delete the current state (the lock file and previous/ stay)."""
        for child in self._state_files():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()

    @staticmethod
    def _digest_in(folder: Path) -> str | None:
        """The digest ``folder/digest.json`` records, or None (none, or unreadable)."""
        try:
            return read_json(folder / "digest.json").get("digest")
        except (LnReproError, AttributeError):
            return None

    def _complete_moves(self) -> None:
        """Finish a move to or from previous/ that a kill cut short. The steps, each a rename or a deletion of
        the older generation done before any of them: .to_previous/ created; (taking back) previous/ ->
        .from_previous/; the current state's files -> .to_previous/ -> previous/; .from_previous/'s files ->
        state/. The folders left say which step to finish."""
        if self.to_previous.exists():
            if self.previous.exists():  # a take-back cut short before its first rename
                os.replace(self.previous, self.from_previous)
            for child in self._state_files():
                os.replace(child, self.to_previous / child.name)
            os.replace(self.to_previous, self.previous)
        if self.from_previous.exists():
            for child in sorted(self.from_previous.iterdir()):
                os.replace(child, self.root / child.name)
            self.from_previous.rmdir()

    def _move_current_to_previous(self) -> None:
        """Move the current state into previous/; an older previous/ (another generation) is deleted first."""
        if self.previous.exists():
            shutil.rmtree(self.previous)
        self.to_previous.mkdir()
        self._complete_moves()

    def take_back(self, digest: dict[str, Any]) -> None:
        """When previous/ holds the state of these inputs and the current state is another's, swap them: the
        current state becomes previous/, the previous one current (to be resumed, or its outputs written
        again). Nothing is deleted."""
        self._complete_moves()
        if not self.previous.exists() or self._digest_in(self.previous) != digest["digest"]:
            return
        if self._state_files() and self._digest_in(self.root) == digest["digest"]:
            return  # the current state is of these inputs too: it stays the one used
        swap = bool(self._state_files())
        if swap:
            self.to_previous.mkdir()
        os.replace(self.previous, self.from_previous)
        self._complete_moves()
        say(f"{self.previous} held the state of these inputs: taken back"
            + (f" (the state of other inputs it replaces is now {self.previous})" if swap else ""))

    def restore_finished(self, digest: dict[str, Any]) -> bool:
        """When a finished state of the same digest is intact, write the declared outputs again from it (the
        bytes of the first time) and return True; otherwise False (prepare() then moves it to previous/ when
        it is of other inputs, clears it when it is of these)."""
        if not self.finished.exists():
            return False
        try:
            info = read_json(self.finished)
        except LnReproError:
            return False
        if info.get("digest") != digest["digest"] or not info.get("outputs"):
            return False
        outputs: dict[str, bytes] = {}
        for name, sha in info["outputs"].items():
            path = self.outputs / name
            data = path.read_bytes() if path.exists() else None
            if data is None or hashlib.sha256(data).hexdigest() != sha:
                say(f"{path}: missing or not the file {self.finished} lists; training this run again")
                return False
            outputs[name] = data
        for name, data in outputs.items():
            if not RunFolder().is_epoch_manifest(name):
                continue
            try:
                manifest = EpochManifest.from_dict(json.loads(data), str(self.outputs / name))
            except LnReproError as e:
                say(f"{e}; training this run again")
                return False
            weights = manifest.weights
            if weights and (not (self.run_dir / weights).exists()
                            or file_sha256(self.run_dir / weights) != manifest.sha256):
                say(f"{self.run_dir / weights}: missing or not the weights {name} lists; training this run again")
                return False
        write_outputs(self.run_dir, outputs)
        say(f"{self.run_dir}: already trained with these inputs ({self.finished}); its declared outputs were "
            f"written again from {self.outputs}, byte for byte, without training")
        return True

    def _load(self, path: Path, digest: dict[str, Any]) -> dict[str, Any]:
        """A training state, checked first against the CRC-32 of every record (torch.load does not check them,
        so a flipped byte would load silently) and then against the digest."""
        try:
            with zipfile.ZipFile(path) as z:
                bad = z.testzip()
            if bad is not None:
                raise ValueError(f"record {bad} fails its CRC-32")
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # written atomically, so this means outside damage
            raise LnReproError(f"{path}: unreadable training state ({e})") from e
        if state.get("digest") != digest["digest"]:
            raise LnReproError(f"{path}: training state of other inputs than {self.digest_file}")
        return state

    def prepare(self, digest: dict[str, Any]) -> dict[str, Any] | None:
        """Resume, or make room for a fresh start: a state of other inputs is moved to previous/, a finished
        one of these inputs (which restore_finished refused) cleared. Returns the state to resume from
        (last.pt, else prev.pt), or None (fresh start; the log of earlier attempts with the same digest is
        kept). Called only once the inputs were checked against the data."""
        same = False
        if self.digest_file.exists() and not self.finished.exists():
            try:
                same = read_json(self.digest_file).get("digest") == digest["digest"]
            except LnReproError:
                same = False
        if not same:
            self.root.mkdir(parents=True, exist_ok=True)
            self._complete_moves()
            if self._state_files() and self._digest_in(self.root) == digest["digest"]:
                say(f"{self.root}: the finished training of these inputs failed its checks: cleared, training "
                    "afresh")
                self._clear()
            elif self._state_files():
                replaced = " (replacing the older one there)" if self.previous.exists() else ""
                say(f"{self.root} belongs to other inputs: moved to {self.previous}{replaced}, training afresh")
                self._move_current_to_previous()
            atomic_write_json(self.digest_file, digest)
            return None
        damaged = False
        for path in (self.last, self.prev):
            if not path.exists():
                continue
            try:
                state = self._load(path, digest)
            except LnReproError as e:
                say(f"{e}; deleted it")
                path.unlink()
                damaged = True
                continue
            if damaged:
                say(f"resuming from {path}, the state before the damaged one (the updates after it are redone)")
            self.resumed_from = path.name
            return state
        # Both damaged: starting afresh rather than refusing, since state/ only holds work that can be redone
        # (bitwise the same on the CPU), and deleting state/ by hand, all a refusal could ask for, does the same.
        if damaged:
            say(f"no readable training state left in {self.root}; training this run from the start")
        return None

    def save_last(self, state: dict[str, Any]) -> None:
        """Write the new last.pt; the old one becomes prev.pt. The state before that is deleted first, so the
        disk holds two states at most, and at every moment at least one complete state exists."""
        if self.last.exists():
            self.prev.unlink(missing_ok=True)
        with atomic_path(self.last) as tmp:
            torch_save_file(state, tmp)
            if self.last.exists():
                os.replace(self.last, self.prev)

    def finish(self, outputs: dict[str, bytes], digest: dict[str, Any]) -> None:
        """Keep the declared outputs' bytes in outputs/, then mark the state finished (restore_finished)."""
        write_outputs(self.outputs, outputs)
        atomic_write_json(self.finished, {
            "digest": digest["digest"], "time": time.time(),
            "outputs": {name: hashlib.sha256(data).hexdigest() for name, data in outputs.items()}})
        self.prev.unlink(missing_ok=True)  # a finished state is never resumed: the fallback is no longer needed


def write_outputs(run_dir: Path, outputs: dict[str, bytes]) -> None:
    """Write the declared outputs (names relative to the run directory), each atomically, in the given order."""
    for name, data in outputs.items():
        atomic_write_bytes(run_dir / name, data)


class RunLog:
    """Append-only JSON-lines log in state/; every record is flushed so a kill loses at most a partial line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if path.exists():  # drop a line cut short by a kill, so appended records stay parseable
            data = path.read_bytes()
            if data and not data.endswith(b"\n"):
                with open(path, "r+b") as f:
                    f.truncate(data.rfind(b"\n") + 1)
        self._f = open(path, "a", encoding="utf-8")

    def records(self) -> list[dict[str, Any]]:
        out = []
        with open(self.path, encoding="utf-8") as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        return out

    def write(self, record: dict[str, Any]) -> None:
        with naming_full_disk(self.path):  # a line cut short here is dropped by the next attempt
            self._f.write(json.dumps(finite_json(record), allow_nan=False) + "\n")
            self._f.flush()

    def close(self) -> None:
        self._f.close()
