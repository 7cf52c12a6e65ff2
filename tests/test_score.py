"""score_checkpoints end to end on a tiny synthetic translation task (a word-for-word mapping).

A model trained here for a few hundred updates must score far above an untrained one; a diverged manifest is
recorded without decoding; corrupt weights and a malformed eval.json are errors naming the file or the key.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from pathlib import Path

import pytest
import torch

from lnrepro.errors import LnReproError
from lnrepro.evaluate.bleu import tokenized_bleu
from lnrepro.evaluate.score import score_checkpoints, skip_reason
from lnrepro.io import atomic_torch_save, file_sha256, read_lines
from lnrepro.paths import RunFolder
from lnrepro.records import CheckpointScores, EpochManifest, RunStatus, SplitScores

torch.set_num_threads(1)

DE = ["eins", "zwei", "drei", "vier", "fuenf", "sechs", "sieben", "acht"]
EN = ["one", "two", "three", "four", "five", "six", "seven", "eight"]
DECODE = {"beam": 4, "lenpen": 1.0, "max_len_a": 0, "max_len_b": 20, "precision": "fp32"}
EVAL = {"splits": {"valid": DECODE, "test": DECODE}, "max_tokens": 400, "label_smoothing": 0.1}  # a scoring slice


def _pairs(n: int, rng: random.Random) -> list[tuple[str, str, str]]:
    """(de tokenized, en tokenized, en raw): the raw side is capitalized with the period attached."""
    out = []
    for _ in range(n):
        idx = [rng.randrange(len(DE)) for _ in range(rng.randint(2, 6))]
        de = " ".join(DE[i] for i in idx) + " ."
        en_words = [EN[i] for i in idx]
        en = " ".join(en_words) + " ."
        raw = " ".join([en_words[0].capitalize()] + en_words[1:]) + "."
        out.append((de, en, raw))
    return out


def _ids_line(sp, text: str) -> str:
    return " ".join(map(str, sp.encode(text)))


def _save_weights(model, run_dir, epoch: int, bpe: Path, status: str = "ok") -> "tuple":
    """The weights and the epoch manifest of ``epoch``, as training writes them (RunFolder, EpochManifest), trained
    on the BPE folder ``bpe``."""
    from lnrepro.model.transformer import weights_blob

    folder = RunFolder(str(run_dir))
    manifest = Path(folder.epoch_manifest(epoch))
    data = {name: file_sha256(bpe / name) for name in ("spm.model", "train.de.ids", "train.en.ids")}
    own = {"epoch": epoch, "updates": 0, "wall_s": 0.0, "partial": False, "run": "r", "seed": 1,
           "config_sha256": None, "data_sha256": data, "where_ran": {}}
    if status != "ok":
        EpochManifest(status=RunStatus(status), weights=None, sha256=None, reason="test", **own).write(manifest)
        return manifest, None
    rel = RunFolder().epoch_weights(epoch)
    path = run_dir / rel
    atomic_torch_save(weights_blob(model), path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    EpochManifest(status=RunStatus.OK, weights=rel, sha256=digest, **own).write(manifest)
    return manifest, path


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    """Prepared text, BPE ids, an untrained (epoch 1) and a trained (epoch 2) checkpoint."""
    import sentencepiece as spm

    from lnrepro.model import ModelConfig, Transformer
    from lnrepro.train.batching import collate, read_ids
    from lnrepro.train.loss import label_smoothed_nll_loss

    root = tmp_path_factory.mktemp("score")
    prepared, bpe, run = root / "prepared", root / "bpe", root / "run"
    prepared.mkdir()
    bpe.mkdir()
    rng = random.Random(0)
    data = {"train": _pairs(600, rng), "valid": _pairs(30, rng), "test": _pairs(30, rng)}
    for split, rows in data.items():
        (prepared / f"{split}.de").write_text("".join(r[0] + "\n" for r in rows))
        (prepared / f"{split}.en").write_text("".join(r[1] + "\n" for r in rows))
        if split != "train":
            (prepared / f"{split}.raw.en").write_text("".join(r[2] + "\n" for r in rows))
    corpus = root / "corpus.txt"
    corpus.write_text("".join(r[0] + "\n" + r[1] + "\n" for r in data["train"]))
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(bpe / "spm"), vocab_size=300, model_type="bpe",
        bos_id=0, pad_id=1, eos_id=2, unk_id=3, byte_fallback=True, character_coverage=1.0,
        normalization_rule_name="identity", hard_vocab_limit=False, minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_file=str(bpe / "spm.model"))
    for split, rows in data.items():
        (bpe / f"{split}.de.ids").write_text("".join(_ids_line(sp, r[0]) + "\n" for r in rows))
        (bpe / f"{split}.en.ids").write_text("".join(_ids_line(sp, r[1]) + "\n" for r in rows))
    (bpe / "stats.json").write_text(json.dumps({"spm_model_sha256": file_sha256(bpe / "spm.model")}))  # apply_bpe's

    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=sp.get_piece_size(), encoder_layers=2, decoder_layers=2, d_model=64, heads=4,
                      ffn_dim=128, dropout=0.0, norm="pre")
    model = Transformer(cfg)
    untrained, _ = _save_weights(model.eval(), run, 1, bpe)

    src, tgt = read_ids(bpe / "train.de.ids"), read_ids(bpe / "train.en.ids")
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    model.train()
    g = random.Random(1)
    for _ in range(250):
        idx = g.sample(range(len(src)), 32)
        s, prev, target = collate([src[i] for i in idx], [tgt[i] for i in idx])
        loss, _ = label_smoothed_nll_loss(model(s, prev), target, 0.1)
        opt.zero_grad()
        (loss / target.ne(1).sum()).backward()
        opt.step()
    trained, trained_path = _save_weights(model.eval(), run, 2, bpe)
    diverged, _ = _save_weights(model, run, 3, bpe, status="diverged")
    eval_json = root / "eval.json"
    eval_json.write_text(json.dumps(EVAL))
    return dict(root=root, prepared=prepared, bpe=bpe, run=run, untrained=untrained, trained=trained,
                trained_path=trained_path, diverged=diverged, eval_json=eval_json)


def score_checkpoint(manifest, eval_json, bpe, prepared, out, threads):
    """One checkpoint scored by a job of its own."""
    (record,) = score_checkpoints([manifest], eval_json, bpe, prepared, [out], threads)
    return record


def _score(task, manifest, name=None):
    out = task["run"] / "eval" / (name or manifest.name)
    return score_checkpoint(manifest, task["eval_json"], task["bpe"], task["prepared"], out, threads=1).to_dict(), out


def test_trained_model_scores_well_above_untrained(task):
    res_u, _ = _score(task, task["untrained"])
    res_t, out = _score(task, task["trained"])
    for split in ("valid", "test"):
        u, t = res_u["splits"][split], res_t["splits"][split]
        assert t["bleu_tok"] > 60 and t["bleu_tok"] > u["bleu_tok"] + 40
        assert t["sacrebleu"] > 60 and t["sacrebleu"] > u["sacrebleu"] + 40
        assert t["loss"] < u["loss"] and t["nll"] < t["loss"]
        assert t["loss_base2"] == pytest.approx(t["loss"] / math.log(2))
        assert t["nll_base2"] == pytest.approx(t["nll"] / math.log(2))
        assert "case:lc" in t["sacrebleu_signature"]
        assert t["sentences"] == 30 and t["sent_per_s"] > 0 and t["decode_s"] > 0
    # the written JSON is what was returned; the .hyp files hold the tokenized hypotheses that were scored
    assert json.loads(out.read_text()) == json.loads(json.dumps(res_t))
    assert res_t["epoch"] == 2 and res_t["status"] == "ok" and res_t["decode"]["test"]["beam"] == 4
    assert set(res_t["decode"]) == {"valid", "test"} and res_t["label_smoothing"] == 0.1
    assert set(res_t["decode"]["valid"]) == {"beam", "lenpen", "max_len_a", "max_len_b", "max_tokens", "precision",
                                             "min_len", "unk_penalty", "cached"}  # docs/outputs.md
    assert set(res_t["where_ran"]) >= {"host", "device", "slurm_job_id"}
    # the scoring job's host, measured at its start, and the scoring code's checkout (this repository's)
    assert set(res_t["host"]) == {"cpu_model", "cpu_flags", "threads", "matmul_gflops"}
    assert res_t["host"]["threads"] == 1 and res_t["host"]["matmul_gflops"] > 0
    assert len(res_t["git_commit"]) == 40 and isinstance(res_t["git_dirty"], bool)
    hyp = read_lines(out.parent / "epoch002.test.hyp")
    assert len(hyp) == 30
    refs = read_lines(task["prepared"] / "test.en")
    assert tokenized_bleu(hyp, refs).score == pytest.approx(res_t["splits"]["test"]["bleu_tok"])


def test_diverged_manifest_gives_diverged_result_without_decoding(task):
    res, out = _score(task, task["diverged"])
    assert res["status"] == "diverged" and res["splits"] == {"valid": None, "test": None}
    assert json.loads(out.read_text())["status"] == "diverged"
    for split in ("valid", "test"):
        assert (out.parent / f"epoch003.{split}.hyp").read_text() == ""


def test_corrupt_weights_named(task, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(task["run"] / "epochs", run / "epochs")
    (run / "state" / "epochs").mkdir(parents=True)
    bad = run / "state" / "epochs" / "epoch002.pt"
    data = bytearray(task["trained_path"].read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad.write_bytes(bytes(data))
    with pytest.raises(LnReproError, match=r"epoch002\.pt: corrupt checkpoint"):
        score_checkpoint(run / "epochs" / "epoch002.json", task["eval_json"], task["bpe"], task["prepared"],
                         tmp_path / "out.json", threads=1)
    bad.unlink()
    with pytest.raises(LnReproError, match="not found"):
        score_checkpoint(run / "epochs" / "epoch002.json", task["eval_json"], task["bpe"], task["prepared"],
                         tmp_path / "out.json", threads=1)
    assert not (tmp_path / "out.json").exists()


def test_scores_only_the_slice_splits_each_with_its_decoding(task, tmp_path):
    """A slice of test alone, greedy with a maximum length of 3: the result and the hypotheses are test's only,
    decoded as that split says (no hypothesis longer than 3 tokens; valid's beam 4 and length 20 unused)."""
    greedy = {"splits": {"test": {**DECODE, "beam": 1, "max_len_b": 3}}, "max_tokens": 400, "label_smoothing": 0.1}
    path = tmp_path / "eval_test.json"
    path.write_text(json.dumps(greedy))
    out = tmp_path / "eval" / "epoch002.json"
    res = score_checkpoint(task["trained"], path, task["bpe"], task["prepared"], out, threads=1).to_dict()
    assert set(res["splits"]) == {"test"} and set(res["decode"]) == {"test"}
    assert (res["decode"]["test"]["beam"], res["decode"]["test"]["max_len_b"]) == (1, 3)
    assert sorted(p.name for p in out.parent.iterdir()) == ["epoch002.json", "epoch002.test.hyp"]
    hyp = read_lines(out.parent / "epoch002.test.hyp")
    assert len(hyp) == 30 and max(len(h.split()) for h in hyp) <= 3
    full, _ = _score(task, task["trained"])
    assert res["splits"]["test"]["bleu_tok"] < full["splits"]["test"]["bleu_tok"]  # the length bound bites
    assert res["splits"]["test"]["loss"] == pytest.approx(full["splits"]["test"]["loss"])  # decoding aside


@pytest.mark.parametrize("where,key,value,msg", [(("splits", "test"), "beam", None, r"splits\.test: missing key beam"),
                                                 ((), "beams", 5, "unknown key.*beams")])
def test_bad_eval_json(task, tmp_path, where, key, value, msg):
    """A scoring slice is read with ScoreSettings.read: a missing or unknown key is an error naming it."""
    cfg = json.loads(json.dumps(EVAL))
    section = cfg
    for k in where:
        section = section[k]
    if value is None:
        del section[key]
    else:
        section[key] = value
    bad = tmp_path / "eval.json"
    bad.write_text(json.dumps(cfg))
    with pytest.raises(LnReproError, match=msg):
        score_checkpoint(task["diverged"], bad, task["bpe"], task["prepared"], tmp_path / "o.json", threads=1)


def test_an_out_of_range_id_in_a_scored_split_is_named(task, tmp_path):
    """An id beyond the model's vocabulary in valid.de.ids: one message naming file, line and id, no output."""
    import shutil

    bpe = tmp_path / "bpe"
    shutil.copytree(task["bpe"], bpe)
    lines = (bpe / "valid.de.ids").read_text().splitlines()
    lines[2] = f"{lines[2]} 99999"
    (bpe / "valid.de.ids").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.json"
    with pytest.raises(LnReproError, match=r"valid\.de\.ids:3: id 99999 is outside the vocabulary"):
        score_checkpoint(task["trained"], task["eval_json"], bpe, task["prepared"], out, threads=1)
    assert not out.exists()


def test_the_in_memory_core_scores_what_the_job_writes(task, tmp_path):
    """score(model, settings, data) with no files written gives the scores the job's eval JSON holds."""
    from lnrepro.config.settings import ScoreSettings
    from lnrepro.evaluate.score import read_scoring_data, score
    from lnrepro.model import load_model
    from lnrepro.records import CheckpointScores

    record, out = _score(task, task["trained"], "core.json")
    model = load_model(task["trained_path"])
    settings = ScoreSettings.from_dict(EVAL)
    result = score(model, settings, read_scoring_data(task["bpe"], task["prepared"], ["valid", "test"],
                                                      model.cfg.vocab_size))
    written = CheckpointScores.read(out)
    for split in ("valid", "test"):
        a, b = result.splits[split].to_dict(), written.splits[split].to_dict()
        for timing in ("decode_s", "sent_per_s"):
            a.pop(timing), b.pop(timing)
        assert a == b
        assert result.hypotheses[split] == read_lines(out.parent / f"core.{split}.hyp")


def test_a_manifest_missing_a_key_is_named(task, tmp_path):
    bad = tmp_path / "epochs" / "epoch002.json"
    bad.parent.mkdir()
    manifest = json.loads(task["trained"].read_text())
    del manifest["updates"]
    bad.write_text(json.dumps(manifest))
    with pytest.raises(LnReproError, match=r"epoch002\.json: missing key\(s\) updates"):
        score_checkpoint(bad, task["eval_json"], task["bpe"], task["prepared"], tmp_path / "o.json", threads=1)


def _without_timing(record: dict) -> dict:
    out = {k: v for k, v in record.items() if k not in ("wall_s", "cpu_s", "job_checkpoints", "manifest")}
    out["host"] = {k: v for k, v in record["host"].items() if k != "matmul_gflops"}  # measured: moves with load
    out["splits"] = {split: None if v is None else {k: x for k, x in v.items() if k not in ("decode_s", "sent_per_s")}
                     for split, v in record["splits"].items()}
    return out


def test_one_job_scores_many_checkpoints_as_jobs_of_their_own(task, tmp_path):
    """Three checkpoints (untrained, trained, diverged) in one process: each score file and its hypotheses are
    those of a job of its own, and the records share the job's time out among themselves."""
    manifests = [task["untrained"], task["trained"], task["diverged"]]
    outs = [tmp_path / "eval" / m.name for m in manifests]
    records = [r.to_dict() for r in score_checkpoints(manifests, task["eval_json"], task["bpe"], task["prepared"],
                                                      outs, threads=1)]
    for manifest, out, record in zip(manifests, outs, records):
        alone, alone_out = _score(task, manifest)
        assert _without_timing(record) == _without_timing(alone)
        assert json.loads(out.read_text()) == json.loads(json.dumps(record))
        for split in ("valid", "test"):
            assert read_lines(RunFolder.hypotheses_beside(out, split)) == read_lines(
                RunFolder.hypotheses_beside(alone_out, split))
        assert record["job_checkpoints"] == 3 and alone["job_checkpoints"] == 1
        assert record["wall_s"] > 0 and record["cpu_s"] > 0


def test_manifests_and_score_files_must_pair(task, tmp_path):
    with pytest.raises(LnReproError, match="2 manifests and 1 score files"):
        score_checkpoints([task["trained"], task["untrained"]], task["eval_json"], task["bpe"], task["prepared"],
                          [tmp_path / "o.json"], threads=1)


def test_a_checkpoint_below_the_valid_bleu_floor_is_not_decoded_on_test(task, tmp_path):
    """eval.valid_bleu_floor: the untrained checkpoint's valid BLEU is below 50, so its test split is not decoded
    (None, an empty .hyp, the reason with the floor in ``skipped``); the trained one's is above it and scored as
    without a floor. Valid is always scored (the floor reads it)."""
    path = tmp_path / "eval_floor.json"
    path.write_text(json.dumps({**EVAL, "valid_bleu_floor": 50.0}))
    records = score_checkpoints([task["untrained"], task["trained"]], path, task["bpe"], task["prepared"],
                                [tmp_path / "eval" / "epoch001.json", tmp_path / "eval" / "epoch002.json"], 1)
    low, high = (r.to_dict() for r in records)
    assert low["splits"]["test"] is None and low["splits"]["valid"]["bleu_tok"] < 50
    assert low["skipped"]["test"].startswith("skipped: valid BLEU") and "below the floor 50" in low["skipped"]["test"]
    assert (tmp_path / "eval" / "epoch001.test.hyp").read_text() == ""
    assert "skipped" not in high and high["splits"]["test"]["bleu_tok"] > 60
    full, _ = _score(task, task["trained"])
    assert high["splits"]["test"]["bleu_tok"] == pytest.approx(full["splits"]["test"]["bleu_tok"])
    # read back: a skipped split is a record of its own kind, not an error
    assert CheckpointScores.read(tmp_path / "eval" / "epoch001.json").skipped == low["skipped"]


def test_skip_reason_reads_the_floor_and_the_valid_bleu():
    valid = SplitScores(loss=1.0, nll=1.0, loss_base2=1.0, nll_base2=1.0, target_tokens=1, bleu_tok=0.4,
                        bleu_tok_detail={}, sacrebleu=0.4, sacrebleu_signature="", sacrebleu_detail={}, sentences=1,
                        decode_s=1.0, sent_per_s=1.0)
    assert skip_reason(valid, None) is None and skip_reason(None, 1.0) is None and skip_reason(valid, 0.4) is None
    assert skip_reason(valid, 1.0) == "skipped: valid BLEU 0.40 below the floor 1 (eval.valid_bleu_floor)"
