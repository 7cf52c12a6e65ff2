"""The expected gradient at initialization, per layer (Xiong et al. 2020, Section 3.4 and Figure 3).

Section 3.4: "For elements in a parameter matrix, we calculate their expected gradients and use the Frobenius
norm of those values as the scale of the expected gradient of the matrix." For every weight matrix W we record
its gradient g_k on each of K mini-batches of real training data, average elementwise and take the Frobenius
norm of that mean, ||E_batch[dL/dW]||_F (``expected_grad_fro``). Beside it the per-batch mean of norms,
E_batch ||dL/dW||_F (``mean_grad_norm``): a different statistic, always at least as large.

Noise. With K batches ||g_mean||^2 overestimates ||E[g]||^2 by about tr(Cov)/K, so every value carries its
standard error: for ``expected_grad_fro`` sqrt(sum_k ||g_k - g_mean||_F^2 / (K (K - 1))), for ``mean_grad_norm``
the standard deviation of the K norms over sqrt(K). Differences smaller than the noise are not results.

Decisions:
- The loss is the paper's (Section 3.1): the cross-entropy averaged over the batch's target positions;
  ``label_smoothing`` (default 0) and ``dropout`` (default off: the model in eval mode, gradients still
  computed) are configurable, and both are off in Theorem 1.
- Models: every norm variant of ``analysis.gradinit.norms`` (absent: the six measured before that key existed,
  ``GRADINIT_NORMS``) at every depth L (encoder = decoder layers) of ``analysis.gradinit.depths``, at the
  experiment's width unless the section overrides it, for every seed.
  Each model is built right after ``torch.manual_seed(seed)``, then given the variant's data-dependent
  initialization on the seed's first batch (``Transformer.init_from_data``; a no-op for post, pre and
  pre_nofinal). Every variant builds the same embeddings and Linear layers, which fairseq's initialization draws
  in the same order, and its own parameters and initialization hooks come after those draws
  (``lnrepro.model.variants``): for a seed the variants share every embedding and weight matrix except the
  ones their hooks change (``NormVariant.differences``; post, pre, pre_nofinal and rezero change none, and differ
  only by their constant-initialized LayerNorms or scalars; deepnorm re-draws every weight matrix of its layers and
  shares the embeddings and biases; tfixup scales the embeddings and its layers' v, out, fc1 and fc2 matrices,
  drawing nothing; resi_dual and b2t re-draw their layers' fc1 and fc2, weights and biases, as nn.Linear does, and
  b2t then scales every weight matrix of its layers). The batches being drawn once per seed, they see the same
  batches.
- ReZero: its branches are multiplied by scalars initialized to 0, so every weight matrix inside its layers has an
  exactly zero gradient at initialization (rows of value 0); its scalars' gradients are measured instead (sublayer
  ``residual``, param ``resweight``: ``Residual.gradinit_params``), and the fit marks the exponent b of a series
  with a zero value "undefined at initialization" (``gradinit_fit``).
- Batches: K of the fairseq-style token-bounded training batches, chosen at random (seeded) without
  replacement, so that they are not the shortest-first batches at the front of the list.
- After warm-up (Figure 3(a)/(b)): the same measurement on the first checkpoint of a Post-LN run with warm-up
  whose update count reaches T_warmup (``run_after_warmup``), one job and table per trained seed (an output of
  that run and seed, made where its weights are), on that seed's batches.
- Running moments (Welford's update) instead of K stored gradients: one mean per matrix, so memory does not
  grow with K at the paper's width and depth.
- Settings from the job's slice (``lnrepro.config.GradinitConfig``: gradinit.json, gradinit_after_warmup.json),
  not experiment.json, so the beam, the notes or a mirror never rerun it.
- Batching as training's (the first selected run's batch multiple); the device is the job's (``--device``,
  from the GPUs its rule is given: ``lnrepro.device``): on a CPU the paper's width and depths take minutes per
  seed, so ``precision: bf16`` is allowed (presets/multi30k.yaml states its measured difference from fp32).
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from ..config import GradinitConfig, ModelSettings
from ..device import DEFAULT_DEVICE, select_device
from ..errors import LnReproError
from ..integrity import check_run
from ..io import atomic_write_csv
from ..paths import RunFolder
from ..records import GRADINIT_COLUMNS, EpochManifest, RunStatus

STATISTICS = ("expected_grad_fro", "mean_grad_norm")

# encoder_layers.3.self_attn.q_proj.weight -> (enc, 3, self_attn, q_proj)   (lnrepro.model's names)
_PARAM = re.compile(r"^(?P<stack>encoder|decoder)_layers\.(?P<layer>\d+)\.(?P<sub>\w+)\.(?P<param>\w+)\.weight$")
# decoder_layers.3.residual.resweight -> (dec, 3, residual, resweight): a residual module's own parameter
_OWN = re.compile(r"^(?P<stack>encoder|decoder)_layers\.(?P<layer>\d+)\.(?P<sub>\w+)\.(?P<param>\w+)$")

Key = tuple[str, int, str, str]  # (stack, layer, sublayer, param)
Batch = tuple[Any, Any, Any]  # collated (src, prev, target)


def layer_weights(model) -> list[tuple[str, int, str, str, Any]]:
    """(stack 'enc'|'dec', layer, sublayer, param, tensor) for every weight matrix inside the layers:
    attention q/k/v/out projections (self_attn, encoder_attn) and the FFN's fc1 (W^1) and fc2 (W^2).
    LayerNorm gains and biases are not matrices and are left out (as in the paper's Figure 3). Beside them, the
    parameters a variant's residual module names in ``gradinit_params`` (ReZero: its scalar ``resweight``, as
    sublayer ``residual``), in the model's parameter order."""
    out = []
    for name, p in model.named_parameters():
        m = _PARAM.match(name)
        if m and p.dim() == 2:
            out.append(("enc" if m["stack"] == "encoder" else "dec", int(m["layer"]), m["sub"], m["param"], p))
            continue
        m = _OWN.match(name)
        if m and m["param"] in getattr(model.get_submodule(name.rsplit(".", 1)[0]), "gradinit_params", ()):
            out.append(("enc" if m["stack"] == "encoder" else "dec", int(m["layer"]), m["sub"], m["param"], p))
    if not out:
        raise LnReproError("gradinit: found no layer weight matrices in the model (parameter names changed?)")
    return out


