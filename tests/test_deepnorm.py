"""deepnorm (Wang et al. 2022): Post-LN with the residual scaled, LN(alpha x + G(x)), and xavier-normal weights with
gain beta (fc1, fc2, every attention's v and out) or 1 (q, k). The constants of the paper's encoder-decoder rule;
every layer's output against the equation from its own sublayers, at init and after one update; the gains of every
drawn matrix; the weights shared with Post-LN; the description, the config, the training loop and gradinit."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from conftest import fake_bpe, tiny_experiment
from lnrepro.analysis.gradinit import run_gradinit
from lnrepro.errors import LnReproError
from lnrepro.model import ModelConfig, Transformer
from lnrepro.model.variants import RESIDUALS
from lnrepro.model.variants.deepnorm import deepnorm_constants
from lnrepro.norms import norm_variant
from lnrepro.train.batching import collate, read_ids
from lnrepro.train.loop import train_run
from lnrepro.train.loss import label_smoothed_nll_loss
from lnrepro.vocab import PAD
from test_train import write_config
from variant_models import TINY, VOCAB, tiny_model

torch.set_num_threads(1)


def model(norm: str = "deepnorm", seed: int = 0, **over) -> Transformer:
    return tiny_model(norm, seed, **over)


def test_description():
    v = norm_variant("deepnorm")
    assert (v.label, v.final_norm) == ("DeepNorm", False)
    assert [d.kind for d in v.differences] == ["residual scaling", "initialization"]


def test_constants_of_the_encoder_decoder_rule():
    # the paper's 6+6 values
    assert deepnorm_constants("encoder", 6, 6) == pytest.approx((1.418, 0.497), abs=5e-4)
    assert deepnorm_constants("decoder", 6, 6) == pytest.approx((2.060, 0.343), abs=5e-4)
    n, m = 4, 7
    assert deepnorm_constants("encoder", n, m) == pytest.approx((0.81 * (n ** 4 * m) ** 0.0625,
                                                                  0.87 * (n ** 4 * m) ** -0.0625))
    assert deepnorm_constants("decoder", n, m) == pytest.approx(((3 * m) ** 0.25, (12 * m) ** -0.25))
    with pytest.raises(LnReproError, match="unknown stack"):
        deepnorm_constants("middle", 6, 6)
    net = model(encoder_layers=6, decoder_layers=6)
    for stack, layers in (("encoder", net.encoder_layers), ("decoder", net.decoder_layers)):
        alpha = deepnorm_constants(stack, 6, 6)[0]
        assert all(r.alpha == alpha for layer in layers for r in layer.residuals())
    assert net.encoder_norm is None and net.decoder_norm is None  # Post-LN: no final LayerNorm


def test_unset_alpha_is_a_clear_error():
    residual = RESIDUALS["deepnorm"](ModelConfig(vocab_size=VOCAB, d_model=8))
    with pytest.raises(LnReproError, match="alpha is set by init_weights"):
        residual(torch.zeros(1, 8), lambda t: t, lambda t: t)


def test_gains_of_every_drawn_matrix():
    """Each projection's and FFN matrix's std against gain * sqrt(2 / (fan_in + fan_out)) (xavier_normal_), at a
    width where a matrix has enough entries to tell the gains apart (4096 per d x d block: the std estimate is
    within about 1.1% (one sd)); drawn normal, not uniform (a uniform draw never exceeds sqrt(3) std)."""
    d, ffn, n, m = 64, 128, 3, 4
    net = model(encoder_layers=n, decoder_layers=m, d_model=d, heads=4, ffn_dim=ffn)
    checked = 0
    for stack, layers in (("encoder", net.encoder_layers), ("decoder", net.decoder_layers)):
        beta = deepnorm_constants(stack, n, m)[1]
        for layer in layers:
            attns = [layer.self_attn] + ([layer.encoder_attn] if stack == "decoder" else [])
            drawn = [(p.weight, g) for a in attns
                     for p, g in ((a.q_proj, 1.0), (a.k_proj, 1.0), (a.v_proj, beta), (a.out_proj, beta))]
            drawn += [(layer.ffn.fc1.weight, beta), (layer.ffn.fc2.weight, beta)]
            for w, gain in drawn:
                fan_out, fan_in = w.shape
                expected = gain * math.sqrt(2 / (fan_in + fan_out))
                std = float(w.detach().std())
                assert std == pytest.approx(expected, rel=0.05), (stack, tuple(w.shape), gain)
                assert abs(float(w.detach().mean())) < 4 * expected / math.sqrt(w.numel())
                assert float(w.detach().abs().max()) > 1.2 * math.sqrt(3) * std  # normal, not uniform
                checked += 1
    assert checked == n * 6 + m * 10
    # q and k at gain 1 differ from fairseq's gain 1/sqrt(2) (xavier-uniform): the std tells them apart
    q = net.encoder_layers[0].self_attn.q_proj.weight
    assert float(q.detach().std()) > 1.3 * (1 / math.sqrt(2)) * math.sqrt(2 / (2 * d))


def test_shares_only_embeddings_biases_and_layernorms_with_post_ln():
    post, deep = model("post").state_dict(), model("deepnorm").state_dict()
    assert list(post) == list(deep)  # the same state-dict keys (alpha is no parameter)
    drawn = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "out_proj.weight", "fc1.weight", "fc2.weight")
    for k, v in post.items():
        if k.endswith(drawn):
            assert not torch.equal(deep[k], v), k
        else:  # embeddings, every bias, the LayerNorms' gains and biases
            assert torch.equal(deep[k], v), k


def _by_hand(net: Transformer, src: torch.Tensor, prev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The encoder's output and the logits, every sublayer computed as LN(alpha x + G(x)) from the model's own
    modules (eval mode: no dropout)."""
    def ln(x, residual):
        return F.layer_norm(x, (x.size(-1),), residual.weight, residual.bias, 1e-5)

    a_enc = deepnorm_constants("encoder", len(net.encoder_layers), len(net.decoder_layers))[0]
    a_dec = deepnorm_constants("decoder", len(net.encoder_layers), len(net.decoder_layers))[0]
    x = net.embed_scale * net.encoder_embed(src) + net.positions(src)
    for layer in net.encoder_layers:
        x = ln(a_enc * x + layer.self_attn(x), layer.self_attn_layer_norm)
        x = ln(a_enc * x + layer.ffn(x), layer.final_layer_norm)
    y = net.embed_scale * net.decoder_embed(prev) + net.positions(prev)
    for layer in net.decoder_layers:
        y = ln(a_dec * y + layer.self_attn(y, causal=True), layer.self_attn_layer_norm)
        y = ln(a_dec * y + layer.encoder_attn(y, memory=x), layer.encoder_attn_layer_norm)
        y = ln(a_dec * y + layer.ffn(y), layer.final_layer_norm)
    return x, F.linear(y, net.decoder_embed.weight)


