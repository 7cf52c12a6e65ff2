"""The expected gradient at initialization: the statistic by hand, the table on a tiny Transformer and a
fabricated BPE folder, the fit over depths, and the measurement after warm-up."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest
import sentencepiece as spm
import torch
import torch.nn as nn

from conftest import fake_bpe, tiny_experiment
from lnrepro.analysis.gradinit import (
    STATISTICS,
    TrainBatches,
    gradient_statistics,
    init_model_settings,
    run_after_warmup,
    run_gradinit,
    token_loss,
    warmup_end_checkpoints,
)
from lnrepro.analysis.stats.gradinit_fit import fit_depths, headline, power_law
from lnrepro.config import AnalysisSettings, GradinitSettings
from lnrepro.records import GRADINIT_COLUMNS, GRADINIT_FIT_COLUMNS
from lnrepro.errors import LnReproError
from lnrepro.io import atomic_torch_save, atomic_write_json, file_sha256
from lnrepro.model import Transformer
from lnrepro.model.transformer import weights_blob
from lnrepro.config.settings import GRADINIT_NORMS as NORMS  # the variants gradinit measures by default

torch.set_num_threads(1)

GRADINIT = {"batches": 2, "seeds": [1, 2, 3], "max_tokens": 128, "depths": [2, 3]}


def experiment(layers: int = 3, **model):
    return tiny_experiment({"encoder_layers": layers, "decoder_layers": layers, "d_model": 16, "heads": 2,
                            "ffn_dim": 32, "dropout": 0.1, "max_positions": 64, **model}, GRADINIT)


class _OneMatrix(nn.Module):
    """A model whose one layer weight (encoder layer 0, FFN fc1) has the gradient ``A`` under loss sum(W * A)."""

    def __init__(self) -> None:
        super().__init__()
        layer = nn.Module()
        layer.ffn = nn.Module()
        layer.ffn.fc1 = nn.Linear(2, 2, bias=False)
        self.encoder_layers = nn.ModuleList([layer])


def test_expected_gradient_statistic_by_hand():
    """Two batches with gradients g1 = [[3, 0], [0, 4]] (norm 5) and g2 = [[1, 0], [0, 0]] (norm 1):
    mean [[2, 0], [0, 2]], so ||E[g]||_F = 2 sqrt(2); ||g_k - mean||^2 = 5 each, so its noise is
    sqrt(10 / (2 * 1)) = sqrt(5); the mean of norms is 3, its noise std(5, 1) / sqrt(2) = 2."""
    batches = [torch.tensor([[3.0, 0.0], [0.0, 4.0]]), torch.tensor([[1.0, 0.0], [0.0, 0.0]])]
    stats = gradient_statistics(_OneMatrix(), batches, lambda m, a: (m.encoder_layers[0].ffn.fc1.weight * a).sum())
    assert list(stats) == [("enc", 0, "ffn", "fc1")]
    got = stats[("enc", 0, "ffn", "fc1")]
    assert set(got) == set(STATISTICS)
    assert got["expected_grad_fro"] == pytest.approx((2 * math.sqrt(2), math.sqrt(5)), rel=1e-12)
    assert got["mean_grad_norm"] == pytest.approx((3.0, 2.0), rel=1e-12)


def test_statistic_matches_separate_gradients_of_a_transformer(tmp_path):
    """On the real model and loss: the statistics equal those computed from each batch's own autograd gradient."""
    fake_bpe(tmp_path / "bpe")
    exp = experiment()
    batches = TrainBatches(tmp_path / "bpe").choose(128, 3, seed=1)
    torch.manual_seed(1)
    model = Transformer(init_model_settings(exp.gradinit_config(), "post", 2).model_config(40)).eval()
    loss = token_loss(0.0, "fp32", torch.device("cpu"))
    stats = gradient_statistics(model, batches, loss)
    w = model.decoder_layers[1].ffn.fc2.weight
    g = torch.stack([torch.autograd.grad(loss(model, b), w)[0] for b in batches]).double()
    mean, k = g.mean(0), len(batches)
    noise = math.sqrt(float(((g - mean) ** 2).sum()) / (k * (k - 1)))
    norms = g.flatten(1).norm(dim=1)
    got = stats[("dec", 1, "ffn", "fc2")]
    assert got["expected_grad_fro"] == pytest.approx((float(mean.norm()), noise), rel=1e-5)
    assert got["mean_grad_norm"] == pytest.approx((float(norms.mean()), float(norms.std() / math.sqrt(k))), rel=1e-5)
    assert got["expected_grad_fro"][0] < got["mean_grad_norm"][0]  # the norm of a mean is at most the mean norm


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    d = tmp_path_factory.mktemp("gi")
    fake_bpe(d / "bpe")
    out, fit = d / "analysis" / "gradinit.csv", d / "analysis" / "gradinit_fit.csv"
    df = run_gradinit(experiment().gradinit_config(), d / "bpe", out, threads=1, fit_csv=fit)
    return df, out, fit


