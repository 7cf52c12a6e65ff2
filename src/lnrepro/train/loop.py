"""One training run: resumable, instrumented, bitwise reproducible on the CPU (docs/architecture.md, "train").

``train_run(run_dir, config_json, bpe_dir, threads)`` trains ``data/bpe/train.de.ids`` -> ``train.en.ids``
with the settings in ``config.json`` (a ``lnrepro.config.RunConfig``), keeping everything it needs across attempts in ``run_dir/state/``
(checkpoint.py: one trainer at a time holds its lock) and writing the declared outputs (run.json, train.jsonl,
summary.json, epochs/epochNNN.json) from that state at the end; a state that finished with the same inputs
writes them again, byte for byte, without training. File formats: docs/outputs.md.

Run it as ``lnrepro train --config CONFIG_JSON --bpe BPE_DIR --run-dir RUN_DIR --threads N --device cpu|cuda``
(the device: ``lnrepro.device``; the workflow passes the one its job's GPUs give, and adds ``--config-sha256``,
the digest of the config.json its experiment resolves the run to). Everything is checked before the state of
an earlier training is touched: the device, config.json against that digest, the data against the settings; a
state of other inputs is then moved to ``state/previous/``, never deleted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from tqdm import tqdm

from ..errors import LnReproError
from ..config import RunConfig
from ..device import DEFAULT_DEVICE, device_name, select_device
from ..host import host_identity
from ..io import atomic_torch_save, file_sha256, finite_json, git_commit, process_cpu_s, where_ran
from ..memory import keep_freed_memory
from ..model import Transformer, weights_blob
from ..paths import EXPERIMENT_JSON, RunFolder
from ..records import Divergence, EpochManifest, RunRecord, RunStatus, RunSummary
from ..vocab import PAD
from .batching import batch_by_size, collate, epoch_order, read_ids
from .checkpoint import RunLog, StateDir, capture_rng, restore_rng, run_digest, say, write_outputs
from ..optimizers import build_optimizer, optimizer_of, optimizer_settings
from .step import StepSettings, train_step

SRC_LANG, TGT_LANG = "de", "en"  # the paper's direction, De -> En


class Batch(NamedTuple):
    """One collated training batch and its target tokens (padding excluded): what ``train_step`` takes."""

    src: torch.Tensor
    prev: torch.Tensor
    target: torch.Tensor
    ntok: int


def vocab_size(spm_model: Path) -> int:
    """Vocabulary size of the sentencepiece model (it counts <s>, <pad>, </s>, <unk>)."""
    import sentencepiece as spm

    if not spm_model.exists():
        raise LnReproError(f"{spm_model}: sentencepiece model not found")
    try:
        return int(spm.SentencePieceProcessor(model_file=str(spm_model)).get_piece_size())
    except Exception as e:
        raise LnReproError(f"{spm_model}: not a sentencepiece model ({e})") from e




def training_inputs(bpe_dir: Path) -> list[Path]:
    """The files a training reads besides config.json; with it they make the digest of its state."""
    return [bpe_dir / "spm.model", bpe_dir / f"train.{SRC_LANG}.ids", bpe_dir / f"train.{TGT_LANG}.ids"]


def check_config(config_json: Path, run_dir: Path, expected: str | None) -> None:
    """Refuse a config.json whose sha256 is not ``expected``, the digest of the config.json the experiment
    resolves the run to (``RunConfig.sha256``, passed by the workflow): a hand edit, or a file written from
    another configuration, would train settings that experiment.json and the report do not show."""
    if expected is None:
        return
    actual = file_sha256(config_json)
    if actual != expected:
        # run_dir is {exp}/runs/{run}/seed{seed}: the experiment's slice is three folders up
        experiment_json = Path(os.path.normpath(Path(run_dir, "..", "..", "..")), EXPERIMENT_JSON)
        raise LnReproError(
            f"{config_json}: not the config.json the experiment resolves this run to (its sha256 is "
            f"{actual[:12]}..., the experiment's configuration gives {expected[:12]}..., the run's settings in "
            f"{experiment_json}): edited by hand or written from another configuration. Nothing was trained or "
            f"changed; write it again from the configuration: snakemake --forcerun write_run_config (with the "
            f"same --configfile), or set the change in the config files instead")


def check_run_dir(config_json: Path, run_dir: Path) -> None:
    """Refuse a ``--config`` that is not ``run_dir``'s own: where the run folder holds a config.json (the workflow
    writes it there) that is another file with other bytes, or where the folder is a results tree's
    ``runs/{run}/seed{seed}`` and the config names another run or seed. Training it would put another run's
    training under this run's name."""
    own = run_dir / "config.json"
    if own.is_file() and not own.samefile(config_json) and own.read_bytes() != config_json.read_bytes():
        raise LnReproError(f"{config_json}: not the config.json of --run-dir {run_dir} ({own} differs): a run "
                           f"trains in its own folder from its own config.json; nothing was trained or changed")
    if run_dir.parent.parent.name != "runs" or not run_dir.name.startswith("seed"):
        return
    config = RunConfig.read(config_json)
    if (config.run, f"seed{config.seed}") != (run_dir.parent.name, run_dir.name):
        raise LnReproError(f"{config_json}: the config of run {config.run} seed{config.seed}, but --run-dir "
                           f"{run_dir} is the folder of run {run_dir.parent.name} {run_dir.name}; nothing was "
                           "trained or changed")


