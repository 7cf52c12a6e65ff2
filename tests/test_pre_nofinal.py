"""pre_nofinal: Pre-LN without the final LayerNorm of each stack, a variant of its own (its module in
lnrepro.model.variants, its description in lnrepro.norms): accepted by the config, Pre-LN's weights and layers
without the two final LayerNorms, trained through the training loop, measured by gradinit."""

from __future__ import annotations

import json

import pandas as pd
import torch
import torch.nn.functional as F

from conftest import fake_bpe, tiny_experiment
from lnrepro.analysis.gradinit import run_gradinit
from lnrepro.model import ModelConfig, Transformer
from lnrepro.norms import norm_variant
from lnrepro.train.loop import train_run
from test_train import write_config

torch.set_num_threads(1)

TINY = dict(encoder_layers=2, decoder_layers=2, d_model=16, heads=2, ffn_dim=32, max_positions=64)


def test_description():
    v = norm_variant("pre_nofinal")
    assert v.final_norm is False and [d.kind for d in v.differences] == ["layernorms removed"]


def test_pre_ln_without_the_final_layer_norms():
    models = {}
    for norm in ("pre", "pre_nofinal"):
        torch.manual_seed(0)
        models[norm] = Transformer(ModelConfig(vocab_size=40, norm=norm, **TINY)).eval()
    pre, nofinal = models["pre"], models["pre_nofinal"]
    assert nofinal.encoder_norm is None and nofinal.decoder_norm is None
    # The same initial weights as Pre-LN's for a seed, the final LayerNorms left out.
    pre_state = {k: v for k, v in pre.state_dict().items() if not k.startswith(("encoder_norm.", "decoder_norm."))}
    state = nofinal.state_dict()
    assert list(state) == list(pre_state) and all(torch.equal(state[k], v) for k, v in pre_state.items())
    g = torch.Generator().manual_seed(1)
    src, prev = torch.randint(4, 40, (3, 7), generator=g), torch.randint(4, 40, (3, 5), generator=g)
    with torch.no_grad():
        x = pre.embed_scale * pre.encoder_embed(src) + pre.positions(src)
        for layer in pre.encoder_layers:
            x = layer(x, None)
        torch.testing.assert_close(nofinal.encode(src).out, x, rtol=0, atol=0)
        enc = nofinal.encode(src)
        y = pre.embed_scale * pre.decoder_embed(prev) + pre.positions(prev)
        for layer in pre.decoder_layers:
            y = layer(y, enc)
        torch.testing.assert_close(nofinal(src, prev), F.linear(y, pre.decoder_embed.weight), rtol=0, atol=0)


def test_trains_and_runs_gradinit(tmp_path):
    bpe_dir = fake_bpe(tmp_path / "bpe", vocab=40, n=64)
    experiment = tiny_experiment({**TINY, "norm": "pre_nofinal"},
                                 {"batches": 2, "seeds": [1, 2, 3], "max_tokens": 128, "depths": [2, 3]})
    assert experiment.gradinit_config().model.norm == "pre_nofinal"  # the config accepts it

    config = write_config(tmp_path / "config.json", max_updates=1, epochs=1, max_tokens=128)
    cfg = json.loads(config.read_text())
    cfg["model"]["norm"] = "pre_nofinal"
    config.write_text(json.dumps(cfg))
    run = tmp_path / "run"
    train_run(run, config, bpe_dir, threads=1)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["updates"] == 1 and summary["status"] == "max_updates"

    out = tmp_path / "gradinit.csv"
    run_gradinit(experiment.gradinit_config(), bpe_dir, out, threads=1)
    table = pd.read_csv(out)
    counts = table.groupby("norm").size()
    assert counts["pre_nofinal"] == counts["pre"] == 3 * 5 * 16 * 2
    assert (table.loc[table["norm"] == "pre_nofinal", "value"] > 0).all()
