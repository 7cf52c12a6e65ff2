"""Joint sentencepiece BPE: special ids, vocabulary size, exact round trip, reproducibility, byte fallback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import SHARED
from lnrepro import bpe
from lnrepro.data import synthetic
from lnrepro.data.prepared import write_prepared
from lnrepro.config import BpeSettings
from lnrepro.errors import LnReproError
from lnrepro.vocab import BOS, EOS, PAD, UNK

SPLITS = ("train", "valid", "test")
LANGS = ("de", "en")
VOCAB = 500
IWSLT_DEV = {lang: SHARED / "data" / "iwslt14-sample" / "fairseq-tokenized" / f"IWSLT14.TED.dev2010.de-en.{lang}"
             for lang in LANGS}


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("prepared")
    synthetic.prepare({"seed": 3, "train": 400, "valid": 30, "test": 30}, out)
    return out


@pytest.fixture(scope="module")
def bpe_dir(prepared: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bpe")
    assert bpe.learn_bpe(prepared, out, BpeSettings(VOCAB, 1.0, 1)) == out / "spm.model"
    bpe.apply_bpe(prepared, out, threads=2)
    return out


def test_special_ids_and_vocab_size(bpe_dir: Path) -> None:
    sp = bpe.load_spm(bpe_dir)
    assert [sp.id_to_piece(i) for i in (BOS, PAD, EOS, UNK)] == ["<s>", "<pad>", "</s>", "<unk>"]
    assert (BOS, PAD, EOS, UNK) == (0, 1, 2, 3)
    assert sp.get_piece_size() == VOCAB
    vocab = _lines(bpe_dir / "spm.vocab")
    assert len(vocab) == VOCAB and vocab[0].split("\t")[0] == "<s>"
    assert sum(sp.is_byte(i) for i in range(VOCAB)) == 256


def test_round_trip_every_prepared_line(prepared: Path, bpe_dir: Path) -> None:
    sp = bpe.load_spm(bpe_dir / "spm.model")
    for split in SPLITS:
        for lang in LANGS:
            lines = _lines(prepared / f"{split}.{lang}")
            ids_lines = _lines(bpe_dir / f"{split}.{lang}.ids")
            assert len(ids_lines) == len(lines)
            for line, ids_line in zip(lines, ids_lines):
                ids = [int(x) for x in ids_line.split()]
                assert ids == bpe.encode(sp, line)
                assert EOS not in ids and BOS not in ids and PAD not in ids  # loaders append EOS
                assert bpe.decode(sp, ids) == line


def test_decode_drops_eos_and_accepts_any_int_sequence(bpe_dir: Path) -> None:
    sp = bpe.load_spm(bpe_dir)
    ids = bpe.encode(sp, "der hund schläft .")
    assert bpe.decode(sp, ids + [EOS]) == "der hund schläft ."
    assert bpe.decode(sp, tuple(ids)) == "der hund schläft ."


def test_stats(bpe_dir: Path, prepared: Path) -> None:
    stats = json.loads((bpe_dir / "stats.json").read_text())
    assert stats["vocab_size"] == VOCAB
    for split in SPLITS:
        for lang in LANGS:
            n = sum(len(l.split()) for l in _lines(bpe_dir / f"{split}.{lang}.ids"))
            assert stats["tokens"][split][lang] == n
            assert stats["roundtrip_mismatches"][split][lang] == 0
        assert stats["byte_fallback_rate"][split] == 0.0  # synthetic text: every character is in the vocabulary
        assert stats["sentences"][split] == len(_lines(prepared / f"{split}.de"))
    assert {"host", "device", "slurm_job_id"} == set(stats["where_ran"])


def test_edge_cases_round_trip(bpe_dir: Path) -> None:
    sp = bpe.load_spm(bpe_dir)
    for text in ["", " ", "der", " der hund", "der hund ", "der  hund", "a\tb", "12345 678", "<s> </s> <unk> <0x41>"]:
        assert bpe.decode(sp, bpe.encode(sp, text)) == text, repr(text)
    # add_dummy_prefix: a word is segmented the same at the start of a line and inside it
    assert bpe.encode(sp, "hund")[:1] == bpe.encode(sp, "der hund")[1:2]


def test_byte_fallback_on_unseen_characters(bpe_dir: Path) -> None:
    sp = bpe.load_spm(bpe_dir)
    text = "der hund 😀 sieht ĳ 漢"
    ids = bpe.encode(sp, text)
    assert UNK not in ids
    assert sum(sp.is_byte(i) for i in ids) == len("😀ĳ漢".encode("utf-8"))
    assert bpe.decode(sp, ids) == text


def test_reproducible_model_bytes(prepared: Path, bpe_dir: Path, tmp_path: Path) -> None:
    bpe.learn_bpe(prepared, tmp_path / "a", BpeSettings(VOCAB, 1.0, 1))
    bpe.learn_bpe(prepared, tmp_path / "b", BpeSettings(VOCAB, 1.0, 1), threads=2)
    model = (bpe_dir / "spm.model").read_bytes()
    assert (tmp_path / "a" / "spm.model").read_bytes() == model
    assert (tmp_path / "b" / "spm.model").read_bytes() == model  # independent of the rule's threads
    assert (tmp_path / "a" / "spm.vocab").read_bytes() == (bpe_dir / "spm.vocab").read_bytes()


def test_vocab_size_errors(prepared: Path, tmp_path: Path) -> None:
    # What only the corpus decides (a type or range error is the schema's, when the config is loaded).
    with pytest.raises(LnReproError, match=r"bpe\.vocab_size.*at most \d+"):
        bpe.learn_bpe(prepared, tmp_path, BpeSettings(50_000, 1.0, 1))
    with pytest.raises(LnReproError, match=r"bpe\.vocab_size"):
        bpe.learn_bpe(prepared, tmp_path, BpeSettings(270, 1.0, 1))  # 4 + 256 + fewer than the corpus' characters
    assert not (tmp_path / "spm.model").exists()


def test_missing_inputs(tmp_path: Path) -> None:
    with pytest.raises(LnReproError, match="train.de"):
        bpe.learn_bpe(tmp_path, tmp_path / "bpe", BpeSettings(VOCAB, 1.0, 1))
    with pytest.raises(LnReproError, match="spm.model"):
        bpe.apply_bpe(tmp_path, tmp_path)
    (tmp_path / "spm.model").write_bytes(b"not a model")
    with pytest.raises(LnReproError, match="not a valid sentencepiece model"):
        bpe.load_spm(tmp_path)


@pytest.mark.shared(*IWSLT_DEV.values())
def test_round_trip_iwslt_dev_sample(tmp_path: Path) -> None:
    """Real Moses-tokenized IWSLT14 text (escaped entities, digits, rare characters) round-trips exactly."""
    de, en = (_lines(IWSLT_DEV[lang]) for lang in LANGS)
    assert len(de) == len(en) == 887
    # Small BPE on the first lines only, so the rest also exercises unseen words (and maybe bytes).
    write_prepared(tmp_path / "prep", {"train": (de[:600], en[:600]), "valid": (de, en), "test": (de[:1], en[:1])},
                   {"valid": (de, en), "test": (de[:1], en[:1])}, {})
    bpe.learn_bpe(tmp_path / "prep", tmp_path / "bpe", BpeSettings(1000, 0.9995, 1))
    stats = bpe.apply_bpe(tmp_path / "prep", tmp_path / "bpe")
    sp = bpe.load_spm(tmp_path / "bpe")
    for line in de + en:
        assert bpe.decode(sp, bpe.encode(sp, line)) == line
    assert stats["roundtrip_mismatches"]["valid"] == {"de": 0, "en": 0}
    assert stats["unk_pieces"]["valid"] == {"de": 0, "en": 0}
    assert stats["byte_pieces"]["valid"]["de"] + stats["byte_pieces"]["valid"]["en"] > 0  # rare chars -> bytes
