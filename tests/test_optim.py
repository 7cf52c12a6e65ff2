"""The optimizer registry and the one training step: names without torch, the schema's enum from the registry,
the optimizer the loop and the bench build, and train_step's divergence stop and gradient norms."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import torch

from lnrepro.config import load_schema
from lnrepro.config.settings import OptimSettings, ScheduleSettings
from lnrepro.errors import LnReproError
from lnrepro.model import ModelConfig, Transformer
from lnrepro.train.batching import collate
from lnrepro.train.loop import Batch
from lnrepro.optimizers import OPTIMIZERS, build_optimizer, optimizer_settings
from lnrepro.train.step import StepSettings, train_step

torch.set_num_threads(1)
OPTIM = OptimSettings(name="adamw", lr_max=1e-3, betas=(0.9, 0.98), eps=1e-8, weight_decay=1e-4, clip_norm=0.0,
                      label_smoothing=0.1)
SCHEDULE = ScheduleSettings(warmup=True, decay="isqrt", warmup_updates=4, anchor_updates=4, decay_epochs=None,
                            decay_factor=None)


def _model_and_batch() -> tuple[Transformer, Batch]:
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=30, encoder_layers=1, decoder_layers=1, d_model=16, heads=2,
                                    ffn_dim=32, norm="pre")).train()
    src, prev, target = collate([[5, 6, 7, 2], [8, 9, 2]], [[10, 11, 2], [12, 2]])
    return model, Batch(src, prev, target, int(target.ne(1).sum()))


def test_the_names_are_read_without_torch_and_fill_the_schema():
    code = "import sys, lnrepro.optimizers as o, lnrepro.config; assert 'torch' not in sys.modules; print(list(o.OPTIMIZERS))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "['adamw', 'radam']"
    assert load_schema()["$defs"]["optim"]["properties"]["name"] == {"enum": list(OPTIMIZERS)}


def test_adamw_is_built_fused_from_the_settings():
    model, _ = _model_and_batch()
    opt = build_optimizer(model, OPTIM)
    assert isinstance(opt, torch.optim.AdamW) and opt.defaults["fused"] is True and opt.defaults["lr"] == 0.0
    assert (opt.defaults["betas"], opt.defaults["eps"], opt.defaults["weight_decay"]) == ((0.9, 0.98), 1e-8, 1e-4)
    assert optimizer_settings(OPTIM) == {"name": "adamw", "betas": [0.9, 0.98], "eps": 1e-8, "weight_decay": 1e-4}
    with pytest.raises(LnReproError, match="optim.name: 'sgd' is not a registered optimizer; expected one of adamw"):
        build_optimizer(model, dataclasses.replace(OPTIM, name="sgd"))


def test_the_bench_builds_and_steps_as_training_does():
    from lnrepro.bench import train as bench_train
    from lnrepro.bench.sizes import CONSTANT, OPTIM as BENCH_OPTIM

    model, batch = _model_and_batch()
    opt = bench_train.project_optimizer(model)
    assert type(opt) is type(build_optimizer(model, BENCH_OPTIM)) and opt.defaults["fused"] is True
    loss = bench_train.project_step(model, opt, batch, "fp32")
    ref_model, _ = _model_and_batch()
    ref_opt = build_optimizer(ref_model, BENCH_OPTIM)
    step = train_step(ref_model, ref_opt, batch, 0, 1, StepSettings(BENCH_OPTIM, CONSTANT, "fp32", float("inf")))
    assert step.loss == loss and step.lr == BENCH_OPTIM.lr_max
    for a, b in zip(model.parameters(), ref_model.parameters()):
        assert torch.equal(a, b)


def test_train_step_sets_the_schedules_rate_and_inspects_gradients():
    model, batch = _model_and_batch()
    opt = build_optimizer(model, OPTIM)
    settings = StepSettings(OPTIM, SCHEDULE, "fp32", diverge_loss=1e6)
    first = train_step(model, opt, batch, 0, 1, settings)
    assert first.stepped and first.lr == 0.0 and first.grad_norm is None and first.grad_norms is None
    second = train_step(model, opt, batch, 2, 1, settings, inspect=True)
    assert second.lr == pytest.approx(0.5e-3) and opt.param_groups[0]["lr"] == second.lr
    assert second.grad_norm > 0 and second.grad_norms


def test_train_step_stops_before_updating_when_the_loss_fails_the_check():
    model, batch = _model_and_batch()
    opt = build_optimizer(model, OPTIM)
    before = [p.detach().clone() for p in model.parameters()]
    step = train_step(model, opt, batch, 5, 1, StepSettings(OPTIM, SCHEDULE, "fp32", diverge_loss=0.5))
    assert not step.stepped and step.loss > 0.5
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert all(p.grad is None for p in model.parameters())