class GradientMoments:
    """One matrix's gradients over batches, as running moments: the mean gradient, sum_k ||g_k - g_mean||_F^2
    (Welford's update, accumulated in float64) and every batch's norm."""

    def __init__(self) -> None:
        self.k = 0
        self.mean: Any = None
        self.m2 = 0.0
        self.norms: list[float] = []

    def add(self, g) -> None:
        import torch

        g = g.detach().float()
        self.k += 1
        self.norms.append(float(torch.linalg.vector_norm(g, dtype=torch.float64)))
        if self.mean is None:
            self.mean = g.clone()
            return
        delta = g - self.mean
        self.mean += delta / self.k
        self.m2 += float((delta * (g - self.mean)).sum(dtype=torch.float64))

    def statistics(self) -> dict[str, tuple[float, float]]:
        """statistic -> (value, noise): ``expected_grad_fro`` and ``mean_grad_norm`` with their standard errors."""
        import torch

        k = self.k
        if k < 2:
            raise LnReproError(f"gradinit: {k} batch(es); the noise of a mean needs at least 2")
        norms = np.asarray(self.norms)
        return {
            "expected_grad_fro": (float(torch.linalg.vector_norm(self.mean, dtype=torch.float64)),
                                  math.sqrt(max(self.m2, 0.0) / (k * (k - 1)))),
            "mean_grad_norm": (float(norms.mean()), float(norms.std(ddof=1) / math.sqrt(k))),
        }


def gradient_statistics(model, batches: Iterable[Batch],
                        loss: Callable[[Any, Batch], Any]) -> dict[Key, dict[str, tuple[float, float]]]:
    """Per layer weight matrix (``layer_weights``), ``GradientMoments.statistics`` of its gradient of
    ``loss(model, batch)`` over ``batches`` (one backward pass per batch)."""
    import torch

    weights = layer_weights(model)
    moments = {w[:4]: GradientMoments() for w in weights}
    for batch in batches:
        model.zero_grad(set_to_none=True)
        loss(model, batch).backward()
        with torch.no_grad():
            for stack, layer, sub, param, p in weights:
                moments[(stack, layer, sub, param)].add(p.grad if p.grad is not None else torch.zeros_like(p))
    model.zero_grad(set_to_none=True)
    return {key: m.statistics() for key, m in moments.items()}


def token_loss(eps: float, precision: str, device) -> Callable[[Any, Batch], Any]:
    """The paper's loss of a batch: (label-smoothed when ``eps`` > 0) cross-entropy summed over the target
    tokens, divided by their number; the forward pass under bf16 autocast when ``precision`` says so."""

    from ..precision import autocast
    from ..train.loss import label_smoothed_nll_loss
    from ..vocab import PAD

    def loss(model, batch: Batch):
        src, prev, target = (x.to(device) for x in batch)
        with autocast(device, precision):
            logits = model(src, prev)
        loss_sum, _ = label_smoothed_nll_loss(logits, target, eps)  # log-softmax in fp32 either way
        return loss_sum / int(target.ne(PAD).sum())

    return loss


