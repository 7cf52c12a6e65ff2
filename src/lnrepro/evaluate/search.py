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

__all__ = ["Hyp", "greedy", "beam_search", "beam_search_nbest", "translate", "pad_batch", "max_lengths"]


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


def max_lengths(model: Any, src: Tensor, max_len_a: float, max_len_b: int, min_len: int) -> Tensor:
    """Per-sentence maximum number of generated tokens before the forced EOS (fairseq's ``max_len``)."""
    src_len = src.ne(PAD).sum(dim=1)  # EOS included, like fairseq's src_tokens.size(1)
    max_len = (max_len_a * src_len.double() + max_len_b).floor().long()  # fairseq: int(a * src_len + b)
    mp = _max_positions(model)
    if mp is not None:
        max_len = max_len.clamp(max=mp - 1)  # "exclude the EOS marker"
    if (max_len < min_len).any():
        raise ValueError(f"min_len ({min_len}) is larger than max_len ({int(max_len.min())}); adjust max_len_a/b")
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


def _constrain(lprobs: Tensor, step: int, max_len: Tensor, min_len: int, unk_penalty: float) -> Tensor:
    """Apply fairseq's per-step constraints: no PAD, UNK penalty, min length, EOS forced at max length."""
    lprobs[:, PAD] = -math.inf
    if unk_penalty:
        lprobs[:, UNK] -= unk_penalty
    at_max = step >= max_len  # [N] rows whose sentence reached its maximum length
    if at_max.any():
        eos_col = lprobs[at_max, EOS].clone()
        lprobs[at_max] = -math.inf
        lprobs[at_max, EOS] = eos_col
    if step < min_len:  # never together with at_max: min_len <= max_len is checked
        lprobs[:, EOS] = -math.inf
    return lprobs


# ----------------------------------------------------------------------------------------------- greedy


@torch.no_grad()
def greedy(
    model: Any,
    src_batch: Tensor,
    max_len_a: float = 0,
    max_len_b: int = 200,
    min_len: int = 1,
    cached: bool = True,
    unk_penalty: float = 0.0,
) -> list[list[int]]:
    """Argmax decoding with the KV cache: fairseq beam 1 (same constraints), tokens without the final EOS."""
    bsz = src_batch.size(0)
    device = src_batch.device
    max_len = max_lengths(model, src_batch, max_len_a, max_len_b, min_len)
    enc = model.encode(src_batch)
    cache = model.new_cache() if cached else None
    tokens = torch.full((bsz, 1), EOS, dtype=torch.long, device=device)
    alive = torch.arange(bsz, device=device)  # original sentence index of each row
    out: list[list[int]] = [[] for _ in range(bsz)]
    step = 0
    while alive.numel() > 0:
        lprobs = _constrain(_lprobs(model, tokens, enc, cache), step, max_len[alive], min_len, unk_penalty)
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


