"""The training update at the CPU study's size: what bounds it, and what each lever buys.

``--scaling``: tokens/s of the project's update (``train_step``) on real batches of growing ``max_tokens``: flat
from 1,024 tokens on means the update is bound by the work per token, not by the number of operations (so
batching seeds into one model, which only makes operations larger, buys nothing).

``--mfu``: ms per update, model GFLOP/s and MFU against the 2048^2 matmul peak timed in the same process between
updates (run two at once, one per core, to see what the study's two trainings at once get).

``--levers``: the levers side by side in one process, each on a model of its own with the same initialization,
trained on the same batches in turn, the order alternating batch by batch (the hosts this project runs on drift
by up to 2x within minutes, which separate processes would read as differences): the update before the levers
(softmax rows of any length, logits at every position), with short rows padded (``short_keys``), and with packed
logits as well (training's ``train_step``).

    python benchmarks/study_step.py --data /path/to/multi30k --levers --precision bf16
    python benchmarks/study_step.py --data /path/to/multi30k --scaling --precision fp32
    python benchmarks/study_step.py --data /path/to/multi30k --mfu --precision fp32

Run it with one thread on an otherwise idle core (``taskset -c 1``); docs/measurements.md has the results.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import time
from pathlib import Path

import torch

import lnrepro.model.transformer as transformer
from lnrepro.bench.batches import Batch, sample_batches
from lnrepro.bench.corpus import open_corpus
from lnrepro.host import matmul
from lnrepro.bench.sizes import CONSTANT, OPTIM, SIZES
from lnrepro.memory import keep_freed_memory
from lnrepro.model import Transformer
from lnrepro.optimizers import build_optimizer
from lnrepro.train.loss import label_smoothed_nll_loss
from lnrepro.precision import autocast
from lnrepro.train.step import StepSettings, train_step

SIZE = SIZES["study"]
WARMUP = 3  # batches before timing


def _model(norm: str) -> tuple[Transformer, torch.optim.Optimizer]:
    torch.manual_seed(1)
    model = Transformer(SIZE.config(norm)).train()
    return model, build_optimizer(model, OPTIM)


def _before(model: Transformer, opt: torch.optim.Optimizer, b: Batch, precision: str) -> None:
    """The update of commit a28067f: logits at every position, the chunked loss over them."""
    with autocast(b.src.device, precision):
        logits = model(b.src, b.prev)
    loss, _ = label_smoothed_nll_loss(logits, b.target, OPTIM.label_smoothing)
    float(loss.detach())
    opt.zero_grad(set_to_none=True)
    (loss / b.ntok).backward()
    opt.step()


def levers(batches: list[Batch], precision: str, norm: str) -> None:
    pad_keys = transformer.short_keys
    settings = StepSettings(OPTIM, CONSTANT, precision, math.inf)
    variants = [  # (name, short_keys, update)
        ("before: rows of any length, logits at every position", lambda q, tk: 0,
         lambda m, o, b: _before(m, o, b, precision)),
        ("short rows padded with masked keys", pad_keys, lambda m, o, b: _before(m, o, b, precision)),
        ("+ packed logits (train_step)", pad_keys, lambda m, o, b: train_step(m, o, b, 0, 1, settings)),
    ]
    models = [_model(norm) for _ in variants]
    cpu = [0.0] * len(variants)
    tokens = 0
    for i, batch in enumerate(batches):
        order = range(len(variants)) if i % 2 == 0 else reversed(range(len(variants)))
        for j in order:
            transformer.short_keys = variants[j][1]
            t0 = time.process_time()
            variants[j][2](*models[j], batch)
            if i >= WARMUP:
                cpu[j] += time.process_time() - t0
        tokens += batch.ntok if i >= WARMUP else 0
    transformer.short_keys = pad_keys
    timed = len(batches) - WARMUP
    for (name, _, _), c in zip(variants, cpu):
        print(f"{precision} {name:55s} {tokens / c:8,.0f} tok/s {1000 * c / timed:7.1f} ms/update x{cpu[0] / c:.3f}")


def scaling(corpus, precision: str, norm: str, updates: int) -> None:
    src, tgt = corpus.pairs(SIZE.vocab, "train")
    model, opt = _model(norm)
    settings = StepSettings(OPTIM, CONSTANT, precision, math.inf)
    for max_tokens in (256, 512, 1024, 2048, 4096, 8192):
        batches = sample_batches(src, tgt, updates + WARMUP, max_tokens, 1)
        tokens, t0 = 0, 0.0
        for i, b in enumerate(batches):
            if i == WARMUP:
                t0 = time.process_time()
            train_step(model, opt, b, 0, 1, settings)
            tokens += b.ntok if i >= WARMUP else 0
        c = time.process_time() - t0
        print(f"{precision} max_tokens {max_tokens:5d}: {1000 * c / updates:7.1f} ms/update, {tokens / c:8,.0f} tok/s, "
              f"{tokens / updates:6,.0f} target tokens/update")


def mfu(batches: list[Batch], precision: str, norm: str) -> None:
    model, opt = _model(norm)
    settings = StepSettings(OPTIM, CONSTANT, precision, math.inf)
    peak_run, peak_flops = matmul(precision, 2048, 2)
    cpu = peak_s = flops = 0.0
    tokens = 0
    for i, b in enumerate(batches):
        t0 = time.process_time()
        train_step(model, opt, b, 0, 1, settings)
        if i >= WARMUP:
            cpu += time.process_time() - t0
            flops, tokens = flops + b.flops(model), tokens + b.ntok
            t0 = time.process_time()
            peak_run()
            peak_s += time.process_time() - t0
    timed = len(batches) - WARMUP
    peak = peak_flops * timed / peak_s
    print(f"{precision}: {1000 * cpu / timed:.1f} ms/update, {tokens / timed:,.0f} target tokens/update, "
          f"{flops / timed / 1e9:.2f} GFLOP/update, model {flops / cpu / 1e9:.1f} GFLOP/s, matmul peak "
          f"{peak / 1e9:.1f} GFLOP/s, MFU {flops / cpu / peak:.1%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="auto", help="a Multi30k mirror folder (default: the bench's auto)")
    ap.add_argument("--cache", type=Path, default=Path("results/bench-cache"))
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="bf16")
    ap.add_argument("--norm", default="post")
    ap.add_argument("--updates", type=int, default=36, help="timed updates per variant or batch size (default 36)")
    ap.add_argument("--levers", action="store_true")
    ap.add_argument("--scaling", action="store_true")
    ap.add_argument("--mfu", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    with contextlib.suppress(RuntimeError):
        torch.set_num_interop_threads(1)
    keep_freed_memory()  # as training does
    corpus = open_corpus(a.data, a.cache, quick=False)
    if a.levers:
        src, tgt = corpus.pairs(SIZE.vocab, "train")
        levers(sample_batches(src, tgt, a.updates + WARMUP, SIZE.max_tokens, 1), a.precision, a.norm)
    if a.mfu:
        src, tgt = corpus.pairs(SIZE.vocab, "train")
        mfu(sample_batches(src, tgt, a.updates + WARMUP, SIZE.max_tokens, 1), a.precision, a.norm)
    if a.scaling:
        scaling(corpus, a.precision, a.norm, a.updates)


if __name__ == "__main__":
    main()
