"""The norm-variant registry: the paper's two equations, a clear error for an unknown name, and a variant added
in this file alone that builds, trains and runs through gradinit."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from conftest import fake_bpe, tiny_experiment
from lnrepro.analysis.gradinit import run_gradinit
from lnrepro.analysis.plots import plot_gradinit
from lnrepro.errors import LnReproError
from lnrepro.model import ModelConfig, Transformer
from lnrepro.norms import NORMS, NormVariant, norm_variant, register_norm
from lnrepro.train.batching import collate, read_ids
from lnrepro.train.loss import label_smoothed_nll_loss
from lnrepro.vocab import PAD

torch.set_num_threads(1)

VOCAB = 40
TINY = dict(encoder_layers=2, decoder_layers=2, d_model=16, heads=2, ffn_dim=32, max_positions=64)


@pytest.fixture
def none_variant():
    """A residual block without any LayerNorm, registered for the test only."""
    variant = register_norm(NormVariant("none", lambda x, norm, f, dropout: x + dropout(f(x)), final_norm=False,
                                        label="no LN"))
    yield variant
    NORMS.pop("none")


@pytest.fixture
def bpe_dir(tmp_path):
    """Random train.{de,en}.ids and a sentencepiece model of VOCAB pieces (what training and gradinit read)."""
    return fake_bpe(tmp_path / "bpe", vocab=VOCAB, n=64)


def test_registry_holds_the_papers_two_equations():
    assert list(NORMS)[:2] == ["post", "pre"]  # the order figures and tables use
    post, pre = norm_variant("post"), norm_variant("pre")
    assert (post.label, post.final_norm) == ("Post-LN", False)
    assert (pre.label, pre.final_norm) == ("Pre-LN", True)  # fairseq: final LayerNorm iff normalize_before
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8)
    ln, f = torch.nn.LayerNorm(8), torch.nn.Linear(8, 8)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5), ln.bias.normal_()
        half = lambda t: 0.5 * t  # noqa: E731  (a deterministic stand-in for dropout: it acts on F's output only)
        torch.testing.assert_close(post.sublayer(x, ln, f, half), ln(x + 0.5 * f(x)))  # LN(x + F(x))
        torch.testing.assert_close(pre.sublayer(x, ln, f, half), x + 0.5 * f(ln(x)))  # x + F(LN(x))


def test_unknown_norm_is_a_clear_error():
    with pytest.raises(LnReproError, match=r"model\.norm: expected one of 'post', 'pre', got 'middle'"):
        Transformer(ModelConfig(vocab_size=VOCAB, norm="middle", **TINY))
    with pytest.raises(LnReproError, match="already registered"):
        register_norm(NormVariant("post", NORMS["post"].sublayer, final_norm=False, label="again"))


def test_added_variant_builds_trains_and_runs_gradinit(none_variant, bpe_dir, tmp_path):
    # Builds: no LayerNorm used in the layers, none after the stacks.
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=VOCAB, norm="none", dropout=0.1, **TINY))
    assert model.encoder_norm is None and model.decoder_norm is None
    layer, x = model.encoder_layers[0].eval(), torch.randn(2, 5, 16)
    with torch.no_grad():
        h = x + layer.self_attn(x)
        torch.testing.assert_close(layer(x, None), h + layer.ffn(h))

    # Trains: one update as the training loop makes it (label-smoothed loss per target token, AdamW step).
    src_ids, tgt_ids = read_ids(bpe_dir / "train.de.ids"), read_ids(bpe_dir / "train.en.ids")
    src, prev, target = collate(src_ids[:8], tgt_ids[:8])
    ntok = int(target.ne(PAD).sum())

    def loss() -> torch.Tensor:
        return label_smoothed_nll_loss(model(src, prev), target, 0.1)[0] / ntok

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-8)
    model.train()
    opt.zero_grad(set_to_none=True)
    loss().backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert all(g is None for n, g in grads.items() if "layer_norm" in n)  # the layers' LayerNorms go unused
    assert all(g is not None and torch.isfinite(g).all() for n, g in grads.items() if "layer_norm" not in n)
    model.eval()
    with torch.no_grad():
        before = float(loss())
    opt.step()
    with torch.no_grad():
        assert float(loss()) < before  # one step on this batch lowers its loss

    # gradinit measures every registered variant, the new one included, with the same rows per variant.
    # The config accepts the new name: the schema's enum is read from the registry when the config is loaded.
    experiment = tiny_experiment({**TINY, "norm": "none"},
                                 {"batches": 2, "seeds": [1, 2, 3], "max_tokens": 128, "depths": [2, 3]})
    out = tmp_path / "analysis" / "gradinit.csv"
    df = run_gradinit(experiment.gradinit_config(), bpe_dir, out, threads=1)
    table = pd.read_csv(out)
    assert list(dict.fromkeys(table["norm"])) == ["post", "pre", "none"]
    counts = table.groupby("norm").size()
    # 3 seeds x (2 + 3 layers) x (enc 6 + dec 10 matrices a layer) x 2 statistics
    assert counts["none"] == counts["post"] == counts["pre"] == 3 * 5 * 16 * 2
    assert (table.loc[table["norm"] == "none", "value"] > 0).all()
    assert plot_gradinit(df, tmp_path / "gradinit.png").stat().st_size > 0  # the figure draws it too