def test_rows_for_every_layer_depth_seed_and_norm(table):
    df, out, _ = table
    assert list(df.columns) == GRADINIT_COLUMNS
    assert pd.read_csv(out).shape == df.shape  # written, and readable back
    assert set(df["norm"]) == set(NORMS) and set(df["seed"]) == {1, 2, 3} and set(df["depth"]) == {2, 3}
    assert set(df["checkpoint"]) == {"init"} and set(df["statistic"]) == set(STATISTICS)
    per = df.groupby(["norm", "depth", "seed", "stack"])["layer"].apply(lambda s: sorted(set(s)))
    assert all(v == list(range(depth)) for (_, depth, _, _), v in per.items())
    # a variant's own parameters (ReZero's scalars: sublayer "residual") beside the weight matrices
    own = df["sublayer"] == "residual"
    assert set(df.loc[own, "norm"]) == {"rezero"} and set(df.loc[own, "param"]) == {"resweight"}
    matrices = df[~own]
    enc = set(map(tuple, matrices[matrices["stack"] == "enc"][["sublayer", "param"]].drop_duplicates().values))
    dec = set(map(tuple, matrices[matrices["stack"] == "dec"][["sublayer", "param"]].drop_duplicates().values))
    attn = {"q_proj", "k_proj", "v_proj", "out_proj"}
    assert enc == {("self_attn", p) for p in attn} | {("ffn", "fc1"), ("ffn", "fc2")}
    assert dec == enc | {("encoder_attn", p) for p in attn}
    # every registered norm x 3 seeds x (2 + 3 layers) x (6 enc + 10 dec matrices) x 2 statistics; ReZero's
    # scalars: 3 seeds x (2 + 3 layers) x 2 stacks x 2 statistics
    assert len(matrices) == len(NORMS) * 3 * (2 + 3) * 16 * 2 and own.sum() == 3 * (2 + 3) * 2 * 2
    assert np.isfinite(df["value"]).all()
    # every gradient is nonzero, but ReZero's matrices' (exactly 0 at init: each branch is multiplied by its a = 0)
    zero = (df["norm"] == "rezero") & (~own | (df["stack"] == "enc"))
    assert (df.loc[zero, "value"] == 0).all() and (df.loc[zero, "noise"] == 0).all()
    assert (df.loc[~zero, "value"] > 0).all() and (df.loc[~zero, "noise"] > 0).all()
    assert set(df["dropout"]) == {False} and set(df["batches"]) == {2} and set(df["label_smoothing"]) == {0.0}
    assert set(df["d_model"]) == {16} and set(df["precision"]) == {"fp32"}