@torch.no_grad()
def beam_search_nbest(
    model: Any,
    src: Tensor,
    beam: int = 5,
    lenpen: float = 1.0,
    max_len_a: float = 0,
    max_len_b: int = 200,
    min_len: int = 1,
    cached: bool = True,
    unk_penalty: float = 0.0,
    vocab_size: int | None = None,
) -> list[list[Hyp]]:
    """All finalized hypotheses per sentence (up to ``beam``), best first. See the module docstring."""
    bsz0 = src.size(0)
    device = src.device
    max_len_sent = max_lengths(model, src, max_len_a, max_len_b, min_len)  # [bsz0]

    enc = model.encode(src)
    # fairseq: "the max beam size is the dictionary size - 1, since we never select pad"; V is known after
    # the first decoder call, so the clamp is applied there.
    cand_size = 2 * beam
    enc = _reorder(enc, torch.arange(bsz0, device=device).repeat_interleave(beam))
    cache = model.new_cache() if cached else None

    sent = torch.arange(bsz0, device=device)  # original sentence index of each active sentence
    tokens = torch.full((bsz0 * beam, 1), EOS, dtype=torch.long, device=device)
    cum = torch.zeros(bsz0 * beam, 1, device=device)  # cumulative scores after each generated token
    blacklist = torch.zeros(bsz0, beam, dtype=torch.bool, device=device)
    finalized: list[list[Hyp]] = [[] for _ in range(bsz0)]

    step = 0
    while sent.numel() > 0:
        bsz = sent.numel()
        max_len = max_len_sent[sent]  # [bsz]
        lprobs = _lprobs(model, tokens, enc, cache)
        V = lprobs.size(1)
        if vocab_size is None:
            vocab_size = V
            if beam > V - 1:
                raise ValueError(f"beam {beam} is larger than the vocabulary size - 1 ({V - 1})")
        lprobs = _constrain(lprobs, step, max_len.repeat_interleave(beam), min_len, unk_penalty)
        lprobs = lprobs.view(bsz, beam, V)

        # --- fairseq/search.py BeamSearch.step
        if step == 0:
            flat = lprobs[:, 0, :]  # all beams are identical at the first step: expand only the first
        else:
            flat = (lprobs + cum[:, -1].view(bsz, beam, 1)).view(bsz, beam * V)
        k = min(cand_size, flat.size(1) - 1)  # "-1 so we never select pad"
        cand_scores, cand_idx = _topk_stable(flat, k)
        cand_beams = torch.div(cand_idx, V, rounding_mode="floor")
        cand_tokens = cand_idx.fmod(V)
        row0 = (torch.arange(bsz, device=device) * beam).unsqueeze(1)
        cand_rows = cand_beams + row0  # rows of `tokens` the candidates extend

        # --- finalize EOS candidates among the first `beam`, except blacklisted ones or -inf
        eos_mask = cand_tokens.eq(EOS) & cand_scores.ne(-math.inf)
        eos_top = eos_mask[:, :beam] & ~blacklist
        newly_finished: list[int] = []
        if eos_top.any():
            sents_seen: list[int] = []
            b_idx, c_idx = eos_top.nonzero(as_tuple=True)  # row-major: sentence, then candidate order
            rows = cand_rows[b_idx, c_idx]
            scores_eos = cand_scores[b_idx, c_idx]
            hist = torch.cat([cum[rows], scores_eos.unsqueeze(1)], dim=1)  # cumulative, [n, step + 2]
            pos = (hist[:, 1:] - hist[:, :-1]).tolist()
            toks = tokens[rows, 1:].tolist()
            norm = (step + 1) ** lenpen
            for j, (b, s) in enumerate(zip(b_idx.tolist(), scores_eos.tolist())):
                orig = int(sent[b])
                if len(finalized[orig]) < beam:
                    finalized[orig].append(Hyp(tokens=toks[j], score=s / norm, lprob=s, positional_scores=pos[j]))
                if not sents_seen or sents_seen[-1] != b:
                    sents_seen.append(b)
            for b in sents_seen:
                if len(finalized[int(sent[b])]) == beam or step >= int(max_len[b]):
                    newly_finished.append(b)
        # Robustness beyond fairseq (which asserts here): a sentence at its max length is finished even when
        # no finite-score EOS was finalized for it (only possible when the model gives probability exactly 0).
        for b in (step >= max_len).nonzero().squeeze(1).tolist():
            if b not in newly_finished:
                newly_finished.append(b)

        # --- drop finished sentences (fairseq's batch_idxs)
        if newly_finished:
            keep_mask = torch.ones(bsz, dtype=torch.bool, device=device)
            keep_mask[newly_finished] = False
            keep = keep_mask.nonzero().squeeze(1)
            sent, blacklist = sent[keep], blacklist[keep]
            eos_mask, cand_rows = eos_mask[keep], cand_rows[keep]
            cand_scores, cand_tokens = cand_scores[keep], cand_tokens[keep]
            bsz = sent.numel()
            if bsz == 0:
                break

        # --- choose the `beam` best active (non-EOS, non-blacklisted) candidates: fairseq's active_mask
        eos_mask[:, :beam] |= blacklist
        order = eos_mask.long() * cand_size + torch.arange(eos_mask.size(1), device=device)
        # values are distinct, so the ascending order of topk is unique: active non-EOS candidates in
        # candidate order first, then (only when too few remain) EOS ones, which become blacklisted beams
        new_bl, active = torch.topk(order, k=beam, dim=1, largest=False, sorted=True)
        blacklist = new_bl.ge(cand_size)
        sel_rows = cand_rows.gather(1, active).view(-1)  # rows of the old batch the survivors extend
        sel_tokens = cand_tokens.gather(1, active).view(-1, 1)
        sel_scores = cand_scores.gather(1, active).view(-1, 1)

        tokens = torch.cat([tokens[sel_rows], sel_tokens], dim=1)
        cum = torch.cat([cum[sel_rows], sel_scores], dim=1)
        enc = _reorder(enc, sel_rows)
        if cache is not None:
            cache = _reorder(cache, sel_rows)
        step += 1

    for hyps in finalized:
        if not hyps:  # every beam had probability 0 (see above): an empty output, never a crash
            hyps.append(Hyp(tokens=[], score=-math.inf, lprob=-math.inf, positional_scores=[]))
        hyps.sort(key=lambda h: h.score, reverse=True)  # stable: ties keep finalization order
    return finalized


