"""admin: LN(omega * x + F(x)) with omega profiled on a training batch (lnrepro.model.variants.admin).

The forward pass against the equation computed from the layer's own sublayers (at init and after one update);
the profile against the reference's recursion recomputed here layer by layer (numpy variances over the whole
tensors, padding included, training mode, the encoder's and the decoder's chains separate); determinism and the
generators left as they were; Post-LN's weights for a seed; the registry and the schema; the training loop and a
bitwise resume; gradinit."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from conftest import fake_bpe, tiny_experiment
from lnrepro.analysis.gradinit import run_gradinit
from lnrepro.model import ModelConfig, Transformer
from lnrepro.model.variants import RESIDUALS
from lnrepro.model.variants.admin import Admin
from lnrepro.norms import norm_variant
from lnrepro.train.loss import label_smoothed_nll_loss
from lnrepro.vocab import PAD
from variant_models import TINY, VOCAB, tiny_model

torch.set_num_threads(1)

DROPOUTS = dict(dropout=0.1, attention_dropout=0.1, activation_dropout=0.1)  # every dropout of the model drawn


def model_of(seed: int = 0, **kw) -> Transformer:
    return tiny_model("admin", seed, **{**DROPOUTS, **kw})


def batch_of(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A right-padded batch with padding in the sources and the targets (prev starts with EOS as collate's)."""
    g = torch.Generator().manual_seed(seed)
    src, target = torch.randint(4, VOCAB, (4, 9), generator=g), torch.randint(4, VOCAB, (4, 7), generator=g)
    src[1, 6:], src[3, 4:], target[0, 5:], target[2, 3:] = PAD, PAD, PAD, PAD
    prev = torch.cat([torch.full((4, 1), 2), target[:, :-1]], dim=1)
    prev[0, 6:], prev[2, 4:] = PAD, PAD
    return src, prev, target


def omegas(model: Transformer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items() if k.endswith(".omega")}


def ln(residual, y):
    return F.layer_norm(y, (y.size(-1),), residual.weight, residual.bias, 1e-5)


# ---- description, registry, schema -----------------------------------------------------------------------------


def test_description_registry_and_schema():
    v = norm_variant("admin")
    assert v.final_norm is False and v.label == "Admin"
    assert [d.kind for d in v.differences] == ["parameters", "residual scaling", "initialization"]
    assert RESIDUALS["admin"] is Admin and not Admin.per_layer
    assert tiny_experiment({**TINY, "norm": "admin"}).gradinit_config().model.norm == "admin"  # the schema's enum


def test_post_ln_weights_plus_omega():
    """For a seed: Post-LN's state dict (same keys, same values) plus one omega of ones per sublayer."""
    torch.manual_seed(0)
    post = Transformer(ModelConfig(vocab_size=VOCAB, norm="post", **TINY, **DROPOUTS)).state_dict()
    model = model_of(0)
    state = model.state_dict()
    assert model.encoder_norm is None and model.decoder_norm is None
    extra = sorted(k for k in state if k not in post)
    names = {"encoder": ("self_attn_layer_norm", "final_layer_norm"),
             "decoder": ("self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm")}
    assert extra == sorted(f"{s}_layers.{i}.{n}.omega" for s, ns in names.items()
                           for i in range(TINY[f"{s}_layers"]) for n in ns)
    assert all(torch.equal(state[k], v) for k, v in post.items()) and all(bool((state[k] == 1).all()) for k in extra)


# ---- the forward pass -------------------------------------------------------------------------------------------


