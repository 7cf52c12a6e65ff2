"""What a per-sentence length limit saves in scoring: valid greedy decoding of checkpoints at fairseq's limit
(200 tokens) and at ``a x source length + b``, in CPU seconds and tokenized BLEU, one thread.

A model that has not learned to end a sentence (a failed run; any run's first epoch) decodes every sentence to
the limit, so its scoring costs several times a trained model's (presets/study-cpu.yaml, eval):

    python benchmarks/decode_length_limit.py --bpe results/study-cpu/data/bpe --prepared results/study-cpu/data/prepared \
        --weights results/study-cpu/runs/postln_nowarmup_isqrt/seed1/state/epochs/epoch001.pt --a 2 --b 10
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from lnrepro.config.settings import ScoreSettings
from lnrepro.evaluate.score import read_scoring_data, score
from lnrepro.model import load_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", type=Path, nargs="+", required=True, help="epoch weights files (state/epochs/*.pt)")
    ap.add_argument("--bpe", type=Path, required=True, help="results/{exp}/data/bpe")
    ap.add_argument("--prepared", type=Path, required=True, help="results/{exp}/data/prepared")
    ap.add_argument("--split", default="valid")
    ap.add_argument("--a", type=float, default=2.0, help="max_len_a of the limit compared with 0 x src + 200")
    ap.add_argument("--b", type=int, default=10, help="max_len_b of that limit")
    a = ap.parse_args()
    torch.set_num_threads(1)
    data = {}
    for path in a.weights:
        model = load_model(path)
        vocab = model.cfg.vocab_size
        data[vocab] = data.get(vocab) or read_scoring_data(a.bpe, a.prepared, [a.split], vocab)
        for max_len_a, max_len_b in ((0.0, 200), (a.a, a.b)):
            settings = ScoreSettings.from_dict({"label_smoothing": 0.1, "max_tokens": 8000, "splits": {a.split: {
                "beam": 1, "lenpen": 1.0, "max_len_a": max_len_a, "max_len_b": max_len_b, "precision": "fp32"}}})
            c0 = time.process_time()
            scores = score(model, settings, data[vocab])
            cpu = time.process_time() - c0
            hyps = scores.hypotheses[a.split]
            words = sum(len(h.split()) for h in hyps) / len(hyps)
            print(f"{path}: limit {max_len_a:g} x src + {max_len_b}: {cpu:.1f} CPU-s, "
                  f"BLEU {scores.splits[a.split].bleu_tok:.2f}, {words:.1f} words a hypothesis", flush=True)


if __name__ == "__main__":
    main()
