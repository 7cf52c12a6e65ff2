"""b2t (B2T connection, takase/b2t_connection --residual-bottom-to-top): Post-LN with the layer's input added
before its last LayerNorm, LN(h + F(h) + x), fc1 and fc2 initialized as nn.Linear, and every weight matrix of a
layer scaled by N^-1/2 (N its stack's layers). The forward pass against the equation from the model's own sublayers
at init and after an update, in training mode with dropout; the initialization against the reference's
construction and numbers; the description; training, resume and gradinit."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import fake_bpe
from lnrepro.norms import norm_variant
from lnrepro.train.batching import collate, read_ids
from variant_models import (VOCAB, assert_linear_default_ffn, cached_decode_equals_full, gradinit_measures,
                            one_update, post_ln_with_linear_default_ffn, tiny_model, trains_and_resumes_bitwise)

torch.set_num_threads(1)

# rescaling_init's layer_num ** -0.5 for the tiny model's 2 encoder and 3 decoder layers: 1/sqrt(2), 1/sqrt(3).
ENCODER_SCALE, DECODER_SCALE = 0.7071067811865476, 0.5773502691896258


def test_description():
    v = norm_variant("b2t")
    assert (v.label, v.final_norm) == ("B2T", False)
    assert [d.kind for d in v.differences] == ["residual scaling", "initialization"]


def test_weights_are_the_reference_s_ffn_then_every_matrix_scaled_by_its_stack_s_depth():
    """Post-LN's weights for the seed with each layer's fc1 and fc2 drawn again by nn.Linear (the reference's
    build_fc1/build_fc2), then every weight matrix of a layer scaled (rescaling_init); biases and LayerNorms left."""
    reference, b2t = post_ln_with_linear_default_ffn().state_dict(), tiny_model("b2t")
    state = b2t.state_dict()
    assert list(state) == list(reference) and b2t.encoder_norm is None  # Post-LN's keys, no final LayerNorm
    scaled = 0
    for k, v in reference.items():
        if "layer_norm" not in k and k.endswith(".weight") and k.startswith(("encoder_layers.", "decoder_layers.")):
            scale = ENCODER_SCALE if k.startswith("encoder_") else DECODER_SCALE
            torch.testing.assert_close(state[k], v * scale, rtol=1e-7, atol=0)
            scaled += 1
        else:  # embeddings, every bias (fc1's and fc2's nn.Linear draws), the LayerNorms
            assert torch.equal(state[k], v), k
    assert scaled == 2 * 6 + 3 * 10  # q, k, v, out (x2 in the decoder), fc1, fc2


def test_ffn_has_nn_linear_s_initialization_scaled():
    assert_linear_default_ffn(tiny_model("b2t"), ENCODER_SCALE, DECODER_SCALE)
    assert_linear_default_ffn(tiny_model("b2t", seed=1), ENCODER_SCALE, DECODER_SCALE)


def _ln(x: torch.Tensor, residual) -> torch.Tensor:
    return F.layer_norm(x, (x.size(-1),), residual.weight, residual.bias, 1e-5)


def _by_hand(net, src, prev, drop=lambda t: t):
    """The encoder output and the logits from the model's own sublayers: LN(x + F(x)) per sublayer, the layer's
    input added before the FFN's LayerNorm; ``drop`` on every branch (not on the bottom residual)."""
    x = net.embed_scale * net.encoder_embed(src) + net.positions(src)
    for layer in net.encoder_layers:
        h = _ln(x + drop(layer.self_attn(x)), layer.self_attn_layer_norm)
        x = _ln(h + drop(layer.ffn(h)) + x, layer.final_layer_norm)
    y = net.embed_scale * net.decoder_embed(prev) + net.positions(prev)
    for layer in net.decoder_layers:
        h1 = _ln(y + drop(layer.self_attn(y, causal=True)), layer.self_attn_layer_norm)
        h2 = _ln(h1 + drop(layer.encoder_attn(h1, memory=x)), layer.encoder_attn_layer_norm)
        y = _ln(h2 + drop(layer.ffn(h2)) + y, layer.final_layer_norm)
    return x, F.linear(y, net.decoder_embed.weight)


def test_forward_is_the_equation_at_init_and_after_one_update(tmp_path):
    bpe = fake_bpe(tmp_path / "bpe", vocab=VOCAB, n=32)
    batch = collate(read_ids(bpe / "train.de.ids")[:6], read_ids(bpe / "train.en.ids")[:6])
    net = tiny_model("b2t", dropout=0.1).eval()
    g = torch.Generator().manual_seed(1)
    s, p = torch.randint(4, VOCAB, (3, 7), generator=g), torch.randint(4, VOCAB, (3, 5), generator=g)
    for step in range(2):
        with torch.no_grad():
            enc, logits = _by_hand(net, s, p)
            torch.testing.assert_close(net.encode(s).out, enc, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(net(s, p), logits, rtol=1e-5, atol=1e-5)
        if step == 0:
            one_update(net, batch)


def test_training_mode_drops_out_the_branches_not_the_bottom_residual():
    net = tiny_model("b2t", dropout=0.5).train()
    g = torch.Generator().manual_seed(2)
    s, p = torch.randint(4, VOCAB, (2, 6), generator=g), torch.randint(4, VOCAB, (2, 5), generator=g)
    torch.manual_seed(3)
    out = net(s, p)
    torch.manual_seed(3)
    x = net.dropout(net.embed_scale * net.encoder_embed(s) + net.positions(s))
    for layer in net.encoder_layers:
        h = _ln(x + layer.dropout(layer.self_attn(x)), layer.self_attn_layer_norm)
        x = _ln(h + layer.dropout(layer.ffn(h)) + x, layer.final_layer_norm)
    y = net.dropout(net.embed_scale * net.decoder_embed(p) + net.positions(p))
    for layer in net.decoder_layers:
        h1 = _ln(y + layer.dropout(layer.self_attn(y, causal=True)), layer.self_attn_layer_norm)
        h2 = _ln(h1 + layer.dropout(layer.encoder_attn(h1, memory=x)), layer.encoder_attn_layer_norm)
        y = _ln(h2 + layer.dropout(layer.ffn(h2)) + y, layer.final_layer_norm)
    torch.testing.assert_close(out, F.linear(y, net.decoder_embed.weight), rtol=1e-5, atol=1e-5)


@pytest.fixture
def bpe_dir(tmp_path):
    return fake_bpe(tmp_path / "bpe", vocab=VOCAB, n=64)


def test_trains_through_the_loop_and_resumes_bitwise(bpe_dir, tmp_path, monkeypatch):
    trains_and_resumes_bitwise("b2t", bpe_dir, tmp_path, monkeypatch)


def test_gradinit_measures_it_where_listed(bpe_dir):
    gradinit_measures("b2t", bpe_dir)


def test_cached_decoding_is_the_full_pass():
    cached_decode_equals_full("b2t")
