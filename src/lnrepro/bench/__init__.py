"""``lnrepro bench``: what the pipeline's stages cost on this machine, each against a baseline, in one run.

Measurements (``--only``): ``train`` the project's training step against a plain-PyTorch reference
(reference.py) in target tokens/s; ``mfu`` their model FLOP utilization against the matmul peak measured in
the same run; ``score`` beam-5 decoding with and without the KV cache, and the scoring job's work; ``prepare``
Moses tokenization with one process and with all cores; ``growth`` epoch time against training-set size and
scoring time against checkpoints; ``seed-training`` (not in the default set; needs ``--against REV`` and the
Multi30k mirror) the CPU seconds of the study's seed-trainings by this checkout's ``lnrepro train`` and by that
commit's (seed_training.py). Every A/B pair runs interleaved (A, B, A, B, ...) after a warm-up; the
tables on stdout give medians, the A/B ratio and the spread, the JSON (``--out``) every repetition.
Progress goes to stderr. ``--quick`` runs tiny sizes with few repetitions, in seconds (what the test runs).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..argtypes import count
from ..errors import LnReproError

if TYPE_CHECKING:
    from .corpus import Corpus
    from .sizes import Size

SECTIONS = ("train", "mfu", "score", "prepare", "growth", "seed-training")
DEFAULT_SECTIONS = SECTIONS[:-1]  # seed-training trains for minutes and needs --against
PRECISIONS = ("fp32", "bf16")


@dataclass(frozen=True)
class Plan:
    """How much of everything one run measures: the default bench or ``--quick``."""

    sizes: tuple[str, ...]
    small: str  # the size scoring, growth and the profiles use
    reps: int
    peak_n: int
    trained_updates: int
    trained_max_tokens: int
    pair_sentences: int
    job_sentences: int
    profile_sentences: int
    prepare_lines: int
    growth_pairs: tuple[int, ...]
    growth_checkpoints: tuple[int, ...]


DEFAULT = Plan(sizes=("multi30k", "paper"), small="multi30k", reps=3, peak_n=2048, trained_updates=300,
               trained_max_tokens=1024, pair_sentences=20, job_sentences=25, profile_sentences=200,
               prepare_lines=170_000, growth_pairs=(1000, 2000, 4000), growth_checkpoints=(1, 2, 4))
QUICK = Plan(sizes=("tiny",), small="tiny", reps=2, peak_n=512, trained_updates=60, trained_max_tokens=1024,
             pair_sentences=6, job_sentences=8, profile_sentences=8, prepare_lines=2000, growth_pairs=(100, 200, 400),
             growth_checkpoints=(1, 2))


def _csv(choices: tuple[str, ...]) -> Callable[[str], list[str]]:
    """An argparse type: a comma-separated list of ``choices``."""

    def parse(text: str) -> list[str]:
        items = [x.strip() for x in text.split(",") if x.strip()]
        bad = [x for x in items if x not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {', '.join(choices)}; got {text!r}")
        return items

    return parse


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``bench`` subcommand (its ``func`` takes the parsed Namespace)."""
    from .sizes import SIZES

    b = sub.add_parser("bench", help="measure training, MFU, scoring, preparation and cost growth on this machine",
                       description="Measure what the pipeline's stages cost on this machine, each against a "
                                   "baseline, interleaved; tables on stdout, progress on stderr, JSON in --out.")
    b.add_argument("--only", type=_csv(SECTIONS), default=list(DEFAULT_SECTIONS),
                   help=f"sections, comma-separated (default {','.join(DEFAULT_SECTIONS)}; mfu runs train's timings; "
                        "seed-training needs --against)")
    b.add_argument("--against", metavar="REV",
                   help="seed-training: the git commit whose own lnrepro train this checkout's is measured against")
    b.add_argument("--seeds", type=_csv(("1", "2", "3", "4", "5")), default=["1", "2", "3"],
                   help="seed-training: the seeds, one training each per commit (default 1,2,3)")
    b.add_argument("--sizes", type=_csv(tuple(SIZES)),
                   help="model sizes for train/mfu (default multi30k,paper; --quick: tiny)")
    b.add_argument("--precisions", type=_csv(PRECISIONS), default=list(PRECISIONS), help="default fp32,bf16")
    b.add_argument("--reps", type=count, help="timed repetitions per pair, after one warm-up (default 3; --quick: 2)")
    b.add_argument("--threads", type=count, default=1, help="torch threads for every measurement (default 1)")
    b.add_argument("--quick", action="store_true", help="tiny sizes and few repetitions: seconds, for tests")
    b.add_argument("--data", default="auto",
                   help="auto (the Multi30k mirror if present, else synthetic), synthetic, or a Multi30k mirror folder")
    b.add_argument("--cache", type=Path, default=Path("results/bench-cache"),
                   help="prepared corpora and the trained-ish checkpoint (default results/bench-cache)")
    b.add_argument("--out", type=Path, default=Path("results/bench.json"), help="the JSON (default results/bench.json)")
    b.add_argument("--profile", type=Path, metavar="DIR",
                   help="also write torch.profiler tables of a training step per precision and a beam-5 scoring")
    b.set_defaults(func=main)


