"""Model: LN placement, fairseq 0.9.0 initialization statistics, parameter count, positions, KV cache."""

import math

import pytest
import torch
import torch.nn.functional as F

from lnrepro.model import ModelConfig, Transformer, load_model, sinusoidal_table, weights_blob
from lnrepro.model.variants import LayerNormResidual
from lnrepro.vocab import EOS, PAD

torch.set_num_threads(1)


def tiny(norm="post", **kw):
    torch.manual_seed(0)
    cfg = dict(vocab_size=60, encoder_layers=2, decoder_layers=2, d_model=32, heads=4, ffn_dim=48, norm=norm)
    cfg.update(kw)
    return Transformer(ModelConfig(**cfg)).eval()


def batch():
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, 60, (3, 7), generator=g)
    src[0, 5:] = PAD
    prev = torch.randint(4, 60, (3, 6), generator=g)
    prev[:, 0] = EOS
    return src, prev


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_encoder_block_ln_placement(norm):
    m = tiny(norm)
    layer = m.encoder_layers[0]
    x = torch.randn(2, 5, 32)
    res1, res2, attn, ffn = layer.self_attn_layer_norm, layer.final_layer_norm, layer.self_attn, layer.ffn
    ln1, ln2 = res1.norm, res2.norm  # the residual modules' LayerNorms (fairseq's names)
    with torch.no_grad():
        res1.weight.uniform_(0.5, 1.5), res1.bias.normal_(), res2.weight.uniform_(0.5, 1.5), res2.bias.normal_()
        if norm == "post":  # x = LN(x + F(x))
            h = ln1(x + attn(x))
            expected = ln2(h + ffn(h))
        else:  # x = x + F(LN(x))
            h = x + attn(ln1(x))
            expected = h + ffn(ln2(h))
        torch.testing.assert_close(layer(x, None), expected)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_decoder_block_ln_placement(norm):
    m = tiny(norm)
    layer = m.decoder_layers[1]
    x, mem = torch.randn(2, 4, 32), torch.randn(2, 6, 32)
    from lnrepro.model import EncoderOut

    enc = EncoderOut(mem, None)
    l1, l2, l3 = layer.self_attn_layer_norm.norm, layer.encoder_attn_layer_norm.norm, layer.final_layer_norm.norm
    sa = lambda h: layer.self_attn(h, causal=True)  # noqa: E731
    ca = lambda h: layer.encoder_attn(h, memory=mem)  # noqa: E731
    with torch.no_grad():
        if norm == "post":
            h = l1(x + sa(x))
            h = l2(h + ca(h))
            expected = l3(h + layer.ffn(h))
        else:
            h = x + sa(l1(x))
            h = h + ca(l2(h))
            expected = h + layer.ffn(l3(h))
        torch.testing.assert_close(layer(x, enc), expected)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_stack_final_layer_norm(norm):
    m = tiny(norm)
    src, prev = batch()
    assert (m.encoder_norm is not None) == (norm == "pre")
    assert (m.decoder_norm is not None) == (norm == "pre")
    with torch.no_grad():
        pad = src.eq(PAD)
        x = m.embed_scale * m.encoder_embed(src) + m.positions(src)
        for layer in m.encoder_layers:
            x = layer(x, pad)
        enc = m.encode(src)
        torch.testing.assert_close(enc.out, m.encoder_norm(x) if norm == "pre" else x)
        y = m.embed_scale * m.decoder_embed(prev) + m.positions(prev)
        for layer in m.decoder_layers:
            y = layer(y, enc)
        if norm == "pre":
            y = m.decoder_norm(y)
        torch.testing.assert_close(m(src, prev), F.linear(y, m.decoder_embed.weight))


