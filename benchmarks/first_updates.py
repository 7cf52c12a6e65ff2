"""Loss and per-layer gradient norms over the first updates of two runs, on real batches.

Trains each run with the project's training loop (`lnrepro.train.loop.train_run`) for ``--updates`` updates
on an encoded corpus (a `data/bpe` folder the DAG made), in parallel processes of one thread each, then
prints a table of the loss and the gradient norms of the first and last layer's FFN and attention weights.
The model, optimizer and schedule are the paper config's (config.yaml) unless a preset is layered on top.

    python benchmarks/first_updates.py --bpe results/multi30k/data/bpe --out /tmp/first100 \
        --runs postln_nowarmup_isqrt preln_nowarmup_isqrt --updates 100 --precision bf16

``--summary 50 100 200`` prints instead one row per run: its loss at those updates and whether it diverged
(a non-finite loss or one above train.diverge_loss: the loop's "diverged" record), e.g. every variant with and
without warm-up at the CPU study's size:

    python benchmarks/first_updates.py --bpe results/study-cpu/data/bpe --configfile presets/study-cpu.yaml \
        --out /tmp/first200 --updates 200 --log-every 10 --precision bf16 --summary 50 100 200 --runs \
        postln_{warmup,nowarmup}_isqrt preln_{warmup,nowarmup}_isqrt prenofinal_{warmup,nowarmup}_isqrt \
        deepnorm_{warmup,nowarmup}_isqrt admin_{warmup,nowarmup}_isqrt rezero_{warmup,nowarmup}_isqrt
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lnrepro.config import REPO_ROOT, experiment, load_config

SHOW = [("encoder", "self_attn"), ("encoder", "ffn"), ("decoder", "self_attn"), ("decoder", "encoder_attn"), ("decoder", "ffn")]


def write_configs(args: argparse.Namespace) -> list[Path]:
    c = load_config([REPO_ROOT / "config.yaml", *args.configfile])
    x = experiment({**c, "select": args.runs, "grids": {}})  # the runs asked for, whatever the preset selects
    paths = []
    for run in args.runs:
        s = x.run_config(run, args.seed)
        train = dataclasses.replace(s.train, max_updates=args.updates, log_every=args.log_every,
                                    checkpoint_every=10**9, precision=args.precision)
        path = args.out / run / "config.json"
        dataclasses.replace(s, train=train).write(path)
        paths.append(path)
    return paths


def table(out: Path, runs: list[str], updates: list[int]) -> str:
    rows = ["| run | update | loss | lr | grad norm | " + " | ".join(f"{st[:3]}.{sub} L1/Ltop" for st, sub in SHOW) + " |"]
    rows.append("|" + "---|" * (5 + len(SHOW)))
    for run in runs:
        steps = {r["update"]: r for r in map(json.loads, (out / run / "train.jsonl").read_text().splitlines())
                 if r.get("kind") == "step"}
        for u in updates:
            if u not in steps:
                continue
            r = steps[u]
            cells = [f"{r['grad_norms'][st][sub][0]:.3g}/{r['grad_norms'][st][sub][-1]:.3g}" for st, sub in SHOW]
            rows.append(f"| {run} | {u} | {r['loss']:.3f} | {r['lr']:.2e} | {r['grad_norm']:.3g} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def summary(out: Path, runs: list[str], updates: list[int]) -> str:
    """One row per run: the loss at ``updates`` and whether (and where) it diverged."""
    rows = ["| run | " + " | ".join(f"loss at {u}" for u in updates) + " | diverged |", "|" + "---|" * (len(updates) + 2)]
    for run in runs:
        records = [json.loads(line) for line in (out / run / "train.jsonl").read_text().splitlines()]
        steps = {r["update"]: r["loss"] for r in records if r.get("kind") == "step"}
        diverged = [r for r in records if r.get("kind") == "diverged"]
        cells = [f"{steps[u]:.3f}" if u in steps else "-" for u in updates]
        where = f"yes, at update {diverged[0].get('update', '?')}" if diverged else "no"
        rows.append(f"| {run} | " + " | ".join(cells) + f" | {where} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bpe", type=Path, required=True, help="an encoded corpus: results/{exp}/data/bpe")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--runs", nargs="+", default=["postln_nowarmup_isqrt", "preln_nowarmup_isqrt"])
    ap.add_argument("--configfile", nargs="*", type=Path, default=[], help="presets layered on config.yaml")
    ap.add_argument("--updates", type=int, default=100)
    ap.add_argument("--log-every", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--show", type=int, nargs="+", default=[1, 2, 5, 10, 25, 50, 100])
    ap.add_argument("--summary", type=int, nargs="+", help="instead of the table: the loss at these updates per run")
    ap.add_argument("--jobs", type=int, default=2, help="trainings at once (one thread each)")
    args = ap.parse_args()
    def train(cfg: Path) -> int:
        with open(cfg.parent / "train.log", "w") as log:
            return subprocess.run([sys.executable, "-m", "lnrepro", "train", "--config", str(cfg), "--bpe",
                                   str(args.bpe), "--run-dir", str(cfg.parent), "--threads", "1"],
                                  stdout=subprocess.DEVNULL, stderr=log).returncode

    with ThreadPoolExecutor(args.jobs) as pool:
        failed = [code for code in pool.map(train, write_configs(args)) if code]  # every training runs
    if failed:
        sys.exit(f"{len(failed)} training(s) failed: see {args.out}/*/train.log")
    print(summary(args.out, args.runs, args.summary) if args.summary else table(args.out, args.runs, args.show))


if __name__ == "__main__":
    main()