def test_width_override_and_shared_initial_weights():
    exp = experiment()
    config = exp.gradinit_config()
    wide = dataclasses.replace(config, gradinit=GradinitSettings(d_model=24, heads=3))
    m = init_model_settings(wide, "pre", 5)
    assert (m.d_model, m.heads, m.ffn_dim, m.encoder_layers, m.decoder_layers, m.norm) == (24, 3, 32, 5, 5, "pre")
    with pytest.raises(LnReproError, match="not divisible by heads"):
        init_model_settings(dataclasses.replace(config, gradinit=GradinitSettings(heads=3)), "post", 2)
    models = {}
    for norm in ("post", "pre"):
        torch.manual_seed(7)
        models[norm] = dict(Transformer(init_model_settings(config, norm, 3).model_config(40)).named_parameters())
    shared = set(models["post"]) & set(models["pre"])
    assert set(models["pre"]) - shared == {"encoder_norm.weight", "encoder_norm.bias", "decoder_norm.weight",
                                           "decoder_norm.bias"}
    assert all(torch.equal(models["post"][n], models["pre"][n]) for n in shared)


def test_post_and_pre_differ_but_are_deterministic(tmp_path, table):
    df, _, _ = table
    key = ["depth", "seed", "stack", "layer", "sublayer", "param", "statistic"]
    post = df[df.norm == "post"].set_index(key)["value"]
    pre = df[df.norm == "pre"].set_index(key)["value"]
    assert not np.allclose(post.values, pre.loc[post.index].values)
    fake_bpe(tmp_path / "bpe")
    again = run_gradinit(experiment().gradinit_config(), tmp_path / "bpe", tmp_path / "g.csv", threads=1)
    pd.testing.assert_frame_equal(again, df)


def test_missing_bpe_model_is_named(tmp_path):
    fake_bpe(tmp_path / "bpe")
    (tmp_path / "bpe" / "spm.model").unlink()
    with pytest.raises(LnReproError, match="spm.model"):
        run_gradinit(experiment().gradinit_config(), tmp_path / "bpe", tmp_path / "g.csv", threads=1)


def test_paper_trend_post_ln_top_decoder_ffn_gradient_is_larger(tmp_path):
    """The paper's Figure 3, where a tiny model shows it robustly (checked over 5 seeds at d_model 16 and 32:
    the top decoder layer's W^2 gradient is 1.6-4x larger in Post-LN, while the bottom layer's is smaller):
    the Post-LN/Pre-LN ratio of the W^2 (fc2) expected gradient grows from the bottom to the top decoder layer
    and exceeds 1 at the top."""
    fake_bpe(tmp_path / "bpe", n=200)
    settings = GradinitSettings(batches=2, seeds=(1, 2, 3), max_tokens=256, depths=(6,))
    exp = dataclasses.replace(experiment(d_model=32, ffn_dim=64), analysis=AnalysisSettings(settings))
    df = run_gradinit(exp.gradinit_config(), tmp_path / "bpe", tmp_path / "g.csv", threads=1)
    f = df[(df["param"] == "fc2") & (df["stack"] == "dec") & (df["statistic"] == "expected_grad_fro")]
    by = f.groupby(["norm", "layer"])["value"].mean()
    ratio = by["post"] / by["pre"]
    assert ratio[5] > 1.3
    assert ratio[5] > 2 * ratio[0]


# ---- the fit over depths


def test_power_law_recovers_an_exact_exponent_and_its_interval_covers_noise():
    depths = np.repeat([6, 8, 10, 12, 14], 3)
    b, lo, hi, c = power_law(depths, 1.6 * depths ** -0.5)
    assert (b, lo, hi, c) == pytest.approx((-0.5, -0.5, -0.5, 1.6), abs=1e-9)
    noisy = 1.6 * depths ** -0.5 * np.exp(np.random.default_rng(0).normal(0, 0.05, len(depths)))
    b, lo, hi, _ = power_law(depths, noisy)
    assert lo < -0.5 < hi and lo < b < hi
    assert all(math.isnan(v) for v in power_law(np.array([6, 6, 6]), np.array([1.0, 2.0, 3.0])))


