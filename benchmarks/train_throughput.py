"""Training throughput (target tokens/s) of the Transformer on random batches, fp32 and bf16.

Defaults: the paper model (6/6 layers, d_model 512, 4 heads, FFN 1024, vocab 10000) on batches of about
4096 tokens (max_tokens as the paper). Each timed update is a full training step: forward, label-smoothed
loss, backward, AdamW step. Example:

    PYTHONPATH=src python benchmarks/train_throughput.py --threads 2 --updates 3
    PYTHONPATH=src python benchmarks/train_throughput.py --layers 2 --d-model 64 --heads 4 --ffn 128 --vocab 1000
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch

from lnrepro.model import ModelConfig, Transformer
from lnrepro.train.loss import label_smoothed_nll_loss
from lnrepro.vocab import EOS


def bench(args: argparse.Namespace, precision: str) -> dict:
    torch.manual_seed(0)
    device = torch.device(args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu"))
    cfg = ModelConfig(vocab_size=args.vocab, encoder_layers=args.layers, decoder_layers=args.layers,
                      d_model=args.d_model, heads=args.heads, ffn_dim=args.ffn, norm=args.norm)
    model = Transformer(cfg).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-8, weight_decay=1e-4)
    bsz = max(1, args.max_tokens // args.length)  # sentences x length <= max_tokens, as batch_by_size
    src = torch.randint(4, args.vocab, (bsz, args.length), device=device)
    target = torch.randint(4, args.vocab, (bsz, args.length), device=device)
    prev = torch.cat([torch.full((bsz, 1), EOS, device=device), target[:, :-1]], dim=1)
    ntok = target.numel()
    amp = torch.autocast(device.type, dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()

    def step() -> None:
        with amp:
            logits = model(src, prev)
        loss, _ = label_smoothed_nll_loss(logits, target, 0.1)
        opt.zero_grad(set_to_none=True)
        (loss / ntok).backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(args.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(args.updates):
        step()
    dt = (time.perf_counter() - t0) / args.updates
    flops = model.flops_per_batch(src.numel(), ntok, args.length, args.length)
    return {"precision": precision, "device": str(device), "params": model.num_params(), "batch": bsz,
            "tokens": ntok, "s_per_update": dt, "tokens_per_s": ntok / dt, "gflops_per_s": flops / dt / 1e9}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=10000)
    ap.add_argument("--norm", choices=["post", "pre"], default="pre")
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--length", type=int, default=32, help="source and target length of every sentence")
    ap.add_argument("--updates", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--precision", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"model {args.layers}/{args.layers} d={args.d_model} heads={args.heads} ffn={args.ffn} "
          f"vocab={args.vocab}; ~{args.max_tokens} tokens/batch; threads={args.threads}")
    for precision in args.precision:
        r = bench(args, precision)
        print(f"{r['precision']:>5} {r['device']}: {r['tokens_per_s']:,.0f} target tokens/s "
              f"({r['s_per_update']:.3f} s/update, batch {r['batch']}x{args.length}, params {r['params']:,}, "
              f"~{r['gflops_per_s']:.1f} GFLOP/s)", flush=True)


if __name__ == "__main__":
    main()
