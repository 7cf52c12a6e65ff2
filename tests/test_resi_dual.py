"""resi_dual (Xie et al. 2023, microsoft/ResiDual): Post-LN's stream x_{k+1} = LN(x_k + b) beside an
unnormalized one y_{k+1} = y_k + b, b = dropout(F(x_k)), y_0 the embeddings, each stack's output x_N + LN(y_N).
The constants against the reference's numbers; every layer against the equation from its own sublayers at init
and after one update, in eval and in training mode (2 encoder and 3 decoder layers); Post-LN's weights for a
seed but fc1 and fc2, initialized as nn.Linear; the description; the training loop with a bitwise resume;
gradinit."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from conftest import fake_bpe
from lnrepro.model import Transformer
from lnrepro.model.variants import RESIDUALS
from lnrepro.model.variants.resi_dual import ResiDual, ResiDualStream
from lnrepro.norms import norm_variant
from lnrepro.train.loss import label_smoothed_nll_loss
from lnrepro.vocab import PAD
from variant_models import (VOCAB, assert_linear_default_ffn, gradinit_measures, post_ln_with_linear_default_ffn,
                            tiny_model, trains_and_resumes_bitwise)

torch.set_num_threads(1)

DROPOUTS = dict(dropout=0.1, attention_dropout=0.1, activation_dropout=0.1)
# The reference's constants (resi_dual/resi_dual.py): the stream LayerNorm's eps, and ResiDualConfig's enc_alpha,
# dec_alpha, enc_res_input_norm_scale and dec_res_input_norm_scale defaults (hydra_config/iwslt.yaml: 1.0).
EPS = 1e-7
ALPHA = 1.0
RES_SCALE = 1.0


def model(norm: str = "resi_dual", seed: int = 0, **over) -> Transformer:
    return tiny_model(norm, seed, **over)


def test_description_and_module():
    v = norm_variant("resi_dual")
    assert (v.label, v.final_norm) == ("ResiDual", False)
    assert [d.kind for d in v.differences] == ["residual connections", "parameters", "initialization"]
    assert RESIDUALS["resi_dual"] is ResiDual and not ResiDual.per_layer and ResiDual.stream is ResiDualStream


def test_post_ln_weights_with_the_reference_s_ffn_plus_one_stream_layernorm_per_stack():
    """Post-LN's weights for the seed, each layer's fc1 and fc2 drawn again by nn.Linear (fairseq 0.12.2's
    build_fc1/build_fc2), and the two stream LayerNorms."""
    net, reference = model(), post_ln_with_linear_default_ffn().state_dict()
    state = net.state_dict()
    assert list(state)[: len(reference)] == list(reference)
    assert all(torch.equal(state[k], v) for k, v in reference.items())
    extra = {k: v for k, v in state.items() if k not in reference}
    assert sorted(extra) == sorted(f"{s}_stream.norm.{p}" for s in ("encoder", "decoder") for p in ("weight", "bias"))
    assert all(bool((v == (1.0 if k.endswith("weight") else 0.0)).all()) for k, v in extra.items())
    assert net.encoder_stream.norm.eps == EPS and net.decoder_stream.norm.eps == EPS
    assert net.encoder_norm is None and net.decoder_norm is None


def test_ffn_has_nn_linear_s_initialization():
    assert_linear_default_ffn(model())
    assert_linear_default_ffn(model(seed=1))


def _ln(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    return F.layer_norm(x, (x.size(-1),), weight, bias, eps)


def _by_hand(net: Transformer, src: torch.Tensor, prev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The encoder's output and the logits from the model's own modules, written as the reference computes them
    (in the model's mode: the same dropout draws, in the same order, as the model's forward)."""
    def sub(layer, x, y, out, residual):
        """One sublayer: its branch dropped out by the layer's dropout, into both streams."""
        b = layer.dropout(out)
        return _ln(x + b, residual.weight, residual.bias, 1e-5), y + b * RES_SCALE

    x = net.dropout(net.embed_scale * net.encoder_embed(src) + net.positions(src))
    y = x * RES_SCALE
    for layer in net.encoder_layers:
        x, y = sub(layer, x, y, layer.self_attn(x), layer.self_attn_layer_norm)
        x, y = sub(layer, x, y, layer.ffn(x), layer.final_layer_norm)
    s = net.encoder_stream.norm
    enc = x * ALPHA + _ln(y, s.weight, s.bias, EPS)
    x = net.dropout(net.embed_scale * net.decoder_embed(prev) + net.positions(prev))
    y = x * RES_SCALE
    for layer in net.decoder_layers:
        x, y = sub(layer, x, y, layer.self_attn(x, causal=True), layer.self_attn_layer_norm)
        x, y = sub(layer, x, y, layer.encoder_attn(x, memory=enc), layer.encoder_attn_layer_norm)
        x, y = sub(layer, x, y, layer.ffn(x), layer.final_layer_norm)
    s = net.decoder_stream.norm
    return enc, F.linear(x * ALPHA + _ln(y, s.weight, s.bias, EPS), net.decoder_embed.weight)