def test_fit_table_from_gradinit_rows(table):
    df, _, fit_csv = table
    fit = pd.read_csv(fit_csv)
    assert list(fit.columns) == GRADINIT_FIT_COLUMNS
    pd.testing.assert_frame_equal(fit, fit_depths(df).reset_index(drop=True), check_dtype=False, atol=1e-5)
    top = headline(fit).set_index("norm")
    assert set(top.index) == set(NORMS) and set(top["layer"]) == {"last"} and set(top["param"]) == {"fc2"}
    assert top.loc["post", "theory_b"] == 0.0 and top.loc["pre", "theory_b"] == -0.5
    assert set(top["depths"]) == {"2;3"} and set(top["seeds"]) == {"1;2;3"} and set(top["n"]) == {6}
    fitted = top.drop(index="rezero")  # ReZero's W^2 has a zero gradient at init: no exponent
    assert (fitted["b_low"] <= fitted["b"]).all() and (fitted["b"] <= fitted["b_high"]).all()
    assert fitted["note"].isna().all() and math.isnan(top.loc["rezero", "b"])
    assert top.loc["rezero", "note"].startswith("undefined at initialization")
    # the fit reads the last layer: here the decoder's layer 1 at depth 2 and layer 2 at depth 3
    last = df[(df["norm"] == "post") & (df["stack"] == "dec") & (df["param"] == "fc2")
              & (df["statistic"] == "expected_grad_fro") & (df["layer"] == df["depth"] - 1)]
    b, lo, hi, c = power_law(last["depth"].to_numpy(), last["value"].to_numpy())
    assert top.loc["post", ["b", "b_low", "b_high", "c"]].tolist() == pytest.approx([b, lo, hi, c], rel=1e-4)


# ---- after warm-up


def _trained_on(bpe) -> dict:
    """A BPE folder as apply_bpe leaves it (stats.json names its model) and the manifests' data_sha256 of it."""
    (bpe / "stats.json").write_text(json.dumps({"spm_model_sha256": file_sha256(bpe / "spm.model")}))
    return {name: file_sha256(bpe / name) for name in ("spm.model", "train.de.ids", "train.en.ids")}


def _checkpoint(run_dir, model, epoch: int, updates: int, run: str = "postln_warmup_isqrt", status: str = "ok",
                data: dict | None = None):
    """An epoch manifest as training writes it, with its weights file."""
    weights = run_dir / "state" / "epochs" / f"epoch{epoch:03d}.pt"
    atomic_torch_save(weights_blob(model), weights)
    manifest = run_dir / "epochs" / f"epoch{epoch:03d}.json"
    atomic_write_json(manifest, {"epoch": epoch, "status": status, "weights": str(weights.relative_to(run_dir)),
                                 "sha256": file_sha256(weights), "updates": updates, "run": run,
                                 "seed": int(run_dir.name.removeprefix("seed")), "wall_s": 1.0, "partial": False,
                                 "config_sha256": None, "data_sha256": data, "where_ran": {}})
    return manifest