def execution_facts(device: torch.device, threads: int) -> dict[str, Any]:
    """What decides a training's bits besides its inputs (config.json, the data): library versions, device
    and threads. An attempt under other facts than the one it resumes continues, but is not bitwise the same."""
    return {"torch": torch.__version__, "numpy": np.__version__, "device": device.type,
            "device_name": device_name(device), "threads": threads}


def load_pairs(bpe_dir: Path, max_positions: int, vocab_size: int) -> tuple[list[list[int]], list[list[int]]]:
    """The encoded training pairs (source, target), checked against the vocabulary and ``max_positions``."""
    src_path, tgt_path = bpe_dir / f"train.{SRC_LANG}.ids", bpe_dir / f"train.{TGT_LANG}.ids"
    src, tgt = read_ids(src_path, vocab_size), read_ids(tgt_path, vocab_size)
    if len(src) != len(tgt):
        raise LnReproError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}")
    if not src:
        raise LnReproError(f"{src_path}: no training pairs")
    for i, (x, y) in enumerate(zip(src, tgt)):
        if len(x) > max_positions or len(y) > max_positions:  # fairseq filter_by_size raises for train too
            raise LnReproError(f"{src_path}:{i + 1}: pair longer than model.max_positions={max_positions}")
    return src, tgt


