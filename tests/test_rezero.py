"""rezero (Bachlechner et al. 2020, rztx.py): x + a * dropout(F(x)), no LayerNorm at all, one scalar a per layer
(initialized to 0) shared by its sublayers. The identity at init, every layer against the equation after one
update, the scalars' zeros and state-dict keys, the weights shared with Post-LN, the description, the config, the
training loop and gradinit (the scalars' gradient measured, b undefined at initialization for the matrices)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from conftest import fake_bpe, tiny_experiment
from lnrepro.analysis.gradinit import run_gradinit
from lnrepro.analysis.stats.gradinit_fit import depth_table, headline, layer_table
from lnrepro.analysis.render.plots import plot_gradinit, plot_gradinit_depth
from lnrepro.model import Transformer
from lnrepro.norms import norm_variant
from lnrepro.train.batching import collate, read_ids
from lnrepro.train.loop import train_run
from lnrepro.train.loss import label_smoothed_nll_loss
from lnrepro.vocab import PAD
from test_train import write_config
from variant_models import TINY, VOCAB, tiny_model

torch.set_num_threads(1)


def model(norm: str = "rezero", seed: int = 0, **over) -> Transformer:
    return tiny_model(norm, seed, **over)


def test_description():
    v = norm_variant("rezero")
    assert (v.label, v.final_norm) == ("ReZero", False)
    assert [d.kind for d in v.differences] == ["parameters", "layernorms removed", "residual scaling"]


def test_one_zero_scalar_per_layer_no_layernorm_and_post_ln_weights():
    net, post = model(), model("post").state_dict()
    state = net.state_dict()
    assert net.encoder_norm is None and net.decoder_norm is None
    assert not any("layer_norm" in k or k.startswith(("encoder_norm", "decoder_norm")) for k in state)
    scalars = sorted(k for k in state if k not in post)
    assert scalars == sorted(f"{s}_layers.{i}.residual.resweight" for s, n in (("encoder", 2), ("decoder", 3))
                             for i in range(n))
    assert all(state[k].shape == () and float(state[k]) == 0.0 for k in scalars)
    # every other weight is Post-LN's for the seed (ReZero draws nothing); Post-LN's LayerNorms are gone
    assert {k for k in post if k not in state} == {k for k in post if "layer_norm" in k}
    assert all(torch.equal(state[k], v) for k, v in post.items() if k in state)
    # one module per layer, shared by the layer's sublayers
    layer = net.decoder_layers[0]
    assert [type(r).__name__ for r in layer.residuals()] == ["ReZero"] and layer.residual.per_layer


def test_identity_at_init():
    """a = 0: with dropout off the encoder's output is its scaled embeddings plus positions, and the logits are
    the decoder's embeddings plus positions through the output projection."""
    net = model(dropout=0.1).eval()
    g = torch.Generator().manual_seed(1)
    src, prev = torch.randint(4, VOCAB, (3, 7), generator=g), torch.randint(4, VOCAB, (3, 5), generator=g)
    with torch.no_grad():
        x = net.embed_scale * net.encoder_embed(src) + net.positions(src)
        torch.testing.assert_close(net.encode(src).out, x, rtol=0, atol=0)
        y = net.embed_scale * net.decoder_embed(prev) + net.positions(prev)
        torch.testing.assert_close(net(src, prev), F.linear(y, net.decoder_embed.weight), rtol=0, atol=0)