def beam_search(
    model: Any,
    src: Tensor,
    beam: int = 5,
    lenpen: float = 1.0,
    max_len_a: float = 0,
    max_len_b: int = 200,
    min_len: int = 1,
    cached: bool = True,
    unk_penalty: float = 0.0,
) -> list[Hyp]:
    """The best hypothesis (by normalized score) for each row of ``src`` [B, S] (right-padded with PAD)."""
    nbest = beam_search_nbest(
        model, src, beam=beam, lenpen=lenpen, max_len_a=max_len_a, max_len_b=max_len_b,
        min_len=min_len, cached=cached, unk_penalty=unk_penalty,
    )
    return [hyps[0] for hyps in nbest]


# ----------------------------------------------------------------------------------------------- translate


def _model_device(model: Any) -> torch.device:
    try:
        return next(model.parameters()).device
    except (AttributeError, StopIteration):
        return torch.device("cpu")


def length_batches(lengths: Sequence[int], max_tokens: int, max_sentences: int | None = None) -> list[list[int]]:
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
        if cur and ((len(cur) + 1) * new_max > max_tokens or (max_sentences and len(cur) >= max_sentences)):
            batches.append(cur)
            cur, new_max = [], lengths[i]
        cur.append(i)
        cur_max = new_max
    if cur:
        batches.append(cur)
    return batches


def translate(
    model: Any,
    src_seqs: Sequence[Sequence[int]],
    beam: int = 5,
    lenpen: float = 1.0,
    max_tokens: int = 4096,
    max_len_a: float = 0,
    max_len_b: int = 200,
    min_len: int = 1,
    precision: str = "fp32",
    cached: bool = True,
    max_sentences: int | None = None,
    progress: bool = True,
    desc: str = "decode",
) -> list[list[int]]:
    """Decode every source sequence (ids ending in EOS, as ``read_ids`` returns them); output order = input order.

    Sentences are batched by length (``n_sentences * longest_source <= max_tokens``, sources counted with
    their EOS, beam copies not counted, as fairseq-generate's --max-tokens); beam 1 uses ``greedy``.
    ``precision`` "bf16" runs the model under bfloat16 autocast (scores are still float32 log-softmaxes).
    Returns token ids without the final EOS.
    """
    from tqdm import tqdm

    if precision not in ("fp32", "bf16"):
        raise ValueError(f"precision must be 'fp32' or 'bf16', got {precision!r}")
    device = _model_device(model)
    if hasattr(model, "eval"):
        model.eval()
    results: list[list[int] | None] = [None] * len(src_seqs)
    batches = length_batches([len(s) for s in src_seqs], max_tokens, max_sentences)
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    with tqdm(total=len(src_seqs), desc=desc, unit="sent", disable=not progress, leave=False) as bar, autocast:
        for idx in batches:
            src = pad_batch([src_seqs[i] for i in idx], device)
            kw = dict(max_len_a=max_len_a, max_len_b=max_len_b, min_len=min_len, cached=cached)
            if beam == 1:
                outs = greedy(model, src, **kw)
            else:
                outs = [h.tokens for h in beam_search(model, src, beam=beam, lenpen=lenpen, **kw)]
            for i, toks in zip(idx, outs):
                results[i] = toks
            bar.update(len(idx))
    return [r if r is not None else [] for r in results]
