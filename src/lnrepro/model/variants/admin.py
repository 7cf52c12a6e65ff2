"""Admin (Liu et al. 2020, "Understanding the Difficulty of Training Transformers", arXiv 2004.08249): Post-LN with
the residual scaled by a learned vector, x_{l+1} = LN(omega * x_l + dropout(F(x_l))), one omega of width d_model per
sublayer, set by profiling the model on a training batch before training.

Reference, read (not copied): Transformer-Clinic (github.com/LiyuanLucasLiu/Transformer-Clinic),
``fairseq/fairseq/modules/transformer_layer.py``:
``TransformerEncoderLayer`` / ``TransformerDecoderLayer`` with ``--init-type adaptive-profiling`` (the profile)
and ``adaptive`` (training from it); the parameters ``attention_ratio_change`` and ``fc_ratio_change``
(encoder), ``self_ratio_change``, ``encoder_ratio_change`` and ``fc_ratio_change`` (decoder) are this module's
``omega``. The profiling stage is ``fairseq/fairseq/tasks/fairseq_task.py`` ``train_step`` (``model.train()``,
one forward and backward, then ``exit()`` under ``adaptive-profiling``), run as
``nmt-experiments/iwslt14_de-en.md``'s Admin recipe gives it (one profiling run with ``--seed 1111``, then five
seeds trained from its ``profile.ratio.init``); ``fairseq/fairseq/models/transformer.py`` builds the stacks and
changes nothing else for Admin.

The forward, as the reference computes it: ``x = dropout(F(residual)); x0 = x + residual * omega; LN(x0)``
(dropout on the branch before the sum, as Post-LN's; the LayerNorm after it).

The profile, as the reference's recursion reads (the module globals ``encoder_ratio`` and ``decoder_ratio``,
both 1.0 at the start; at each sublayer, in the order of the forward pass):

    tmp_ratio = ratio;  omega.fill_(tmp_ratio)
    ratio = sqrt(np.var(residual * omega) + np.var(dropout(F(residual))))

i.e. omega_1 = 1 and omega_{i+1} = sqrt(Var[omega_i * x_i] + Var[dropout(F_i(x_i))]), x_i the sublayer's input
(the embeddings after dropout for the first sublayer, the previous LayerNorm's output after it). It is not a
running sum of variances as written: each step takes the variance of the scaled input as it is, which is
omega_i^2 Var[x_i], and Var[x_i] is close to 1 only where x_i is a LayerNorm's output (gain 1, bias 0), so
omega_{i+1}^2 is close to omega_i^2 + Var[F_i], the paper's sum of the branch variances, with the embeddings'
variance as its first term. Each variance is ``np.var`` of the whole batch tensor flattened (the population
variance over batch, positions and width: padded positions included, one number per sublayer, filled into every
element of omega). The encoder's chain and the decoder's are separate (two globals), each starting at 1, the
decoder's chain in the order self-attention, encoder attention, FFN of each layer; the encoder runs first, so
the decoder's profile sees the encoder output of the profiled encoder.

Here: ``init_from_data(model, batch)`` (the data-dependent hook, ``Residual.init_from_data``) runs that pass on
the batch it is given: the run's own first training batch (train/loop.py: the first batch of epoch 1's order,
on the run's device; gradinit: the first of the seed's K measured batches, on the CPU, before the model moves),
with the recursion done by each module's ``forward`` while a profile is attached (``_Chain``). Decisions:

- Mode: TRAINING mode (dropout on, at the model's ``model.dropout`` / attention / activation dropout), as the
  reference's profile runs under ``model.train()`` after ``fairseq_task.train_step``; the model's mode is
  restored afterwards. Gradinit calls the hook on a freshly built model (nn.Module's training mode) before
  putting it into its own mode (``model.train(analysis.gradinit.dropout)``: eval by default); the hook profiles
  in training mode whatever mode the caller left, so gradinit measures an Admin model profiled as a run's is
  (the same recursion and mode; its own width, depth and batch, hence its own omega).
- Randomness: the dropout masks of the profile are drawn from the generators (CPU, and the model's CUDA
  device) and their states are restored afterwards (``torch.random.fork_rng``): the profile is a function of
  the seed (the state after the model's initialization) and the batch, and every later draw of the run is the
  one it would be without the profile. So a run's initial weights depend only on its seed and data, and its
  training is, bit for bit, a run started from those weights.
- Padding: the whole batch tensors, padding included, as the reference takes them. The encoder computes every
  position anyway (right-padded here, left-padded in fairseq: the same padded and real values, in other places
  of the tensor). The decoder, which in training runs on its non-padding rows only, is run for the profile over
  every position with the padded keys masked in its self-attention, as fairseq's decoder computes it
  (``Transformer.decode(..., padded=True)``).
- Arithmetic: fp32 without autocast (the reference profiled under ``--fp16``); the variances accumulated in
  float64 (``np.var`` of a float32 array accumulates in float32), omega stored in float32.
- Before profiling (and for a model never profiled, e.g. a checkpoint's model before its weights are loaded)
  omega is 1: Post-LN exactly. A resumed run does not profile again: its state holds omega.
- Deviation (``lnrepro.paper.DEVIATIONS``): the reference profiles once (seed 1111, the first batch of that
  run) and trains every seed from that one profile; here every run profiles its own initialization on its own
  first batch, so omega differs by seed.

What Admin shares with Post-LN: every weight drawn by fairseq's initialization (embeddings, projections, FFN;
``init_weights`` only sets omega to 1 and the LayerNorms to 1 and 0, drawing nothing), so for a seed an Admin
model's weights are Post-LN's plus omega, which the profile sets from data. The reference changes nothing else
at initialization (its ``Linear`` and attention layers are built as in the default ``--init-type``; its fairseq's
attention zero-initializes the q/k/v biases, fairseq 0.9.0's, followed here for every variant, does not).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from .base import Fn, LayerNormResidual, register_residual


class _Chain:
    """One stack's profile: the ratio the next sublayer's omega takes (the reference's encoder_ratio or
    decoder_ratio), 1 at the stack's first sublayer."""

    def __init__(self) -> None:
        self.ratio = 1.0

    def step(self, module: "Admin", x: torch.Tensor, branch: torch.Tensor) -> None:
        """omega_i <- ratio; ratio <- sqrt(Var[omega_i * x] + Var[branch]) over the whole tensors."""
        with torch.no_grad():
            module.omega.fill_(self.ratio)
            var_in = (x * module.omega).double().var(correction=0)
            var_branch = branch.double().var(correction=0)
            self.ratio = math.sqrt(float(var_in + var_branch))