def check_layers_against_equation(model: Transformer, src: torch.Tensor, prev: torch.Tensor) -> None:
    """Each layer's output (dropout off) against LN(omega * x + F(x)) of its own sublayers, sublayer by sublayer."""
    model.eval()
    with torch.no_grad():
        x = model.embed_scale * model.encoder_embed(src) + model.positions(src)
        pad = src.eq(PAD)
        for layer in model.encoder_layers:
            a, f = layer.self_attn_layer_norm, layer.final_layer_norm
            h = ln(a, a.omega * x + layer.self_attn(x, key_pad=pad))
            expected = ln(f, f.omega * h + layer.ffn(h))
            torch.testing.assert_close(layer(x, pad), expected, rtol=0, atol=0)
            x = expected
        enc = model.encode(src)
        torch.testing.assert_close(enc.out, x, rtol=0, atol=0)
        y = model.embed_scale * model.decoder_embed(prev) + model.positions(prev)
        for layer in model.decoder_layers:
            s, e, f = layer.self_attn_layer_norm, layer.encoder_attn_layer_norm, layer.final_layer_norm
            h1 = ln(s, s.omega * y + layer.self_attn(y, causal=True))
            h2 = ln(e, e.omega * h1 + layer.encoder_attn(h1, memory=enc.out, key_pad=enc.pad_mask))
            expected = ln(f, f.omega * h2 + layer.ffn(h2))
            torch.testing.assert_close(layer(y, enc), expected, rtol=0, atol=0)
            y = expected
        # The whole model (the decoder on its non-padding rows) at the real positions, up to rounding.
        real = prev.ne(PAD)
        torch.testing.assert_close(model(src, prev)[real], F.linear(y, model.decoder_embed.weight)[real],
                                   rtol=1e-5, atol=1e-5)


def test_forward_is_the_equation_at_init_and_after_one_update():
    model = model_of(0)
    src, prev, target = batch_of()
    model.init_from_data((src, prev, target))
    assert any(bool((w != 1).any()) for w in omegas(model).values())  # profiled: the equation with omega != 1
    check_layers_against_equation(model, src, prev)

    # One update as the loop makes it (label-smoothed loss per target token, AdamW, dropout on): omega learns.
    before = omegas(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.98), eps=1e-8, weight_decay=1e-4)
    model.train()
    loss = label_smoothed_nll_loss(model(src, prev), target, 0.1)[0] / int(target.ne(PAD).sum())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    opt.step()
    after = omegas(model)
    assert all(not torch.equal(after[k], before[k]) for k in before)  # every omega moved, elementwise
    assert any(len(set(w.tolist())) > 1 for w in after.values())  # no longer one value per vector
    check_layers_against_equation(model, src, prev)


def test_padded_decode_is_the_rows_decode_at_real_positions():
    """decode(padded=True) (the profile's) computes the padded positions too, with padded self-attention keys
    masked; at the real positions it is the training forward's decode up to rounding."""
    model = model_of(0).eval()
    src, prev, _ = batch_of()
    with torch.no_grad():
        enc = model.encode(src)
        rows, full = model.decode(prev, enc), model.decode(prev, enc, padded=True)
        real = prev.ne(PAD)
        torch.testing.assert_close(full[real], rows[real], rtol=1e-5, atol=1e-5)
        assert bool((rows[~real] == 0).all()) and bool((full[~real] != 0).any())
        # every position through the layers, the padded target positions masked as self-attention keys
        y = model.embed_scale * model.decoder_embed(prev) + model.positions(prev)
        masked, unmasked = y, y
        for layer in model.decoder_layers:
            masked = layer(masked, enc, self_pad=prev.eq(PAD))
            unmasked = layer(unmasked, enc)
        weight = model.decoder_embed.weight
        torch.testing.assert_close(full, F.linear(masked, weight), rtol=0, atol=0)
        assert not torch.allclose(full[~real], F.linear(unmasked, weight)[~real])


# ---- the profile --------------------------------------------------------------------------------------------------


