"""dyt (DyT, Zhu et al. 2025): Pre-LN with every LayerNorm, the stacks' final ones included, replaced by
gamma * tanh(alpha x) + beta, alpha a learned scalar initialized to the reference's alpha_init_value 0.5. The
forward pass against the equation from the model's own sublayers at init and after an update, in training mode with
dropout; the constants; the description; training, resume and gradinit."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import fake_bpe
from lnrepro.model.variants.dyt import DynamicTanh
from lnrepro.norms import norm_variant
from lnrepro.train.batching import collate, read_ids
from variant_models import (VOCAB, cached_decode_equals_full, gradinit_measures, one_update, tiny_model,
                            trains_and_resumes_bitwise)

torch.set_num_threads(1)

ALPHA_INIT_VALUE = 0.5  # DynamicTanh(normalized_shape, ..., alpha_init_value=0.5), dynamic_tanh.py


def test_description():
    v = norm_variant("dyt")
    assert (v.label, v.final_norm) == ("DyT", True)
    assert [d.kind for d in v.differences] == ["layernorms removed", "parameters"]


def test_every_layernorm_is_a_dyt_with_alpha_one_half_and_pre_ln_weights():
    pre, net = tiny_model("pre").state_dict(), tiny_model("dyt", encoder_layers=2, decoder_layers=3)
    state = net.state_dict()
    assert isinstance(net.encoder_norm, DynamicTanh) and isinstance(net.decoder_norm, DynamicTanh)
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in net.modules())
    alphas = sorted(k for k in state if k.endswith(".alpha"))
    assert len(alphas) == 2 * 2 + 3 * 3 + 2  # one per sublayer, and one per stack's final DyT
    assert all(state[k].shape == (1,) and float(state[k]) == ALPHA_INIT_VALUE for k in alphas)
    assert sorted(k for k in state if k not in pre) == alphas
    assert all(torch.equal(state[k], v) for k, v in pre.items())  # gamma 1, beta 0 and every other weight


def _dyt(x, m):
    return torch.tanh(m.alpha * x) * m.weight + m.bias


def _by_hand(net, src, prev, drop=lambda t: t, embed_drop=lambda t: t):
    x = embed_drop(net.embed_scale * net.encoder_embed(src) + net.positions(src))
    for layer in net.encoder_layers:
        x = x + drop(layer.self_attn(_dyt(x, layer.self_attn_layer_norm)))
        x = x + drop(layer.ffn(_dyt(x, layer.final_layer_norm)))
    x = _dyt(x, net.encoder_norm)
    y = embed_drop(net.embed_scale * net.decoder_embed(prev) + net.positions(prev))
    for layer in net.decoder_layers:
        y = y + drop(layer.self_attn(_dyt(y, layer.self_attn_layer_norm), causal=True))
        y = y + drop(layer.encoder_attn(_dyt(y, layer.encoder_attn_layer_norm), memory=x))
        y = y + drop(layer.ffn(_dyt(y, layer.final_layer_norm)))
    return x, F.linear(_dyt(y, net.decoder_norm), net.decoder_embed.weight)


def test_forward_is_the_equation_at_init_and_after_one_update(tmp_path):
    bpe = fake_bpe(tmp_path / "bpe", vocab=VOCAB, n=32)
    batch = collate(read_ids(bpe / "train.de.ids")[:6], read_ids(bpe / "train.en.ids")[:6])
    net = tiny_model("dyt", dropout=0.1).eval()
    g = torch.Generator().manual_seed(1)
    s, p = torch.randint(4, VOCAB, (3, 7), generator=g), torch.randint(4, VOCAB, (3, 5), generator=g)
    for step in range(2):
        with torch.no_grad():
            enc, logits = _by_hand(net, s, p)
            torch.testing.assert_close(net.encode(s).out, enc, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(net(s, p), logits, rtol=1e-5, atol=1e-5)
        if step == 0:
            one_update(net, batch)
            assert float(net.decoder_norm.alpha.detach()) != ALPHA_INIT_VALUE  # alpha learns


def test_training_mode_drops_out_the_branches():
    net = tiny_model("dyt", dropout=0.5).train()
    g = torch.Generator().manual_seed(2)
    s, p = torch.randint(4, VOCAB, (2, 6), generator=g), torch.randint(4, VOCAB, (2, 5), generator=g)
    torch.manual_seed(3)
    out = net(s, p)
    torch.manual_seed(3)
    _, logits = _by_hand(net, s, p, drop=net.encoder_layers[0].dropout, embed_drop=net.dropout)
    torch.testing.assert_close(out, logits, rtol=1e-5, atol=1e-5)


@pytest.fixture
def bpe_dir(tmp_path):
    return fake_bpe(tmp_path / "bpe", vocab=VOCAB, n=64)


def test_trains_through_the_loop_and_resumes_bitwise(bpe_dir, tmp_path, monkeypatch):
    trains_and_resumes_bitwise("dyt", bpe_dir, tmp_path, monkeypatch)


def test_gradinit_measures_it_where_listed(bpe_dir):
    gradinit_measures("dyt", bpe_dir)


def test_cached_decoding_is_the_full_pass():
    cached_decode_equals_full("dyt")