class TrainBatches:
    """The encoded training split (train.{de,en}.ids), read once; ``choose`` draws a seed's K batches."""

    def __init__(self, bpe_dir: Path) -> None:
        from ..train.batching import read_ids
        from ..train.loop import vocab_size

        bpe_dir = Path(bpe_dir)
        vocab = vocab_size(bpe_dir / "spm.model")
        self.src, self.tgt = read_ids(bpe_dir / "train.de.ids", vocab), read_ids(bpe_dir / "train.en.ids", vocab)
        if len(self.src) != len(self.tgt) or not self.src:
            raise LnReproError(f"{bpe_dir}: train.de.ids and train.en.ids must be non-empty with equal line counts "
                               f"(got {len(self.src)} and {len(self.tgt)})")

    def choose(self, max_tokens: int, n: int, seed: int, multiple: int = 8) -> list[Batch]:
        """``n`` collated batches, chosen at random (seeded) among the fairseq-style token-bounded batches."""
        from ..train.batching import batch_by_size, collate

        batches = batch_by_size([len(s) for s in self.src], [len(t) for t in self.tgt], max_tokens, seed, multiple)
        if len(batches) < n:
            raise LnReproError(f"analysis.gradinit.batches: {n} batches asked, the training data makes {len(batches)} "
                               f"of at most {max_tokens} tokens")
        pick = np.random.default_rng(seed).choice(len(batches), size=n, replace=False)
        return [collate([self.src[i] for i in batches[b]], [self.tgt[i] for i in batches[b]])
                for b in sorted(pick.tolist())]


def init_model_settings(config: GradinitConfig, norm: str, depth: int) -> ModelSettings:
    """The experiment's model (defaults.model) with ``norm``, ``depth`` encoder and decoder layers, and the
    width of ``analysis.gradinit`` where it sets one."""
    s, base = config.gradinit, config.model
    m = dataclasses.replace(base, norm=norm, encoder_layers=depth, decoder_layers=depth,
                            d_model=s.d_model or base.d_model, ffn_dim=s.ffn_dim or base.ffn_dim,
                            heads=s.heads or base.heads)
    if m.d_model % m.heads:
        raise LnReproError(f"analysis.gradinit: d_model {m.d_model} is not divisible by heads {m.heads}")
    return m


class _Job:
    """What every model of one gradinit job shares: settings, device, loss, and one set of batches per seed."""

    def __init__(self, config: GradinitConfig, bpe_dir: Path, threads: int, device: str) -> None:
        import torch

        from ..memory import keep_freed_memory
        from ..train.loop import vocab_size

        torch.set_num_threads(max(1, int(threads)))
        keep_freed_memory()
        self.settings = s = config.gradinit
        self.vocab = vocab_size(Path(bpe_dir) / "spm.model")
        self.multiple = config.batch_multiple
        self.device = select_device(device)
        self.loss = token_loss(s.label_smoothing, s.precision, self.device)
        self.data = TrainBatches(bpe_dir)
        self._batches: dict[int, list[Batch]] = {}

    def batches(self, seed: int) -> list[Batch]:
        if seed not in self._batches:
            s = self.settings
            self._batches[seed] = self.data.choose(s.max_tokens, s.batches, seed, self.multiple)
        return self._batches[seed]

    def rows(self, model, seed: int, meta: dict[str, Any]) -> list[dict[str, Any]]:
        """The CSV rows of one model on the seed's batches, ``meta`` (checkpoint, norm, run, ...) in each."""
        from ..vocab import PAD

        s, cfg, batches = self.settings, model.cfg, self.batches(seed)
        model.to(self.device).train(s.dropout)  # eval mode = dropout off; autograd works either way
        common = {**meta, "seed": int(seed), "depth": cfg.decoder_layers, "d_model": cfg.d_model,
                  "ffn_dim": cfg.ffn_dim, "heads": cfg.heads, "batches": len(batches), "max_tokens": s.max_tokens,
                  "target_tokens": sum(int(t.ne(PAD).sum()) for _, _, t in batches),
                  "label_smoothing": s.label_smoothing, "dropout": s.dropout, "precision": s.precision}
        return [{**common, "stack": stack, "layer": layer, "sublayer": sub, "param": param, "statistic": name,
                 "value": value, "noise": noise}
                for (stack, layer, sub, param), stats in gradient_statistics(model, batches, self.loss).items()
                for name, (value, noise) in stats.items()]


def _write(rows: list[dict[str, Any]], out_csv: Path) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=GRADINIT_COLUMNS)
    if not np.isfinite(df[["value", "noise"]].to_numpy(dtype=float)).all():
        # a non-finite gradient at init is a bug or a broken input, not a result to plot
        raise LnReproError("gradinit: non-finite gradient statistic")
    atomic_write_csv(out_csv, df)
    return df


