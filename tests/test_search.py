"""Beam search and greedy decoding: hand-computed hypotheses, beam 1 == greedy, cached == uncached."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from lnrepro.evaluate.search import (
    DecodeOptions,
    beam_search,
    beam_search_nbest,
    greedy,
    length_batches,
    pad_batch,
    translate,
)
from lnrepro.model import ModelConfig, Transformer
from lnrepro.vocab import BOS, EOS, PAD

torch.set_num_threads(1)

NEG = -math.inf


# ------------------------------------------------------------------------------------------ fake models


class FakeEnc:
    """Stands in for EncoderOut: keeps the source so the fake decoder can check beam/batch alignment."""

    def __init__(self, src: torch.Tensor):
        self.src = src

    def reorder(self, index: torch.Tensor) -> "FakeEnc":
        return FakeEnc(self.src.index_select(0, index))

    def move(self, dst: torch.Tensor, src: torch.Tensor, rows: int) -> "FakeEnc":
        index = torch.arange(rows)
        index[dst] = src
        return self.reorder(index)


class FakeCache:
    """Stands in for KVCache: stores the decoder input so far in a buffer of rows x capacity, reordered and
    moved in place like the real one."""

    def __init__(self, rows: int, capacity: int):
        self.tokens = torch.full((rows, capacity), -1, dtype=torch.long)
        self.length = 0

    def reorder(self, index: torch.Tensor, shared_encoder: bool = False) -> None:
        self.tokens[: index.numel(), : self.length] = self.tokens[index, : self.length]

    def move(self, dst: torch.Tensor, src: torch.Tensor, sentences=None) -> None:
        self.tokens[dst, : self.length] = self.tokens[src, : self.length]


class TableModel:
    """Next-token logits = ``table[key(prefix, src)]``: Markov on the last token, or hashed on the history."""

    def __init__(self, table: torch.Tensor, history: bool = False):
        self.table = table
        self.history = history

    beams_share_encoder = False  # the decoder checks that the encoder output has one row per hypothesis

    def encode(self, src):
        return FakeEnc(src)

    def new_cache(self, rows: int, capacity: int):
        return FakeCache(rows, capacity)

    def _key(self, prefix: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        if not self.history:
            return prefix[:, -1]
        t = prefix.size(1)
        return (prefix.sum(1) * 7 + t * 3 + src[:, 0] * 5 + src.ne(PAD).sum(1)) % self.table.size(0)

    def decode(self, prev, enc, cache=None):
        assert prev.size(0) == enc.src.size(0), "encoder output not reordered with the beams"
        if cache is not None:
            n, end = prev.size(0), cache.length + prev.size(1)
            cache.tokens[:n, cache.length : end] = prev
            full, new = cache.tokens[:n, :end], prev.size(1)
            cache.length = end
        else:
            full, new = prev, prev.size(1)
        T = full.size(1)
        out = [self.table[self._key(full[:, : t + 1], enc.src)] for t in range(T - new, T)]
        return torch.stack(out, 1)


def markov(rows: dict[int, dict[int, float]], V: int) -> TableModel:
    """A Markov model from {previous token: {next token: probability}} (missing entries: probability 0)."""
    table = torch.full((V, V), NEG)
    for prev, dist in rows.items():
        for tok, p in dist.items():
            table[prev, tok] = math.log(p)
    return TableModel(table)


def random_history_model(V: int = 9, M: int = 37, seed: int = 0, sharp: float = 2.0) -> TableModel:
    g = torch.Generator().manual_seed(seed)
    return TableModel(torch.randn(M, V, generator=g) * sharp, history=True)


A, B = 4, 5  # two "word" tokens after the specials <s>=0 <pad>=1 </s>=2 <unk>=3

# P(.|start=EOS) a .6 b .4; P(.|a) EOS .55 a .45; P(.|b) EOS .3 b .7
HAND = {EOS: {A: 0.6, B: 0.4}, A: {EOS: 0.55, A: 0.45}, B: {EOS: 0.3, B: 0.7}}


def src_of(*lens: int) -> torch.Tensor:
    return pad_batch([[6 + (i % 3)] * (n - 1) + [EOS] for i, n in enumerate(lens)])


# ------------------------------------------------------------------------------------------ hand computed


def test_hand_computed_beam2_lenpen1():
    """Worked by hand with beam 2.

    step 0 (EOS banned): a .6, b .4 -> beams [a], [b].
    step 1 candidates: aE .33, bb .28, aa .27, bE .12 -> aE in the top 2: finalize [a] (lprob ln .33, length 2);
           continue with bb, aa.
    step 2 candidates: bbb .196, aaE .1485, aaa .1215, bbE .084 -> aaE in the top 2: finalize [a a]
           (ln .1485, length 3); the sentence has 2 finalized hypotheses and stops.
    lenpen 1: [a] = ln(.33)/2 = -0.554 beats [a a] = ln(.1485)/3 = -0.636.
    """
    model = markov(HAND, V=6)
    nbest = beam_search_nbest(model, src_of(3), DecodeOptions(beam=2, lenpen=1.0))[0]
    assert [h.tokens for h in nbest] == [[A], [A, A]]
    assert nbest[0].score == pytest.approx(math.log(0.33) / 2, abs=1e-6)
    assert nbest[1].score == pytest.approx(math.log(0.1485) / 3, abs=1e-6)
    assert nbest[1].lprob == pytest.approx(math.log(0.1485), abs=1e-6)
    assert nbest[1].positional_scores == pytest.approx([math.log(0.6), math.log(0.45), math.log(0.55)], abs=1e-6)
    best = beam_search(model, src_of(3), DecodeOptions(beam=2, lenpen=1.0))[0]
    assert best.tokens == [A]


def test_hand_computed_length_penalty_changes_winner():
    """Same search, lenpen 2: [a] = ln(.33)/4 = -0.277 loses to [a a] = ln(.1485)/9 = -0.212."""
    model = markov(HAND, V=6)
    best = beam_search(model, src_of(3), DecodeOptions(beam=2, lenpen=2.0))[0]
    assert best.tokens == [A, A]
    assert best.score == pytest.approx(math.log(0.1485) / 9, abs=1e-6)
    # lenpen 0: raw log-probabilities, the short one wins
    best = beam_search(model, src_of(3), DecodeOptions(beam=2, lenpen=0.0))[0]
    assert best.score == pytest.approx(math.log(0.33), abs=1e-6)


def test_eos_only_accepted_in_top_beam():
    """An EOS candidate ranked below the top `beam` is not finalized (fairseq), though it is a candidate.

    beam 1 (2 candidates per step), max_len 2: step 0 -> [a] (.6). step 1 from a: a .35, EOS .34, b .31:
    the candidates are a, EOS; EOS is 2nd, not in the top 1, so [a] is NOT finalized; [a a] continues.
    step 2 = max_len: EOS forced -> [a a] with ln(.6 * .35 * .34).
    """
    model = markov({EOS: {A: 0.6, B: 0.4}, A: {A: 0.35, EOS: 0.34, B: 0.31}, B: {EOS: 1.0}}, V=6)
    h = beam_search_nbest(model, src_of(3), DecodeOptions(beam=1, lenpen=1.0, max_len_b=2))[0]
    assert [x.tokens for x in h] == [[A, A]]
    assert h[0].lprob == pytest.approx(math.log(0.6 * 0.35 * 0.34), abs=1e-6)
    assert greedy(model, src_of(3), DecodeOptions(max_len_b=2)) == [[A, A]]


def test_max_len_forces_eos_and_min_len_bans_it():
    rarely_eos = markov({EOS: {A: 1.0}, A: {A: 0.9, EOS: 0.1}}, V=6)
    seqs = [[7, 7, EOS], [7, EOS]]
    out = translate(rarely_eos, seqs, DecodeOptions(beam=1, max_len_a=0, max_len_b=4), progress=False)
    assert out == [[A] * 4, [A] * 4]
    # max_len_a: a * src_len + b, src_len counting EOS
    out = translate(rarely_eos, seqs, DecodeOptions(beam=1, max_len_a=1, max_len_b=1), progress=False)
    assert out == [[A] * 4, [A] * 3]
    # beam 2 (n-best): every finalized hypothesis respects the bound, the longest ends at the forced EOS
    for n in beam_search_nbest(rarely_eos, src_of(3, 2), DecodeOptions(beam=2, max_len_b=4)):
        assert max(len(h.tokens) for h in n) <= 4
    # min length 1: EOS has probability 1 at step 0 but is banned, so one real token is produced
    eos_first = markov({EOS: {EOS: 0.99, B: 0.01}, B: {EOS: 1.0}}, V=6)
    assert greedy(eos_first, src_of(2)) == [[B]]
    assert beam_search(eos_first, src_of(2), DecodeOptions(beam=2))[0].tokens == [B]


def test_nan_rows_become_minus_inf():
    """fairseq turns NaN log-probabilities into -inf (one NaN logit makes its whole row NaN): a hypothesis
    with a NaN next-token distribution is never extended with a finite score, and decoding still ends."""
    table = torch.full((6, 6), NEG)
    table[EOS, A], table[EOS, B], table[A, EOS] = math.log(0.4), math.log(0.6), 0.0
    table[B] = float("nan")
    model = TableModel(table)
    best = beam_search(model, src_of(2), DecodeOptions(beam=2, max_len_b=4))[0]
    assert best.tokens == [A] and best.score == pytest.approx(math.log(0.4) / 2)
    # greedy follows B into the NaN row; every continuation is -inf, so it stops at the length limit
    assert greedy(model, src_of(2), DecodeOptions(max_len_b=4)) == [[B, BOS, BOS, BOS]]


def test_pad_never_generated():
    table = torch.zeros(6, 6)
    table[:, PAD] = 10.0  # PAD is by far the most probable token everywhere
    table[:, EOS] = 5.0
    model = TableModel(table)
    for beam in (1, 2, 4):
        out = translate(model, [[7, EOS]], DecodeOptions(beam=beam, max_len_b=5), progress=False)[0]
        assert PAD not in out


def test_ties_are_broken_by_lowest_token_id():
    """A uniform distribution: every decision is a tie; the lowest id wins (BOS=0 first, PAD excluded)."""
    model = TableModel(torch.zeros(6, 6))
    assert greedy(model, src_of(2), DecodeOptions(max_len_b=3)) == [[BOS, BOS, BOS]]
    a = beam_search(model, src_of(2, 3), DecodeOptions(beam=3, max_len_b=3))
    b = beam_search(model, src_of(2, 3), DecodeOptions(beam=3, max_len_b=3))
    assert [h.tokens for h in a] == [h.tokens for h in b]
    assert a[0].tokens == [BOS]  # [<s>] then EOS, the first finalized among equal scores


# ------------------------------------------------------------------------------------------ consistency


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam1_equals_greedy_fake(seed):
    model = random_history_model(seed=seed)
    src = src_of(3, 5, 2, 4, 6)
    g = greedy(model, src, DecodeOptions(max_len_b=12))
    b = [h.tokens for h in beam_search(model, src, DecodeOptions(beam=1, max_len_b=12))]
    assert g == b


@pytest.mark.parametrize("beam", [2, 4])
def test_cached_equals_uncached_fake(beam):
    model = random_history_model(seed=3, sharp=1.0)
    src = src_of(3, 5, 2, 4, 6, 3)
    cached = beam_search_nbest(model, src, DecodeOptions(beam=beam, lenpen=1.2, max_len_b=10, cached=True))
    uncached = beam_search_nbest(model, src, DecodeOptions(beam=beam, lenpen=1.2, max_len_b=10, cached=False))
    assert [[h.tokens for h in n] for n in cached] == [[h.tokens for h in n] for n in uncached]
    for nc, nu in zip(cached, uncached):
        assert [h.score for h in nc] == pytest.approx([h.score for h in nu])
    assert greedy(model, src, DecodeOptions(cached=True)) == greedy(model, src, DecodeOptions(cached=False))


def test_batched_equals_one_by_one_and_order_kept():
    model = random_history_model(seed=4, sharp=1.0)
    seqs = [[6 + (i % 3)] * (1 + (i * 7) % 5) + [EOS] for i in range(9)]
    opts = DecodeOptions(beam=3, lenpen=1.2, max_len_b=8)
    one = [beam_search(model, pad_batch([s]), opts)[0].tokens for s in seqs]
    for max_tokens in (1, 7, 10_000):
        out = translate(model, seqs, dataclasses.replace(opts, max_tokens=max_tokens), progress=False)
        assert out == one


def test_decode_options_reject_bad_values():
    with pytest.raises(ValueError, match="precision"):
        DecodeOptions(precision="fp16")
    with pytest.raises(ValueError, match="beam"):
        DecodeOptions(beam=0)


def test_length_batches_bound_and_cover():
    lens = [5, 1, 9, 3, 3, 7, 2, 9, 4]
    batches = length_batches(lens, max_tokens=12)
    assert sorted(i for b in batches for i in b) == list(range(len(lens)))
    for b in batches:
        assert len(b) * max(lens[i] for i in b) <= 12 or len(b) == 1


def test_best_hypothesis_has_highest_normalized_score():
    model = random_history_model(seed=5, sharp=0.5)
    for n in beam_search_nbest(model, src_of(3, 4), DecodeOptions(beam=4, lenpen=1.2, max_len_b=10)):
        assert len(n) == 4
        assert n[0].score == max(h.score for h in n)
        for h in n:
            assert h.score == pytest.approx(sum(h.positional_scores) / (len(h.tokens) + 1) ** 1.2, abs=1e-5)
            assert EOS not in h.tokens and PAD not in h.tokens


# ------------------------------------------------------------------------------------------ real model


def _tiny_model(norm: str):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=23, encoder_layers=2, decoder_layers=2, d_model=16, heads=2,
                      ffn_dim=32, dropout=0.0, norm=norm)
    m = Transformer(cfg).eval()
    # random init gives near-uniform outputs; sharpen them so beams differ and EOS happens
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(3.0)
    return m


def _real_src():
    g = torch.Generator().manual_seed(1)
    return pad_batch([torch.randint(4, 23, (n,), generator=g).tolist() + [EOS] for n in (3, 7, 5, 1)])


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_real_model_cached_equals_uncached(norm):
    m = _tiny_model(norm)
    src = _real_src()
    a = beam_search_nbest(m, src, DecodeOptions(beam=3, lenpen=1.2, max_len_b=12, cached=True))
    b = beam_search_nbest(m, src, DecodeOptions(beam=3, lenpen=1.2, max_len_b=12, cached=False))
    assert [[h.tokens for h in n] for n in a] == [[h.tokens for h in n] for n in b]
    for na, nb in zip(a, b):
        assert [h.score for h in na] == pytest.approx([h.score for h in nb], abs=1e-4)
    assert greedy(m, src, DecodeOptions(max_len_b=12)) == greedy(m, src, DecodeOptions(max_len_b=12, cached=False))


class ReorderedCache:
    """The model's cache, index-selected in full before every step (fairseq's reorder_incremental_state, the
    encoder's keys/values one per hypothesis) instead of moved row by row; it starts empty and grows."""

    def __init__(self, cache):
        self.cache = cache
        self.origin: torch.Tensor | None = None  # the row each row comes from since the last step

    @property
    def length(self) -> int:
        return self.cache.length

    def reorder(self, index, shared_encoder=False):
        assert not shared_encoder
        self.cache.reorder(index)

    def move(self, dst, src, sentences=None):
        if self.origin is None:
            self.origin = torch.arange(self.cache.encoder_rows)
        self.origin[dst] = self.origin[src]

    def before_step(self, rows: int) -> None:
        if self.origin is not None:
            self.cache.reorder(self.origin[:rows])
            self.origin = None


