"""Beam-search decoding speed: sentences/s (fp32 and bf16) and the speed-up of the KV cache.

Usage (a trained checkpoint and the encoded test set, e.g. the Multi30k preset's):

    python benchmarks/decode_speed.py --weights results/multi30k/runs/RUN/seed1/state/epochs/epoch020.pt \
        --src results/multi30k/data/bpe/test.de.ids --beam 5 --lenpen 1.2 --threads 1 --uncached-n 100

Without weights, ``--random '{"vocab_size": 8000, "d_model": 256, "ffn_dim": 512}'`` builds a randomly
initialized model (ModelConfig fields); an untrained model rarely ends a sentence, so pass a realistic
``--max-len-b`` (e.g. 30) and read the result as a per-token cost rather than a translation speed.

The uncached decoder (``cached=False`` in lnrepro.evaluate.search) re-runs the decoder over the whole
prefix at every step, as an implementation without incremental state would; it is timed on the first
``--uncached-n`` sentences (it is slow) together with the cached decoder on the same sentences, and the
two outputs are compared token for token. Prints one JSON object (and writes it to ``--out`` if given).

Every timing is given as wall-clock seconds and as the CPU seconds of this process (``cpu_s``), which
other jobs on a shared machine inflate much less. ``outputs_sha256`` is a digest of the decoded ids: to
compare two versions of the decoder (before/after a change), run the benchmark at both commits and compare
the digests and times.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import time
from pathlib import Path

import torch

from lnrepro.evaluate.search import DecodeOptions, translate
from lnrepro.io import atomic_write_json, where_ran


def _timed(fn):
    """fn()'s result, wall-clock seconds and CPU seconds of this process."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out, time.perf_counter() - t, time.process_time() - c


def _digest(outputs: list[list[int]]) -> str:
    return hashlib.sha256(json.dumps(outputs).encode()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    p.add_argument("--weights", type=Path, help="a weights file (state/epochs/epochNNN.pt)")
    p.add_argument("--random", help="JSON of ModelConfig fields for a randomly initialized model")
    src.add_argument("--src", type=Path, help="encoded source sentences (bpe/{split}.de.ids)")
    src.add_argument("--synthetic", type=int, metavar="N", help="N random source sentences instead of --src")
    p.add_argument("--n", type=int, default=0, help="use only the first N sentences (0: all)")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--lenpen", type=float, default=1.0)
    p.add_argument("--max-len-a", type=float, default=0)
    p.add_argument("--max-len-b", type=int, default=200)
    p.add_argument("--max-tokens", type=int, default=8000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    p.add_argument("--uncached-n", type=int, default=50, help="sentences for the cached/uncached comparison (0: skip)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)

    torch.set_num_threads(a.threads)
    device = torch.device("cuda" if (a.device == "auto" and torch.cuda.is_available()) or a.device == "cuda"
                          else "cpu")
    from lnrepro.model import ModelConfig, Transformer, load_model

    if a.weights:
        model = load_model(a.weights, device=device)
    elif a.random:
        torch.manual_seed(a.seed)
        model = Transformer(ModelConfig(**json.loads(a.random))).to(device).eval()
    else:
        p.error("give --weights or --random")
    if a.src:
        from lnrepro.train.batching import read_ids

        seqs = read_ids(a.src)
    else:
        g = torch.Generator().manual_seed(a.seed)
        V = model.cfg.vocab_size
        seqs = [torch.randint(4, V, (int(torch.randint(5, 30, (1,), generator=g)),), generator=g).tolist() + [2]
                for _ in range(a.synthetic)]
    if a.n:
        seqs = seqs[: a.n]

    opts = DecodeOptions(beam=a.beam, lenpen=a.lenpen, max_tokens=a.max_tokens, max_len_a=a.max_len_a,
                         max_len_b=a.max_len_b)
    progress = sys.stderr.isatty()
    res: dict = {
        "model": {"params": model.num_params(), **vars(model.cfg)}, "weights": str(a.weights) if a.weights else None,
        "sentences": len(seqs), "src_tokens": sum(map(len, seqs)),
        "settings": dataclasses.asdict(opts), "threads": a.threads,
        "torch": torch.__version__, "where_ran": where_ran(
            torch.cuda.get_device_name(device) if device.type == "cuda" else None),
        "precision": {},
    }
    for prec in a.precisions:
        out, dt, cpu = _timed(lambda: translate(model, seqs, dataclasses.replace(opts, precision=prec), progress))
        res["precision"][prec] = {"decode_s": dt, "cpu_s": cpu, "sent_per_s": len(seqs) / dt,
                                  "out_tokens_per_s": sum(len(o) + 1 for o in out) / dt,
                                  "mean_out_len": sum(len(o) for o in out) / len(out), "outputs_sha256": _digest(out)}
        print(f"{prec}: {len(seqs) / dt:.2f} sentences/s ({dt:.1f} s, {cpu:.1f} CPU s)", file=sys.stderr)
    if a.uncached_n:
        sub = seqs[: a.uncached_n]
        cached, t_c, _ = _timed(lambda: translate(model, sub, opts, progress))
        uncached, t_u, _ = _timed(lambda: translate(model, sub, dataclasses.replace(opts, cached=False), progress))
        res["cache"] = {"sentences": len(sub), "cached_s": t_c, "uncached_s": t_u, "speedup": t_u / t_c,
                        "cached_sent_per_s": len(sub) / t_c, "uncached_sent_per_s": len(sub) / t_u,
                        "identical_outputs": cached == uncached}
        print(f"cache speed-up {t_u / t_c:.2f}x on {len(sub)} sentences (identical: {cached == uncached})",
              file=sys.stderr)
    print(json.dumps(res, indent=2, sort_keys=True))
    if a.out:
        atomic_write_json(a.out, res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
