"""Training throughput: the project's training step against the reference, on identical real batches.

The project's step is the one ``lnrepro.train.loop`` runs: ``lnrepro.train.step.train_step`` with the optimizer
``lnrepro.optimizers.build_optimizer`` builds from the bench's ``optim`` settings (config.yaml's defaults:
fused AdamW), at a constant learning rate. Left out, as a few percent at most: the gradient norms the loop
asks of every ``log_every``-th (100th) update (``inspect``); clipping is off (``clip_norm`` 0, the default).
"""

from __future__ import annotations

import math

import torch

from ..config.settings import OptimSettings, ScheduleSettings
from ..errors import LnReproError
from ..model import Transformer
from ..optimizers import build_optimizer
from ..train.step import StepSettings, train_step
from .batches import Batch, padded_fraction, sample_batches
from .corpus import Corpus
from .reference import ReferenceTransformer, reference_optimizer, reference_step
from .sizes import CONSTANT, OPTIM, Size
from .timing import ab, interleave, log

SEED = 1


def project_optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    """The optimizer training builds from the bench's optim settings."""
    return build_optimizer(model, OPTIM)


def project_step(model: Transformer, opt: torch.optim.Optimizer, batch: Batch, precision: str, t: int = 0,
                 schedule: ScheduleSettings = CONSTANT, optim: OptimSettings = OPTIM) -> float:
    """Update ``t`` (of epoch 1) on ``batch`` with training's ``train_step``; returns the loss per target
    token. A non-finite loss is an error (no divergence limit otherwise)."""
    step = train_step(model, opt, batch, t, 1, StepSettings(optim, schedule, precision, diverge_loss=math.inf))
    if not step.stepped:
        raise LnReproError(f"bench: non-finite training loss ({step.loss}) at lr {step.lr}")
    return step.loss


def measure_training(corpus: Corpus, sizes: list[Size], precisions: list[str], reps: int,
                     peak_n: int | None = None) -> list[dict]:
    """tokens/s of project and reference per size and precision, on ``reps + 1`` random real batches.

    Round k (the warm-up, then each repetition) runs project and reference on batch k: A and B of a round see
    the same batch, and the repetitions cover several batch shapes. The per-repetition ratio is therefore
    clean of batch-to-batch variation; the spread of tokens/s includes it. With ``peak_n``, every round also
    times the n x n matmul of the precision (mfu.py), third.
    """
    from ..host import matmul

    rows = []
    for size in sizes:
        src, tgt = corpus.pairs(size.vocab, "train")
        batches = sample_batches(src, tgt, reps + 1, size.max_tokens, SEED)
        timed_batches = batches[1:]
        cfg = size.config()
        torch.manual_seed(SEED)
        project = Transformer(cfg).train()
        torch.manual_seed(SEED)
        reference = ReferenceTransformer(cfg).train()
        p_opt, r_opt = project_optimizer(project), reference_optimizer(reference)
        ntok = [b.ntok for b in timed_batches]
        flops = {"unpadded": [b.flops(project) for b in timed_batches],
                 "padded": [b.flops(project, padded=True) for b in timed_batches]}
        for precision in precisions:
            log(f"train {size.name} {precision}: 1 warm-up + {reps} interleaved repetitions, one random batch each "
                f"(~{sum(ntok) // len(ntok)} target tokens)" + (f", with the {peak_n}^2 matmul peak" if peak_n else ""))

            def project_rounds():
                it = iter(batches)
                return lambda: project_step(project, p_opt, next(it), precision)

            def reference_rounds():
                it = iter(batches)

                def run() -> None:
                    b = next(it)
                    reference_step(reference, r_opt, b.src, b.prev, b.target, b.ntok, precision == "bf16")
                return run

            fns = [project_rounds(), reference_rounds()]
            if peak_n:
                peak_fn, peak_flops = matmul(precision, peak_n)
                fns.append(peak_fn)
            seconds = interleave(fns, reps)
            s_project, s_reference = seconds[:2]
            res = ab(ntok, s_project, ntok, s_reference)
            row = {
                "size": size.name, "precision": precision, "model": {**size.model, "vocab_size": size.vocab},
                "params": {"project": project.num_params(),
                           "reference": sum(p.numel() for p in reference.parameters())},
                "warmup_batch": batches[0].shape, "batches": [b.shape for b in timed_batches],
                "padding": padded_fraction(timed_batches), "target_tokens": ntok, "flops": flops,
                "seconds": {"project": s_project, "reference": s_reference},
                "tokens_per_s": {"project": res["a"], "reference": res["b"]},
                "ratio": res["ratio"], "ratio_per_rep": res["ratio_per_rep"],
            }
            if peak_n:
                row["seconds"]["peak"] = seconds[2]
                row.update(peak_n=peak_n, peak_flops=peak_flops)
            rows.append(row)
    return rows