class ModelReorderingItsCache:
    """The real model behind the generic interface, with one encoder row per hypothesis and its cache reordered
    every step (``ReorderedCache``)."""

    beams_share_encoder = False

    def __init__(self, model):
        self.model = model

    def encode(self, src):
        return self.model.encode(src)

    def decode(self, prev, enc, cache=None):
        if cache is None:
            return self.model.decode(prev, enc)
        cache.before_step(prev.size(0))
        return self.model.decode(prev, enc, cache.cache)

    def new_cache(self, rows, capacity):
        return ReorderedCache(self.model.new_cache())


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_moved_cache_equals_reordered_cache(norm):
    """The cache moved row by row (rows copied only when their hypothesis changes, one encoder row per sentence)
    gives exactly the results of the cache reordered every step."""
    m = _tiny_model(norm)
    src = _real_src()
    for beam in (1, 3):
        opts = DecodeOptions(beam=beam, lenpen=1.2, max_len_b=12)
        rows = beam_search_nbest(m, src, opts)
        reordered = beam_search_nbest(ModelReorderingItsCache(m), src, opts)
        assert [[(h.tokens, h.score, h.positional_scores) for h in n] for n in rows] == \
            [[(h.tokens, h.score, h.positional_scores) for h in n] for n in reordered]
    assert greedy(m, src, DecodeOptions(max_len_b=12)) == \
        greedy(ModelReorderingItsCache(m), src, DecodeOptions(max_len_b=12))


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_real_model_beam1_equals_greedy(norm):
    m = _tiny_model(norm)
    src = _real_src()
    opts = DecodeOptions(beam=1, max_len_b=12)
    assert greedy(m, src, opts) == [h.tokens for h in beam_search(m, src, opts)]


def test_real_model_bf16_translate_runs():
    m = _tiny_model("pre")
    seqs = [[5, 6, 7, EOS], [8, EOS], [9, 10, EOS]]
    out = translate(m, seqs, DecodeOptions(beam=2, max_len_b=6, precision="bf16"), progress=False)
    assert len(out) == 3 and all(1 <= len(o) <= 6 and EOS not in o and PAD not in o for o in out)
