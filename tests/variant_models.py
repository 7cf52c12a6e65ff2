"""The tiny model the norm variants' tests build (test_deepnorm, test_admin, test_rezero): 2 encoder and 3 decoder
layers (so that the encoder's and decoder's constants differ), width 16."""

from __future__ import annotations

import torch

from lnrepro.model import ModelConfig, Transformer

VOCAB = 40
TINY = dict(encoder_layers=2, decoder_layers=3, d_model=16, heads=2, ffn_dim=32, max_positions=64)


def tiny_model(norm: str, seed: int = 0, **over) -> Transformer:
    """A freshly initialized tiny ``norm`` model under ``seed``; ``over`` replaces ModelConfig fields."""
    torch.manual_seed(seed)
    return Transformer(ModelConfig(vocab_size=VOCAB, norm=norm, **{**TINY, **over}))


def assert_linear_default_ffn(model: Transformer, encoder_scale: float = 1.0, decoder_scale: float = 1.0) -> None:
    """Every layer's fc1 and fc2 as nn.Linear initializes them: biases nonzero within +-1/sqrt(fan_in), weights within
    the Kaiming-uniform bound 1/sqrt(fan_in) (times the stack's scale where the variant scales them) and past 0.9 of
    it. fairseq 0.9.0's zero biases fail, and so do its Xavier weights: sqrt(6/(fan_in+fan_out)) is the wider bound
    for both of the tiny model's FFN shapes."""
    for scale, layers in ((encoder_scale, model.encoder_layers), (decoder_scale, model.decoder_layers)):
        for layer in layers:
            for fc in (layer.ffn.fc1, layer.ffn.fc2):
                bound = fc.in_features ** -0.5
                largest, bias = float(fc.weight.detach().abs().max()), fc.bias.detach().abs()
                assert 0.9 * bound * scale < largest <= bound * scale, (fc, largest, bound * scale)
                assert bool((bias > 0).all()) and float(bias.max()) <= bound, fc


def post_ln_with_linear_default_ffn(seed: int = 0) -> Transformer:
    """Post-LN's tiny model under ``seed``, then each layer's fc1 and fc2 drawn again by nn.Linear's own
    initialization, layer by layer, encoder first: the draws a variant with nn.Linear's FFN makes after fairseq's."""
    model = tiny_model("post", seed)
    with torch.no_grad():
        for layer in [*model.encoder_layers, *model.decoder_layers]:
            layer.ffn.fc1.reset_parameters()
            layer.ffn.fc2.reset_parameters()
    return model


def one_update(model: Transformer, batch: tuple[torch.Tensor, ...]) -> None:
    """One AdamW update on ``batch`` (src, prev, target) as the training loop makes it, in training mode."""
    from lnrepro.train.loss import label_smoothed_nll_loss
    from lnrepro.vocab import PAD

    src, prev, target = batch
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-8)
    (label_smoothed_nll_loss(model(src, prev), target, 0.1)[0] / int(target.ne(PAD).sum())).backward()
    opt.step()
    model.eval()


def trains_and_resumes_bitwise(norm: str, bpe_dir, tmp_path, monkeypatch) -> dict:
    """Train ``norm`` through ``train_run`` (tiny config, 2 epochs, a checkpoint every 2 updates), then again
    killed after its second checkpoint and resumed: the same summary and weights bitwise. Returns the summary."""
    import json

    import pytest

    from lnrepro.train import loop
    from test_train import assert_same_weights, write_config

    config = write_config(tmp_path / "config.json", max_tokens=128, checkpoint_every=2, epochs=2)
    cfg = json.loads(config.read_text())
    cfg["model"]["norm"] = norm
    config.write_text(json.dumps(cfg))
    reference = tmp_path / "reference"
    loop.train_run(reference, config, bpe_dir, threads=1)
    summary = json.loads((reference / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["updates"] > 4

    class Stop(Exception):
        pass

    save, saves = loop._Trainer._save_last, []

    def save_then_stop(self):
        save(self)
        saves.append(self.update)
        if len(saves) == 2:
            raise Stop

    run = tmp_path / "run"
    monkeypatch.setattr(loop._Trainer, "_save_last", save_then_stop)
    with pytest.raises(Stop):
        loop.train_run(run, config, bpe_dir, threads=1)
    monkeypatch.setattr(loop._Trainer, "_save_last", save)
    loop.train_run(run, config, bpe_dir, threads=1)
    resumed = json.loads((run / "summary.json").read_text())
    assert resumed["attempts"] == 2 and resumed["updates"] == summary["updates"]
    assert resumed["final_loss"] == summary["final_loss"]
    assert_same_weights(reference, run, epochs=2)
    return summary


def gradinit_measures(norm: str, bpe_dir) -> None:
    """gradinit, with ``norm`` listed in analysis.gradinit.norms beside Post-LN, measures it: as many rows as
    Post-LN, every matrix's gradient finite and nonzero, and the depth fit's exponent of the last decoder W^2."""
    import math

    import pandas as pd

    from conftest import tiny_experiment
    from lnrepro.analysis.gradinit import run_gradinit

    experiment = tiny_experiment({**TINY, "decoder_layers": 2}, {"batches": 2, "seeds": [1, 2, 3], "max_tokens": 128,
                                                                 "depths": [2, 3], "norms": ["post", norm]})
    out, fit_csv = bpe_dir.parent / "gradinit.csv", bpe_dir.parent / "fit.csv"
    run_gradinit(experiment.gradinit_config(), bpe_dir, out, threads=1, fit_csv=fit_csv)
    table = pd.read_csv(out)
    assert list(dict.fromkeys(table["norm"])) == ["post", norm]
    ours = table[table["norm"] == norm]
    assert len(ours) == len(table[table["norm"] == "post"]) == 3 * (2 + 3) * 16 * 2 and (ours["value"] > 0).all()
    fit = pd.read_csv(fit_csv, dtype={"note": "string"}).fillna({"note": ""})
    top = fit[(fit["norm"] == norm) & (fit["stack"] == "dec") & (fit["param"] == "fc2")
              & (fit["statistic"] == "expected_grad_fro")]
    assert len(top) == 1 and math.isfinite(top["b"].iloc[0]) and top["note"].iloc[0] == ""


def cached_decode_equals_full(norm: str) -> None:
    """Incremental decoding (the cache of beam search), one position at a time, gives the full pass's logits."""
    model = tiny_model(norm).eval()
    g = torch.Generator().manual_seed(4)
    src, prev = torch.randint(4, VOCAB, (3, 6), generator=g), torch.randint(4, VOCAB, (3, 5), generator=g)
    with torch.no_grad():
        full = model(src, prev)
        enc, cache = model.encode(src), model.new_cache()
        steps = [model.decode(prev[:, t: t + 1], enc, cache) for t in range(prev.size(1))]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
