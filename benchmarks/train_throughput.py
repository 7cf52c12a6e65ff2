"""Training throughput (target tokens/s) of the project's training step against a plain PyTorch one.

The project's step is the one the training loop runs: ``lnrepro.train.step.train_step`` (``Transformer(cfg)(src,
prev)`` under the precision's autocast, ``label_smoothed_nll_loss``, the divergence check's one sync, backward of
the loss per target token, the optimizer's step) with the optimizer ``lnrepro.optimizers.build_optimizer``
builds (fused AdamW).
The reference is the step a user would write: ``torch.nn.Transformer(batch_first=True, norm_first=True)`` with
token embeddings, sinusoidal positions and a tied output projection, ``F.cross_entropy(label_smoothing=0.1,
ignore_index=PAD, reduction="sum")``, the same AdamW. Both models have the same sizes.

Batches: real sentences (``--ids PREFIX`` reads PREFIX.de.ids and PREFIX.en.ids, one line of space-separated
ids per sentence, as data/bpe/train.*.ids) cut as training cuts them (fairseq's batch_by_size, padded to the
longest), ``--batches`` of them spread evenly over the length-sorted batch list; without ``--ids``, random
batches of ``--length`` tokens. Variants run interleaved (a round is every variant once over all batches); the
first round is a warm-up; tokens/s is reported as the median over rounds with the min-max spread. Times are
the process's CPU time by default (``--clock cpu``): on a shared machine a one-thread step's CPU time is what
it takes alone, while wall time also counts the time other processes held the core. Model FLOP
utilization counts the matmul FLOPs of the unpadded tokens (``Transformer.flops_per_batch``) against the
peak of one large matmul measured in the same process. ``--profile VARIANT`` prints the top self-CPU entries of
one round of that variant instead. Examples:

    PYTHONPATH=src python benchmarks/train_throughput.py --ids data/bpe/train --threads 1 \
        --d-model 256 --ffn 512 --vocab 8000
    PYTHONPATH=src python benchmarks/train_throughput.py --ids data/bpe/train --profile project-bf16
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from lnrepro.bench.reference import ReferenceTransformer  # the one 'what a user would write' model
from lnrepro.bench.sizes import CONSTANT
from lnrepro.config.settings import OptimSettings
from lnrepro.model import ModelConfig, Transformer
from lnrepro.train.batching import batch_by_size, collate, read_ids
from lnrepro.optimizers import build_optimizer
from lnrepro.train.step import StepSettings, train_step
from lnrepro.vocab import EOS, PAD

VARIANTS = ("project-fp32", "project-bf16", "reference-fp32", "reference-bf16")
Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # src, prev, target
OPTIM = OptimSettings(name="adamw", lr_max=1e-4, betas=(0.9, 0.98), eps=1e-8, weight_decay=1e-4, clip_norm=0.0,
                      label_smoothing=0.1)


@dataclass(frozen=True)
class StepBatch:
    """A batch as ``train_step`` takes it."""

    src: torch.Tensor
    prev: torch.Tensor
    target: torch.Tensor
    ntok: int


def autocast(precision: str) -> contextlib.AbstractContextManager:
    return torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()


def make_step(variant: str, cfg: ModelConfig) -> Callable[[Batch], None]:
    """One full update of ``variant`` (a name in VARIANTS) on a batch; the model is built under seed 0."""
    kind, precision = variant.split("-")
    torch.manual_seed(0)
    model = (Transformer(cfg) if kind == "project" else ReferenceTransformer(cfg)).train()
    # The project's optimizer as training builds it (fused); the reference's as a user writes it (default).
    opt = (build_optimizer(model, OPTIM) if kind == "project" else
           torch.optim.AdamW(model.parameters(), lr=OPTIM.lr_max, betas=OPTIM.betas, eps=OPTIM.eps,
                             weight_decay=OPTIM.weight_decay))
    settings = StepSettings(OPTIM, CONSTANT, precision, diverge_loss=math.inf)

    def project(batch: Batch) -> None:  # the training loop's update
        src, prev, target = batch
        train_step(model, opt, StepBatch(src, prev, target, int(target.ne(PAD).sum())), 0, 1, settings)

    def reference(batch: Batch) -> None:
        src, prev, target = batch
        with autocast(precision):
            logits = model(src, prev)
            loss = F.cross_entropy(logits.view(-1, cfg.vocab_size), target.view(-1), ignore_index=PAD,
                                   label_smoothing=0.1, reduction="sum")
        opt.zero_grad(set_to_none=True)
        (loss / int(target.ne(PAD).sum())).backward()
        opt.step()

    return project if kind == "project" else reference


def real_batches(prefix: str, max_tokens: int, count: int) -> list[Batch]:
    """``count`` training batches spread evenly over the length-sorted list batch_by_size builds (seed 1)."""
    src, tgt = read_ids(f"{prefix}.de.ids"), read_ids(f"{prefix}.en.ids")
    index = batch_by_size([len(s) for s in src], [len(t) for t in tgt], max_tokens, seed=1)
    picks = sorted({round(i * (len(index) - 1) / max(count - 1, 1)) for i in range(count)})
    return [collate([src[i] for i in index[p]], [tgt[i] for i in index[p]]) for p in picks]


def random_batches(vocab: int, max_tokens: int, length: int, count: int) -> list[Batch]:
    g = torch.Generator().manual_seed(0)
    bsz = max(1, max_tokens // length)
    out = []
    for _ in range(count):
        src = torch.randint(4, vocab, (bsz, length), generator=g)
        target = torch.randint(4, vocab, (bsz, length), generator=g)
        out.append((src, torch.cat([torch.full((bsz, 1), EOS), target[:, :-1]], dim=1), target))
    return out


def batch_flops(model: Transformer, batches: list[Batch]) -> float:
    """Training matmul FLOPs of the unpadded tokens: attention lengths as sum(len^2)/sum(len) of the sentences."""
    total = 0.0
    for src, _, target in batches:
        s_len, t_len = src.ne(PAD).sum(1).double(), target.ne(PAD).sum(1).double()
        total += model.flops_per_batch(int(s_len.sum()), int(t_len.sum()), float((s_len ** 2).sum() / s_len.sum()),
                                       float((t_len ** 2).sum() / t_len.sum()))
    return total


Clock = Callable[[], float]
CLOCKS: dict[str, Clock] = {"cpu": time.process_time, "wall": time.perf_counter}


def matmul_peak(dtype: torch.dtype, clock: Clock, n: int = 2048, reps: int = 5) -> float:
    """GFLOP/s of the best of ``reps`` n x n x n matmuls in ``dtype``."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    best = math.inf
    for _ in range(reps):
        t0 = clock()
        a @ b
        best = min(best, clock() - t0)
    return 2 * n ** 3 / best / 1e9


