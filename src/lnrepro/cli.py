"""`lnrepro <stage>`: one subcommand per pipeline stage, each usable without Snakemake.

Stage modules are imported lazily, so data stages never pay for importing torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .errors import LnReproError


def _download(a: argparse.Namespace) -> None:
    from .data.download import fetch

    fetch(
        a.url,
        a.out,
        md5=a.md5,
        sha256=a.sha256,
        size=a.size,
        mirror=a.mirror,
        archive=a.archive,
        checksum_key=a.checksum_key,
        archive_key=a.archive_key,
        mirror_key=a.mirror_key,
    )


def _prepare(a: argparse.Namespace) -> None:
    if a.dataset == "iwslt14":
        from .data.iwslt14 import prepare_iwslt14

        from .data.iwslt14 import OFFICIAL_COUNTS

        expected = None if a.no_check_counts else (_counts(a.expected_counts) if a.expected_counts else OFFICIAL_COUNTS)
        stats = prepare_iwslt14(a.archive, a.out, expected_counts=expected, threads=a.threads)
    elif a.dataset == "multi30k":
        from .data.multi30k import prepare_multi30k

        clean = dict(zip(("min_len", "max_len", "ratio"), a.clean)) if a.clean else None
        stats = prepare_multi30k(a.folder, a.out, {"clean": clean}, threads=a.threads)
    else:
        from .data.synthetic import prepare_synthetic

        stats = prepare_synthetic(a.out, {"seed": a.seed, "train": a.train, "valid": a.valid, "test": a.test})
    print(json.dumps(stats, indent=2, sort_keys=True))


def _counts(pairs: list[str]) -> dict[str, int]:
    """``key=N`` pairs -> {key: N}."""
    try:
        return {k: int(v) for k, v in (p.split("=", 1) for p in pairs)}
    except ValueError as e:
        raise LnReproError(f"--expected-counts takes KEY=N pairs, got {' '.join(pairs)}") from e


def _bpe(a: argparse.Namespace) -> None:
    from . import bpe

    if a.action == "learn":
        cfg = {"vocab_size": a.vocab_size, "character_coverage": a.character_coverage, "seed": a.seed}
        print(bpe.learn_bpe(a.prepared, a.out, cfg, threads=a.threads))
    else:
        print(json.dumps(bpe.apply_bpe(a.prepared, a.bpe, threads=a.threads), indent=2, sort_keys=True))


def _train(a: argparse.Namespace) -> None:
    from .train.loop import train_run

    train_run(a.run_dir, a.config, a.bpe, a.threads)


def _evaluate(a: argparse.Namespace) -> None:
    from .evaluate.score import score_checkpoint

    result = score_checkpoint(a.manifest, a.eval_config, a.bpe, a.prepared, a.out, a.threads)
    print(json.dumps(result, indent=2, sort_keys=True))


def _gradinit(a: argparse.Namespace) -> None:
    from .analysis.gradinit import run_gradinit
    from .io import read_json

    experiment = read_json(a.experiment)
    settings = experiment.get("analysis", {}).get("gradinit", {})
    run_gradinit(
        experiment,
        a.bpe,
        a.out,
        threads=a.threads,
        batches=settings.get("batches", 8),
        seeds=settings.get("seeds", [1]),
        max_tokens=settings.get("max_tokens", 4096),
    )


def _report(a: argparse.Namespace) -> None:
    from .analysis.report import make_report
    from .io import read_json

    print(make_report(a.exp_dir, read_json(a.experiment), a.out))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lnrepro", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="stage", required=True)

    d = sub.add_parser("download", help="fetch one file: local archive, mirror folder or URL; checksum-verified")
    d.add_argument("--url", action="append", default=[], help="source URL (repeatable: tried in order)")
    d.add_argument("--out", type=Path, required=True, help="destination file (written atomically)")
    d.add_argument("--md5")
    d.add_argument("--sha256")
    d.add_argument("--size", type=int)
    d.add_argument("--mirror", type=Path, help="a folder holding a file of the same name")
    d.add_argument("--archive", type=Path, help="a local copy of the file")
    d.add_argument("--checksum-key", default="the checksum", help="config key named in a mismatch message")
    d.add_argument("--archive-key", default="--archive", help="config key named when offline")
    d.add_argument("--mirror-key", default="--mirror", help="config key named when offline")
    d.set_defaults(func=_download)

    pr = sub.add_parser("prepare", help="tokenize, clean and split a corpus into prepared text")
    pr.add_argument("dataset", choices=["iwslt14", "multi30k", "synthetic"])
    pr.add_argument("--out", type=Path, required=True, help="the prepared folder")
    pr.add_argument("--threads", type=int, default=1)
    pr.add_argument("--archive", type=Path, help="iwslt14: de-en.tgz")
    pr.add_argument("--no-check-counts", action="store_true", help="iwslt14: accept a non-official archive")
    pr.add_argument("--expected-counts", nargs="+", metavar="KEY=N", help="iwslt14: line counts to check (default: the official archive's)")
    pr.add_argument("--folder", type=Path, help="multi30k: folder with {train,val,test_2016_flickr}.{de,en}.gz")
    pr.add_argument("--clean", nargs=3, type=float, metavar=("MIN", "MAX", "RATIO"), help="multi30k: length filter")
    pr.add_argument("--seed", type=int, default=1234, help="synthetic: generator seed")
    pr.add_argument("--train", type=int, default=20000, help="synthetic: training pairs")
    pr.add_argument("--valid", type=int, default=500)
    pr.add_argument("--test", type=int, default=500)
    pr.set_defaults(func=_prepare)

    b = sub.add_parser("bpe", help="learn the joint sentencepiece BPE, or encode every split with it")
    b.add_argument("action", choices=["learn", "apply"])
    b.add_argument("--prepared", type=Path, required=True)
    b.add_argument("--out", type=Path, help="learn: the bpe folder")
    b.add_argument("--bpe", type=Path, help="apply: the bpe folder holding spm.model")
    b.add_argument("--vocab-size", type=int, default=10000)
    b.add_argument("--character-coverage", type=float, default=1.0)
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--threads", type=int, default=1)
    b.set_defaults(func=_bpe)

    t = sub.add_parser("train", help="train one run and seed (resumes an interrupted attempt)")
    t.add_argument("--config", type=Path, required=True, help="the run's config.json")
    t.add_argument("--bpe", type=Path, required=True, help="the bpe folder (spm.model, encoded splits)")
    t.add_argument("--run-dir", type=Path, required=True)
    t.add_argument("--threads", type=int, default=1)
    t.set_defaults(func=_train)

    e = sub.add_parser("evaluate", help="score one epoch checkpoint: validation loss, decoding, BLEU")
    e.add_argument("--manifest", type=Path, required=True, help="epochs/epochNNN.json")
    e.add_argument("--eval-config", type=Path, required=True, help="eval.json")
    e.add_argument("--bpe", type=Path, required=True)
    e.add_argument("--prepared", type=Path, required=True)
    e.add_argument("--out", type=Path, required=True, help="eval/epochNNN.json (hypotheses beside it)")
    e.add_argument("--threads", type=int, default=1)
    e.set_defaults(func=_evaluate)

    g = sub.add_parser("gradinit", help="per-layer gradient norms at initialization, Post-LN vs Pre-LN")
    g.add_argument("--experiment", type=Path, required=True, help="experiment.json")
    g.add_argument("--bpe", type=Path, required=True)
    g.add_argument("--out", type=Path, required=True, help="gradinit.csv")
    g.add_argument("--threads", type=int, default=1)
    g.set_defaults(func=_gradinit)

    r = sub.add_parser("report", help="write the HTML report, figures, tables and confounds")
    r.add_argument("--experiment", type=Path, required=True, help="experiment.json")
    r.add_argument("--exp-dir", type=Path, required=True, help="results/{exp}")
    r.add_argument("--out", type=Path, required=True, help="the report folder")
    r.set_defaults(func=_report)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except LnReproError as e:
        print(f"lnrepro {args.stage}: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
