"""The two BLEU scores every checkpoint gets, with sacrebleu 2.x's ``BLEU`` class.

* **Tokenized BLEU** (the paper's and fairseq's number): hypotheses decoded from BPE back to the prepared
  text (Moses-tokenized, lowercased) against the prepared references, ``tokenize='none'``: BLEU-4 on the
  tokens as they are (what fairseq-generate's ``--remove-bpe`` + ``multi-bleu``/``score.py`` compute).
* **sacreBLEU**: hypotheses detokenized with sacremoses (English, Moses escapes undone) against the raw,
  untokenized references with sacrebleu's defaults (13a tokenization, exp smoothing) and
  ``lowercase=True``, because the models only ever produce lowercase; the signature is stored with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from sacrebleu.metrics import BLEU

from ..bpe import decode, load_spm  # load_spm re-exported: scoring loads the model as the BPE stage does
from ..errors import LnReproError
from ..vocab import EOS

__all__ = [
    "BleuResult",
    "tokenized_bleu",
    "detokenize",
    "detok_sacrebleu",
    "load_spm",
    "ids_to_text",
]


@dataclass
class BleuResult:
    """A corpus BLEU score with the details a reader needs to judge it."""

    score: float
    signature: str
    precisions: list[float]
    bp: float
    sys_len: int
    ref_len: int
    text: str  # sacrebleu's one-line summary

    def as_dict(self) -> dict:
        return {
            "score": self.score,
            "signature": self.signature,
            "precisions": self.precisions,
            "bp": self.bp,
            "sys_len": self.sys_len,
            "ref_len": self.ref_len,
            "text": self.text,
        }


def _check_lengths(hyps: Sequence[str], refs: Sequence[str], what: str) -> None:
    if len(hyps) != len(refs):
        raise LnReproError(f"{what}: {len(hyps)} hypotheses but {len(refs)} references; expected one per line")


def _score(metric: BLEU, hyps: Sequence[str], refs: Sequence[str]) -> BleuResult:
    s = metric.corpus_score(list(hyps), [list(refs)])
    return BleuResult(
        score=float(s.score),
        signature=str(metric.get_signature()),
        precisions=[float(p) for p in s.precisions],
        bp=float(s.bp),
        sys_len=int(s.sys_len),
        ref_len=int(s.ref_len),
        text=str(s),
    )


def tokenized_bleu(hyps: Sequence[str], refs: Sequence[str], what: str = "tokenized BLEU") -> BleuResult:
    """BLEU-4 on already tokenized, lowercased text, split on whitespace only (``tokenize='none'``)."""
    _check_lengths(hyps, refs, what)
    # force=True: the input IS tokenized on purpose; silence sacrebleu's "forgot to detokenize?" warning
    return _score(BLEU(tokenize="none", force=True), hyps, refs)


@lru_cache(maxsize=4)
def _detokenizer(lang: str):
    from sacremoses import MosesDetokenizer

    return MosesDetokenizer(lang=lang)


def detokenize(lines: Sequence[str], lang: str = "en") -> list[str]:
    """Moses-detokenize tokenized lines (undoing Moses' XML escapes such as ``&apos;``)."""
    md = _detokenizer(lang)
    return [md.detokenize(line.split(), unescape=True) for line in lines]


def detok_sacrebleu(hyps_tok: Sequence[str], raw_refs: Sequence[str], lang: str = "en",
                    what: str = "sacreBLEU") -> BleuResult:
    """sacreBLEU of detokenized hypotheses against the raw references, defaults + ``lowercase=True``."""
    _check_lengths(hyps_tok, raw_refs, what)
    return _score(BLEU(lowercase=True), detokenize(hyps_tok, lang), raw_refs)


def ids_to_text(sp, ids: Sequence[int]) -> str:
    """Decode one hypothesis to text: everything from the first EOS on is dropped (control ids vanish)."""
    ids = list(ids)
    if EOS in ids:
        ids = ids[: ids.index(EOS)]
    return decode(sp, ids)
