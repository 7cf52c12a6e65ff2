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
  leaves the batch (the cache and encoder output are index-selected with the surviving rows);
* the ``beam`` best non-EOS candidates (fairseq's ``active_mask`` / blacklist logic) continue;
* finalized hypotheses are sorted by score, descending, with a stable sort, and the first is returned.

Deterministic tie-breaking (fairseq leaves it to ``torch.topk``): among equal scores the candidate with
the lower flat index (beam, then token id) ranks first (``_topk_stable``); among finalized hypotheses
with equal normalized scores the one finalized first wins (stable sort).

Documented deviation: fairseq's ``src_len`` is the padded width of the batch, so with ``max_len_a != 0``
its output depends on how sentences are batched. Here ``src_len`` is each sentence's own length
(EOS included), which equals fairseq with one sentence per batch and makes results batch-independent.
With the defaults (a = 0, b = 200) both are identical.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

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


def _reorder(obj: Any, index: Tensor) -> Any:
    """Call ``obj.reorder(index)``; accept both in-place (returns None) and functional implementations."""
    out = obj.reorder(index)
    return obj if out is None else out


def _topk_stable(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """``torch.topk`` along dim 1 with ties broken by the lower index, for reproducible beams.

    Uses topk (fast) and falls back to a stable sort only for rows where a tie straddles the k-th place
    (for example the -inf candidates at the forced-EOS step).
    """
    vals, idx = torch.topk(x, k, dim=1)
    kth = vals[:, -1:]
    straddle = x.eq(kth).sum(dim=1) > vals.eq(kth).sum(dim=1)
    if straddle.any():
        rows = straddle.nonzero().squeeze(1)
        sv, si = torch.sort(x[rows], dim=1, descending=True, stable=True)
        vals[rows], idx[rows] = sv[:, :k], si[:, :k]
    # order the k chosen ones by (value desc, index asc)
    idx, perm = torch.sort(idx, dim=1)
    vals = vals.gather(1, perm)
    vals, perm = torch.sort(vals, dim=1, descending=True, stable=True)
    idx = idx.gather(1, perm)
    return vals, idx


def _lprobs(model: Any, tokens: Tensor, enc: Any, cache: Any | None) -> Tensor:
    """Float32 log-probabilities of the next token for every row of ``tokens`` [N, t]."""
    if cache is not None:
        logits = model.decode(tokens[:, -1:], enc, cache)  # the cache holds the earlier positions
    else:
        logits = model.decode(tokens, enc)  # uncached: re-run the whole prefix every step
    lprobs = F.log_softmax(logits[:, -1, :].float(), dim=-1)
    # fairseq: lprobs[lprobs != lprobs] = -inf (one pass; infinities kept as they are)
    return torch.nan_to_num(lprobs, nan=-math.inf, posinf=math.inf, neginf=-math.inf)


def _constrain(lprobs: Tensor, step: int, max_len: Tensor, opts: DecodeOptions) -> Tensor:
    """Apply fairseq's per-step constraints: no PAD, UNK penalty, min length, EOS forced at max length."""
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


# ----------------------------------------------------------------------------------------------- greedy


@torch.no_grad()
def greedy(model: Any, src_batch: Tensor, opts: DecodeOptions = DecodeOptions()) -> list[list[int]]:
    """Argmax decoding with the KV cache: fairseq beam 1 (same constraints), tokens without the final EOS."""
    bsz = src_batch.size(0)
    device = src_batch.device
    max_len = max_lengths(model, src_batch, opts)
    enc = model.encode(src_batch)
    cache = model.new_cache() if opts.cached else None
    tokens = torch.full((bsz, 1), EOS, dtype=torch.long, device=device)
    alive = torch.arange(bsz, device=device)  # original sentence index of each row
    out: list[list[int]] = [[] for _ in range(bsz)]
    step = 0
    while alive.numel() > 0:
        lprobs = _constrain(_lprobs(model, tokens, enc, cache), step, max_len[alive], opts)
        nxt = lprobs.argmax(dim=1)  # first maximal index on ties, like _topk_stable
        done = nxt.eq(EOS)
        for row in done.nonzero().squeeze(1).tolist():
            out[int(alive[row])] = tokens[row, 1:].tolist()
        keep = (~done).nonzero().squeeze(1)
        if keep.numel() < done.numel():  # drop finished sentences from the batch
            enc = _reorder(enc, keep)
            if cache is not None:
                cache = _reorder(cache, keep)
            tokens, alive, nxt = tokens[keep], alive[keep], nxt[keep]
        tokens = torch.cat([tokens, nxt.unsqueeze(1)], dim=1)
        step += 1
    return out


# ----------------------------------------------------------------------------------------------- beam
#
# fairseq 0.9.0's SequenceGenerator._generate is one loop over ``step`` with the search state in local
# variables. Here the state is a ``_Beams`` object and each part of the loop body is a function:
# ``_expand`` (the decoder call, the constraints and fairseq/search.py ``BeamSearch.step``), ``_finalize``
# (``finalize_hypos`` and ``is_finished``), ``_prune`` (the ``batch_idxs`` block that drops finished
# sentences) and ``_advance`` (``active_mask`` / ``active_hypos``, the new blacklist and the reorder of the
# incremental state and encoder output).


@dataclass
class _Beams:
    """The search state of the sentences still being decoded, ``beam`` rows each (fairseq's loop variables).

    Row ``i * beam + j`` is hypothesis ``j`` of active sentence ``i``; ``tokens`` is the decoder input (EOS,
    then the ``step`` tokens generated so far) and ``cum`` the cumulative score after each generated token.
    ``blacklist`` marks the candidate slots, among the first ``beam``, whose hypotheses were finalized
    (fairseq: an EOS hypothesis can be kept as a beam when too few others remain; it is never finalized again).
    """

    sent: Tensor  # [bsz] original index of each active sentence
    max_len: Tensor  # [bsz] its maximum length (max_lengths)
    tokens: Tensor  # [bsz * beam, step + 1]
    cum: Tensor  # [bsz * beam, step + 1]; column 0 is a zero, the score before any token
    blacklist: Tensor  # [bsz, beam]
    enc: Any
    cache: Any | None
    step: int = 0


@dataclass
class _Candidates:
    """The best ``2 * beam`` expansions of each active sentence, in rank order (``BeamSearch.step``'s output)."""

    scores: Tensor  # [bsz, k] cumulative scores
    tokens: Tensor  # [bsz, k] token ids
    rows: Tensor  # [bsz, k] the rows of _Beams they extend (fairseq's cand_bbsz_idx)
    eos: Tensor  # [bsz, k] ends in EOS with a finite score (fairseq's eos_mask)


def _start(model: Any, src: Tensor, opts: DecodeOptions) -> _Beams:
    """Encode, repeat each sentence ``beam`` times, and start every hypothesis with EOS (fairseq's tokens[:, 0])."""
    bsz, beam, device = src.size(0), opts.beam, src.device
    max_len = max_lengths(model, src, opts)
    enc = _reorder(model.encode(src), torch.arange(bsz, device=device).repeat_interleave(beam))
    return _Beams(
        sent=torch.arange(bsz, device=device),
        max_len=max_len,
        tokens=torch.full((bsz * beam, 1), EOS, dtype=torch.long, device=device),
        cum=torch.zeros(bsz * beam, 1, device=device),
        blacklist=torch.zeros(bsz, beam, dtype=torch.bool, device=device),
        enc=enc,
        cache=model.new_cache() if opts.cached else None,
    )


def _expand(model: Any, st: _Beams, opts: DecodeOptions) -> _Candidates:
    """Score every next token of every hypothesis and keep the best ``2 * beam`` per sentence.

    fairseq/search.py ``BeamSearch.step``: at step 0 only the first beam is expanded (all are identical);
    afterwards the cumulative score is added and the top candidates over beam x vocabulary are taken, at most
    ``width - 1`` ("-1 so we never select pad").
    """
    bsz, beam = st.sent.numel(), opts.beam
    lprobs = _lprobs(model, st.tokens, st.enc, st.cache)
    V = lprobs.size(1)
    if st.step == 0 and beam > V - 1:
        # fairseq: "the max beam size is the dictionary size - 1, since we never select pad"
        raise ValueError(f"beam {beam} is larger than the vocabulary size - 1 ({V - 1})")
    lprobs = _constrain(lprobs, st.step, st.max_len.repeat_interleave(beam), opts).view(bsz, beam, V)
    if st.step == 0:
        flat = lprobs[:, 0, :]
    else:
        flat = (lprobs + st.cum[:, -1].view(bsz, beam, 1)).view(bsz, beam * V)
    scores, idx = _topk_stable(flat, min(2 * beam, flat.size(1) - 1))
    tokens = idx.fmod(V)
    rows = torch.div(idx, V, rounding_mode="floor") + (torch.arange(bsz, device=st.tokens.device) * beam).unsqueeze(1)
    return _Candidates(scores, tokens, rows, tokens.eq(EOS) & scores.ne(-math.inf))


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
        rows = cands.rows[b_idx, c_idx]
        scores = cands.scores[b_idx, c_idx]
        hist = torch.cat([st.cum[rows], scores.unsqueeze(1)], dim=1)  # cumulative, [n, step + 2]
        pos = (hist[:, 1:] - hist[:, :-1]).tolist()
        toks = st.tokens[rows, 1:].tolist()
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


def _prune(st: _Beams, cands: _Candidates, finished: list[int]) -> tuple[_Beams, _Candidates]:
    """Drop the finished sentences from the search and from the candidates (fairseq's ``batch_idxs``).

    Only the per-sentence tensors are selected here; the rows of ``tokens``, ``cum``, the cache and the encoder
    output are selected by ``_advance``, whose ``cands.rows`` name only surviving rows.
    """
    keep_mask = torch.ones(st.sent.numel(), dtype=torch.bool, device=st.sent.device)
    keep_mask[finished] = False
    keep = keep_mask.nonzero().squeeze(1)
    st.sent, st.max_len, st.blacklist = st.sent[keep], st.max_len[keep], st.blacklist[keep]
    return st, _Candidates(cands.scores[keep], cands.tokens[keep], cands.rows[keep], cands.eos[keep])


def _advance(st: _Beams, cands: _Candidates, beam: int) -> None:
    """Continue with the ``beam`` best active candidates of each sentence; reorder the cache to follow them.

    fairseq's ``active_mask``: EOS and blacklisted candidates get ``cand_size`` added to their rank, so the
    ``beam`` smallest values are the best non-EOS candidates in candidate order, followed (only when too few
    remain) by EOS ones, which become the new blacklist.
    """
    cand_size = cands.eos.size(1)
    eos = cands.eos.clone()
    eos[:, :beam] |= st.blacklist
    order = eos.long() * cand_size + torch.arange(cand_size, device=eos.device)
    # values are distinct, so the ascending order of topk is unique
    new_bl, active = torch.topk(order, k=beam, dim=1, largest=False, sorted=True)
    st.blacklist = new_bl.ge(cand_size)
    rows = cands.rows.gather(1, active).view(-1)  # rows of the old batch the survivors extend
    st.tokens = torch.cat([st.tokens[rows], cands.tokens.gather(1, active).view(-1, 1)], dim=1)
    st.cum = torch.cat([st.cum[rows], cands.scores.gather(1, active).view(-1, 1)], dim=1)
    st.enc = _reorder(st.enc, rows)
    if st.cache is not None:
        st.cache = _reorder(st.cache, rows)
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
            st, cands = _prune(st, cands, finished)
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
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=opts.precision == "bf16")
    with tqdm(total=len(src_seqs), desc=desc, unit="sent", disable=not progress, leave=False) as bar, autocast:
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
