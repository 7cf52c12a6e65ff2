"""optim.name radam: torch.optim.RAdam with decoupled weight decay, checked update by update against RAdam written
out by hand (the un-rectified momentum step of the first updates and the rectified step after them), against
torch.optim.RAdam built directly, and against the references' first updates where they differ (the registry
entry's deviations); the schema and the config accept it."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from lnrepro import config as cfg
from lnrepro.config.settings import OptimSettings, ScheduleSettings
from lnrepro.errors import LnReproError
from lnrepro.model import ModelConfig, Transformer
from lnrepro.optimizers import OPTIMIZERS, build_optimizer, optimizer_of, optimizer_settings
from lnrepro.train.batching import collate
from lnrepro.train.loop import Batch
from lnrepro.train.step import StepSettings, train_step

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[1]
# A large weight decay, so that a step taken or skipped with or without it is far apart in float64.
OPTIM = OptimSettings(name="radam", lr_max=1e-2, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.1, clip_norm=0.0,
                      label_smoothing=0.1)
# Warm-up over 4 updates then isqrt: the first update runs at lr 0, the rate changes every update.
SCHEDULE = ScheduleSettings(warmup=True, decay="isqrt", warmup_updates=4, anchor_updates=4, decay_epochs=None,
                            decay_factor=None)
UPDATES = 10


def _model_and_batch() -> tuple[Transformer, Batch]:
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=30, encoder_layers=1, decoder_layers=1, d_model=16, heads=2,
                                    ffn_dim=32, norm="post", dropout=0.0)).double().train()
    src, prev, target = collate([[5, 6, 7, 2], [8, 9, 2]], [[10, 11, 2], [12, 2]])
    return model, Batch(src, prev, target, int(target.ne(1).sum()))


def rho(t: int, beta2: float) -> float:
    """The length of the approximated simple moving average at step t (from 1)."""
    rho_inf = 2 / (1 - beta2) - 1
    return rho_inf - 2 * t * beta2 ** t / (1 - beta2 ** t)


@dataclasses.dataclass
class HandRAdam:
    """RAdam written out from the paper (Liu et al. 2020, arXiv 1908.03265, Algorithm 2) with decoupled weight
    decay. ``early`` is what the first updates (rho_t <= 5) do: "momentum" (torch, the authors' radam.py),
    "skip" (the authors' radam/radam.py, degenerated_to_sgd=False: neither step nor weight decay) or
    "decay only" (Transformer-Clinic's radam_fairseq/radam.py: the weight decay, no step)."""

    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    early: str = "momentum"
    t: int = 0
    m: list[torch.Tensor] | None = None
    v: list[torch.Tensor] | None = None

    def step(self, params: list[torch.Tensor], grads: list[torch.Tensor], lr: float) -> tuple[list[torch.Tensor], str]:
        """The parameters after one update, and which branch it took."""
        if self.m is None:
            self.m = [torch.zeros_like(p) for p in params]
            self.v = [torch.zeros_like(p) for p in params]
        self.t += 1
        t, b1, b2 = self.t, self.beta1, self.beta2
        rho_inf, rho_t = 2 / (1 - b2) - 1, rho(t, b2)
        rectified = rho_t > 5
        out = []
        for i, (p, g) in enumerate(zip(params, grads)):
            self.m[i] = b1 * self.m[i] + (1 - b1) * g
            self.v[i] = b2 * self.v[i] + (1 - b2) * g * g
            m_hat = self.m[i] / (1 - b1 ** t)
            decayed = p * (1 - lr * self.weight_decay)
            if rectified:
                r = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
                v_hat_sqrt = self.v[i].sqrt() / math.sqrt(1 - b2 ** t)  # eps after it, as torch and the authors
                out.append(decayed - lr * r * m_hat / (v_hat_sqrt + self.eps / math.sqrt(1 - b2 ** t)))
            elif self.early == "momentum":
                out.append(decayed - lr * m_hat)
            elif self.early == "skip":
                out.append(p.clone())
            else:
                out.append(decayed)
        return out, "rectified" if rectified else "momentum"


def _train(optimizer=None, optim: OptimSettings = OPTIM):
    """UPDATES updates of the tiny model through training's train_step, with ``optimizer(model)`` or the one
    ``optim`` builds; per update, the parameters before it, its gradients, its rate and the parameters after."""
    model, batch = _model_and_batch()
    opt = optimizer(model) if optimizer else build_optimizer(model, optim)
    settings = StepSettings(optim, SCHEDULE, "fp32", diverge_loss=1e6)
    steps = []
    for t in range(UPDATES):
        before = [p.detach().clone() for p in model.parameters()]
        result = train_step(model, opt, batch, t, 1, settings)
        assert result.stepped
        steps.append((before, [p.grad.detach().clone() for p in model.parameters()], result.lr,
                      [p.detach().clone() for p in model.parameters()]))
    return opt, steps


def test_radam_is_torchs_with_decoupled_weight_decay_from_the_settings():
    model, _ = _model_and_batch()
    opt = build_optimizer(model, OPTIM)
    assert type(opt) is torch.optim.RAdam and opt.defaults["decoupled_weight_decay"] is True
    assert (opt.defaults["lr"], opt.defaults["betas"], opt.defaults["eps"], opt.defaults["weight_decay"]) == (
        0.0, (0.9, 0.98), 1e-8, 0.1)
    assert optimizer_settings(OPTIM) == {"name": "radam", "betas": [0.9, 0.98], "eps": 1e-8, "weight_decay": 0.1}
    spec = optimizer_of(OPTIM)
    assert "torch.optim.RAdam" in spec.implementation and list(OPTIMIZERS) == ["adamw", "radam"]
    assert all(ref in spec.deviations[0] for ref in ("radam.py", "radam/radam.py", "radam_fairseq/radam.py"))


def test_the_first_updates_take_the_momentum_step_then_the_rectified_one():
    """rho_t <= 5 for the first 5 updates at beta2 0.98 (and at 0.999): those are the momentum branch."""
    assert [rho(t, 0.98) > 5 for t in range(1, UPDATES + 1)] == [False] * 5 + [True] * 5
    assert [rho(t, 0.999) > 5 for t in range(1, UPDATES + 1)] == [False] * 5 + [True] * 5


def test_ten_updates_equal_radam_written_by_hand():
    """Both branches, with decoupled weight decay, the rate changing every update (the first at lr 0)."""
    _, steps = _train()
    hand = HandRAdam(*OPTIM.betas, OPTIM.eps, OPTIM.weight_decay)
    branches = []
    for before, grads, lr, after in steps:
        expected, branch = hand.step(before, grads, lr)
        branches.append(branch)
        for e, a in zip(expected, after):
            torch.testing.assert_close(a, e, rtol=1e-12, atol=1e-14)
    assert branches == ["momentum"] * 5 + ["rectified"] * 5
    assert steps[0][2] == 0.0 and all(lr > 0 for _, _, lr, _ in steps[1:])
    # the momentum step moves the weights (the references that skip it would not): update 2 at lr > 0
    before, _, lr, after = steps[1]
    assert any(not torch.allclose(a, b * (1 - lr * OPTIM.weight_decay)) for a, b in zip(after, before))


def test_ten_updates_equal_torch_radam_built_directly():
    """build_optimizer is torch.optim.RAdam(decoupled_weight_decay=True): the same weights, bitwise; without weight
    decay the decoupled and the coupled forms agree too."""
    def direct(model):
        return torch.optim.RAdam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.1,
                                 decoupled_weight_decay=True)

    _, ours = _train()
    _, theirs = _train(direct)
    for (_, _, _, a), (_, _, _, b) in zip(ours, theirs):
        assert all(torch.equal(x, y) for x, y in zip(a, b))
    no_wd = dataclasses.replace(OPTIM, weight_decay=0.0)
    _, no_decay = _train(optim=no_wd)
    _, coupled = _train(lambda m: torch.optim.RAdam(m.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-8), no_wd)
    for (_, _, _, a), (_, _, _, b) in zip(no_decay, coupled):
        assert all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("early", ["skip", "decay only"])
def test_the_references_that_skip_the_first_updates_differ_there(early):
    """The deviations the registry lists: on the same gradients, the authors' radam/radam.py leaves the weights
    unchanged in the first updates and Transformer-Clinic's radam_fairseq/radam.py only decays them; torch's
    moment estimates are theirs, so from update 6 the three take the same rectified step from their weights."""
    _, steps = _train()
    ref = HandRAdam(*OPTIM.betas, OPTIM.eps, OPTIM.weight_decay, early=early)
    before, grads, lr, after = steps[1]
    ref.step(steps[0][0], steps[0][1], steps[0][2])
    expected, branch = ref.step(before, grads, lr)
    assert branch == "momentum"
    for e, b in zip(expected, before):
        torch.testing.assert_close(e, b if early == "skip" else b * (1 - lr * OPTIM.weight_decay), rtol=0, atol=0)
    assert any(not torch.allclose(e, a) for e, a in zip(expected, after))


def test_the_schema_and_the_config_accept_radam():
    paper = cfg.load_config([REPO / "config.yaml"])
    assert cfg.load_schema()["$defs"]["optim"]["properties"]["name"] == {"enum": ["adamw", "radam"]}
    for run, norm, decay in (("postln_radam_nowarmup_isqrt", "post", "isqrt"),
                             ("preln_radam_nowarmup_step8", "pre", "step")):
        r = cfg.resolve_run(paper, run)
        assert (r.optim.name, r.model.norm, r.schedule.warmup, r.schedule.decay) == ("radam", norm, False, decay)
        assert r.optim.betas == (0.9, 0.98) and r.optim.lr_max == 5e-4 and run not in paper["select"]
    selected = dict(paper, defaults={**paper["defaults"], "optim": {**paper["defaults"]["optim"], "name": "radam"}})
    cfg.validate_config(selected)
    bad = dict(paper, defaults={**paper["defaults"], "optim": {**paper["defaults"]["optim"], "name": "lamb"}})
    with pytest.raises(LnReproError, match="optim.name"):
        cfg.validate_config(bad)


def test_the_report_lists_radams_deviations_only_where_a_selected_run_uses_it():
    from lnrepro.analysis.render.deviations import config_deviations

    paper = cfg.load_config([REPO / "config.yaml"])
    deviation = OPTIMIZERS["radam"].deviations[0]
    assert deviation not in config_deviations(cfg.experiment(paper))
    paper["select"] = [*paper["select"], "postln_radam_nowarmup_isqrt"]
    cfg.validate_config(paper)
    listed = config_deviations(cfg.experiment(paper))
    assert deviation in listed and any(d.startswith("optim.name 'radam' in postln_radam_nowarmup_isqrt instead of "
                                                    "the paper's 'adamw'") for d in listed)