class _Trainer:
    """Holds the run's objects; ``run()`` trains from the resumed position to the end, or until divergence."""

    def __init__(self, config_json: Path, bpe_dir: Path, threads: int, device: torch.device, state_dir: StateDir,
                 digest: dict[str, Any]) -> None:
        self.t_start = time.time()
        self.bpe_dir, self.threads = Path(bpe_dir), threads
        self.cfg = RunConfig.read(config_json)
        cfg = self.cfg
        self.seed, self.train, self.step_settings = cfg.seed, cfg.train, StepSettings.of(cfg)
        self.epochs = self.train.epochs

        torch.set_num_threads(threads)
        with contextlib.suppress(RuntimeError):  # only settable before any inter-op work started
            torch.set_num_interop_threads(1)
        keep_freed_memory()
        self.host = host_identity(threads)  # before any work: a matmul of its own, no RNG or model touched
        self.device = device

        self.mcfg = cfg.model.model_config(vocab_size(self.bpe_dir / "spm.model"))
        self.digest, self.state_dir = digest, state_dir

        # Data: batches built once from the seed (fairseq), collated once (cheap, saves per-epoch work). Checked
        # against the settings (max_positions, max_tokens, the vocabulary) before the state is touched.
        src, tgt = load_pairs(self.bpe_dir, self.mcfg.max_positions, self.mcfg.vocab_size)
        self.num_pairs = len(src)
        index_batches = batch_by_size([len(s) for s in src], [len(t) for t in tgt], self.train.max_tokens, self.seed,
                                      self.train.required_batch_size_multiple)
        self.batches: list[Batch] = []
        for idx in index_batches:
            s, p, t = collate([src[i] for i in idx], [tgt[i] for i in idx])
            self.batches.append(Batch(s, p, t, int(t.ne(PAD).sum())))
        self.resume = state_dir.prepare(digest)  # the inputs are valid: an earlier state may now move aside
        self.log = RunLog(self.state_dir.log)
        self.attempt = 1 + sum(1 for r in self.log.records() if r.get("kind") == "attempt")

        # Model and optimizer. Init under the run's seed, as fairseq seeds torch before building the model.
        torch.manual_seed(self.seed)
        if self.device.type == "cuda":
            torch.cuda.manual_seed_all(self.seed)
        self.model = Transformer(self.mcfg).to(self.device)
        if self.resume is None:  # the variant's data-dependent initialization, on the first update's batch
            self.model.init_from_data(self.batches[epoch_order(len(self.batches), self.seed, 1)[0]][:3])
        self.optimizer = build_optimizer(self.model, cfg.optim)
        self.update = 0  # updates done (fairseq num_updates); the next update is t = self.update
        self.epoch, self.pos = 1, 0  # epoch in progress (from 1) and batches of it done
        self.train_s = 0.0  # training time of the retained work (restored on resume)
        self.train_cpu_s = 0.0  # its CPU time (process time; restored on resume)
        self.tokens_done = 0  # target tokens of the retained updates
        self.epoch_records: list[dict[str, Any]] = []
        self.end: dict[str, Any] | None = None  # {"reason": a RunStatus's value of RunSummary.STATUSES, ...}
        self.last_loss: dict[str, Any] = {}
        self.bar: tqdm | None = None  # the epoch's progress bar
        if self.resume is not None:
            r = self.resume
            self.model.load_state_dict(r["model"])
            self.optimizer.load_state_dict(r["optimizer"])
            self.update, self.epoch, self.pos = r["update"], r["epoch"], r["pos"]
            self.train_s, self.epoch_records, self.end = r["train_s"], r["epoch_records"], r["end"]
            self.train_cpu_s = r.get("train_cpu_s", 0.0)  # a state of an older lnrepro has none
            self.tokens_done = r["tokens_done"]
            self.last_loss = r.get("last_loss", {})
            restore_rng(r["rng"])
        self.execution = execution_facts(self.device, threads)
        self._say_execution_changes()
        self.log.write({"kind": "attempt", "attempt": self.attempt, "resumed_update": self.update,
                        "resumed_epoch": self.epoch, "resumed_pos": self.pos,
                        "resumed_from": self.state_dir.resumed_from, "execution": self.execution, "host": self.host,
                        "startup_s": time.time() - self.t_start, "wall_s": time.time() - self.t_start,
                        "time": time.time()})

    def _say_execution_changes(self) -> None:
        """A resumed state trained under other execution facts continues, said on stderr (run.json's
        ``executions`` lists every attempt's): its bits are then not an uninterrupted run's."""
        if self.resume is None:
            return
        before = [r for r in self.log.records() if r.get("kind") == "attempt" and "execution" in r]
        if not before:
            return
        last = before[-1]
        changed = {k: (last["execution"].get(k), v) for k, v in self.execution.items()
                   if last["execution"].get(k) != v}
        if changed:
            say(f"resuming {self.state_dir.root} at update {self.update} under other execution facts than attempt "
                f"{last['attempt']}: " + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in changed.items())
                + "; the result is not bitwise an uninterrupted run's (run.json: executions)")

    # ---- state ------------------------------------------------------------------------------------------------

    def _save_last(self) -> None:
        self.state_dir.save_last({
            "digest": self.digest["digest"], "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(), "update": self.update, "epoch": self.epoch, "pos": self.pos,
            "train_s": self.train_s, "train_cpu_s": self.train_cpu_s, "tokens_done": self.tokens_done, "epoch_records": self.epoch_records, "end": self.end,
            "last_loss": self.last_loss, "rng": capture_rng(),
        })

    def _end_epoch(self, partial: bool) -> None:
        path = self.state_dir.epoch_weights(self.epoch)
        atomic_torch_save(weights_blob(self.model), path)
        rec = {"epoch": self.epoch, "status": RunStatus.OK.value, "weights": RunFolder().epoch_weights(self.epoch),
               "sha256": file_sha256(path), "updates": self.update, "wall_s": self.train_s, "cpu_s": self.train_cpu_s,
               "partial": partial}
        self.epoch_records.append(rec)
        self.log.write({"kind": "epoch", "attempt": self.attempt, **rec,
                        "wall_s_attempt": time.time() - self.t_start, "cpu_s": process_cpu_s(), "time": time.time()})

    # ---- training ---------------------------------------------------------------------------------------------

    def run(self) -> None:
        model, opt, nb = self.model, self.optimizer, len(self.batches)
        model.train()
        while self.end is None and self.epoch <= self.epochs:
            order = epoch_order(nb, self.seed, self.epoch)
            lrs: list[float] = []
            tok_since, t_since = 0, time.perf_counter()
            bar = self.bar = tqdm(total=nb, initial=self.pos, desc=f"epoch {self.epoch}/{self.epochs}", file=sys.stderr,
                                  leave=True, dynamic_ncols=True)
            while self.pos < nb:
                t0, c0 = time.perf_counter(), time.process_time()
                batch = self.batches[order[self.pos]]
                ntok = batch.ntok
                batch = Batch(*(x.to(self.device, non_blocking=True) for x in batch[:3]), ntok)
                logged = (self.update + 1) % self.train.log_every == 0 or self.pos + 1 == nb
                step = train_step(model, opt, batch, self.update, self.epoch, self.step_settings, inspect=logged)
                lr, loss = step.lr, step.loss
                if not step.stepped:
                    reason = "non-finite loss" if not math.isfinite(loss) else \
                        f"loss {loss:.4g} > train.diverge_loss {self.train.diverge_loss:g}"
                    self.end = {"reason": RunStatus.DIVERGED.value, "update": self.update + 1, "epoch": self.epoch,
                                "detail": reason, "loss": loss if math.isfinite(loss) else None, "lr": lr}
                    self.log.write({"kind": "diverged", "attempt": self.attempt, **self.end, "time": time.time()})
                    break
                self.update += 1
                self.pos += 1
                self.train_s += time.perf_counter() - t0
                self.train_cpu_s += time.process_time() - c0
                lrs.append(lr)
                tok_since += ntok
                self.tokens_done += ntok
                bar.update(1)
                if logged:
                    now = time.perf_counter()
                    nll = float(step.nll_sum) / ntok
                    self.last_loss = {"loss": loss, "nll": nll, "update": self.update}
                    self.log.write({"kind": "step", "attempt": self.attempt, "update": self.update,
                                    "epoch": self.epoch, "loss": loss, "nll": nll, "lr": lr, "lrs": lrs,
                                    "target_tokens": ntok, "tokens_per_s": tok_since / max(now - t_since, 1e-9),
                                    "grad_norm": step.grad_norm, "grad_norms": step.grad_norms,
                                    "train_s": self.train_s, "train_cpu_s": self.train_cpu_s,
                                    "wall_s": time.time() - self.t_start, "cpu_s": process_cpu_s(),
                                    "time": time.time()})
                    bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", refresh=False)
                    lrs, tok_since, t_since = [], 0, now
                if self.train.max_updates and self.update >= self.train.max_updates:
                    self.end = {"reason": RunStatus.MAX_UPDATES.value, "update": self.update, "epoch": self.epoch}
                    break
                if self.update % self.train.checkpoint_every == 0 and self.pos < nb:
                    self._save_last()
            bar.close()
            if self.end is not None and self.end["reason"] == RunStatus.DIVERGED:
                self._save_last()
                break
            self._end_epoch(partial=self.pos < nb)
            if self.end is None and self.epoch == self.epochs:
                self.end = {"reason": RunStatus.COMPLETED.value, "update": self.update, "epoch": self.epoch}
            if self.end is None:
                self.epoch, self.pos = self.epoch + 1, 0
            self._save_last()

    def close(self) -> None:
        """Close the log and a progress bar left open by an error (else it is redrawn after the message)."""
        if self.bar is not None:
            self.bar.close()
        self.log.close()

    # ---- declared outputs -------------------------------------------------------------------------------------

    def outputs(self) -> dict[str, bytes]:
        """The declared outputs' bytes by name relative to the run directory, manifests first, summary last."""
        out: dict[str, bytes] = {}
        names = RunFolder()
        records = self.log.records()
        ran = where_ran(device_name(self.device))
        done = {r["epoch"]: r for r in self.epoch_records}
        end = self.end or {"reason": RunStatus.COMPLETED.value}
        diverged = end["reason"] == RunStatus.DIVERGED
        config_sha256 = self.digest["parts"]["config.json"]
        data_sha256 = {name: sha for name, sha in self.digest["parts"].items() if name != "config.json"}
        for ep in range(1, self.epochs + 1):
            own = {"run": self.cfg.run, "seed": self.seed, "config_sha256": config_sha256,
                   "data_sha256": data_sha256, "where_ran": ran}
            if ep in done:
                manifest = EpochManifest.from_dict({**done[ep], **own})
            else:
                manifest = EpochManifest(
                    epoch=ep, status=RunStatus.DIVERGED if diverged else RunStatus.STOPPED, weights=None,
                    sha256=None, updates=self.update, wall_s=self.train_s, cpu_s=self.train_cpu_s, partial=False,
                    reason=end.get("detail", end["reason"]), **own)
            out[names.epoch_manifest(ep)] = manifest.text().encode()
        out[names.train_jsonl] = "".join(json.dumps(finite_json(r)) + "\n" for r in records).encode()
        # Wall-clock of every attempt: the newest time stamp each attempt logged, minus its start.
        attempt_wall: dict[int, float] = {}
        for r in records:
            w = r.get("wall_s", r.get("wall_s_attempt"))
            if w is not None:
                attempt_wall[r["attempt"]] = max(attempt_wall.get(r["attempt"], 0.0), w)
        attempt_wall[self.attempt] = time.time() - self.t_start
        # CPU-seconds of every attempt: the newest process CPU time each attempt logged (this one's: now)
        attempt_cpu: dict[int, float] = {}
        for r in records:
            if r.get("cpu_s") is not None:
                attempt_cpu[r["attempt"]] = max(attempt_cpu.get(r["attempt"], 0.0), r["cpu_s"])
        attempt_cpu[self.attempt] = process_cpu_s()
        commit, dirty = git_commit()
        out[names.run_json] = RunRecord(
            run=self.cfg.run, seed=self.seed, config=self.cfg.to_dict(), config_sha256=config_sha256,
            inputs_sha256=self.digest["parts"], state_digest=self.digest["digest"],
            model_config=dataclasses.asdict(self.mcfg), num_params=self.model.num_params(),
            torch_version=torch.__version__, python_version=platform.python_version(), device=self.device.type,
            device_name=device_name(self.device), threads=self.threads, precision=self.train.precision,
            optimizer=optimizer_of(self.cfg.optim).implementation,
            optimizer_settings=optimizer_settings(self.cfg.optim), train_pairs=self.num_pairs,
            batches_per_epoch=len(self.batches), source_lang=SRC_LANG, target_lang=TGT_LANG,
            git_commit=commit, git_dirty=dirty, attempts=self.attempt, where_ran=ran, host=self.host,
            executions=[{"attempt": r["attempt"], "resumed_update": r["resumed_update"], **r["execution"]}
                        for r in records if r.get("kind") == "attempt" and "execution" in r],
        ).text().encode()
        out[names.summary] = RunSummary(
            run=self.cfg.run, seed=self.seed, status=RunStatus(end["reason"]),
            final_loss=self.last_loss.get("loss"), final_nll=self.last_loss.get("nll"),
            final_loss_update=self.last_loss.get("update"),
            updates=self.update, epochs_completed=sum(1 for r in self.epoch_records if not r.get("partial")),
            epochs=self.epochs,
            diverged=Divergence(**{k: end.get(k) for k in ("update", "epoch", "detail", "loss", "lr")}) if diverged else None,
            train_s=self.train_s, wall_s_all_attempts=sum(attempt_wall.values()), attempts=self.attempt,
            target_tokens_per_epoch=sum(b.ntok for b in self.batches), target_tokens_trained=self.tokens_done,
            tokens_per_s=self.tokens_done / self.train_s if self.train_s > 0 else None, where_ran=ran,
            train_cpu_s=self.train_cpu_s, cpu_s_all_attempts=sum(attempt_cpu.values()),
        ).text().encode()
        return out


