"""`lnrepro <stage>`: one subcommand per pipeline stage, each usable without Snakemake.

Stage modules are imported lazily, so data stages never pay for importing torch.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from pathlib import Path
from typing import Callable

from .argtypes import count, positive, sha256_hex, size
from .device import DEFAULT_DEVICE, DEVICES
from .errors import LnReproError
from .paths import DOWNLOADS, EXPERIMENT_JSON
from .studies import STUDIES


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
    from .config import DataSettings
    from .data.registry import dataset

    data = DataSettings.read(a.data_config)
    settings = dict(data.options)
    if a.no_check_counts:  # check_counts: false; stats.json then says counts_checked: false
        settings.pop("expected_counts", None)
    stats = dataset(data.dataset).prepare(settings, a.out, a.threads, a.downloads)
    print(json.dumps(stats, indent=2, sort_keys=True))


def _bpe(a: argparse.Namespace) -> None:
    from . import bpe
    from .config import BpeSettings

    if a.action == "learn":
        print(bpe.learn_bpe(a.prepared, a.out, BpeSettings.read(a.bpe_config), threads=a.threads))
    else:
        print(json.dumps(bpe.apply_bpe(a.prepared, a.bpe, threads=a.threads), indent=2, sort_keys=True))


def _train(a: argparse.Namespace) -> None:
    from .train.loop import train_run

    train_run(a.run_dir, a.config, a.bpe, a.threads, config_sha256=a.config_sha256, device=a.device)


def _evaluate(a: argparse.Namespace) -> None:
    from .evaluate.score import score_checkpoints
    from .paths import RunFolder

    manifests = a.manifest or [RunFolder.manifest_scored_by(out) for out in a.out]
    for result in score_checkpoints(manifests, a.eval_config, a.bpe, a.prepared, a.out, a.threads, a.device,
                                    eval_sha256=a.eval_config_sha256):
        print(result.text(), end="")


def _gradinit(a: argparse.Namespace) -> None:
    from .analysis.gradinit import run_after_warmup, run_gradinit
    from .config import GradinitConfig

    config = GradinitConfig.read(a.gradinit_config)
    if a.after_warmup:
        run_after_warmup(config, a.bpe, a.after_warmup, a.out, threads=a.threads, device=a.device)
    else:
        run_gradinit(config, a.bpe, a.out, threads=a.threads, fit_csv=a.fit, device=a.device)


def _say(stage: str) -> Callable[[str], None]:
    """A line on stderr from ``stage`` that is no error (a wait for a lock, a recovery)."""
    return lambda message: print(f"lnrepro {stage}: {message}", file=sys.stderr)


def _report(a: argparse.Namespace) -> None:
    from .analysis.render.report import make_report
    from .config import Experiment

    if a.store:  # a store is laid out as results/{exp}/: its experiment.json, its report/ folder
        from .store import REPORT, locked, read_whole

        with locked(a.store, _say(a.stage)) as store:
            read_whole(store)
            print(make_report(store, Experiment.read(store / EXPERIMENT_JSON), store / REPORT))
        return
    if not (a.exp_dir and a.experiment and a.out):
        raise LnReproError("name --store, or --exp-dir, --experiment and --out")
    print(make_report(a.exp_dir, Experiment.read(a.experiment), a.out))


def _publish(a: argparse.Namespace) -> None:
    from .store import damage_text, locked, publish

    if a.status:
        from .store_status import report, status

        if len(a.folders) != 1:
            raise LnReproError("--status takes one folder: the store")
        with locked(a.folders[0], _say(a.stage)) as store:
            print(report(status(store, a.threads, a.configfile), a.minutes, a.cores), end="")
        return
    if len(a.folders) != 2:
        raise LnReproError("name the results tree and the store: lnrepro publish results/{name} published/{name}")
    from .analysis.render.report import make_report

    outcome = publish(a.folders[0], a.folders[1], a.configfile, make_report, _say(a.stage))
    print(outcome.text(a.folders[1]), end="")
    if outcome.damaged:  # what this part could not repair: the store is still not whole
        raise LnReproError(damage_text(a.folders[1], outcome.name, outcome.damaged))


def _fates(a: argparse.Namespace) -> None:
    from .analysis.store_fates import store_fates
    from .io import atomic_write_csv

    fates = store_fates(a.store, a.data, a.epoch)
    if a.csv:
        atomic_write_csv(a.csv, fates.units)
    print(fates.text(), end="")


def _readme_results(a: argparse.Namespace) -> None:
    from .analysis.render.readme_results import update_readme

    report = a.report or Path(STUDIES[a.part].report)
    fresh = update_readme(a.readme, report, str(report), check=a.check, part=a.part)
    print(f"{a.readme}: results part {a.part} {'up to date' if fresh else 'rewritten'} from {report}")


def _config_reference(a: argparse.Namespace) -> None:
    from .config.reference import update_reference

    fresh = update_reference(a.out, check=a.check)
    print(f"{a.out}: {'up to date' if fresh else 'rewritten'} from the config schema and config.yaml")


def _add_device(p: argparse.ArgumentParser) -> None:
    """``--device``: where a torch stage computes; the workflow passes the one its job's GPUs give."""
    p.add_argument("--device", choices=DEVICES, default=DEFAULT_DEVICE,
                   help=f"cpu or cuda (default: {DEFAULT_DEVICE}, also where a GPU is visible). The workflow passes "
                        "cuda to a job given a GPU (resources.<rule>.gpus in the config), else cpu; cuda without "
                        "a visible CUDA device is an error")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lnrepro", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="stage", required=True)

    d = sub.add_parser("download", help="fetch one file: local archive, mirror folder or URL; checksum-verified")
    d.add_argument("--url", action="append", default=[], help="source URL (repeatable: tried in order)")
    d.add_argument("--out", type=Path, required=True, help="destination file (written atomically)")
    d.add_argument("--md5")
    d.add_argument("--sha256")
    d.add_argument("--size", type=size)
    d.add_argument("--mirror", type=Path, help="a folder holding a file of the same name")
    d.add_argument("--archive", type=Path, help="a local copy of the file")
    d.add_argument("--checksum-key", default="the checksum", help="config key named in a mismatch message")
    d.add_argument("--archive-key", default="--archive", help="config key named when offline")
    d.add_argument("--mirror-key", default="--mirror", help="config key named when offline")
    d.set_defaults(func=_download)

    pr = sub.add_parser("prepare", help="tokenize, clean and split a corpus into prepared text")
    pr.add_argument("--data-config", type=Path, required=True, help="data.json: the dataset and its settings")
    pr.add_argument("--downloads", type=Path, default=Path(DOWNLOADS), help="the folder the files were fetched to")
    pr.add_argument("--out", type=Path, required=True, help="the prepared folder")
    pr.add_argument("--threads", type=count, default=1)
    pr.add_argument("--no-check-counts", action="store_true", help="do not check the settings' expected_counts")
    pr.set_defaults(func=_prepare)

    b = sub.add_parser("bpe", help="learn the joint sentencepiece BPE, or encode every split with it")
    actions = b.add_subparsers(dest="action", required=True)
    learn = actions.add_parser("learn", help="train spm.model on the prepared train.{de,en}")
    learn.add_argument("--bpe-config", type=Path, required=True, help="bpe.json: vocab_size, character_coverage, seed")
    learn.add_argument("--out", type=Path, required=True, help="the bpe folder")
    apply = actions.add_parser("apply", help="encode every prepared split into {split}.{lang}.ids")
    apply.add_argument("--bpe", type=Path, required=True, help="the bpe folder holding spm.model")
    for action in (learn, apply):
        action.add_argument("--prepared", type=Path, required=True, help="the prepared folder")
        action.add_argument("--threads", type=count, default=1)
    b.set_defaults(func=_bpe)

    t = sub.add_parser("train", help="train one run and seed (resumes an interrupted attempt)")
    t.add_argument("--config", type=Path, required=True, help="the run's config.json")
    t.add_argument("--bpe", type=Path, required=True, help="the bpe folder (spm.model, encoded splits)")
    t.add_argument("--run-dir", type=Path, required=True)
    t.add_argument("--config-sha256", type=sha256_hex,
                   help="the digest --config must have (the workflow passes the one its experiment resolves the run "
                        "to): another config.json is refused before anything is touched")
    t.add_argument("--threads", type=count, default=1)
    _add_device(t)
    t.set_defaults(func=_train)

    e = sub.add_parser("evaluate", help="score epoch checkpoints in one process: validation loss, decoding, BLEU")
    e.add_argument("--manifest", type=Path, nargs="+",
                   help="epochs/epochNNN.json for each --out, in its order (default: the manifest of each --out's "
                        "epoch in its run folder, as the workflow runs it)")
    e.add_argument("--eval-config", type=Path, required=True,
                   help="the scoring slice of its epoch's group (eval.json or eval_{splits}.json)")
    e.add_argument("--eval-config-sha256", type=sha256_hex,
                   help="the digest --eval-config must have (the workflow passes the slice its experiment resolves): "
                        "another slice is refused before anything is scored")
    e.add_argument("--bpe", type=Path, required=True)
    e.add_argument("--prepared", type=Path, required=True)
    e.add_argument("--out", type=Path, nargs="+", required=True,
                   help="the score files, eval/epochNNN.json (hypotheses beside each)")
    e.add_argument("--threads", type=count, default=1)
    _add_device(e)
    e.set_defaults(func=_evaluate)

    g = sub.add_parser("gradinit", help="per-layer expected gradient at initialization, every norm position and depth")
    g.add_argument("--gradinit-config", type=Path, required=True,
                   help="gradinit.json (gradinit_after_warmup.json with --after-warmup)")
    g.add_argument("--bpe", type=Path, required=True)
    g.add_argument("--out", type=Path, required=True, help="gradinit.csv (the seed's gradinit_after_warmup.csv with --after-warmup)")
    g.add_argument("--fit", type=Path, help="gradinit_fit.csv: the last layer's value against depth, fitted")
    g.add_argument("--after-warmup", type=Path, nargs="+", metavar="MANIFEST",
                   help="instead: measure analysis.gradinit.after_warmup_run at its end of warm-up (one seed's epoch manifests)")
    g.add_argument("--threads", type=count, default=1)
    _add_device(g)
    g.set_defaults(func=_gradinit)

    r = sub.add_parser("report", help="write the HTML report, figures, tables and confounds")
    r.add_argument("--experiment", type=Path, help="experiment.json")
    r.add_argument("--exp-dir", type=Path, help="results/{exp}")
    r.add_argument("--out", type=Path, help="the report folder")
    r.add_argument("--store", type=Path,
                   help="instead: a study's store (published/{exp}); the report is written to its report/ folder")
    r.set_defaults(func=_report)

    pu = sub.add_parser("publish", help="add a part's finished units to a study's store, or (--status) say what "
                                        "the store lacks and the snakemake command of a part")
    pu.add_argument("folders", type=Path, nargs="+", metavar="FOLDER",
                    help="RESULTS_DIR STORE_DIR (results/{exp} published/{exp}); with --status: STORE_DIR")
    pu.add_argument("--configfile", nargs="+", metavar="FILE",
                    help="the --configfile layers the part was run with, merged over ./config.yaml (required for a "
                         "new store and for a part that extends a grid); the store keeps the merge as study.yaml. "
                         "With --status and no store yet: the study's configfiles; with a store: layers that extend its "
                         "grids (the extension's units are then listed)")
    pu.add_argument("--status", action="store_true",
                    help="list the units stored and missing, their training cost here, and a part's command; "
                         "before the first part (no store yet) with --configfile: the study they resolve to, its "
                         "cost measured here on a few updates (needs results/{exp}/data/bpe: snakemake --until "
                         "apply_bpe)")
    pu.add_argument("--minutes", type=positive, help="with --status: the part's time on this machine")
    pu.add_argument("--cores", type=count, default=os.cpu_count() or 1,
                    help="with --status: the cores the part runs on (default: this machine's)")
    pu.add_argument("--threads", type=count,
                    help="with --status: threads per training job (default: the study's resources.train_run)")
    pu.set_defaults(func=_publish)

    fa = sub.add_parser("fates", help="each unit's fate from its own training dynamics (diverged, stalled, "
                                      "source-ignoring, trained) and its speed, against the report's fates")
    fa.add_argument("--store", type=Path, required=True,
                    help="a study's store (published/{exp}) or results tree (results/{exp})")
    fa.add_argument("--data", type=Path, required=True,
                    help="the study's data folder (results/{exp}/data: snakemake --until apply_bpe), for H")
    fa.add_argument("--epoch", type=count,
                    help="read every unit at the end of this epoch (default: its run's last)")
    fa.add_argument("--csv", type=Path, help="also write the per-unit rows to this CSV")
    fa.set_defaults(func=_fates)

    rr = sub.add_parser("readme-results", help="write one generated results part of README.md from a published report")
    rr.add_argument("--part", choices=list(STUDIES), default="study",
                    help="the generated part to write (default: study)")
    rr.add_argument("--report", type=Path,
                    help="the report folder, as the README names it (default: the part's published folder)")
    rr.add_argument("--readme", type=Path, default=Path("README.md"))
    rr.add_argument("--check", action="store_true", help="only compare: fail when the README differs")
    rr.set_defaults(func=_readme_results)

    cr = sub.add_parser("config-reference",
                        help="write docs/configuration.md: every config key, from the schema and config.yaml")
    cr.add_argument("--out", type=Path, default=Path("docs/configuration.md"))
    cr.add_argument("--check", action="store_true", help="only compare: fail when the page differs")
    cr.set_defaults(func=_config_reference)

    from . import bench  # the benchmark command registers its own options

    bench.add_parser(sub)
    return p


