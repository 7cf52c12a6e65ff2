"""Loss and per-layer gradient norms over the first updates of two runs, on real batches.

Trains each run with the project's training loop (`lnrepro.train.loop.train_run`) for ``--updates`` updates
on an encoded corpus (a `data/bpe` folder the DAG made), in parallel processes of one thread each, then
prints a table of the loss and the gradient norms of the first and last layer's FFN and attention weights.
The model, optimizer and schedule are the paper config's (config.yaml) unless a preset is layered on top.

    python benchmarks/first_updates.py --bpe results/multi30k/data/bpe --out /tmp/first100 \
        --runs postln_nowarmup_isqrt preln_nowarmup_isqrt --updates 100 --precision bf16
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from lnrepro.config import REPO_ROOT, experiment, load_config

SHOW = [("encoder", "self_attn"), ("encoder", "ffn"), ("decoder", "self_attn"), ("decoder", "encoder_attn"), ("decoder", "ffn")]


def write_configs(args: argparse.Namespace) -> list[Path]:
    x = experiment(load_config([REPO_ROOT / "config.yaml", *args.configfile]))
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
    args = ap.parse_args()
    procs = [
        subprocess.Popen([sys.executable, "-m", "lnrepro", "train", "--config", str(cfg), "--bpe", str(args.bpe),
                          "--run-dir", str(cfg.parent), "--threads", "1"],
                         stdout=subprocess.DEVNULL, stderr=open(cfg.parent / "train.log", "w"))
        for cfg in write_configs(args)
    ]
    if any(p.wait() for p in procs):
        sys.exit(f"a training failed: see {args.out}/*/train.log")
    print(table(args.out, args.runs, args.show))


if __name__ == "__main__":
    main()