def test_initialization_statistics():
    torch.manual_seed(0)
    d, v = 256, 2000
    m = Transformer(ModelConfig(vocab_size=v, encoder_layers=2, decoder_layers=2, d_model=d, heads=4, ffn_dim=512))
    for emb in (m.encoder_embed, m.decoder_embed):
        w = emb.weight.detach()
        assert torch.all(w[PAD] == 0)
        rows = torch.cat([w[:PAD], w[PAD + 1:]])
        assert abs(rows.std().item() - d ** -0.5) < 0.02 * d ** -0.5
        assert abs(rows.mean().item()) < 0.01 * d ** -0.5
    for attn in [l.self_attn for l in m.encoder_layers] + [l.encoder_attn for l in m.decoder_layers]:
        bound = (1 / math.sqrt(2)) * math.sqrt(6 / (d + d))  # xavier_uniform with gain 1/sqrt(2)
        for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
            w = proj.weight.detach()
            assert w.abs().max() <= bound and w.abs().max() > 0.99 * bound
            assert abs(w.std().item() - bound / math.sqrt(3)) < 0.02 * bound
            b = proj.bias.detach()  # PyTorch default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), not zero
            assert b.abs().max() <= 1 / math.sqrt(d) and b.abs().max() > 0.5 / math.sqrt(d)
        w = attn.out_proj.weight.detach()
        bound = math.sqrt(6 / (d + d))
        assert w.abs().max() <= bound and w.abs().max() > 0.99 * bound
        assert torch.all(attn.out_proj.bias == 0)
    for layer in list(m.encoder_layers) + list(m.decoder_layers):
        for fc in (layer.ffn.fc1, layer.ffn.fc2):
            bound = math.sqrt(6 / (fc.in_features + fc.out_features))
            assert fc.weight.abs().max() <= bound and fc.weight.abs().max() > 0.99 * bound
            assert torch.all(fc.bias == 0)
    for mod in m.modules():
        if isinstance(mod, (torch.nn.LayerNorm, LayerNormResidual)):
            assert torch.all(mod.weight == 1) and torch.all(mod.bias == 0)


def paper_param_count(v=10000, d=512, ffn=1024, enc=6, dec=6, pre=False):
    attn = 4 * (d * d + d)  # q, k, v, out projections with biases
    ffn_p = d * ffn + ffn + ffn * d + d
    ln = 2 * d
    enc_layer = attn + ffn_p + 2 * ln
    dec_layer = 2 * attn + ffn_p + 3 * ln
    embeddings = 2 * v * d  # encoder embedding + decoder embedding (= output projection, shared)
    return embeddings + enc * enc_layer + dec * dec_layer + (2 * ln if pre else 0)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_paper_parameter_count(norm):
    m = Transformer(ModelConfig(vocab_size=10000, norm=norm))
    assert m.num_params() == paper_param_count(pre=norm == "pre")
    assert paper_param_count() == 41_783_296


def test_shared_embeddings():
    m = tiny(share_all_embeddings=True)
    assert m.encoder_embed is m.decoder_embed
    m2 = tiny(share_decoder_embeddings=False)
    assert m2.output_projection is not None
    assert m2.num_params() == tiny().num_params() + 60 * 32


def test_sinusoidal_positions_fairseq():
    d = 32
    table = sinusoidal_table(40, d)
    half = d // 2
    freqs = [math.exp(-i * math.log(10000) / (half - 1)) for i in range(half)]
    p = 7
    expected = [math.sin(p * f) for f in freqs] + [math.cos(p * f) for f in freqs]
    torch.testing.assert_close(table[p], torch.tensor(expected))
    assert torch.all(table[PAD] == 0)
    m = tiny()
    tokens = torch.tensor([[5, 6, 7, PAD, PAD], [5, 6, 7, 8, 9]])
    pos = m.positions(tokens)
    torch.testing.assert_close(pos[0, :3], table[PAD + 1: PAD + 4])  # numbered from padding_idx + 1
    assert torch.all(pos[0, 3:] == 0)
    torch.testing.assert_close(pos[0, :3], pos[1, :3])


