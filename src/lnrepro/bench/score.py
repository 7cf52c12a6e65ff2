"""Scoring: beam-5 decoding with the KV cache against the uncached decoder, and the whole scoring work.

The pair: ``lnrepro.evaluate.search.translate`` with ``cached=True`` (what scoring runs) and ``cached=False``
(search.py's own uncached path: the decoder re-runs over the whole prefix at every step, as an implementation
without incremental state does), on the same model and sentences, outputs compared token for token. It runs on
the trained-ish model only: an untrained one decodes every sentence to the 200-token limit, where the uncached
decoder's cost grows with the square of the length and one repetition takes minutes.

The job: what a ``score_checkpoint`` job does per checkpoint, in memory: load the weights and the splits, then
scoring's core ``lnrepro.evaluate.score.score`` with the eval settings of config.yaml (beam 5, length penalty
1.2, fp32); the trained-ish model on valid + test (one checkpoint of the paper config's scoring), and trained-ish against
untrained on the first test sentences. The job's own file writing (a JSON and the hypotheses) is left out.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from ..config.settings import ScoreSettings, SplitDecoding
from ..evaluate.score import decode_options, read_scoring_data, score
from ..memory import keep_freed_memory
from ..evaluate.search import translate
from ..io import atomic_write_lines, read_lines
from ..model import load_model
from .checkpoints import untrained_weights
from .corpus import Corpus
from .sizes import DECODING, EVAL_MAX_TOKENS, EVAL_SPLITS, Size, eval_slice
from .timing import ab, interleave, log, timed

DECODE = decode_options(SplitDecoding.from_dict(DECODING), EVAL_MAX_TOKENS)  # exactly the options score_checkpoint decodes with


def beam_pair(weights: Path, seqs: list[list[int]], reps: int) -> dict:
    """sentences/s of cached and uncached beam search on ``seqs``, interleaved, and whether they agree."""
    model = load_model(weights)
    outputs: dict[str, list[list[int]]] = {}

    def run(cached: bool):
        key, opts = ("cached" if cached else "uncached"), dataclasses.replace(DECODE, cached=cached)
        return lambda: outputs.__setitem__(key, translate(model, seqs, opts, progress=False))

    log(f"beam {DECODE.beam}: cached vs uncached on {len(seqs)} test sentences, 1 warm-up + {reps} repetitions")
    s_cached, s_uncached = interleave([run(True), run(False)], reps)
    res = ab(len(seqs), s_cached, len(seqs), s_uncached)
    return {"sentences": len(seqs), "seconds": {"cached": s_cached, "uncached": s_uncached},
            "sent_per_s": {"cached": res["a"], "uncached": res["b"]}, "ratio": res["ratio"],
            "ratio_per_rep": res["ratio_per_rep"], "identical_outputs": outputs["cached"] == outputs["uncached"],
            "mean_hyp_tokens": sum(map(len, outputs["cached"])) / len(seqs)}


def first_test_sentences(bpe_dir: Path, prepared: Path, n: int, dest: Path) -> tuple[Path, Path]:
    """(bpe, prepared) folders holding only the first ``n`` test sentences, for a shorter scoring job."""
    sub_bpe, sub_prep = dest / "bpe", dest / "prepared"
    sub_bpe.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(bpe_dir / "spm.model", sub_bpe / "spm.model")
    for folder, out, name in ((bpe_dir, sub_bpe, "test.de.ids"), (bpe_dir, sub_bpe, "test.en.ids"),
                              (prepared, sub_prep, "test.en"), (prepared, sub_prep, "test.raw.en")):
        atomic_write_lines(out / name, read_lines(folder / name)[:n])
    return sub_bpe, sub_prep


def scoring_job(label: str, weights: Path, bpe_dir: Path, prepared: Path, splits: list[str]) -> dict:
    """Wall-clock of one scoring job's work: loading the weights and the splits, the validation loss, decoding
    and BLEU (scoring's core, as ``score_checkpoint`` calls it)."""
    settings = ScoreSettings.from_dict(eval_slice(splits), "the bench's scoring slice")

    def job():
        model = load_model(weights)
        return score(model, settings, read_scoring_data(bpe_dir, prepared, splits, model.cfg.vocab_size), label)

    log(f"scoring job ({label}): load, then score on {', '.join(splits)}")
    result, wall = timed(job)
    per_split = {s: {k: getattr(result.splits[s], k) for k in ("sentences", "decode_s", "sent_per_s", "bleu_tok")}
                 for s in splits}
    sentences = sum(v["sentences"] for v in per_split.values())
    return {"model": label, "splits": per_split, "sentences": sentences, "wall_s": wall,
            "s_per_sentence": wall / sentences}


def measure_scoring(corpus: Corpus, size: Size, trained: tuple[Path, dict], work: Path, reps: int,
                    pair_sentences: int, job_sentences: int) -> dict:
    """The beam pair on the trained-ish model, the full job, and trained-ish vs untrained on a test subset."""
    weights, info = trained
    keep_freed_memory()  # as the scoring job does
    bpe_dir = corpus.bpe(size.vocab)
    test_src, _ = corpus.pairs(size.vocab, "test")
    out = {"size": size.name, "decode": dataclasses.asdict(DECODE), "trained": info,
           "beam_pair": beam_pair(weights, test_src[:pair_sentences], reps)}
    sub_bpe, sub_prep = first_test_sentences(bpe_dir, corpus.prepared, job_sentences, work / "test-subset")
    untrained = untrained_weights(size, work)
    out["jobs"] = [
        scoring_job("trained-ish", weights, bpe_dir, corpus.prepared, list(EVAL_SPLITS)),
        scoring_job("trained-ish-subset", weights, sub_bpe, sub_prep, ["test"]),
        scoring_job("untrained-subset", untrained, sub_bpe, sub_prep, ["test"]),
    ]
    return out
