"""The undeclared ``state/`` folder of a run (docs/architecture.md, "Stages and their contracts").

state/digest.json   the digest this state belongs to (config.json + training inputs)
state/last.pt       newest complete training state: model, optimizer, updates, epoch, position in the epoch's
                    batch order, RNG states, epoch records, retained training time; written atomically
state/epochs/epochNNN.pt  per-epoch weights {"model_config", "model"} (no optimizer state)
state/log.jsonl     the log of every attempt so far (append-only; a line cut by a kill is dropped)
state/finished.json written after the declared outputs: a finished state is never resumed

An unfinished state with the same digest is resumed; anything else is cleared and training starts fresh.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path
from typing import Any

import torch

from ..errors import LnReproError
from ..io import atomic_torch_save, atomic_write_json, file_sha256, read_json


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
    """Paths and the resume/clear decision for one run's state/ folder."""

    def __init__(self, run_dir: Path) -> None:
        self.root = Path(run_dir) / "state"
        self.last = self.root / "last.pt"
        self.digest_file = self.root / "digest.json"
        self.finished = self.root / "finished.json"
        self.log = self.root / "log.jsonl"
        self.epochs = self.root / "epochs"

    def epoch_weights(self, epoch: int) -> Path:
        return self.epochs / f"epoch{epoch:03d}.pt"

    def prepare(self, digest: dict[str, Any]) -> dict[str, Any] | None:
        """Resume or clear. Returns the last state to resume from, or None (fresh start; the log of earlier
        attempts with the same digest that died before their first checkpoint is kept)."""
        same = False
        if self.digest_file.exists() and not self.finished.exists():
            try:
                same = read_json(self.digest_file).get("digest") == digest["digest"]
            except LnReproError:
                same = False
        if not same:
            if self.root.exists():
                shutil.rmtree(self.root)
            self.root.mkdir(parents=True)
            atomic_write_json(self.digest_file, digest)
            return None
        if not self.last.exists():
            return None
        try:
            state = torch.load(self.last, map_location="cpu", weights_only=True)
        except Exception as e:  # written atomically, so this means outside damage
            raise LnReproError(f"{self.last}: unreadable training state ({e}); delete {self.root} to start "
                               "this run afresh") from e
        if state.get("digest") != digest["digest"]:
            raise LnReproError(f"{self.last}: digest differs from {self.digest_file}; delete {self.root}")
        return state

    def save_last(self, state: dict[str, Any]) -> None:
        atomic_torch_save(state, self.last)

    def mark_finished(self, info: dict[str, Any]) -> None:
        atomic_write_json(self.finished, info)


def finite_json(obj: Any) -> Any:
    """Replace non-finite floats by None (strict JSON has no NaN/Infinity); recurse into dicts and lists."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    return obj


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
        self._f.write(json.dumps(finite_json(record), allow_nan=False) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()