def test_right_padding_does_not_change_outputs():
    m = tiny("pre")
    src, prev = batch()
    full = m(src, prev)
    alone = m(src[:1, :5], prev[:1])
    torch.testing.assert_close(full[:1], alone)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_cached_decode_equals_uncached(norm):
    m = tiny(norm)
    src, prev = batch()
    with torch.no_grad():
        full = m(src, prev)
        enc = m.encode(src)
        cache = m.new_cache()
        steps = [m.decode(prev[:, t: t + 1], enc, cache) for t in range(prev.size(1))]
        torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
        # beam-search reordering: expand rows, reorder cache and encoder output, keep decoding
        index = torch.tensor([2, 2, 0, 1])
        enc2 = m.encode(src).reorder(torch.tensor([0, 1, 2]))
        cache2 = m.new_cache()
        for t in range(3):
            m.decode(prev[:, t: t + 1], enc2, cache2)
        cache2.reorder(index)
        enc2 = enc2.reorder(index)
        out = [m.decode(prev[index, t: t + 1], enc2, cache2) for t in range(3, prev.size(1))]
        torch.testing.assert_close(torch.cat(out, 1), full[index, 3:], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_cache_expanded_into_beams_shares_encoder_rows(norm):
    """Beam search's expansion (reorder with shared_encoder): each sentence's rows keep one row of encoder
    keys/values, and decoding on gives exactly the cache reordered with them repeated."""
    m = tiny(norm)
    src, prev = batch()
    index = torch.tensor([0, 0, 1, 1, 2, 2])
    with torch.no_grad():
        enc = m.encode(src)
        shared, repeated = m.new_cache(6, prev.size(1)), m.new_cache()
        for cache in (shared, repeated):
            m.decode(prev[:, :1], enc, cache)
        shared.reorder(index, shared_encoder=True)
        repeated.reorder(index)
        assert shared.encoder_rows == 3 and repeated.encoder_rows == 6
        a = [m.decode(prev[index, t: t + 1], enc, shared) for t in range(1, prev.size(1))]
        b = [m.decode(prev[index, t: t + 1], enc.reorder(index), repeated) for t in range(1, prev.size(1))]
        assert torch.equal(torch.cat(a, 1), torch.cat(b, 1))


def test_load_model_roundtrip(tmp_path):
    m = tiny("pre")
    torch.save(weights_blob(m), tmp_path / "w.pt")
    m2 = load_model(tmp_path / "w.pt")
    assert not m2.training
    src, prev = batch()
    torch.testing.assert_close(m2(src, prev), m(src, prev), rtol=0, atol=0)


def test_load_model_bad_file(tmp_path):
    from lnrepro.errors import LnReproError

    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(LnReproError, match="bad.pt"):
        load_model(tmp_path / "bad.pt")


def test_flops_estimate_positive():
    m = tiny()
    assert m.flops_per_batch(100, 100, 10, 10) > 6 * 100 * 32 * 60


def _sdpa(q, k, v, key_pad, causal):
    """The same attention through F.scaled_dot_product_attention (boolean mask: True = may attend)."""
    tq, tk = q.size(-2), k.size(-2)
    allowed = torch.ones(q.size(0), 1, tq, tk, dtype=torch.bool)
    if key_pad is not None:
        allowed &= ~key_pad[:, None, None, :]
    if causal:
        allowed &= torch.arange(tk)[None, :] <= torch.arange(tq)[:, None] + (tk - tq)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("masks", ["none", "key_pad", "causal", "key_pad+causal", "incremental"])
def test_attend_equals_sdpa(dtype, tol, masks):
    from lnrepro.model.transformer import attend

    g = torch.Generator().manual_seed(0)
    b, h, tq, hd = 3, 4, 6, 16
    tk = 9 if masks == "incremental" else tq  # the last 6 of 9 positions, as with a cache holding 3
    q, k, v = (torch.randn(b, h, t, hd, generator=g).to(dtype).requires_grad_() for t in (tq, tk, tk))
    key_pad = None
    if "key_pad" in masks:
        key_pad = torch.zeros(b, tk, dtype=torch.bool)
        key_pad[0, 4:] = True
        key_pad[2, 1:] = True  # one real key only
    causal = "causal" in masks or masks == "incremental"
    out = attend(q, k, v, key_pad, causal, 0.0, True)
    ref = _sdpa(q, k, v, key_pad, causal)
    assert out.dtype == dtype
    torch.testing.assert_close(out, ref, atol=tol, rtol=tol)
    go = torch.randn(out.shape, generator=g).to(dtype)
    grads = torch.autograd.grad(out, (q, k, v), go)
    ref_grads = torch.autograd.grad(ref, (q, k, v), go)
    for a, r in zip(grads, ref_grads):
        torch.testing.assert_close(a, r, atol=5 * tol, rtol=5 * tol)


def test_attend_under_autocast_softmax_in_fp32():
    """Under bf16 autocast the scores are bf16 matmuls and the softmax fp32, as fairseq's utils.softmax."""
    from lnrepro.model.transformer import attend

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 8, generator=g) for _ in range(3))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attend(q, k, v, None, True, 0.0, False)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), _sdpa(q, k, v, None, True), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("p", [0.1, 0.3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropout_statistics(p, dtype):
    """Drop rate p (within 5 binomial sigmas; the mask quantizes p to 2^-17), kept values scaled by 2^16/k (1/(1-p)
    to 2^-16, unbiased), the four 16-bit draws of each 64-bit word independent, gradient = the same mask and scale."""
    from lnrepro.model.transformer import dropout

    torch.manual_seed(0)
    x = torch.ones(1000, 2000, dtype=dtype, requires_grad=True)
    y = dropout(x, p, training=True)
    assert y.dtype == dtype and y.shape == x.shape
    dropped = y.detach() == 0
    n = dropped.numel()
    sigma = math.sqrt(p * (1 - p) / n)
    assert abs(dropped.float().mean().item() - p) < 5 * sigma + 2 ** -17
    kept = round((1 - p) * 2 ** 16)
    assert abs(2 ** 16 / kept * (1 - p) - 1) < 2 ** -16
    torch.testing.assert_close(y.detach()[~dropped], torch.full((n - int(dropped.sum()),), 2 ** 16 / kept).to(dtype))
    quarters = dropped.view(-1, 4)  # the four draws of one 64-bit word
    for i, j in ((0, 1), (1, 2), (2, 3), (0, 3)):
        both = (quarters[:, i] & quarters[:, j]).float().mean().item()
        assert abs(both - p * p) < 5 * math.sqrt(p * p / (n // 4))
    y.backward(torch.ones_like(y))
    torch.testing.assert_close(x.grad, y.detach())


def test_dropout_identity_and_reproducible():
    from lnrepro.model.transformer import Dropout, dropout

    x = torch.randn(64, 33)
    assert dropout(x, 0.3, training=False) is x and dropout(x, 0.0, training=True) is x
    assert dropout(x, 1e-6, training=True) is x  # below the mask's resolution
    assert torch.all(dropout(x, 1.0, training=True) == 0)
    torch.manual_seed(5)
    a = dropout(x, 0.3, training=True)
    b = dropout(x, 0.3, training=True)
    torch.manual_seed(5)
    assert torch.equal(dropout(x, 0.3, training=True), a) and not torch.equal(a, b)
    module = Dropout(0.3)
    assert module.eval()(x) is x and not torch.equal(module.train()(x), x)


@pytest.mark.parametrize("cross", [False, True])
def test_stacked_projections_equal_separate_ones(cross):
    """The one GEMM over stacked q/k/v weights gives the separate projections' outputs and gradients."""
    from lnrepro.model.transformer import attend

    attn = tiny().encoder_layers[0].self_attn
    g = torch.Generator().manual_seed(2)
    x, mem = torch.randn(2, 5, 32, generator=g), torch.randn(2, 7, 32, generator=g)
    src = mem if cross else x

    def split(t):
        return t.view(t.size(0), t.size(1), 4, 8).transpose(1, 2)

    def separate():
        y = attend(split(attn.q_proj(x)), split(attn.k_proj(src)), split(attn.v_proj(src)), None, not cross, 0.0, False)
        return attn.out_proj(y.transpose(1, 2).reshape(2, 5, 32))

    out = attn(x, memory=mem, causal=False) if cross else attn(x, causal=True)
    ref = separate()
    torch.testing.assert_close(out, ref)
    params = [attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight, attn.v_proj.bias]
    for a, b in zip(torch.autograd.grad(out.sum(), params), torch.autograd.grad(ref.sum(), params)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_model_pickles(norm):
    """The residual modules are module-level classes: the whole model pickles and deep-copies."""
    import copy
    import pickle

    m = tiny(norm)
    src, prev = batch()
    for clone in (pickle.loads(pickle.dumps(m)), copy.deepcopy(m)):
        torch.testing.assert_close(clone(src, prev), m(src, prev), rtol=0, atol=0)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_padded_targets_run_as_their_rows(norm):
    """A batch with padded targets (decoded as its non-padding rows) gives each sentence's logits and loss
    gradients as decoding it alone; logits at padded positions are zero."""
    from lnrepro.train.loss import label_smoothed_nll_loss

    m = tiny(norm).train()  # dropout 0.1 is drawn: compare with dropout off
    for mod in m.modules():
        if hasattr(mod, "p"):
            mod.p = 0.0
    g = torch.Generator().manual_seed(3)
    src = torch.randint(4, 60, (3, 7), generator=g)
    target = torch.randint(4, 60, (3, 6), generator=g)
    target[0, 4:] = PAD
    target[2, 2:] = PAD
    prev = torch.cat([torch.full((3, 1), EOS), target[:, :-1]], 1).masked_fill(target.eq(PAD), PAD)
    logits = m(src, prev)
    assert torch.all(logits[target.eq(PAD)] == 0)
    grads = torch.autograd.grad(label_smoothed_nll_loss(logits, target, 0.1)[0], list(m.parameters()))
    alone_loss = 0.0
    for i in range(3):
        n = int(target[i].ne(PAD).sum())
        alone = m(src[i: i + 1], prev[i: i + 1, :n])
        torch.testing.assert_close(logits[i: i + 1, :n], alone, atol=1e-5, rtol=1e-5)
        alone_loss = alone_loss + label_smoothed_nll_loss(alone, target[i: i + 1, :n], 0.1)[0]
    for a, b in zip(grads, torch.autograd.grad(alone_loss, list(m.parameters()))):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    # packed: the logits of the non-padding positions only, in row-major order
    packed = m(src, prev, packed=True)
    torch.testing.assert_close(packed, logits[target.ne(PAD)], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="packed"):
        m.decode(prev, m.encode(src), cache=m.new_cache(), packed=True)


@pytest.mark.parametrize("masks", ["none", "key_pad", "causal", "key_pad+causal"])
def test_short_key_rows_padded_with_masked_keys(monkeypatch, masks):
    """attend pads rows of fewer keys than a CPU vector with masked zero keys (aten's softmax takes a scalar
    path below one vector): the same attention and gradients, whatever the host's vector width; incremental
    decoding (one query) and rows of a vector or more are not padded."""
    import lnrepro.model.transformer as T

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 2, 5, 8, generator=g, dtype=torch.float64).requires_grad_() for _ in range(3))
    key_pad = None
    if "key_pad" in masks:
        key_pad = torch.zeros(3, 5, dtype=torch.bool)
        key_pad[0, 3:] = True
    causal = "causal" in masks
    go = torch.randn(3, 2, 5, 8, generator=g, dtype=torch.float64)
    results = []
    for added in (0, 11):
        monkeypatch.setattr(T, "short_keys", lambda q_, tk, added=added: added)
        out = T.attend(q, k, v, key_pad, causal, 0.0, False)
        results.append((out, *torch.autograd.grad(out, (q, k, v), go)))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)  # the scores and softmax are fp32
    monkeypatch.undo()
    lanes = T._VECTOR_FLOATS.get(torch.backends.cpu.get_cpu_capability(), 1)
    assert T.short_keys(q, 5) == max(lanes - 5, 0)
    assert T.short_keys(q[:, :, :1], 5) == 0  # one query: incremental decoding
    assert T.short_keys(q, lanes) == 0


@pytest.mark.parametrize("queries", [1, 3])
def test_shared_keys_attend_exactly_as_repeated_keys(queries):
    """Beam search's encoder attention: g query rows sharing one row of keys/values (and of padding mask) give
    bit for bit what attention over the keys repeated g times gives."""
    from lnrepro.model.transformer import attend

    g = torch.Generator().manual_seed(0)
    b, beam, heads, src_len, hd = 7, 5, 4, 9, 16
    q = torch.randn(b * beam, heads, queries, hd, generator=g)
    k, v = torch.randn(b, heads, src_len, hd, generator=g), torch.randn(b, heads, src_len, hd, generator=g)
    pad = torch.zeros(b, src_len, dtype=torch.bool)
    pad[::2, -3:] = True
    rep = torch.arange(b).repeat_interleave(beam)
    repeated = attend(q, k[rep].contiguous(), v[rep].contiguous(), pad[rep], False, 0.0, False)
    assert torch.equal(attend(q, k, v, pad, False, 0.0, False), repeated)
