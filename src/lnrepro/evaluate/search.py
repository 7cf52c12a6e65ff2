"""Greedy and beam search with fairseq 0.9.0's ``SequenceGenerator`` semantics, batched, with the KV cache.

Reference: fairseq 0.9.0, ``fairseq/sequence_generator.py`` (``SequenceGenerator._generate``) and
``fairseq/search.py`` (``BeamSearch.step``). What is reproduced, step by step (``step`` = 0, 1, ...,
the number of target tokens already generated):

* the decoder input starts with EOS (``tokens[:, 0] = eos``);
* log-probabilities are computed in float32 (``utils.log_softmax(x.float())``), NaN becomes -inf,
  PAD is never generated (``lprobs[:, pad] = -inf``), the UNK penalty is 0 (fairseq's default);
* EOS is banned while ``step < min_len`` (min_len 1: at least one real token) and forced once
  ``step >= max_len``, ``max_len = min(a * src_len + b, max_positions - 1)``;
* at step 0 only the first beam is expanded (all beams are identical); afterwards the cumulative
  score is added and the best ``2 * beam`` candidates over (beam x vocabulary) are taken (at most
  ``width - 1`` of them, as fairseq does so that PAD is never needed);
* a candidate ending in EOS with a finite score is *finalized* only when it ranks among the first
  ``beam`` candidates (fairseq's "only consider eos when it's among the top beam_size indices"),
  at most ``beam`` finalized hypotheses per sentence, in candidate order;
* a finalized hypothesis' score is its summed log-probability, EOS included, divided by
  ``(step + 1) ** lenpen`` (its length counting EOS);
* a sentence is finished once it holds ``beam`` finalized hypotheses or reaches ``max_len``; it then
  leaves the batch;
* the ``beam`` best non-EOS candidates (fairseq's ``active_mask`` / blacklist logic) continue;
* finalized hypotheses are sorted by score, descending, with a stable sort, and the first is returned.

Deterministic tie-breaking (fairseq leaves it to ``torch.topk``): among equal scores the candidate with
the lower flat index (beam, then token id) ranks first (``_topk_stable``); among finalized hypotheses
with equal normalized scores the one finalized first wins (stable sort).

Documented deviation: fairseq's ``src_len`` is the padded width of the batch, so with ``max_len_a != 0``
its output depends on how sentences are batched. Here ``src_len`` is each sentence's own length
(EOS included), which equals fairseq with one sentence per batch and makes results batch-independent.
With the defaults (a = 0, b = 200) both are identical.

What differs from fairseq's code, not its results (scoring spends its time here): each hypothesis keeps
one row of buffers allocated once per batch (decoder input, cumulative scores, and the model's key/value
cache, ``lnrepro.model.KVCache``), and only rows whose hypothesis changes are copied (fairseq
index-selects its whole incremental state every step); step 0 runs the decoder on one row per sentence
instead of ``beam`` identical ones; the beams of a sentence share one copy of its encoder output and of
the encoder-attention keys/values (fairseq repeats them ``beam`` times; ``shared_attend`` in the model gives
exactly the values of repeated ones, and only sentences, not hypotheses, move them); fairseq's NaN -> -inf
pass over all log-probabilities is replaced by a check of the selected values (``_nan_free``).

What the search uses of a model (``lnrepro.model.Transformer``, or the tests' stand-ins): ``encode(src)``, an
encoder output with ``reorder(index)`` and ``move(dst, src, rows)``; ``decode(prev, enc, cache=None)``;
``new_cache(rows, capacity)``, a cache with ``length``, ``reorder(index, shared_encoder)`` and
``move(dst, src, sentences=None)``; ``beams_share_encoder``; optionally ``cfg.max_positions``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from ..precision import autocast
from ..vocab import EOS, PAD, UNK

__all__ = ["DecodeOptions", "Hyp", "greedy", "beam_search", "beam_search_nbest", "translate", "pad_batch",
           "max_lengths", "length_batches"]


@dataclass(frozen=True)
class DecodeOptions:
    """How to decode: fairseq-generate's search options (defaults: fairseq 0.9.0's), batching and precision.

    One object is shared by ``greedy``, ``beam_search``, ``translate`` and the scoring stage, so a setting
    cannot be passed to one of them and forgotten in another. ``beam`` 1 means greedy decoding in
    ``translate``; ``greedy`` itself ignores ``beam`` and ``lenpen``. ``max_tokens`` bounds a decoding batch
    (``n_sentences * longest_source``, as fairseq-generate's --max-tokens); ``precision`` "bf16" runs the
    model under bfloat16 autocast; ``cached`` False re-runs the decoder over the whole prefix at every step
    (the reference the KV cache is tested against).
    """

    beam: int = 5
    lenpen: float = 1.0
    max_len_a: float = 0.0
    max_len_b: int = 200
    min_len: int = 1
    unk_penalty: float = 0.0
    max_tokens: int = 4096
    precision: str = "fp32"
    cached: bool = True

    def __post_init__(self) -> None:
        if self.beam < 1:
            raise ValueError(f"beam must be >= 1, got {self.beam}")
        if self.precision not in ("fp32", "bf16"):
            raise ValueError(f"precision must be 'fp32' or 'bf16', got {self.precision!r}")


@dataclass
class Hyp:
    """One finished hypothesis.

    ``tokens`` are the generated ids WITHOUT the final EOS (ready for sentencepiece decoding);
    ``positional_scores`` has ``len(tokens) + 1`` log-probabilities, the last one EOS's;
    ``lprob`` is their sum and ``score`` the length-normalized score ``lprob / (len(tokens)+1) ** lenpen``.
    """

    tokens: list[int]
    score: float
    lprob: float
    positional_scores: list[float] = field(default_factory=list)


# ----------------------------------------------------------------------------------------------- helpers


def pad_batch(seqs: Sequence[Sequence[int]], device: torch.device | str = "cpu") -> Tensor:
    """Right-pad token lists with PAD into a LongTensor [B, S] (the model masks padding)."""
    width = max(len(s) for s in seqs)
    out = torch.full((len(seqs), width), PAD, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    return out.to(device)


def _max_positions(model: Any) -> int | None:
    cfg = getattr(model, "cfg", None)
    return getattr(cfg, "max_positions", None)


def max_lengths(model: Any, src: Tensor, opts: DecodeOptions) -> Tensor:
    """Per-sentence maximum number of generated tokens before the forced EOS (fairseq's ``max_len``)."""
    src_len = src.ne(PAD).sum(dim=1)  # EOS included, like fairseq's src_tokens.size(1)
    max_len = (opts.max_len_a * src_len.double() + opts.max_len_b).floor().long()  # fairseq: int(a * src_len + b)
    mp = _max_positions(model)
    if mp is not None:
        max_len = max_len.clamp(max=mp - 1)  # "exclude the EOS marker"
    if (max_len < opts.min_len).any():
        raise ValueError(f"min_len ({opts.min_len}) is larger than max_len ({int(max_len.min())}); "
                         "adjust max_len_a/b")
    return max_len


# ----------------------------------------------------------------------------------------------- rows
#
# Every hypothesis of a batch owns one row of buffers allocated once per batch (decoder input, cumulative
# scores, the model's key/value cache). fairseq index-selects every row of its incremental state at every step
# (``reorder_incremental_state``); here, when a sentence's beams are reordered, only the rows whose hypothesis
# is replaced are overwritten (``_assign_rows``), and a finished sentence's rows are refilled with the last
# sentence's (``_fill_holes``): ``move(dst, src, ...)`` of the encoder output and the cache. The values every
# row holds are the same as fairseq's.


def _new_cache(model: Any, rows: int, capacity: int, opts: DecodeOptions) -> Any:
    """The model's key/value cache for ``rows`` rows of up to ``capacity`` positions; None when uncached."""
    return model.new_cache(rows, capacity) if opts.cached else None


def _lprobs(model: Any, tokens: Tensor, step: int, enc: Any, cache: Any | None) -> Tensor:
    """Float32 log-probabilities [n, V] of the next token after ``tokens[:, : step + 1]`` for every row.

    fairseq turns NaN into -inf here (``lprobs[lprobs != lprobs] = -inf``); that pass over [n, V] is left
    to the selection functions, which look for NaN among the few values they select (``_nan_free``).
    """
    if cache is not None:
        logits = model.decode(tokens[:, step : step + 1], enc, cache)  # the cache holds the earlier positions
    else:
        logits = model.decode(tokens[:, : step + 1], enc)  # uncached: re-run the whole prefix every step
    return F.log_softmax(logits[:, -1, :].float(), dim=-1)


def _nan_free(x: Tensor, selected: Tensor) -> bool:
    """True if ``x`` holds no NaN, judged from values selected by topk/argmax (which rank NaN first);
    otherwise NaN is replaced by -inf in place, as fairseq does, and the caller selects again."""
    if not torch.isnan(selected).any():
        return True
    torch.nan_to_num_(x, nan=-math.inf, posinf=math.inf, neginf=-math.inf)
    return False


def _constrain(lprobs: Tensor, step: int, max_len: Tensor, opts: DecodeOptions) -> Tensor:
    """Apply fairseq's per-step constraints: no PAD, UNK penalty, min length, EOS forced at max length.

    They commute with fairseq's NaN -> -inf, which is therefore applied later (``_nan_free``).
    """
    lprobs[:, PAD] = -math.inf
    if opts.unk_penalty:
        lprobs[:, UNK] -= opts.unk_penalty
    at_max = step >= max_len  # [N] rows whose sentence reached its maximum length
    if at_max.any():
        eos_col = lprobs[at_max, EOS].clone()
        lprobs[at_max] = -math.inf
        lprobs[at_max, EOS] = eos_col
    if step < opts.min_len:  # never together with at_max: min_len <= max_len is checked
        lprobs[:, EOS] = -math.inf
    return lprobs


def _topk_stable(x: Tensor, k: int, perm: Tensor) -> tuple[Tensor, Tensor]:
    """The ``k`` best of each row of ``x`` [bsz, nb * V], ordered by (value desc, logical index asc).

    ``x`` holds ``nb`` beams of V scores in row order; ``perm[b, j]`` is the row (within the sentence) of
    logical beam ``j``, and the logical index of an entry is ``j * V + token``. Ties are broken by the lower
    logical index for reproducible beams (fairseq leaves them to ``torch.topk``). The top ``k + 1`` are
    taken, so a tie straddling the k-th place shows as equal k-th and (k+1)-th values; only in such rows
    (the -inf candidates at the forced-EOS step; equal bf16 logits) are the tied entries chosen again, the
    ones with the lowest logical indices.
    """
    bsz, nb = perm.shape
    V = x.size(1) // nb
    vals, idx = torch.topk(x, k + 1, dim=1)
    if not _nan_free(x, vals):
        vals, idx = torch.topk(x, k + 1, dim=1)
    row = torch.div(idx, V, rounding_mode="floor")
    inv = torch.empty_like(perm).scatter_(1, perm, torch.arange(nb, device=x.device).expand(bsz, nb))
    idx = inv.gather(1, row) * V + (idx - row * V)
    straddle = vals[:, k - 1] == vals[:, k]
    vals, idx = vals[:, :k], idx[:, :k]
    if straddle.any():
        rows = straddle.nonzero().squeeze(1)
        n = rows.numel()
        logical = x.view(bsz, nb, V)[rows].gather(1, perm[rows].unsqueeze(2).expand(-1, -1, V)).view(n, nb * V)
        kth = vals[rows, k - 1 : k]
        above, tied = logical > kth, logical == kth
        # all entries above the k-th value, then the tied ones in logical order until there are k
        take = above | (tied & (tied.cumsum(1) <= k - above.sum(1, keepdim=True)))
        idx[rows] = take.nonzero()[:, 1].view(n, k)
        vals[rows] = logical.gather(1, idx[rows])
    # order the k chosen ones by (value desc, index asc)
    idx, order = torch.sort(idx, dim=1)
    vals = vals.gather(1, order)
    vals, order = torch.sort(vals, dim=1, descending=True, stable=True)
    return vals, idx.gather(1, order)


def _block_rows(blocks: Tensor, width: int) -> Tensor:
    """The rows of the given sentence blocks of ``width`` rows each, block by block."""
    return (blocks.unsqueeze(1) * width + torch.arange(width, device=blocks.device)).view(-1)


def _fill_holes(alive: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Compact the blocks where ``alive`` [bsz] is True into the first ones, moving as few as possible.

    Returns ``order`` (new block i is old block ``order[i]``) and the ``holes`` (dead blocks among the first
    ``alive.sum()``) that receive the ``fillers`` (live blocks after them), in pairs.
    """
    n = int(alive.sum())
    holes = (~alive[:n]).nonzero().squeeze(1)
    fillers = alive[n:].nonzero().squeeze(1) + n
    order = torch.arange(n, device=alive.device)
    order[holes] = fillers
    return order, holes, fillers


# ----------------------------------------------------------------------------------------------- greedy


@torch.no_grad()
def greedy(model: Any, src_batch: Tensor, opts: DecodeOptions = DecodeOptions()) -> list[list[int]]:
    """Argmax decoding with the KV cache: fairseq beam 1 (same constraints), tokens without the final EOS."""
    bsz = src_batch.size(0)
    max_len = max_lengths(model, src_batch, opts)
    enc = model.encode(src_batch)
    cache = _new_cache(model, bsz, int(max_len.max()) + 1, opts)
    tokens = torch.full((bsz, int(max_len.max()) + 2), EOS, dtype=torch.long, device=src_batch.device)
    alive = torch.arange(bsz, device=src_batch.device)  # original sentence index of each row
    out: list[list[int]] = [[] for _ in range(bsz)]
    step = 0
    while alive.numel() > 0:
        lprobs = _constrain(_lprobs(model, tokens[: alive.numel()], step, enc, cache), step, max_len[alive], opts)
        nxt = lprobs.argmax(dim=1)  # first maximal index on ties, like _topk_stable
        if not _nan_free(lprobs, lprobs.gather(1, nxt.unsqueeze(1))):
            nxt = lprobs.argmax(dim=1)
        # Robustness beyond fairseq, as in _finalize: at its maximum length a sentence is finished even when
        # EOS has probability 0 there (every token -inf), instead of decoding on without end.
        done = nxt.eq(EOS) | (step >= max_len[alive])
        for row in done.nonzero().squeeze(1).tolist():
            out[int(alive[row])] = tokens[row, 1 : step + 1].tolist()
        tokens[: alive.numel(), step + 1] = nxt
        if done.any():  # finished sentences leave the batch: the last rows fill their places
            order, holes, fillers = _fill_holes(~done)
            tokens[holes, : step + 2] = tokens[fillers, : step + 2]
            alive = alive[order]
            n = alive.numel()
            enc = enc.move(holes, fillers, n)
            if cache is not None:
                cache.move(holes, fillers, (holes, fillers, n))
        step += 1
    return out


# ----------------------------------------------------------------------------------------------- beam
#
# fairseq 0.9.0's SequenceGenerator._generate is one loop over ``step`` with the search state in local
# variables. Here the state is a ``_Beams`` object and each part of the loop body is a function:
# ``_expand`` (the decoder call, the constraints and fairseq/search.py ``BeamSearch.step``), ``_finalize``
# (``finalize_hypos`` and ``is_finished``), ``_prune`` (the ``batch_idxs`` block that drops finished
# sentences) and ``_advance`` (``active_mask`` / ``active_hypos``, the new blacklist, and the reorder of the
# incremental state, here as row moves).


@dataclass
class _Beams:
    """The search state of the sentences still being decoded, ``beam`` rows each (fairseq's loop variables).

    Sentence ``i`` owns rows ``i * beam ... i * beam + beam - 1`` of the buffers; its logical beam ``j`` (the
    rank fairseq's hypothesis ``i * beam + j`` has) lives in row ``i * beam + perm[i, j]``. ``tokens[r, :step +
    1]`` is row r's decoder input (EOS, then the tokens generated so far) and ``cum[r, :step + 1]`` the
    cumulative score before and after each generated token (``cum[r, 0] = 0``). ``blacklist`` marks the
    candidate slots, among the first ``beam``, whose hypotheses were finalized (fairseq: an EOS hypothesis can
    be kept as a beam when too few others remain; it is never finalized again).
    """

    sent: Tensor  # [bsz] original index of each active sentence
    max_len: Tensor  # [bsz] its maximum length (max_lengths)
    perm: Tensor  # [bsz, beam] row within the sentence's block of each logical beam
    blacklist: Tensor  # [bsz, beam]
    tokens: Tensor  # [bsz0 * beam, max_len + 2], bsz0 the batch's sentences
    cum: Tensor  # [bsz0 * beam, max_len + 2]
    enc: Any  # the encoder output: one row per sentence, or (``shared`` False) per hypothesis once step 0 ran
    cache: Any | None
    shared: bool  # the model attends to one encoder row per sentence from all its beams (beams_share_encoder)
    step: int = 0


@dataclass
class _Candidates:
    """The best ``2 * beam`` expansions of each active sentence, in rank order (``BeamSearch.step``'s output)."""

    scores: Tensor  # [bsz, k] cumulative scores
    tokens: Tensor  # [bsz, k] token ids
    parents: Tensor  # [bsz, k] row within the block of the hypothesis each extends (fairseq's cand_beams)
    eos: Tensor  # [bsz, k] ends in EOS with a finite score (fairseq's eos_mask)

    def select(self, index: Tensor) -> "_Candidates":
        return _Candidates(self.scores[index], self.tokens[index], self.parents[index], self.eos[index])


def _start(model: Any, src: Tensor, opts: DecodeOptions) -> _Beams:
    """Encode and start every hypothesis with EOS (fairseq's tokens[:, 0])."""
    bsz, beam, device = src.size(0), opts.beam, src.device
    max_len = max_lengths(model, src, opts)
    width = int(max_len.max()) + 2  # EOS, up to max_len tokens, and the forced EOS
    return _Beams(
        sent=torch.arange(bsz, device=device),
        max_len=max_len,
        perm=torch.arange(beam, device=device).expand(bsz, beam).contiguous(),
        blacklist=torch.zeros(bsz, beam, dtype=torch.bool, device=device),
        tokens=torch.full((bsz * beam, width), EOS, dtype=torch.long, device=device),
        cum=torch.zeros(bsz * beam, width, device=device),
        enc=model.encode(src),  # one row per sentence (repeated per beam by _expand unless shared)
        cache=_new_cache(model, bsz * beam, width - 1, opts),
        shared=model.beams_share_encoder,
    )


def _expand(model: Any, st: _Beams, opts: DecodeOptions) -> _Candidates:
    """Score every next token of every hypothesis and keep the best ``2 * beam`` per sentence.

    fairseq/search.py ``BeamSearch.step``: at step 0 only the first beam is expanded (all are identical);
    afterwards the cumulative score is added and the top candidates over beam x vocabulary are taken, at most
    ``width - 1`` ("-1 so we never select pad"). Step 0 runs the decoder on one row per sentence (fairseq
    runs all ``beam`` identical copies); its cache and the encoder output are then repeated ``beam`` times.
    """
    bsz, beam, step = st.sent.numel(), opts.beam, st.step
    rows = bsz if step == 0 else bsz * beam
    lprobs = _lprobs(model, st.tokens[:rows], step, st.enc, st.cache)
    V = lprobs.size(1)
    if step == 0:
        if beam > V - 1:  # fairseq: "the max beam size is the dictionary size - 1, since we never select pad"
            raise ValueError(f"beam {beam} is larger than the vocabulary size - 1 ({V - 1})")
        repeat = torch.arange(bsz, device=lprobs.device).repeat_interleave(beam)
        if not st.shared:
            st.enc = st.enc.reorder(repeat)
        if st.cache is not None:
            st.cache.reorder(repeat, st.shared)
        flat, perm = _constrain(lprobs, step, st.max_len, opts), st.perm[:, :1]
    else:  # fairseq adds the scores in place too (lprobs.add_)
        lprobs = _constrain(lprobs, step, st.max_len.repeat_interleave(beam), opts)
        flat, perm = lprobs.add_(st.cum[:rows, step : step + 1]).view(bsz, beam * V), st.perm
    scores, idx = _topk_stable(flat, min(2 * beam, flat.size(1) - 1), perm)
    tokens = idx.fmod(V)
    parents = st.perm.gather(1, torch.div(idx, V, rounding_mode="floor"))
    return _Candidates(scores, tokens, parents, tokens.eq(EOS) & scores.ne(-math.inf))


def _finalize(st: _Beams, cands: _Candidates, opts: DecodeOptions, finalized: list[list[Hyp]]) -> list[int]:
    """Store the EOS candidates ranked among the first ``beam`` (not blacklisted) as finished hypotheses.

    fairseq ``finalize_hypos``: the hypothesis is the extended row's tokens, its positional scores the
    differences of the cumulative ones, its score the sum divided by ``(step + 1) ** lenpen``; at most ``beam``
    per sentence, in candidate order. Returns the batch positions of the sentences now finished
    (``is_finished``: ``beam`` hypotheses, or the maximum length reached).
    """
    beam, step = opts.beam, st.step
    finished: list[int] = []
    eos_top = cands.eos[:, :beam] & ~st.blacklist  # fairseq: "only consider eos when it's among the top beam_size"
    if eos_top.any():
        sents_seen: list[int] = []
        b_idx, c_idx = eos_top.nonzero(as_tuple=True)  # row-major: sentence, then candidate order
        rows = b_idx * beam + cands.parents[b_idx, c_idx]
        scores = cands.scores[b_idx, c_idx]
        hist = torch.cat([st.cum[rows, : step + 1], scores.unsqueeze(1)], dim=1)  # cumulative, [n, step + 2]
        pos = (hist[:, 1:] - hist[:, :-1]).tolist()
        toks = st.tokens[rows, 1 : step + 1].tolist()
        norm = (step + 1) ** opts.lenpen
        for j, (b, s) in enumerate(zip(b_idx.tolist(), scores.tolist())):
            orig = int(st.sent[b])
            if len(finalized[orig]) < beam:
                finalized[orig].append(Hyp(tokens=toks[j], score=s / norm, lprob=s, positional_scores=pos[j]))
            if not sents_seen or sents_seen[-1] != b:
                sents_seen.append(b)
        for b in sents_seen:
            if len(finalized[int(st.sent[b])]) == beam or step >= int(st.max_len[b]):
                finished.append(b)
    # Robustness beyond fairseq (which asserts here): a sentence at its max length is finished even when
    # no finite-score EOS was finalized for it (only possible when the model gives probability exactly 0).
    for b in (step >= st.max_len).nonzero().squeeze(1).tolist():
        if b not in finished:
            finished.append(b)
    return finished


def _prune(st: _Beams, cands: _Candidates, finished: list[int], beam: int) -> _Candidates:
    """Drop the finished sentences from the search and from the candidates (fairseq's ``batch_idxs``).

    The last sentences' rows move into the finished ones' (sentence order does not matter to the search);
    returns the candidates of the remaining sentences.
    """
    alive = torch.ones(st.sent.numel(), dtype=torch.bool, device=st.sent.device)
    alive[finished] = False
    order, holes, fillers = _fill_holes(alive)
    dst, src = _block_rows(holes, beam), _block_rows(fillers, beam)
    st.sent, st.max_len, st.perm, st.blacklist = st.sent[order], st.max_len[order], st.perm[order], st.blacklist[order]
    positions = st.step + 1
    st.tokens[dst, :positions], st.cum[dst, :positions] = st.tokens[src, :positions], st.cum[src, :positions]
    n, rows = order.numel(), order.numel() * beam
    st.enc = st.enc.move(holes, fillers, n) if st.shared else st.enc.move(dst, src, rows)
    if st.cache is not None:
        st.cache.move(dst, src, (holes, fillers, n) if st.shared else (dst, src, rows))
    return cands.select(order)


def _assign_rows(parents: Tensor) -> tuple[Tensor, Tensor]:
    """Rows for the new beams of each sentence, given the row each extends: ``parents`` [bsz, beam].

    The first new beam (in rank order) extending a row takes that row over; the other ones take, in rank
    order, the rows of hypotheses nobody extends (lowest first). Returns the new beams' rows [bsz, beam] and
    a mask of those that must copy their parent's row.
    """
    bsz, beam = parents.shape
    same = parents.unsqueeze(2) == parents.unsqueeze(1)  # [bsz, j, j']
    first = ~(same & torch.ones(beam, beam, dtype=torch.bool, device=parents.device).tril(-1)).any(2)
    taken = ((parents.unsqueeze(2) == torch.arange(beam, device=parents.device)) & first.unsqueeze(2)).any(1)
    free = torch.sort(taken.to(torch.uint8), dim=1, stable=True).indices  # rows nobody extends first
    rank = (~first).long().cumsum(1) - 1
    rows = torch.where(first, parents, free.gather(1, rank.clamp(min=0)))
    return rows, ~first


def _advance(st: _Beams, cands: _Candidates, beam: int) -> None:
    """Continue with the ``beam`` best active candidates of each sentence; move the rows to follow them.

    fairseq's ``active_mask``: EOS and blacklisted candidates get ``cand_size`` added to their rank, so the
    ``beam`` smallest values are the best non-EOS candidates in candidate order, followed (only when too few
    remain) by EOS ones, which become the new blacklist.
    """
    bsz, step = st.sent.numel(), st.step
    cand_size = cands.eos.size(1)
    eos = cands.eos.clone()
    eos[:, :beam] |= st.blacklist
    order = eos.long() * cand_size + torch.arange(cand_size, device=eos.device)
    # values are distinct, so the ascending order of topk is unique
    new_bl, active = torch.topk(order, k=beam, dim=1, largest=False, sorted=True)
    st.blacklist = new_bl.ge(cand_size)
    parents = cands.parents.gather(1, active)
    perm, copy = _assign_rows(parents)
    base = (torch.arange(bsz, device=perm.device) * beam).unsqueeze(1)
    dst, src = (perm + base)[copy], (parents + base)[copy]
    positions = step + 1
    st.tokens[dst, :positions], st.cum[dst, :positions] = st.tokens[src, :positions], st.cum[src, :positions]
    if st.cache is not None:
        st.cache.move(dst, src)  # within sentences: the encoder's keys/values stay
    rows = (perm + base).view(-1)
    st.tokens[rows, positions] = cands.tokens.gather(1, active).view(-1)
    st.cum[rows, positions] = cands.scores.gather(1, active).view(-1)
    st.perm = perm
    st.step += 1


@torch.no_grad()
def beam_search_nbest(model: Any, src: Tensor, opts: DecodeOptions = DecodeOptions()) -> list[list[Hyp]]:
    """All finalized hypotheses per sentence (up to ``beam``), best first. See the module docstring."""
    st = _start(model, src, opts)
    finalized: list[list[Hyp]] = [[] for _ in range(src.size(0))]
    while st.sent.numel() > 0:
        cands = _expand(model, st, opts)
        finished = _finalize(st, cands, opts, finalized)
        if finished:
            cands = _prune(st, cands, finished, opts.beam)
            if st.sent.numel() == 0:
                break
        _advance(st, cands, opts.beam)
    for hyps in finalized:
        if not hyps:  # every beam had probability 0 (see _finalize): an empty output, never a crash
            hyps.append(Hyp(tokens=[], score=-math.inf, lprob=-math.inf, positional_scores=[]))
        hyps.sort(key=lambda h: h.score, reverse=True)  # stable: ties keep finalization order
    return finalized


def beam_search(model: Any, src: Tensor, opts: DecodeOptions = DecodeOptions()) -> list[Hyp]:
    """The best hypothesis (by normalized score) for each row of ``src`` [B, S] (right-padded with PAD)."""
    return [hyps[0] for hyps in beam_search_nbest(model, src, opts)]


# ----------------------------------------------------------------------------------------------- translate


def _model_device(model: Any) -> torch.device:
    try:
        return next(model.parameters()).device
    except (AttributeError, StopIteration):
        return torch.device("cpu")


def length_batches(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Indices grouped into batches of similar length, longest first, each with n * longest <= max_tokens.

    A sentence longer than ``max_tokens`` gets a batch of its own rather than an error (decoding it is
    still correct, only the memory bound is exceeded).
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    cur: list[int] = []
    cur_max = 0
    for i in order:
        new_max = max(cur_max, lengths[i])
        if cur and (len(cur) + 1) * new_max > max_tokens:
            batches.append(cur)
            cur, new_max = [], lengths[i]
        cur.append(i)
        cur_max = new_max
    if cur:
        batches.append(cur)
    return batches


def translate(model: Any, src_seqs: Sequence[Sequence[int]], opts: DecodeOptions = DecodeOptions(),
              progress: bool = True, desc: str = "decode") -> list[list[int]]:
    """Decode every source sequence (ids ending in EOS, as ``read_ids`` returns them); output order = input order.

    Sentences are batched by length (``n_sentences * longest_source <= max_tokens``, sources counted with
    their EOS, beam copies not counted, as fairseq-generate's --max-tokens); beam 1 uses ``greedy``.
    Under bf16 the scores are still float32 log-softmaxes. Returns token ids without the final EOS.
    """
    from tqdm import tqdm

    device = _model_device(model)
    if hasattr(model, "eval"):
        model.eval()
    results: list[list[int] | None] = [None] * len(src_seqs)
    batches = length_batches([len(s) for s in src_seqs], opts.max_tokens)
    with tqdm(total=len(src_seqs), desc=desc, unit="sent", disable=not progress, leave=False) as bar, \
            autocast(device, opts.precision):
        for idx in batches:
            src = pad_batch([src_seqs[i] for i in idx], device)
            if opts.beam == 1:
                outs = greedy(model, src, opts)
            else:
                outs = [h.tokens for h in beam_search(model, src, opts)]
            for i, toks in zip(idx, outs):
                results[i] = toks
            bar.update(len(idx))
    return [r if r is not None else [] for r in results]
