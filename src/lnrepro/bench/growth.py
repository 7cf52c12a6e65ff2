"""Cost growth: time per epoch against training-set size, total scoring time against checkpoints.

Both should grow linearly; the per-unit cost printed at each size (seconds per 1,000 pairs, per 1,000 target
tokens, per checkpoint) makes a superlinear term visible as a rising column. Training uses the small (demo)
model so that three epoch sizes fit in seconds, fp32 as config.yaml's default precision; an epoch is the
loop's: every batch of the set once, in the loop's epoch order, plus building the batches (collation),
which the loop does once per run. Scoring repeats one scoring job's work per checkpoint (loading it and the
split, scoring's core), as the pipeline runs one job per checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..model import Transformer
from ..train.batching import epoch_order
from .batches import index_batches, make_batch
from .corpus import Corpus
from .score import first_test_sentences, scoring_job
from .sizes import SIZES, Size
from .timing import interleave, log, summary, timed
from .train import SEED, project_optimizer, project_step

PRECISION = "fp32"


def epoch_growth(corpus: Corpus, pair_counts: list[int], reps: int) -> list[dict]:
    """Per training-set size: batch-building seconds, and seconds per epoch (median of interleaved reps)."""
    size = SIZES["tiny"]
    src, tgt = corpus.pairs(size.vocab, "train")
    runs = []
    for n in pair_counts:
        s, t = src[:n], tgt[:n]
        batches, setup_s = timed(lambda: [make_batch([s[i] for i in idx], [t[i] for i in idx])
                                          for idx in index_batches(s, t, size.max_tokens, SEED)])
        torch.manual_seed(SEED)
        model = Transformer(size.config()).train()
        opt = project_optimizer(model)
        project_step(model, opt, batches[0], PRECISION)  # warm-up: optimizer state, first allocations
        runs.append((n, batches, setup_s, model, opt))

    def epoch(batches: list, model: Transformer, opt: torch.optim.Optimizer):
        order = epoch_order(len(batches), SEED, 1)  # the loop's order; every repetition repeats epoch 1's
        return lambda: [project_step(model, opt, batches[j], PRECISION) for j in order]

    log(f"growth: one epoch of the {size.name} model at {', '.join(map(str, pair_counts))} training pairs, "
        f"{reps} interleaved repetitions")
    seconds = interleave([epoch(b, m, o) for _, b, _, m, o in runs], reps, warmup=0)
    rows = []
    for (n, batches, setup_s, _, _), secs in zip(runs, seconds):
        ntok = sum(b.ntok for b in batches)
        med = summary(secs)
        rows.append({"pairs": n, "updates": len(batches), "target_tokens": ntok, "setup_s": setup_s,
                     "epoch_s": med, "s_per_1k_pairs": med["median"] / n * 1000,
                     "s_per_1k_tokens": med["median"] / ntok * 1000, "s_per_update": med["median"] / len(batches)})
    return rows


def scoring_growth(corpus: Corpus, size: Size, weights: Path, counts: list[int], sentences: int,
                   work: Path) -> list[dict]:
    """Total wall-clock of scoring 1, 2, ... checkpoints (one scoring job's work each) on a test subset."""
    sub_bpe, sub_prep = first_test_sentences(corpus.bpe(size.vocab), corpus.prepared, sentences, work / "growth-subset")
    rows = []
    for count in counts:
        log(f"growth: scoring {count} checkpoint(s) on {sentences} test sentences")
        _, total = timed(lambda: [scoring_job(f"checkpoint {i + 1}", weights, sub_bpe, sub_prep, ["test"])
                                  for i in range(count)])
        rows.append({"checkpoints": count, "sentences_each": sentences, "total_s": total,
                     "s_per_checkpoint": total / count})
    return rows