@register_residual("admin")
class Admin(LayerNormResidual):
    """LN(omega * x + dropout(F(x))), with its LayerNorm under fairseq's name and ``omega`` beside its gain and
    bias (``self_attn_layer_norm.omega``, ...)."""

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.omega = nn.Parameter(torch.ones(cfg.d_model))
        self._chain: _Chain | None = None  # attached only while init_from_data profiles

    def forward(self, x: torch.Tensor, f: Fn, dropout: Fn) -> torch.Tensor:
        branch = dropout(f(x))
        if self._chain is not None:
            self._chain.step(self, x, branch)
        return self.norm(x * self.omega + branch)

    def init_weights(self, layer, stack, index, encoder_layers, decoder_layers, cfg) -> None:
        super().init_weights(layer, stack, index, encoder_layers, decoder_layers, cfg)
        nn.init.ones_(self.omega)

    @classmethod
    def init_from_data(cls, model: nn.Module, batch: tuple[torch.Tensor, ...]) -> None:
        """Profile omega on ``batch`` (src, prev, target; on any device), in training mode, fp32, every generator's
        state restored afterwards."""
        device = next(model.parameters()).device
        src, prev = (t.to(device) for t in batch[:2])
        stacks = {"encoder": model.encoder_layers, "decoder": model.decoder_layers}
        chains = {stack: _Chain() for stack in stacks}
        for stack, layers in stacks.items():
            for layer in layers:
                for residual in layer.residuals():
                    residual._chain = chains[stack]
        was_training = model.training
        try:
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.no_grad(), \
                    torch.autocast(device.type, enabled=False):
                model.train()
                model.decode(prev, model.encode(src), padded=True)
        finally:
            model.train(was_training)
            for layers in stacks.values():
                for layer in layers:
                    for residual in layer.residuals():
                        residual._chain = None