# What rerunning an interrupted stage does: every file it wrote is whole (written atomically).
RESUME = {"train": "training resumes from its last saved state"}
INTERRUPTED = 130  # 128 + SIGINT, the shell's status of a command stopped by Ctrl-C


def main(argv: list[str] | None = None) -> int:
    """Run one stage; a fault of the stage (LnReproError), of the file system (OSError) or a Ctrl-C is one line
    on stderr, never a traceback. Run as the program (``argv`` None: the process exits next), it freezes the
    garbage collector's objects first: the interpreter's last collections at exit then skip everything the stage
    imported (torch's modules), about 0.3 CPU-s of every stage's process."""
    status = _run(build_parser().parse_args(argv))
    if argv is None:
        gc.freeze()
    return status


def _run(args: argparse.Namespace) -> int:
    """The stage of ``args``, its fault as one line on stderr; the exit status."""
    try:
        args.func(args)
    except LnReproError as e:
        print(f"lnrepro {args.stage}: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # the file system refused (read-only, permission, a folder for a file): not a bug
        where = f"{e.filename}: " if e.filename else ""
        print(f"lnrepro {args.stage}: error: {where}{e.strerror or e} (the file system refused it: fix its "
              "permissions, mount or space, then rerun the same command)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        again = RESUME.get(args.stage, "it writes what is missing")
        print(f"lnrepro {args.stage}: interrupted; the files written so far are whole: rerun the same command "
              f"({again})", file=sys.stderr)
        return INTERRUPTED
    return 0


if __name__ == "__main__":
    sys.exit(main())