def train_run(run_dir: Path, config_json: Path, bpe_dir: Path, threads: int,
              config_sha256: str | None = None, device: str = DEFAULT_DEVICE) -> None:
    """Train one run on ``device`` (cpu | cuda: ``lnrepro.device.select_device``) and write its declared outputs:
    resuming its unfinished state if any, or, when its state finished with these inputs, only writing the
    outputs again; a state of these inputs in state/previous/ is taken back first. ``config_sha256``: the digest
    config.json must have (else nothing is touched). One trainer at a time per state/ (a lock)."""
    run_dir, config_json, bpe_dir = Path(run_dir), Path(config_json), Path(bpe_dir)
    torch_device = select_device(device)
    check_config(config_json, run_dir, config_sha256)
    check_run_dir(config_json, run_dir)
    with StateDir(run_dir).locked() as state_dir:
        digest = run_digest(config_json, training_inputs(bpe_dir))
        state_dir.take_back(digest)
        if state_dir.restore_finished(digest):
            return
        trainer = _Trainer(config_json, bpe_dir, threads, torch_device, state_dir, digest)
        try:
            trainer.run()
            trainer.log.write({"kind": "finished", "attempt": trainer.attempt,
                               "status": (trainer.end or {}).get("reason"), "update": trainer.update,
                               "wall_s": time.time() - trainer.t_start, "cpu_s": process_cpu_s(), "time": time.time()})
            outputs = trainer.outputs()
            state_dir.finish(outputs, digest)  # first into state/, so a kill from here on loses nothing
            write_outputs(run_dir, outputs)
        finally:
            trainer.close()