def _git() -> dict:
    """The checkout's commit and whether tracked files differ from it: which code the numbers belong to."""
    here = str(Path(__file__).resolve().parent)

    def git(*cmd: str) -> str:
        return subprocess.run(["git", "-C", here, *cmd], capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()

    try:
        return {"commit": git("rev-parse", "HEAD"), "dirty": git("status", "--porcelain", "--untracked-files=no") != ""}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def main(args: argparse.Namespace) -> None:
    """Run the selected measurements, print each table as it is ready, write the JSON at the end."""
    import torch

    from ..io import atomic_write_json, cpu_name, where_ran
    from ..memory import keep_freed_memory
    from . import tables
    from .corpus import open_corpus
    from .sizes import DECODING, SIZES
    from .timing import log

    plan = QUICK if args.quick else DEFAULT
    reps = args.reps or plan.reps
    if reps < 1 or args.threads < 1:
        raise LnReproError("bench: --reps and --threads must be at least 1")
    sizes = [SIZES[s] for s in (args.sizes or plan.sizes)]
    small = SIZES[plan.small]
    only = set(args.only)
    if "seed-training" in only and not args.against:
        raise LnReproError("bench: --only seed-training needs --against REV (the commit to measure against)")
    torch.set_num_threads(args.threads)
    with contextlib.suppress(RuntimeError):  # as the training loop: settable only before any inter-op work
        torch.set_num_interop_threads(1)
    keep_freed_memory()  # as training and scoring do
    t0 = time.perf_counter()
    args.cache.mkdir(parents=True, exist_ok=True)
    corpus = open_corpus(args.data, args.cache, args.quick)
    log(f"corpus: {corpus.name} ({corpus.source})")
    result: dict = {
        "bench_version": 1, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "git": _git(),
        "machine": {"cpu": cpu_name(), "torch": torch.__version__, "python": platform.python_version(),
                    "threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
                    "cores": os.cpu_count(), "where_ran": where_ran(),
                    # other jobs on a shared machine: read the numbers with the load they ran under
                    "load_average_start": os.getloadavg()},
        "options": {"only": args.only, "sizes": [s.name for s in sizes], "precisions": args.precisions, "reps": reps,
                    "quick": args.quick, "data": args.data, "against": args.against, "seeds": args.seeds},
        "corpus": corpus.describe(),
    }

    def emit(text: str) -> None:
        print(text + "\n", flush=True)

    emit(f"corpus: {corpus.name}: {corpus.source}; {corpus.preparation}\n"
         f"threads {torch.get_num_threads()}, {reps} repetitions after 1 warm-up, medians; "
         "± = half the min-max range over the median; ratio = median of the A/B ratios of each round")
    with tempfile.TemporaryDirectory(dir=args.cache, prefix="work-") as tmp:
        work = Path(tmp)
        if only & {"train", "mfu"}:
            from .train import measure_training

            result["padding"] = _epoch_padding(corpus, sizes)
            emit(tables.padding(result["padding"]))
            result["train"] = measure_training(corpus, sizes, args.precisions, reps,
                                               plan.peak_n if "mfu" in only else None)
            peaks = None
            if "mfu" in only:
                from .mfu import add_mfu

                peaks = add_mfu(result["train"])
                result["mfu"] = {"peak": peaks, "flops": "Transformer.flops_per_batch on the unpadded tokens",
                                 "peak_timing": "an n x n matmul timed in every round of the training pair"}
            emit("training throughput (target tokens/s, optimizer step included)\n"
                 + tables.training(result["train"], peaks) + (f"\n\n{tables.peak(peaks)}" if peaks else ""))
        if only & {"score", "growth"} or args.profile:
            from .checkpoints import trained_weights

            weights, info = trained_weights(corpus, small, plan.trained_updates, plan.trained_max_tokens)
        if "score" in only:
            from .score import measure_scoring

            result["score"] = measure_scoring(corpus, small, (weights, info), work, reps, plan.pair_sentences,
                                              plan.job_sentences)
            emit(f"scoring ({DECODING['precision']}, beam {DECODING['beam']}, length penalty {DECODING['lenpen']})\n"
                 + tables.scoring(result["score"]))
        if "prepare" in only:
            from .prepare import measure_prepare

            result["prepare"] = measure_prepare(plan.prepare_lines, reps, args.cache)
            emit("preparation\n" + tables.prepare(result["prepare"]))
        if "growth" in only:
            from .growth import epoch_growth, scoring_growth

            result["growth"] = {
                "epoch": epoch_growth(corpus, list(plan.growth_pairs), reps),
                "scoring": scoring_growth(corpus, small, weights, list(plan.growth_checkpoints), plan.job_sentences,
                                          work),
            }
            emit("cost growth (training: tiny model, fp32; scoring: the trained-ish model, one job per checkpoint)\n"
                 + tables.growth(result["growth"]))
        if "seed-training" in only:
            from .seed_training import measure_seed_training

            if corpus.name != "multi30k":
                raise LnReproError("bench: seed-training measures the study's preset and needs the Multi30k mirror "
                                   "(--data DIR)")
            result["seed_training"] = measure_seed_training(
                corpus.bpe(SIZES["study"].vocab), args.against, args.precisions, [int(s) for s in args.seeds],
                args.cache, work)
            emit(f"seed-trainings (presets/study-cpu.yaml, one epoch each, one thread), against {args.against}\n"
                 + tables.seed_training(result["seed_training"], args.against))
        if args.profile:
            from .profile import profile_scoring, profile_training

            test_src, _ = corpus.pairs(small.vocab, "test")
            result["profile"] = profile_training(corpus, small, args.precisions, args.profile) + [
                profile_scoring(weights, test_src[:plan.profile_sentences], args.profile)]
            emit("profiles (top operators by self CPU time)\n" + tables.profiles(result["profile"]))
    result["wall_s"] = time.perf_counter() - t0
    result["machine"]["load_average_end"] = os.getloadavg()
    atomic_write_json(args.out, result)
    load = " -> ".join(f"{result['machine'][k][0]:.1f}" for k in ("load_average_start", "load_average_end"))
    emit(f"wall-clock {result['wall_s']:.0f} s; 1-minute load average {load} on {os.cpu_count()} cores; "
         f"JSON: {args.out}")


def _epoch_padding(corpus: "Corpus", sizes: list["Size"]) -> dict:
    """Padded fraction of one epoch's training batches (each size's max_tokens), per size (each has its own BPE)."""
    from .batches import epoch_padding
    from .train import SEED

    out = {}
    for size in sizes:
        src, tgt = corpus.pairs(size.vocab, "train")
        out[size.name] = epoch_padding(src, tgt, size.max_tokens, SEED)
    return out
