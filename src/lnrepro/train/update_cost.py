"""What training a study costs here before any of it is trained: each unit's updates and this host's CPU-seconds
per update, measured.

Updates: the batches per epoch of the encoded train split (``results/{exp}/data/bpe``), built by training's own
``batch_by_size`` with the run's ``max_tokens``, ``required_batch_size_multiple`` and the unit's seed, times the
run's epochs (at most ``max_updates``). CPU-seconds per update: per model shape (the model settings, precision,
``max_tokens`` and optimizer; the learning-rate schedule does not change the work), ``WARMUP`` untimed and then
``TIMED`` timed updates of ``train_step`` on the first batches of epoch 1 of the shape's first run and seed, in
this process's CPU time (``process_cpu_s``, as run.json's ``train_cpu_s``) at the job's threads.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config.settings import Experiment, RunSettings
from ..errors import LnReproError
from ..io import json_text, process_cpu_s
from ..memory import keep_freed_memory
from ..model import Transformer
from ..optimizers import build_optimizer
from ..vocab import PAD
from .batching import batch_by_size, collate, epoch_order
from .loop import Batch, load_pairs, training_inputs, vocab_size
from .step import StepSettings, train_step

WARMUP, TIMED = 3, 8  # untimed, then timed updates per model shape


@dataclass(frozen=True)
class UpdateCost:
    """Each unit's training updates and each selected run's CPU-seconds per update, measured here."""

    updates: dict[tuple[str, int], int]  # (run, seed) -> updates of its training
    cpu_s_per_update: dict[str, float]  # run -> CPU-seconds of one update (its shape's)
    shapes: int  # distinct model shapes timed
    timed: int  # updates timed per shape


def shape_of(settings: RunSettings) -> str:
    """What decides the work of an update: the model, its precision, the batches' size and the optimizer."""
    train = settings.train
    return json_text({"model": settings.model.to_dict(), "precision": train.precision, "optim": settings.optim.name,
                      "max_tokens": train.max_tokens, "multiple": train.required_batch_size_multiple})


def missing_inputs(bpe_dir: Path) -> list[Path]:
    """The files of the encoded train split (and spm.model) that ``bpe_dir`` lacks."""
    return [p for p in training_inputs(bpe_dir) if not p.exists()]


def measure(exp: Experiment, units: list[tuple[str, int]], bpe_dir: Path, threads: int) -> UpdateCost:
    """The updates of ``units`` (run, seed) and the CPU-seconds per update of their runs, at ``threads``."""
    if missing_inputs(bpe_dir):
        absent = ", ".join(map(str, missing_inputs(bpe_dir)))
        raise LnReproError(f"{bpe_dir}: the encoded train split is missing ({absent})")
    vocab = vocab_size(bpe_dir / "spm.model")
    pairs: dict[int, tuple[list[list[int]], list[list[int]]]] = {}
    index: dict[tuple[int, int, int], list[list[int]]] = {}

    def batches_of(run: str, seed: int) -> tuple[tuple[list[list[int]], list[list[int]]], list[list[int]]]:
        s = exp.runs[run]
        if s.model.max_positions not in pairs:
            pairs[s.model.max_positions] = load_pairs(bpe_dir, s.model.max_positions, vocab)
        src, tgt = pairs[s.model.max_positions]
        key = (s.train.max_tokens, s.train.required_batch_size_multiple, seed)
        if key not in index:
            index[key] = batch_by_size([len(x) for x in src], [len(y) for y in tgt], s.train.max_tokens, seed,
                                       s.train.required_batch_size_multiple)
        return (src, tgt), index[key]

    updates: dict[tuple[str, int], int] = {}
    for run, seed in units:
        train = exp.runs[run].train
        n = len(batches_of(run, seed)[1]) * train.epochs
        updates[(run, seed)] = min(n, train.max_updates) if train.max_updates else n
    rate: dict[str, float] = {}
    by_shape: dict[str, float] = {}
    for run, seed in units:
        shape = shape_of(exp.runs[run])
        if shape not in by_shape:
            (src, tgt), idx = batches_of(run, seed)
            by_shape[shape] = cpu_s_per_update(exp.runs[run], src, tgt, idx, seed, vocab, threads)
        rate[run] = by_shape[shape]
    return UpdateCost(updates, rate, len(by_shape), TIMED)


def cpu_s_per_update(settings: RunSettings, src: list[list[int]], tgt: list[list[int]], index: list[list[int]],
                     seed: int, vocab: int, threads: int) -> float:
    """CPU-seconds of one ``train_step`` of ``settings``' model on the first batches of epoch 1 (``index``: the
    run's batches of the split ``src``/``tgt``), built and initialized as training does, at ``threads``."""
    order = epoch_order(len(index), seed, 1)
    chosen = [index[order[i % len(order)]] for i in range(WARMUP + TIMED)]
    batches = []
    for idx in chosen:
        s, p, t = collate([src[i] for i in idx], [tgt[i] for i in idx])
        batches.append(Batch(s, p, t, int(t.ne(PAD).sum())))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    with contextlib.suppress(RuntimeError):  # only settable before any inter-op work started
        torch.set_num_interop_threads(1)
    keep_freed_memory()  # as training: its updates' allocations stay in the heap
    try:
        torch.manual_seed(seed)
        model = Transformer(settings.model.model_config(vocab)).train()
        model.init_from_data(batches[0][:3])
        optimizer = build_optimizer(model, settings.optim)
        step = StepSettings.of(settings)
        for t, batch in enumerate(batches[:WARMUP]):
            train_step(model, optimizer, batch, t, 1, step)
        start = process_cpu_s()
        for t, batch in enumerate(batches[WARMUP:], WARMUP):
            train_step(model, optimizer, batch, t, 1, step)
        return (process_cpu_s() - start) / TIMED
    finally:
        torch.set_num_threads(before)