def test_after_warmup_takes_the_first_checkpoint_that_reaches_t_warmup(tmp_path):
    data = _trained_on(fake_bpe(tmp_path / "bpe"))
    exp = experiment(2)
    t_warmup = exp.runs["postln_warmup_isqrt"].schedule.warmup_updates
    torch.manual_seed(0)
    model = Transformer(exp.runs["postln_warmup_isqrt"].model.model_config(40))
    manifests = []
    for seed in (1, 2):
        d = tmp_path / "runs" / "postln_warmup_isqrt" / f"seed{seed}"
        manifests += [_checkpoint(d, model, 1, t_warmup - 1, data=data),
                      _checkpoint(d, model, 2, t_warmup + seed - 1, data=data),
                      _checkpoint(d, model, 3, 2 * t_warmup, data=data)]
    chosen = warmup_end_checkpoints(manifests, "postln_warmup_isqrt", t_warmup)
    assert {s: m.epoch for s, (_, m) in chosen.items()} == {1: 2, 2: 2}
    config = exp.gradinit_config(after_warmup=True)
    for seed, own in ((1, manifests[:3]), (2, manifests[3:])):  # one table per seed: that unit's
        df = run_after_warmup(config, tmp_path / "bpe", own, tmp_path / f"aw{seed}.csv", threads=1)
        assert list(df.columns) == GRADINIT_COLUMNS and set(df["checkpoint"]) == {"after_warmup"}
        assert set(df["norm"]) == {"post"} and set(df["run"]) == {"postln_warmup_isqrt"} and set(df["epoch"]) == {2}
        assert set(df["seed"]) == {seed} and set(df["updates"]) == {t_warmup + seed - 1} and set(df["depth"]) == {2}
    with pytest.raises(LnReproError, match=r"seeds \[1, 2\]; the table is one unit's"):
        run_after_warmup(config, tmp_path / "bpe", manifests, tmp_path / "aw.csv", threads=1)
    with pytest.raises(LnReproError, match="no checkpoint reaches T_warmup"):
        warmup_end_checkpoints(manifests[:1], "postln_warmup_isqrt", t_warmup)
    with pytest.raises(LnReproError, match="expected 'other'"):
        warmup_end_checkpoints(manifests, "other", t_warmup)
    # the BPE folder of another experiment (same vocabulary) is refused, as scoring refuses it
    other = shutil.copytree(tmp_path / "bpe", tmp_path / "other")
    (other / "spm.txt").write_text("\n".join(f"ein baum ist gross zahl {i} a tree is big" for i in range(50)) + "\n")
    spm.SentencePieceTrainer.train(input=str(other / "spm.txt"), model_prefix=str(other / "spm"), vocab_size=40,
                                   model_type="bpe", bos_id=0, pad_id=1, eos_id=2, unk_id=3, minloglevel=2)
    assert _trained_on(other)["spm.model"] != data["spm.model"]
    with pytest.raises(LnReproError, match=r"spm\.model: not the BPE model .*epoch002\.json was trained with"):
        run_after_warmup(config, tmp_path / "other", manifests[3:], tmp_path / "aw2.csv", threads=1)
    # a manifest of seed 2 copied into seed 1's folder is not read as either seed's (lnrepro.integrity)
    shutil.copy(manifests[5], manifests[2])
    with pytest.raises(LnReproError, match=r"seed1/epochs/epoch003\.json: the record of run postln_warmup_isqrt "
                                           r"seed 2, read as run postln_warmup_isqrt seed 1"):
        warmup_end_checkpoints(manifests, "postln_warmup_isqrt", t_warmup)


def test_by_hand_gradinit_runs_on_the_cpu_where_cuda_is_visible(tmp_path, monkeypatch):
    """``lnrepro gradinit`` without --device (a job given no GPU) measures on the CPU even where torch sees a
    GPU: every model it measures is on the CPU."""
    from lnrepro.analysis import gradinit
    from lnrepro.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    devices = []

    def measured(model, batches, loss):
        devices.append(next(model.parameters()).device)
        return gradient_statistics(model, batches, loss)

    monkeypatch.setattr(gradinit, "gradient_statistics", measured)
    fake_bpe(tmp_path / "bpe")
    config = experiment().gradinit_config()
    config = dataclasses.replace(config, gradinit=dataclasses.replace(config.gradinit, seeds=(1,), depths=(2,)))
    config.write(tmp_path / "gradinit.json")
    out = tmp_path / "gradinit.csv"
    assert main(["gradinit", "--gradinit-config", str(tmp_path / "gradinit.json"), "--bpe", str(tmp_path / "bpe"),
                 "--out", str(out)]) == 0
    assert out.exists() and devices and set(devices) == {torch.device("cpu")}