def recompute_profile(model: Transformer, src: torch.Tensor, prev: torch.Tensor,
                      training: bool = True) -> dict[str, float]:
    """The reference's recursion, written out here: the forward pass in training mode sublayer by sublayer from
    the layer's own attention, FFN and dropout, ratio = 1 at each stack's first sublayer, then
    omega_i = ratio and ratio = sqrt(var(omega_i * x_i) + var(dropout(F_i(x_i)))), numpy's population variance
    of the whole tensor (padding included), the decoder over every position with padded keys masked. The caller
    sets the generator to the state the profile started from, so the dropout masks are the profile's."""
    found: dict[str, float] = {}

    def var(t: torch.Tensor) -> float:
        return float(np.var(t.detach().numpy().astype(np.float64).reshape(-1)))

    def sublayer(name: str, residual, x: torch.Tensor, f, chain: list[float], dropout) -> torch.Tensor:
        omega = chain[0]
        found[name] = omega
        branch = dropout(f(x))
        scaled = x * torch.tensor(omega, dtype=torch.float32)
        chain[0] = math.sqrt(var(scaled) + var(branch))
        return ln(residual, scaled + branch)

    model.train(training)
    with torch.no_grad():
        chain = [1.0]
        x = model.dropout(model.embed_scale * model.encoder_embed(src) + model.positions(src))
        pad = src.eq(PAD)
        for i, layer in enumerate(model.encoder_layers):
            x = sublayer(f"encoder_layers.{i}.self_attn_layer_norm", layer.self_attn_layer_norm, x,
                         lambda h: layer.self_attn(h, key_pad=pad), chain, layer.dropout)
            x = sublayer(f"encoder_layers.{i}.final_layer_norm", layer.final_layer_norm, x, layer.ffn, chain,
                         layer.dropout)
        chain = [1.0]  # the decoder's own chain
        y = model.dropout(model.embed_scale * model.decoder_embed(prev) + model.positions(prev))
        tgt_pad = prev.eq(PAD)
        for i, layer in enumerate(model.decoder_layers):
            y = sublayer(f"decoder_layers.{i}.self_attn_layer_norm", layer.self_attn_layer_norm, y,
                         lambda h: layer.self_attn(h, key_pad=tgt_pad, causal=True), chain, layer.dropout)
            y = sublayer(f"decoder_layers.{i}.encoder_attn_layer_norm", layer.encoder_attn_layer_norm, y,
                         lambda h: layer.encoder_attn(h, memory=x, key_pad=pad), chain, layer.dropout)
            y = sublayer(f"decoder_layers.{i}.final_layer_norm", layer.final_layer_norm, y, layer.ffn, chain,
                         layer.dropout)
    return found


def test_profile_is_the_references_recursion():
    model = model_of(0)
    src, prev, target = batch_of()
    assert bool(src.eq(PAD).any()) and bool(prev.eq(PAD).any())  # the variances include padded positions
    start = torch.get_rng_state()
    model.init_from_data((src, prev, target))
    got = omegas(model)
    assert all(bool((w == w[0]).all()) for w in got.values())  # one value per sublayer, filled into omega

    torch.set_rng_state(start)
    expected = recompute_profile(model_of(0), src, prev)
    assert sorted(expected) == sorted(k.removesuffix(".omega") for k in got)
    for name, omega in expected.items():
        assert float(got[f"{name}.omega"][0]) == pytest.approx(omega, rel=1e-6, abs=0), name
    assert expected["encoder_layers.0.self_attn_layer_norm"] == expected["decoder_layers.0.self_attn_layer_norm"] \
        == 1.0
    assert all(w > 1 for k, w in expected.items() if not k.endswith("layers.0.self_attn_layer_norm"))

    # Training mode matters: the recursion in eval mode (no dropout) gives other values.
    evaluated = recompute_profile(model_of(0), src, prev, training=False)
    assert evaluated["encoder_layers.0.final_layer_norm"] != pytest.approx(expected["encoder_layers.0.final_layer_norm"],
                                                                        rel=1e-6)


def test_profile_is_deterministic_and_leaves_the_generators_and_mode():
    src, prev, target = batch_of()
    a, b = model_of(5), model_of(5)
    state = torch.get_rng_state()
    a.eval()
    a.init_from_data((src, prev, target))
    assert torch.equal(torch.get_rng_state(), state) and not a.training  # generator and mode as they were
    b.init_from_data((src, prev, target))
    assert b.training
    sa, sb = a.state_dict(), b.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)  # same seed and batch: the same omegas, bit for bit
    other = model_of(6)
    other.init_from_data((src, prev, target))
    assert any(not torch.equal(omegas(other)[k], omegas(a)[k]) for k in omegas(a))  # omega depends on the seed
    again = model_of(5)
    again.init_from_data(batch_of(2))
    assert any(not torch.equal(omegas(again)[k], omegas(a)[k]) for k in omegas(a))  # and on the batch


def test_training_after_the_profile_is_training_from_its_weights():
    """The profile draws its dropout masks but restores the generator: a model profiled, then trained, is bit for
    bit a model given those omegas without profiling, then trained (the training draws the same masks)."""
    src, prev, target = batch_of()
    ntok = int(target.ne(PAD).sum())

    def train(model: Transformer) -> dict[str, torch.Tensor]:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-8)
        model.train()
        for _ in range(2):
            loss = label_smoothed_nll_loss(model(src, prev), target, 0.1)[0] / ntok
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return {k: v.clone() for k, v in model.state_dict().items()}

    profiled = model_of(3)
    profiled.init_from_data((src, prev, target))
    profile = omegas(profiled)
    trained = train(profiled)

    given = model_of(3)  # the generator is where the profiled model's was after its profile
    with torch.no_grad():
        for k, v in profile.items():
            given.get_parameter(k).copy_(v)
    assert all(torch.equal(a, b) for a, b in zip(trained.values(), train(given).values()))