def _by_hand(net: Transformer, src: torch.Tensor, prev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x + a F(x) for every sublayer, a its layer's scalar, from the model's own modules (eval mode)."""
    x = net.embed_scale * net.encoder_embed(src) + net.positions(src)
    for layer in net.encoder_layers:
        a = layer.residual.resweight
        x = x + a * layer.self_attn(x)
        x = x + a * layer.ffn(x)
    y = net.embed_scale * net.decoder_embed(prev) + net.positions(prev)
    for layer in net.decoder_layers:
        a = layer.residual.resweight
        y = y + a * layer.self_attn(y, causal=True)
        y = y + a * layer.encoder_attn(y, memory=x)
        y = y + a * layer.ffn(y)
    return x, F.linear(y, net.decoder_embed.weight)


def test_forward_is_the_equation_after_one_update(tmp_path):
    bpe = fake_bpe(tmp_path / "bpe", vocab=VOCAB, n=32)
    src, prev, target = collate(read_ids(bpe / "train.de.ids")[:6], read_ids(bpe / "train.en.ids")[:6])
    net = model(dropout=0.1)
    net.train()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-8)
    loss = label_smoothed_nll_loss(net(src, prev), target, 0.1)[0] / int(target.ne(PAD).sum())
    loss.backward()
    # at init only the decoder's scalars (and the embeddings) have a gradient: every branch is multiplied by 0
    for name, p in net.named_parameters():
        if name.startswith("decoder_layers.") and name.endswith("resweight"):
            assert float(p.grad.abs()) > 0, name
        elif name.startswith(("encoder_layers.", "decoder_layers.")):
            assert p.grad is None or not p.grad.any(), name
    opt.step()
    scalars = [float(layer.residual.resweight.detach()) for layer in net.decoder_layers]
    assert all(a != 0.0 for a in scalars)  # the decoder's scalars moved (Adam: by about lr)
    # a second update moves the encoder's too (the decoder's encoder attention now reaches the loss)
    opt.zero_grad()
    (label_smoothed_nll_loss(net(src, prev), target, 0.1)[0] / int(target.ne(PAD).sum())).backward()
    opt.step()
    assert all(float(layer.residual.resweight.detach()) != 0.0 for layer in net.encoder_layers)
    net.eval()
    g = torch.Generator().manual_seed(1)
    s, p = torch.randint(4, VOCAB, (3, 7), generator=g), torch.randint(4, VOCAB, (3, 5), generator=g)
    with torch.no_grad():
        enc, logits = _by_hand(net, s, p)
        torch.testing.assert_close(net.encode(s).out, enc, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(net(s, p), logits, rtol=1e-5, atol=1e-6)


def test_dropout_acts_on_the_branch_only():
    """x + a * dropout(F(x)) (rztx.py): with dropout on, a = 0 still gives the identity on the residual path."""
    net = model(dropout=0.5).train()
    layer, x = net.encoder_layers[0], torch.randn(2, 5, 16)
    torch.testing.assert_close(layer(x, None), x, rtol=0, atol=0)
    with torch.no_grad():
        layer.residual.resweight.fill_(1.0)
    torch.manual_seed(3)
    out = layer(x, None)
    torch.manual_seed(3)
    h = x + layer.dropout(layer.self_attn(x))
    torch.testing.assert_close(out, h + layer.dropout(layer.ffn(h)))


def test_config_training_loop_and_gradinit_accept_it(tmp_path):
    bpe = fake_bpe(tmp_path / "bpe", vocab=VOCAB, n=64)
    experiment = tiny_experiment({**TINY, "decoder_layers": 2, "norm": "rezero"},
                                 {"batches": 2, "seeds": [1, 2, 3], "max_tokens": 128, "depths": [2, 3, 4]})
    assert experiment.gradinit_config().model.norm == "rezero"  # model.norm: rezero validates

    config = write_config(tmp_path / "config.json", max_updates=3, epochs=2, max_tokens=128)
    cfg = json.loads(config.read_text())
    cfg["model"]["norm"] = "rezero"
    config.write_text(json.dumps(cfg))
    train_run(tmp_path / "run", config, bpe, threads=1)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["updates"] == 3 and summary["status"] == "max_updates"

    # gradinit: ReZero's matrices have an exactly zero gradient at init, its decoder scalars a nonzero one
    fit_csv = tmp_path / "fit.csv"
    df = run_gradinit(experiment.gradinit_config(), bpe, tmp_path / "gradinit.csv", threads=1, fit_csv=fit_csv)
    rz = df[df["norm"] == "rezero"]
    matrices, scalars = rz[rz["sublayer"] != "residual"], rz[rz["sublayer"] == "residual"]
    assert len(matrices) == len(df[df["norm"] == "post"]) == 3 * (2 + 3 + 4) * 16 * 2
    assert (matrices["value"] == 0).all() and (matrices["noise"] == 0).all()
    assert set(scalars["param"]) == {"resweight"} and len(scalars) == 3 * (2 + 3 + 4) * 2 * 2
    assert (scalars.loc[scalars["stack"] == "dec", "value"] > 0).all()
    assert (scalars.loc[scalars["stack"] == "enc", "value"] == 0).all()  # cut off by the decoder's a = 0
    assert set(df.loc[df["norm"] != "rezero", "sublayer"]) == {"self_attn", "encoder_attn", "ffn"}

    fit = pd.read_csv(fit_csv).fillna({"note": ""})
    assert list(fit.columns)[-1] == "note"
    rfit = fit[fit["norm"] == "rezero"].set_index(["stack", "param", "statistic"])
    for stack in ("dec", "enc"):
        for param in ("fc2", "fc1"):
            row = rfit.loc[(stack, param, "expected_grad_fro")]
            assert math.isnan(row["b"]) and math.isnan(row["b_low"]) and math.isnan(row["c"])
            assert row["note"].startswith("undefined at initialization")
    scalar_fit = rfit.loc[("dec", "resweight", "expected_grad_fro")]
    assert math.isfinite(scalar_fit["b"]) and scalar_fit["b_low"] <= scalar_fit["b"] <= scalar_fit["b_high"]
    assert scalar_fit["note"] == "" and scalar_fit["n"] == 9
    assert rfit.loc[("enc", "resweight", "expected_grad_fro"), "note"].startswith("undefined at initialization")
    assert (fit.loc[fit["norm"] != "rezero", "note"] == "").all()
    assert math.isnan(headline(fit).set_index("norm").loc["rezero", "b"])

    # the report's views and figures take the zeros: no ratio to a zero, no crash on log axes
    summary = layer_table(df, 2)
    assert np.isnan(summary["Post-LN/ReZero"]).all()
    assert np.isfinite(summary.loc[summary["sublayer"] != "residual", "Post-LN/Pre-LN"]).all()
    assert (depth_table(df)["ReZero"] == 0).all()
    assert plot_gradinit(df, tmp_path / "g.png").stat().st_size > 0
    assert plot_gradinit_depth(df, fit, tmp_path / "d.png").stat().st_size > 0