@dataclass
class Result:
    variant: str
    tokens_per_s: list[float]  # one per measured round

    @property
    def median(self) -> float:
        return statistics.median(self.tokens_per_s)


def measure(steps: dict[str, Callable[[Batch], None]], batches: list[Batch], rounds: int,
            clock: Clock) -> dict[str, Result]:
    """Interleaved rounds (every variant over every batch, in turn); round 0 is the warm-up, not reported."""
    ntok = sum(int(t.ne(PAD).sum()) for _, _, t in batches)
    results = {v: Result(v, []) for v in steps}
    for r in range(rounds + 1):
        for variant, step in steps.items():
            t0 = clock()
            for batch in batches:
                step(batch)
            if r > 0:
                results[variant].tokens_per_s.append(ntok / (clock() - t0))
    return results


def profile(step: Callable[[Batch], None], batches: list[Batch], rows: int) -> str:
    for batch in batches:  # warm-up
        step(batch)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for batch in batches:
            step(batch)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=10000)
    ap.add_argument("--norm", default="pre")
    ap.add_argument("--ids", help="PREFIX of PREFIX.de.ids / PREFIX.en.ids (real batches); default random ones")
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--length", type=int, default=32, help="random batches: length of every sentence")
    ap.add_argument("--batches", type=int, default=6, help="batches per round")
    ap.add_argument("--rounds", type=int, default=3, help="measured rounds (after one warm-up round)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--clock", choices=CLOCKS, default="cpu", help="cpu: process CPU time (default); wall")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    ap.add_argument("--profile", choices=VARIANTS, help="print the self-CPU profile of one round of this variant")
    ap.add_argument("--profile-rows", type=int, default=25)
    args = ap.parse_args()
    clock = CLOCKS[args.clock]
    torch.set_num_threads(args.threads)
    cfg = ModelConfig(vocab_size=args.vocab, encoder_layers=args.layers, decoder_layers=args.layers,
                      d_model=args.d_model, heads=args.heads, ffn_dim=args.ffn, norm=args.norm)
    batches = (real_batches(args.ids, args.max_tokens, args.batches) if args.ids
               else random_batches(args.vocab, args.max_tokens, args.length, args.batches))
    padded = sum(t.numel() + s.numel() for s, _, t in batches)
    real = sum(int(t.ne(PAD).sum() + s.ne(PAD).sum()) for s, _, t in batches)
    print(f"model {args.layers}+{args.layers} d={args.d_model} heads={args.heads} ffn={args.ffn} vocab={args.vocab} "
          f"norm={args.norm}; threads={args.threads}; clock {args.clock}; {len(batches)} batches "
          f"({', '.join(f'{tuple(t.shape)}' for _, _, t in batches)}), padding {1 - real / padded:.1%} of tokens")
    if args.profile:
        print(profile(make_step(args.profile, cfg), batches, args.profile_rows))
        return
    peaks = {p: matmul_peak(dt, clock) for p, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16))}
    print(f"matmul peak 2048^3: fp32 {peaks['fp32']:.0f} GFLOP/s, bf16 {peaks['bf16']:.0f} GFLOP/s")
    results = measure({v: make_step(v, cfg) for v in args.variants}, batches, args.rounds, clock)
    flops = batch_flops(Transformer(cfg), batches)
    ntok = sum(int(t.ne(PAD).sum()) for _, _, t in batches)
    for v, r in results.items():
        precision = v.split("-")[1]
        gflops = flops / (ntok / r.median) / 1e9
        print(f"{v:>15}: {r.median:8,.0f} target tokens/s (min {min(r.tokens_per_s):,.0f}, "
              f"max {max(r.tokens_per_s):,.0f}, {len(r.tokens_per_s)} rounds), {gflops:.0f} GFLOP/s "
              f"= {gflops / peaks[precision]:.0%} of the {precision} peak")
    for precision in ("fp32", "bf16"):
        p, ref = results.get(f"project-{precision}"), results.get(f"reference-{precision}")
        if p and ref:
            ratios = [a / b for a, b in zip(p.tokens_per_s, ref.tokens_per_s)]
            print(f"{precision}: project / reference {statistics.median(ratios):.2f}x "
                  f"(per round {min(ratios):.2f}-{max(ratios):.2f})")
    if "project-fp32" in results and "project-bf16" in results:
        print(f"project bf16 / fp32 {results['project-bf16'].median / results['project-fp32'].median:.2f}x")


if __name__ == "__main__":
    main()
