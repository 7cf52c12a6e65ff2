"""torch.profiler views of where the time goes: one training step per precision, one beam-5 scoring.

For deciding what to optimize, not for timing: the profiler's overhead inflates many small ops. Each profile
is written as the profiler's table (``--profile DIR``/NAME.txt, sorted by self CPU time) and summarized in the
JSON as its top operators with their share of the total self CPU time.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from ..evaluate.search import translate
from ..io import atomic_write_text
from ..model import Transformer, load_model
from .batches import sample_batches
from .corpus import Corpus
from .score import DECODE
from .sizes import Size
from .timing import log, timed
from .train import SEED, project_optimizer, project_step

TOP = 15


def _record(prof: profile, name: str, out_dir: Path, wall_s: float) -> dict:
    """Write NAME.txt and return the top operators by self CPU time."""
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    atomic_write_text(out_dir / f"{name}.txt", events.table(sort_by="self_cpu_time_total", row_limit=TOP) + "\n")
    top = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:TOP]
    return {"name": name, "wall_s": wall_s, "self_cpu_s": total / 1e6, "file": str(out_dir / f"{name}.txt"),
            "top": [{"op": e.key, "self_cpu_s": e.self_cpu_time_total / 1e6, "share": e.self_cpu_time_total / total,
                     "cpu_total_s": e.cpu_time_total / 1e6, "calls": e.count} for e in top]}


def profile_training(corpus: Corpus, size: Size, precisions: list[str], out_dir: Path) -> list[dict]:
    """One profiled project training step per precision on a real batch, after one warm-up step."""
    src, tgt = corpus.pairs(size.vocab, "train")
    (batch,) = sample_batches(src, tgt, 1, size.max_tokens, SEED)
    torch.manual_seed(SEED)
    model = Transformer(size.config()).train()
    opt = project_optimizer(model)
    out = []
    for precision in precisions:
        project_step(model, opt, batch, precision)
        log(f"profile: training step {size.name} {precision}, batch {batch.shape}")
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            _, wall = timed(lambda: project_step(model, opt, batch, precision))
        out.append({**_record(prof, f"train-{size.name}-{precision}", out_dir, wall), "batch": batch.shape})
    return out


def profile_scoring(weights: Path, seqs: list[list[int]], out_dir: Path) -> dict:
    """One profiled beam search (the scoring job's decoding) over ``seqs``."""
    model = load_model(weights)
    log(f"profile: beam {DECODE.beam} decoding of {len(seqs)} test sentences")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _, wall = timed(lambda: translate(model, seqs, DECODE, progress=False))
    return {**_record(prof, f"score-beam{DECODE.beam}-{len(seqs)}", out_dir, wall), "sentences": len(seqs)}
