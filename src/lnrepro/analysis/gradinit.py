"""Gradient norms at initialization, per layer (Xiong et al. 2020, Section 3 and Figure 3).

The paper's argument: at initialization, the gradient of the loss with respect to the weights of the
last layers of a Post-LN Transformer is large (and grows with the layer index toward the top of the
decoder), which is why Post-LN needs learning-rate warm-up; in Pre-LN it stays flat across layers
(and shrinks with depth). We measure it as the paper does: freshly initialized models of both norm
positions, the label-smoothed loss per target token on real training batches, one backward pass per
batch, the Frobenius norm of each weight matrix's gradient, averaged over batches; repeated per seed.

Decisions (also recorded in the CSV):
- Dropout OFF by default (``model.eval()``, gradients still computed): the quantity of interest is the
  expected gradient at initialization; dropout only adds noise to it, and Theorem 1 of the paper has no
  dropout. ``dropout=True`` measures with the training-mode model instead.
- For a seed, Post-LN and Pre-LN models are built after the same ``torch.manual_seed(seed)``: their
  weight matrices are identical (LayerNorm parameters are constants), so the comparison isolates the
  norm position. Both see the same batches, drawn from the fairseq-style token-bounded batches with a
  seeded random choice (not the shortest-first batches at the front of the list).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..config import Experiment
from ..errors import LnReproError
from ..norms import NORMS
from .aggregate import to_csv_text

CSV_COLUMNS = ["norm", "seed", "stack", "layer", "sublayer", "param", "grad_norm",
               "grad_norm_std", "dropout", "batches", "max_tokens", "target_tokens"]

# encoder_layers.3.self_attn.q_proj.weight -> (enc, 3, self_attn, q_proj)   (lnrepro.model's names)
_PARAM = re.compile(r"^(?P<stack>encoder|decoder)_layers\.(?P<layer>\d+)\.(?P<sub>\w+)\.(?P<param>\w+)\.weight$")


def layer_weights(model) -> list[tuple[str, int, str, str, Any]]:
    """(stack 'enc'|'dec', layer, sublayer, param, tensor) for every weight matrix inside the layers:
    attention q/k/v/out projections (self_attn, encoder_attn) and the FFN's fc1 (W^1) and fc2 (W^2).
    LayerNorm gains and biases are not matrices and are left out (as in the paper's Figure 3)."""
    out = []
    for name, p in model.named_parameters():
        m = _PARAM.match(name)
        if m and p.dim() == 2:
            out.append(("enc" if m["stack"] == "encoder" else "dec", int(m["layer"]), m["sub"], m["param"], p))
    if not out:
        raise LnReproError("gradinit: found no layer weight matrices in the model (parameter names changed?)")
    return out


def choose_batches(bpe_dir: Path, max_tokens: int, n: int, seed: int, multiple: int = 8) -> list[tuple]:
    """``n`` collated training batches (src, prev, target), chosen at random (seeded) among the
    fairseq-style token-bounded batches of train.{de,en}.ids."""
    from ..train.batching import batch_by_size, collate, read_ids

    bpe_dir = Path(bpe_dir)
    src = read_ids(bpe_dir / "train.de.ids")
    tgt = read_ids(bpe_dir / "train.en.ids")
    if len(src) != len(tgt) or not src:
        raise LnReproError(f"{bpe_dir}: train.de.ids and train.en.ids must be non-empty with equal line counts "
                           f"(got {len(src)} and {len(tgt)})")
    batches = batch_by_size([len(s) for s in src], [len(t) for t in tgt], max_tokens, seed, multiple)
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(batches), size=min(n, len(batches)), replace=False)
    return [collate([src[i] for i in batches[b]], [tgt[i] for i in batches[b]]) for b in sorted(pick.tolist())]


def gradient_norms(model, batches: list[tuple], eps: float) -> tuple[dict[tuple, list[float]], int]:
    """Per weight matrix, the list of its gradient's Frobenius norm on each batch (loss = label-smoothed
    loss sum / number of target tokens, as the training criterion), and the target tokens seen."""
    import torch

    from ..train.loss import label_smoothed_nll_loss
    from ..vocab import PAD

    weights = layer_weights(model)
    norms: dict[tuple, list[float]] = {w[:4]: [] for w in weights}
    tokens = 0
    for src, prev, target in batches:
        model.zero_grad(set_to_none=True)
        ntok = int(target.ne(PAD).sum())
        loss_sum, _ = label_smoothed_nll_loss(model(src, prev), target, eps)
        (loss_sum / ntok).backward()
        tokens += ntok
        with torch.no_grad():
            for stack, layer, sub, param, p in weights:
                norms[(stack, layer, sub, param)].append(float(p.grad.norm()) if p.grad is not None else 0.0)
    model.zero_grad(set_to_none=True)
    return norms, tokens


def run_gradinit(experiment: Experiment, bpe_dir: Path, out_csv: Path, threads: int, *,
                 dropout: bool = False) -> pd.DataFrame:
    """For each registered norm variant (lnrepro.norms.NORMS: post, pre, ...) and each seed of
    ``analysis.gradinit``: initialize the experiment's model (``defaults.model``), take that many real training
    batches, and record each layer weight's gradient norm averaged over the batches. Writes ``out_csv``
    atomically (columns CSV_COLUMNS) and returns the table."""
    import torch
    from tqdm import tqdm

    from ..io import atomic_write_text
    from ..train.loop import vocab_size

    settings = experiment.analysis.gradinit
    batches, seeds, max_tokens = settings.batches, settings.seeds, settings.max_tokens
    torch.set_num_threads(max(1, int(threads)))
    vocab = vocab_size(Path(bpe_dir) / "spm.model")
    eps = experiment.eval.label_smoothing  # the training criterion's smoothing (optim.label_smoothing)
    multiple = experiment.runs[experiment.select[0]].train.required_batch_size_multiple
    from ..model import Transformer

    rows: list[dict[str, Any]] = []
    jobs = [(s, n) for s in seeds for n in NORMS]
    data: dict[int, list[tuple]] = {}
    for seed, norm in tqdm(jobs, desc="gradinit", unit="model"):
        if seed not in data:  # same batches for every norm position of a seed
            data[seed] = choose_batches(bpe_dir, max_tokens, batches, seed, multiple)
        torch.manual_seed(seed)  # same seed -> the same initial weight matrices for every norm position
        model = Transformer(dataclasses.replace(experiment.model, norm=norm).model_config(vocab))
        model.train(dropout)  # eval mode = dropout off; autograd works either way
        norms, tokens = gradient_norms(model, data[seed], eps)
        for (stack, layer, sub, param), vals in norms.items():
            v = np.asarray(vals, dtype=float)
            rows.append({"norm": norm, "seed": int(seed), "stack": stack, "layer": layer, "sublayer": sub,
                         "param": param, "grad_norm": float(v.mean()),
                         "grad_norm_std": float(v.std(ddof=1)) if len(v) > 1 else 0.0,
                         "dropout": "on" if dropout else "off", "batches": len(vals),
                         "max_tokens": int(max_tokens), "target_tokens": tokens})
    df = pd.DataFrame(rows, columns=CSV_COLUMNS)
    if not np.isfinite(df["grad_norm"]).all():
        # a non-finite gradient at init is a bug or a broken input, not a result to plot
        raise LnReproError("gradinit: non-finite gradient norm at initialization")
    atomic_write_text(out_csv, to_csv_text(df))
    return df
