"""The norm variants: the paper's two equations, one module per described variant, a clear error for an unknown
name, and a variant added in this file alone (a learned gain per layer, its own fc2 initialization and a
data-dependent hook) that is accepted by the config, builds, trains and runs through gradinit."""

from __future__ import annotations

import re

import pandas as pd
import pytest
import torch
import torch.nn as nn

from conftest import fake_bpe, tiny_experiment
from lnrepro.analysis.gradinit import run_gradinit
from lnrepro.analysis.render.plots import plot_gradinit
from lnrepro.errors import LnReproError
from lnrepro.model import ModelConfig, Transformer
from lnrepro.model.variants import RESIDUALS, Residual, register_residual
from lnrepro.norms import NORMS, Difference, NormVariant, norm_variant, register_norm
from lnrepro.train.batching import collate, read_ids
from lnrepro.train.loss import label_smoothed_nll_loss
from lnrepro.vocab import PAD
from variant_models import tiny_model

torch.set_num_threads(1)

VOCAB = 40
TINY = dict(encoder_layers=2, decoder_layers=2, d_model=16, heads=2, ffn_dim=32, max_positions=64)


class GatedResidual(Residual):
    """x + gain * dropout(F(x)), no LayerNorm; one learned gain per layer (``per_layer``: its sublayers share it);
    fc2 initialized scaled by (encoder_layers + decoder_layers)^-1/2; the data hook sets the gain from a batch."""

    per_layer = True
    data_calls: list[tuple[int, ...]] = []  # the batches' shapes init_from_data saw

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.gain = nn.Parameter(torch.zeros(()))

    def forward(self, x, f, dropout):
        return x + self.gain * dropout(f(x))

    def init_weights(self, layer, stack, index, encoder_layers, decoder_layers, cfg):
        nn.init.ones_(self.gain)
        with torch.no_grad():
            layer.ffn.fc2.weight.mul_((encoder_layers + decoder_layers) ** -0.5)

    @classmethod
    def init_from_data(cls, model, batch):
        cls.data_calls.append(tuple(batch[0].shape))
        with torch.no_grad():
            for layer in list(model.encoder_layers) + list(model.decoder_layers):
                layer.residual.gain.fill_(0.5)


@pytest.fixture
def gated():
    """The variant, described and given its module for this test only."""
    variant = register_norm(NormVariant("gated", "gated", final_norm=False, differences=(
        Difference("parameters", "a learned gain per layer on the residual branch"),
        Difference("layernorms removed", "every LayerNorm"),
        Difference("initialization", "fc2 scaled by (encoder_layers + decoder_layers)^-1/2"))))
    register_residual("gated")(GatedResidual)
    GatedResidual.data_calls.clear()
    yield variant
    NORMS.pop("gated")
    RESIDUALS.pop("gated")


@pytest.fixture
def bpe_dir(tmp_path):
    """Random train.{de,en}.ids and a sentencepiece model of VOCAB pieces (what training and gradinit read)."""
    return fake_bpe(tmp_path / "bpe", vocab=VOCAB, n=64)


def test_registry_holds_the_papers_two_equations():
    assert list(NORMS)[:2] == ["post", "pre"]  # the order figures and tables use
    post, pre = norm_variant("post"), norm_variant("pre")
    assert (post.label, post.final_norm, post.differences) == ("Post-LN", False, ())
    assert (pre.label, pre.final_norm, pre.differences) == ("Pre-LN", True, ())  # final LN iff normalize_before
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8)
    f = torch.nn.Linear(8, 8)
    cfg = ModelConfig(vocab_size=VOCAB, d_model=8)
    half = lambda t: 0.5 * t  # noqa: E731  (a deterministic stand-in for dropout: it acts on F's output only)
    for name, expected in (("post", lambda ln: ln(x + 0.5 * f(x))),  # LN(x + F(x))
                           ("pre", lambda ln: x + 0.5 * f(ln(x)))):  # x + F(LN(x))
        residual, ln = RESIDUALS[name](cfg), torch.nn.LayerNorm(8)
        with torch.no_grad():
            ln.weight.uniform_(0.5, 1.5), ln.bias.normal_()
            residual.weight.copy_(ln.weight), residual.bias.copy_(ln.bias)
            torch.testing.assert_close(residual(x, f, half), expected(ln), rtol=0, atol=0)


def test_every_described_variant_has_its_module():
    assert list(RESIDUALS) == list(NORMS)  # registered in the same order, by the same names


# The variants whose references build fc1 and fc2 with nn.Linear's initialization (their tests check it), and those
# whose own initialization redraws or rescales the fc1 and fc2 weights (theirs check those).
LINEAR_DEFAULT_FFN = ("b2t", "resi_dual")
OWN_FFN_WEIGHTS = ("deepnorm", "tfixup")


@pytest.mark.parametrize("norm", [n for n in NORMS if n not in LINEAR_DEFAULT_FFN])
def test_other_variants_keep_fairseq_s_ffn_initialization(norm):
    """fairseq 0.9.0's Linear(): zero biases, and Post-LN's Xavier-uniform weights for the seed (unless the variant
    draws or scales its own); b2t and resi_dual alone take nn.Linear's."""
    post, net = tiny_model("post"), tiny_model(norm)
    for ours, theirs in zip([*net.encoder_layers, *net.decoder_layers], [*post.encoder_layers, *post.decoder_layers]):
        for fc, fc_post in ((ours.ffn.fc1, theirs.ffn.fc1), (ours.ffn.fc2, theirs.ffn.fc2)):
            assert not fc.bias.any()
            bound = (6 / (fc.in_features + fc.out_features)) ** 0.5
            assert norm in OWN_FFN_WEIGHTS or torch.equal(fc.weight, fc_post.weight)
            assert float(fc_post.weight.detach().abs().max()) <= bound


