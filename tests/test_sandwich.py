"""sandwich (Sandwich-LN / Peri-LN as x-transformers' sandwich_norm): x + dropout(LN_out(F(LN_in(x)))) per sublayer
and Pre-LN's final LayerNorm. The forward pass against the equation from the model's own sublayers at init and
after an update, in training mode with dropout; the LayerNorms' constants; the description; training, resume
and gradinit."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import fake_bpe
from lnrepro.norms import norm_variant
from lnrepro.train.batching import collate, read_ids
from variant_models import (VOCAB, cached_decode_equals_full, gradinit_measures, one_update, tiny_model,
                            trains_and_resumes_bitwise)

torch.set_num_threads(1)


def test_description():
    v = norm_variant("sandwich")
    assert (v.label, v.final_norm) == ("Sandwich-LN", True)
    assert [d.kind for d in v.differences] == ["parameters", "residual scaling"]


def test_two_layernorms_per_sublayer_at_one_and_zero_and_pre_ln_weights():
    pre, net = tiny_model("pre").state_dict(), tiny_model("sandwich")
    state = net.state_dict()
    added = sorted(k for k in state if k not in pre)
    sublayers = 2 * 2 + 3 * 3  # encoder 2 layers x 2 sublayers, decoder 3 x 3
    assert len(added) == 2 * sublayers and all(k.endswith((".out_weight", ".out_bias")) for k in added)
    assert all(float(state[k].min()) == float(state[k].max()) == (1.0 if k.endswith("weight") else 0.0)
               for k in added)
    assert all(torch.equal(state[k], v) for k, v in pre.items())  # every Pre-LN weight, the final LNs included


def _ln(x, weight, bias):
    return F.layer_norm(x, (x.size(-1),), weight, bias, 1e-5)


def _branch(residual, fn, x, drop):
    return x + drop(_ln(fn(_ln(x, residual.weight, residual.bias)), residual.out_weight, residual.out_bias))


def _by_hand(net, src, prev, drop=lambda t: t, embed_drop=lambda t: t):
    x = embed_drop(net.embed_scale * net.encoder_embed(src) + net.positions(src))
    for layer in net.encoder_layers:
        x = _branch(layer.self_attn_layer_norm, layer.self_attn, x, drop)
        x = _branch(layer.final_layer_norm, layer.ffn, x, drop)
    x = net.encoder_norm(x)
    y = embed_drop(net.embed_scale * net.decoder_embed(prev) + net.positions(prev))
    for layer in net.decoder_layers:
        y = _branch(layer.self_attn_layer_norm, lambda h: layer.self_attn(h, causal=True), y, drop)
        y = _branch(layer.encoder_attn_layer_norm, lambda h: layer.encoder_attn(h, memory=x), y, drop)
        y = _branch(layer.final_layer_norm, layer.ffn, y, drop)
    return x, F.linear(net.decoder_norm(y), net.decoder_embed.weight)


def test_forward_is_the_equation_at_init_and_after_one_update(tmp_path):
    bpe = fake_bpe(tmp_path / "bpe", vocab=VOCAB, n=32)
    batch = collate(read_ids(bpe / "train.de.ids")[:6], read_ids(bpe / "train.en.ids")[:6])
    net = tiny_model("sandwich", dropout=0.1).eval()
    g = torch.Generator().manual_seed(1)
    s, p = torch.randint(4, VOCAB, (3, 7), generator=g), torch.randint(4, VOCAB, (3, 5), generator=g)
    for step in range(2):
        with torch.no_grad():
            enc, logits = _by_hand(net, s, p)
            torch.testing.assert_close(net.encode(s).out, enc, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(net(s, p), logits, rtol=1e-5, atol=1e-5)
        if step == 0:
            one_update(net, batch)
            assert not torch.equal(net.encoder_layers[0].final_layer_norm.out_weight, torch.ones(16))


def test_training_mode_drops_out_the_normalized_branch():
    net = tiny_model("sandwich", dropout=0.5).train()
    g = torch.Generator().manual_seed(2)
    s, p = torch.randint(4, VOCAB, (2, 6), generator=g), torch.randint(4, VOCAB, (2, 5), generator=g)
    torch.manual_seed(3)
    out = net(s, p)
    torch.manual_seed(3)
    layer = net.encoder_layers[0]
    _, logits = _by_hand(net, s, p, drop=layer.dropout, embed_drop=net.dropout)
    torch.testing.assert_close(out, logits, rtol=1e-5, atol=1e-5)


@pytest.fixture
def bpe_dir(tmp_path):
    return fake_bpe(tmp_path / "bpe", vocab=VOCAB, n=64)


def test_trains_through_the_loop_and_resumes_bitwise(bpe_dir, tmp_path, monkeypatch):
    trains_and_resumes_bitwise("sandwich", bpe_dir, tmp_path, monkeypatch)


def test_gradinit_measures_it_where_listed(bpe_dir):
    gradinit_measures("sandwich", bpe_dir)


def test_cached_decoding_is_the_full_pass():
    cached_decode_equals_full("sandwich")