def _check(net: Transformer, s: torch.Tensor, p: torch.Tensor) -> None:
    """The model against ``_by_hand`` in eval mode and in training mode (dropout on: the same seed)."""
    outputs = []
    for training in (False, True):
        net.train(training)
        with torch.no_grad():
            torch.manual_seed(5)
            enc = net.encode(s)
            logits = net.decode(p, enc)
            torch.manual_seed(5)
            enc_hand, logits_hand = _by_hand(net, s, p)
        torch.testing.assert_close(enc.out, enc_hand, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(logits, logits_hand, rtol=1e-5, atol=1e-6)
        outputs.append(logits)
    assert not torch.allclose(*outputs)  # dropout acted in training mode


def test_forward_is_the_equation_at_init_and_after_one_update():
    net = model(**DROPOUTS)
    g = torch.Generator().manual_seed(1)
    s, p = torch.randint(4, VOCAB, (3, 7), generator=g), torch.randint(4, VOCAB, (3, 5), generator=g)
    _check(net, s, p)
    net.train()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-8)
    target = torch.randint(4, VOCAB, (3, 5), generator=g)
    loss = label_smoothed_nll_loss(net(s, p), target, 0.1)[0] / int(target.ne(PAD).sum())
    loss.backward()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    opt.step()
    moved = [k for k, v in net.state_dict().items() if not torch.equal(v, before[k])]
    assert all(f"{stack}_stream.norm.{w}" in moved for stack in ("encoder", "decoder") for w in ("weight", "bias"))
    _check(net, s, p)


def test_padded_target_rows_are_the_padded_decode_at_real_positions():
    """The decoder's two ways of running a padded batch (its non-padding rows; every position) carry the pair
    alike: the logits at real positions agree."""
    net = model().eval()
    g = torch.Generator().manual_seed(2)
    s, p = torch.randint(4, VOCAB, (3, 7), generator=g), torch.randint(4, VOCAB, (3, 6), generator=g)
    p[1, 4:] = PAD
    with torch.no_grad():
        enc = net.encode(s)
        rows, padded = net.decode(p, enc), net.decode(p, enc, padded=True)
    real = p.ne(PAD)
    torch.testing.assert_close(rows[real], padded[real], rtol=1e-5, atol=1e-6)


def test_incremental_decoding_is_the_full_decode():
    """Beam search's path: one position per call with the cache; the pair begins and ends within each call."""
    net = model().eval()
    g = torch.Generator().manual_seed(3)
    s, p = torch.randint(4, VOCAB, (2, 7), generator=g), torch.randint(4, VOCAB, (2, 5), generator=g)
    with torch.no_grad():
        enc = net.encode(s)
        full, cache = net.decode(p, enc), net.new_cache()
        steps = torch.cat([net.decode(p[:, t:t + 1], enc, cache) for t in range(p.size(1))], dim=1)
    torch.testing.assert_close(steps, full, rtol=1e-5, atol=1e-5)


# ---- training loop, resume, gradinit --------------------------------------------------------------------------


def test_trains_through_the_loop_and_resumes_bitwise(tmp_path, monkeypatch):
    trains_and_resumes_bitwise("resi_dual", fake_bpe(tmp_path / "bpe", vocab=VOCAB, n=64), tmp_path, monkeypatch)


def test_gradinit_measures_it_where_listed(tmp_path):
    gradinit_measures("resi_dual", fake_bpe(tmp_path / "bpe", vocab=VOCAB, n=64))