def test_forward_is_the_equation_at_init_and_after_one_update(tmp_path):
    bpe = fake_bpe(tmp_path / "bpe", vocab=VOCAB, n=32)
    src_ids, tgt_ids = read_ids(bpe / "train.de.ids"), read_ids(bpe / "train.en.ids")
    src, prev, target = collate(src_ids[:6], tgt_ids[:6])
    net = model(dropout=0.1)
    g = torch.Generator().manual_seed(1)
    # unpadded inputs for the by-hand pass (padding only changes masks, checked by the model's own tests)
    s, p = torch.randint(4, VOCAB, (3, 7), generator=g), torch.randint(4, VOCAB, (3, 5), generator=g)
    for step in range(2):
        net.eval()
        with torch.no_grad():
            enc, logits = _by_hand(net, s, p)
            torch.testing.assert_close(net.encode(s).out, enc, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(net(s, p), logits, rtol=1e-5, atol=1e-5)
        if step == 0:  # one update as the training loop makes it (LayerNorm gains and biases move too)
            before = {k: v.clone() for k, v in net.state_dict().items()}
            net.train()
            opt = torch.optim.AdamW(net.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-8)
            loss = label_smoothed_nll_loss(net(src, prev), target, 0.1)[0] / int(target.ne(PAD).sum())
            loss.backward()
            opt.step()
            moved = [k for k, v in net.state_dict().items() if not torch.equal(v, before[k])]
            assert any(k.endswith("final_layer_norm.weight") for k in moved) and len(moved) > len(before) // 2


def test_config_training_loop_and_gradinit_accept_it(tmp_path):
    bpe = fake_bpe(tmp_path / "bpe", vocab=VOCAB, n=64)
    experiment = tiny_experiment({**TINY, "decoder_layers": 2, "norm": "deepnorm"},
                                 {"batches": 2, "seeds": [1, 2, 3], "max_tokens": 128, "depths": [2, 3]})
    assert experiment.gradinit_config().model.norm == "deepnorm"  # model.norm: deepnorm validates

    config = write_config(tmp_path / "config.json", max_updates=3, epochs=2, max_tokens=128)
    cfg = json.loads(config.read_text())
    cfg["model"]["norm"] = "deepnorm"
    config.write_text(json.dumps(cfg))
    train_run(tmp_path / "run", config, bpe, threads=1)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["updates"] == 3 and summary["status"] == "max_updates"

    fit_csv = tmp_path / "fit.csv"
    run_gradinit(experiment.gradinit_config(), bpe, tmp_path / "gradinit.csv", threads=1, fit_csv=fit_csv)
    table = pd.read_csv(tmp_path / "gradinit.csv")
    deep = table[table["norm"] == "deepnorm"]
    assert len(deep) == len(table[table["norm"] == "post"]) == 3 * 5 * 16 * 2 and (deep["value"] > 0).all()
    fit = pd.read_csv(fit_csv).fillna({"note": ""})
    top = fit[(fit["norm"] == "deepnorm") & (fit["stack"] == "dec") & (fit["param"] == "fc2")
              & (fit["statistic"] == "expected_grad_fro")]
    assert len(top) == 1 and math.isfinite(top["b"].iloc[0]) and top["note"].iloc[0] == ""