def run_gradinit(config: GradinitConfig, bpe_dir: Path, out_csv: Path, threads: int,
                 fit_csv: Path | None = None, device: str = DEFAULT_DEVICE) -> pd.DataFrame:
    """For each seed, depth and norm variant of ``analysis.gradinit`` (``measured_norms``): a freshly initialized
    model on the seed's K training batches, on ``device`` (cpu | cuda). Writes ``out_csv`` (columns GRADINIT_COLUMNS)
    and, when given, ``fit_csv`` (the fit over depths, lnrepro.analysis.stats.gradinit_fit); returns the table."""
    import torch
    from tqdm import tqdm

    from ..model import Transformer
    from .stats.gradinit_fit import write_fit

    job = _Job(config, bpe_dir, threads, device)
    s = job.settings
    rows: list[dict[str, Any]] = []
    for seed, depth, norm in tqdm([(sd, d, n) for sd in s.seeds for d in s.depths for n in s.measured_norms],
                                  desc="gradinit", unit="model"):
        torch.manual_seed(seed)  # the same initial weights for every norm position of a seed
        model = Transformer(init_model_settings(config, norm, depth).model_config(job.vocab))
        model.init_from_data(job.batches(seed)[0])
        rows += job.rows(model, seed, {"checkpoint": "init", "norm": norm, "run": "", "epoch": 0, "updates": 0})
    df = _write(rows, out_csv)
    if fit_csv is not None:
        write_fit(df, fit_csv)
    return df


def warmup_end_checkpoints(manifests: Iterable[Path], run: str,
                           warmup_updates: int) -> dict[int, tuple[Path, EpochManifest]]:
    """Per seed, the first epoch manifest of ``run`` (status ok) whose update count reaches T_warmup. Each
    manifest's run folder is checked whole first (``lnrepro.integrity.check_run``: every record of that run and
    seed, and of its config)."""
    by_seed: dict[int, list[tuple[Path, EpochManifest]]] = {}
    for path in map(Path, manifests):
        m = EpochManifest.read(path)
        if m.run != run:
            raise LnReproError(f"{path}: a manifest of run {m.run!r}, expected {run!r}")
        by_seed.setdefault(m.seed, []).append((path, m))
    for folder, seed in sorted({(RunFolder.of_manifest(p).root, m.seed) for found in by_seed.values()
                                for p, m in found}):
        check_run(folder, run, seed)
    chosen = {}
    for seed, found in sorted(by_seed.items()):
        reached = [(path, m) for path, m in sorted(found, key=lambda f: f[1].epoch)
                   if m.status == RunStatus.OK and m.updates >= warmup_updates]
        if not reached:
            most = max(m.updates for _, m in found)
            raise LnReproError(f"{run} seed {seed}: no checkpoint reaches T_warmup = {warmup_updates} updates "
                               f"(the checkpoints reach {most} updates at most)")
        chosen[seed] = reached[0]
    return chosen


def run_after_warmup(config: GradinitConfig, bpe_dir: Path, manifests: Iterable[Path], out_csv: Path,
                     threads: int, device: str = DEFAULT_DEVICE) -> pd.DataFrame:
    """The measurement on ``analysis.gradinit.after_warmup_run``'s checkpoint at the end of warm-up, of the one
    seed of ``manifests`` (its epoch manifests), on that seed's batches, on ``device``. Writes ``out_csv``, that
    unit's ``gradinit_after_warmup.csv``."""
    from ..evaluate.score import check_bpe
    from ..model import load_model

    run, t_warmup = config.gradinit.after_warmup_run, config.warmup_updates
    if run is None or t_warmup is None:  # gradinit.json, the init job's slice, has neither
        raise LnReproError("gradinit --after-warmup: the slice names no after_warmup_run with its T_warmup "
                           "(expected gradinit_after_warmup.json)")
    chosen = warmup_end_checkpoints(manifests, run, t_warmup)
    if len(chosen) != 1:
        raise LnReproError(f"gradinit --after-warmup: manifests of {run} seeds {sorted(chosen)}; the table is one "
                           "unit's: give the epoch manifests of one seed")
    job = _Job(config, bpe_dir, threads, device)
    rows: list[dict[str, Any]] = []
    for seed, (path, m) in chosen.items():
        check_bpe(m, path, bpe_dir)  # the checkpoint's own BPE model and data, as scoring checks them
        print(f"gradinit after warm-up: {run} seed {seed}: epoch {m.epoch} ({m.updates} updates, "
              f"T_warmup {t_warmup}), {path}", flush=True)
        model = load_model(m.weights_file(RunFolder.of_manifest(path).root, path))
        rows += job.rows(model, seed, {"checkpoint": "after_warmup", "norm": model.cfg.norm, "run": run,
                                       "epoch": m.epoch, "updates": m.updates})
    return _write(rows, out_csv)
