"""tfixup (Huang et al. 2020, layer6ai-labs/T-Fixup): x + dropout(F(x)), no LayerNorm at all, fairseq's weights
scaled by depth. The factors against the reference's numbers (2 encoder and 3 decoder layers, so a swap of the
stacks' factors fails); every layer against the equation from its own sublayers at init and after one update, in
eval and in training mode; the description; the training loop with a bitwise resume; gradinit."""

from __future__ import annotations


import pytest
import torch
import torch.nn.functional as F

from conftest import fake_bpe
from lnrepro.errors import LnReproError
from lnrepro.model import Transformer
from lnrepro.model.variants import RESIDUALS
from lnrepro.model.variants.tfixup import TFixup, tfixup_scale
from lnrepro.norms import norm_variant
from lnrepro.train.loss import label_smoothed_nll_loss
from lnrepro.vocab import PAD
from variant_models import TINY, VOCAB, gradinit_measures, tiny_model, trains_and_resumes_bitwise

torch.set_num_threads(1)

DROPOUTS = dict(dropout=0.1, attention_dropout=0.1, activation_dropout=0.1)

# The reference's factors (fairseq/modules/transformer_layer.py fixup_initialization, fairseq/models/
# transformer.py) at TINY's 2 encoder and 3 decoder layers, worked out by hand:
ENCODER_LAYER = 0.56340060  # 0.67 * 2 ** (-1/4)
DECODER_LAYER = 0.43869134  # (9 * 3) ** (-1/4)
ENCODER_EMBED = 0.48549177  # (9 * 2) ** (-1/4)
DECODER_EMBED = 0.43869134  # (9 * 3) ** (-1/4)
SQRT2 = 1.41421356  # the v_proj's extra factor (param * 2**0.5)


def model(norm: str = "tfixup", seed: int = 0, **over) -> Transformer:
    return tiny_model(norm, seed, **over)


def test_description_and_module():
    v = norm_variant("tfixup")
    assert (v.label, v.final_norm) == ("T-Fixup", False)
    assert [d.kind for d in v.differences] == ["layernorms removed", "initialization"]
    assert RESIDUALS["tfixup"] is TFixup and TFixup.per_layer and TFixup.stream is None
    with pytest.raises(LnReproError, match="unknown stack"):
        tfixup_scale("middle", 6, 6)


def test_post_ln_weights_times_the_references_factors():
    """For a seed, every weight is Post-LN's (fairseq's draws), times its factor; no LayerNorm anywhere."""
    net, post = model().state_dict(), model("post").state_dict()
    assert set(net) == {k for k in post if "layer_norm" not in k}
    assert not any("norm" in k or "stream" in k for k in net)
    factors = {"encoder_embed.weight": ENCODER_EMBED, "decoder_embed.weight": DECODER_EMBED}
    for stack, n, factor in (("encoder", 2, ENCODER_LAYER), ("decoder", 3, DECODER_LAYER)):
        for i in range(n):
            attns = ["self_attn"] + (["encoder_attn"] if stack == "decoder" else [])
            for a in attns:
                factors[f"{stack}_layers.{i}.{a}.v_proj.weight"] = factor * SQRT2
                factors[f"{stack}_layers.{i}.{a}.out_proj.weight"] = factor
            factors[f"{stack}_layers.{i}.ffn.fc1.weight"] = factor
            factors[f"{stack}_layers.{i}.ffn.fc2.weight"] = factor
    assert len(factors) == 2 + 2 * 4 + 3 * 6
    for k, v in net.items():
        if k in factors:
            torch.testing.assert_close(v, post[k] * factors[k], rtol=1e-6, atol=0, msg=k)
        else:  # q, k, every bias
            assert torch.equal(v, post[k]), k
    assert not net["decoder_embed.weight"][PAD].any()  # the padding row stays zero


def test_a_shared_embedding_takes_the_encoders_factor_an_unshared_output_projection_none():
    shared, post = model(share_all_embeddings=True).state_dict(), model("post", share_all_embeddings=True)
    torch.testing.assert_close(shared["encoder_embed.weight"], post.state_dict()["encoder_embed.weight"]
                               * ENCODER_EMBED, rtol=1e-6, atol=0)
    unshared = model(share_decoder_embeddings=False)
    post = model("post", share_decoder_embeddings=False)
    assert torch.equal(unshared.output_projection.weight, post.output_projection.weight)


def test_deeper_stacks_scale_by_their_own_depth():
    """6 encoder and 6 decoder layers: 0.67 * 6 ** (-1/4) = 0.42809188, (9 * 6) ** (-1/4) = 0.36889397."""
    net, post = model(encoder_layers=6, decoder_layers=6), model("post", encoder_layers=6, decoder_layers=6)
    torch.testing.assert_close(net.encoder_layers[5].ffn.fc2.weight, post.encoder_layers[5].ffn.fc2.weight
                               * 0.42809188, rtol=1e-6, atol=0)
    torch.testing.assert_close(net.decoder_layers[5].ffn.fc2.weight, post.decoder_layers[5].ffn.fc2.weight
                               * 0.36889397, rtol=1e-6, atol=0)
    torch.testing.assert_close(net.encoder_embed.weight, post.encoder_embed.weight * 0.36889397, rtol=1e-6, atol=0)


def _by_hand(net: Transformer, src: torch.Tensor, prev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The encoder's output and the logits, each sublayer x + dropout(F(x)) from the model's own modules (in the
    model's mode: the same dropout draws, in the same order, as the model's forward)."""
    drop = net.dropout
    x = drop(net.embed_scale * net.encoder_embed(src) + net.positions(src))
    for layer in net.encoder_layers:
        x = x + layer.dropout(layer.self_attn(x))
        x = x + layer.dropout(layer.ffn(x))
    y = drop(net.embed_scale * net.decoder_embed(prev) + net.positions(prev))
    for layer in net.decoder_layers:
        y = y + layer.dropout(layer.self_attn(y, causal=True))
        y = y + layer.dropout(layer.encoder_attn(y, memory=x))
        y = y + layer.dropout(layer.ffn(y))
    return x, F.linear(y, net.decoder_embed.weight)


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
    assert all(w.grad is not None and w.grad.any() for n, w in net.named_parameters() if n.endswith("fc2.weight"))
    before = {k: v.clone() for k, v in net.state_dict().items()}
    opt.step()
    assert all(not torch.equal(v, before[k]) for k, v in net.state_dict().items() if k.endswith("fc1.weight"))
    _check(net, s, p)


# ---- training loop, resume, gradinit --------------------------------------------------------------------------


def test_trains_through_the_loop_and_resumes_bitwise(tmp_path, monkeypatch):
    trains_and_resumes_bitwise("tfixup", fake_bpe(tmp_path / "bpe", vocab=VOCAB, n=64), tmp_path, monkeypatch)


def test_gradinit_measures_it_where_listed(tmp_path):
    gradinit_measures("tfixup", fake_bpe(tmp_path / "bpe", vocab=VOCAB, n=64))