def test_unknown_norm_is_a_clear_error():
    choices = re.escape(", ".join(map(repr, NORMS)))  # every registered variant, in registration order
    with pytest.raises(LnReproError, match=rf"model\.norm: expected one of {choices}, got 'middle'"):
        Transformer(ModelConfig(vocab_size=VOCAB, norm="middle", **TINY))
    with pytest.raises(LnReproError, match="already registered"):
        register_norm(NormVariant("post", "again", final_norm=False))
    with pytest.raises(LnReproError, match="already registered"):
        register_residual("post")(GatedResidual)
    with pytest.raises(LnReproError, match="difference kind"):
        Difference("colour", "blue")
    register_norm(NormVariant("described_only", "?", final_norm=False))
    try:
        with pytest.raises(LnReproError, match="'described_only' has no residual module"):
            Transformer(ModelConfig(vocab_size=VOCAB, norm="described_only", **TINY))
    finally:
        NORMS.pop("described_only")


def test_added_variant_builds_trains_and_runs_gradinit(gated, bpe_dir, tmp_path):
    # The config accepts the new name: the schema's enum is read from the registry when the config is loaded.
    measured = ["post", "pre", "pre_nofinal", "deepnorm", "admin", "rezero", "gated"]
    experiment = tiny_experiment({**TINY, "norm": "gated"},
                                 {"batches": 2, "seeds": [1, 2, 3], "max_tokens": 128, "depths": [2, 3],
                                  "norms": measured})
    assert experiment.gradinit_config().model.norm == "gated"
    NORMS.pop("gated")
    try:
        with pytest.raises(LnReproError, match="gated"):  # the same config, the variant unregistered: refused
            tiny_experiment({**TINY, "norm": "gated"})
    finally:
        register_norm(gated)

    # Builds: one gain per layer, no LayerNorm; its hook changed fc2 only: every other weight is Post-LN's.
    torch.manual_seed(0)
    post = Transformer(ModelConfig(vocab_size=VOCAB, norm="post", dropout=0.1, **TINY)).state_dict()
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=VOCAB, norm="gated", dropout=0.1, **TINY))
    state = model.state_dict()
    assert model.encoder_norm is None and model.decoder_norm is None
    assert not any("layer_norm" in k for k in state)
    assert sorted(k for k in state if k not in post) == sorted(
        f"{s}_layers.{i}.residual.gain" for s in ("encoder", "decoder") for i in range(2))
    for k, v in post.items():
        if "layer_norm" in k:
            continue
        expected = v * 4 ** -0.5 if k.endswith("ffn.fc2.weight") else v
        assert torch.equal(state[k], expected), k
    layer, x = model.encoder_layers[0].eval(), torch.randn(2, 5, 16)
    with torch.no_grad():
        h = x + layer.self_attn(x)
        torch.testing.assert_close(layer(x, None), h + layer.ffn(h))

    # The data hook, then one update as the training loop makes it (label-smoothed loss per target token, AdamW).
    src_ids, tgt_ids = read_ids(bpe_dir / "train.de.ids"), read_ids(bpe_dir / "train.en.ids")
    src, prev, target = collate(src_ids[:8], tgt_ids[:8])
    model.init_from_data((src, prev, target))
    assert GatedResidual.data_calls == [tuple(src.shape)] and float(layer.residual.gain.detach()) == 0.5
    ntok = int(target.ne(PAD).sum())

    def loss() -> torch.Tensor:
        return label_smoothed_nll_loss(model(src, prev), target, 0.1)[0] / ntok

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-8)
    model.train()
    opt.zero_grad(set_to_none=True)
    loss().backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values())  # the gains learn too
    model.eval()
    with torch.no_grad():
        before = float(loss())
    opt.step()
    with torch.no_grad():
        assert float(loss()) < before  # one step on this batch lowers its loss
    assert float(layer.residual.gain.detach()) != 0.5

    # gradinit measures the variants analysis.gradinit.norms lists, the new one included, in that order, with the
    # same rows per variant, after its data hook (once per model, on the seed's first batch).
    GatedResidual.data_calls.clear()
    out = tmp_path / "analysis" / "gradinit.csv"
    df = run_gradinit(experiment.gradinit_config(), bpe_dir, out, threads=1)
    assert len(GatedResidual.data_calls) == 3 * 2  # seeds x depths
    table = pd.read_csv(out)
    assert list(dict.fromkeys(table["norm"])) == measured and list(NORMS)[-1] == "gated"
    counts = table.groupby("norm").size()
    # 3 seeds x (2 + 3 layers) x (enc 6 + dec 10 matrices a layer) x 2 statistics
    assert counts["gated"] == counts["post"] == counts["pre"] == 3 * 5 * 16 * 2
    assert (table.loc[table["norm"] == "gated", "value"] > 0).all()
    assert plot_gradinit(df, tmp_path / "gradinit.png").stat().st_size > 0  # the figure draws it too


def test_added_variant_trains_through_the_loop(gated, bpe_dir, tmp_path):
    """The training loop builds it and calls its data hook once, on a training batch, before the first update."""
    import json

    from lnrepro.train.loop import train_run
    from test_train import write_config

    config = write_config(tmp_path / "config.json", max_updates=1, epochs=1, max_tokens=128)
    cfg = json.loads(config.read_text())
    cfg["model"]["norm"] = "gated"
    config.write_text(json.dumps(cfg))
    train_run(tmp_path / "run", config, bpe_dir, threads=1)
    assert len(GatedResidual.data_calls) == 1
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["updates"] == 1