# ---- training loop, resume, gradinit --------------------------------------------------------------------------


@pytest.fixture
def bpe_dir(tmp_path):
    return fake_bpe(tmp_path / "bpe", vocab=VOCAB, n=64)


def admin_config(path, **train):
    from test_train import write_config

    config = write_config(path, max_tokens=128, checkpoint_every=2, epochs=2, **train)
    cfg = json.loads(config.read_text())
    cfg["model"]["norm"] = "admin"
    config.write_text(json.dumps(cfg))
    return config


def test_trains_through_the_loop_and_resumes_bitwise(bpe_dir, tmp_path, monkeypatch):
    from lnrepro.train import loop
    from test_train import assert_same_weights

    calls: list[int] = []
    original = Admin.init_from_data.__func__

    def spy(cls, model, batch):
        calls.append(tuple(batch[0].shape))
        original(cls, model, batch)

    monkeypatch.setattr(Admin, "init_from_data", classmethod(spy))
    config = admin_config(tmp_path / "config.json")
    reference = tmp_path / "reference"
    loop.train_run(reference, config, bpe_dir, threads=1)
    summary = json.loads((reference / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["updates"] > 4 and len(calls) == 1
    state = torch.load(reference / "state" / "epochs" / "epoch002.pt", weights_only=True)["model"]
    assert sum(k.endswith(".omega") for k in state) == 2 * 2 + 3 * 2  # encoder 2 x 2, decoder 2 x 3 sublayers

    class Stop(Exception):
        pass

    save = loop._Trainer._save_last
    saves: list[int] = []

    def save_then_stop(self):
        save(self)
        saves.append(self.update)
        if len(saves) == 2:  # killed after its second checkpoint (mid-epoch: every 2 updates)
            raise Stop

    run = tmp_path / "run"
    monkeypatch.setattr(loop._Trainer, "_save_last", save_then_stop)
    with pytest.raises(Stop):
        loop.train_run(run, config, bpe_dir, threads=1)
    monkeypatch.setattr(loop._Trainer, "_save_last", save)
    assert saves == [2, 4] and not (run / "summary.json").exists() and len(calls) == 2
    loop.train_run(run, config, bpe_dir, threads=1)  # resumes at update 4: no new profile, the state's omega
    assert len(calls) == 2
    resumed = json.loads((run / "summary.json").read_text())
    assert resumed["attempts"] == 2 and resumed["updates"] == summary["updates"]
    assert resumed["final_loss"] == summary["final_loss"]
    assert_same_weights(reference, run, epochs=2)


def test_gradinit_measures_admin_after_its_profile(bpe_dir, tmp_path, monkeypatch):
    calls: list[tuple[int, ...]] = []
    original = Admin.init_from_data.__func__

    def spy(cls, model, batch):
        assert model.training  # gradinit hands over a fresh model (training mode); the profile runs in it
        original(cls, model, batch)
        calls.append(tuple(batch[0].shape))
        assert any(bool((p != 1).any()) for n, p in model.named_parameters() if n.endswith(".omega"))

    monkeypatch.setattr(Admin, "init_from_data", classmethod(spy))
    experiment = tiny_experiment({**TINY, "decoder_layers": 2, "norm": "admin"},
                                 {"batches": 2, "seeds": [1, 2, 3], "max_tokens": 128, "depths": [2, 3]})
    out = tmp_path / "gradinit.csv"
    run_gradinit(experiment.gradinit_config(), bpe_dir, out, threads=1)
    assert len(calls) == 3 * 2  # seeds x depths, once per model
    table = pd.read_csv(out)
    counts = table.groupby("norm").size()
    assert counts["admin"] == counts["post"] == 3 * (2 + 3) * 16 * 2
    values = table.loc[table["norm"] == "admin", "value"]
    assert (values > 0).all() and np.isfinite(values).all()
