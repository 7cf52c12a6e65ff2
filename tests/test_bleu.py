"""Tokenized BLEU and sacreBLEU as the scoring stage defines them, checked against sacrebleu called directly."""

from __future__ import annotations

import pytest
import sacrebleu

from lnrepro.errors import LnReproError
from lnrepro.evaluate.bleu import detok_sacrebleu, detokenize, ids_to_text, load_spm, tokenized_bleu
from lnrepro.vocab import EOS

HYPS = [
    "the cat sat on the mat .",
    "there is a cat on the mat",
    "it &apos;s a &quot; test &quot; , isn &apos;t it ?",
    "a completely different sentence",
]
REFS = [
    "the cat sat on the mat .",
    "there is a cat on the mat .",
    "it &apos;s a &quot; test &quot; , isn &apos;t it ?",
    "this is not what was said",
]
RAW = [
    "The cat sat on the mat.",
    "There is a cat on the mat.",
    'It\'s a "test", isn\'t it?',
    "This is not what was said",
]


def test_tokenized_bleu_equals_sacrebleu_direct():
    ours = tokenized_bleu(HYPS, REFS)
    direct = sacrebleu.corpus_bleu(HYPS, [REFS], tokenize="none")
    assert ours.score == pytest.approx(direct.score, abs=1e-9)
    assert ours.precisions == pytest.approx(direct.precisions)
    assert "tok:none" in ours.signature and "case:mixed" in ours.signature
    assert 0 < ours.score < 100


def test_tokenized_bleu_does_not_retokenize():
    # with 13a, "mat." would be split; tokenize='none' must keep it as one token, so this is not perfect
    assert tokenized_bleu(["the mat."], ["the mat ."]).score < 100


def test_perfect_hypothesis_scores_100():
    assert tokenized_bleu(REFS, REFS).score == pytest.approx(100.0)
    assert detok_sacrebleu(REFS, RAW).score == pytest.approx(100.0)


def test_detokenize_undoes_moses_escapes():
    assert detokenize(["it &apos;s a &quot; test &quot; , isn &apos;t it ?"]) == ['it\'s a "test", isn\'t it?']


def test_sacrebleu_lowercases_and_uses_defaults():
    res = detok_sacrebleu(HYPS, RAW)
    direct = sacrebleu.corpus_bleu(detokenize(HYPS), [RAW], lowercase=True)
    assert res.score == pytest.approx(direct.score, abs=1e-9)
    assert "case:lc" in res.signature and "tok:13a" in res.signature and "smooth:exp" in res.signature
    assert res.signature.startswith("nrefs:1|")


def test_length_mismatch_is_an_error():
    with pytest.raises(LnReproError, match="3 hypotheses but 4 references"):
        tokenized_bleu(HYPS[:3], REFS)


def _train_spm(tmp_path, lines):
    import sentencepiece as spm

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(tmp_path / "spm"), vocab_size=320, model_type="bpe",
        bos_id=0, pad_id=1, eos_id=2, unk_id=3, byte_fallback=True, character_coverage=1.0,
        normalization_rule_name="identity", minloglevel=2,
    )
    return tmp_path / "spm.model"


def test_ids_to_text_round_trip_and_eos(tmp_path):
    sp = load_spm(_train_spm(tmp_path, REFS * 5))
    for line in REFS:
        ids = sp.encode(line)
        assert ids_to_text(sp, ids) == line
        assert ids_to_text(sp, ids + [EOS, 7, 8]) == line  # everything after EOS is dropped


def test_load_spm_missing_file(tmp_path):
    with pytest.raises(LnReproError, match="sentencepiece model not found"):
        load_spm(tmp_path / "nope.model")
