"""Evaluation: fairseq-0.9.0-style beam search with the KV cache, both BLEU kinds, per-checkpoint scoring
(``lnrepro.evaluate.score``: ``score``, the in-memory core, and ``score_checkpoints``, the job around it)."""

from .bleu import BleuResult, detok_sacrebleu, detokenize, ids_to_text, load_spm, tokenized_bleu
from .search import DecodeOptions, Hyp, beam_search, beam_search_nbest, greedy, translate

__all__ = [
    "BleuResult",
    "DecodeOptions",
    "Hyp",
    "beam_search",
    "beam_search_nbest",
    "detok_sacrebleu",
    "detokenize",
    "greedy",
    "ids_to_text",
    "load_spm",
    "tokenized_bleu",
    "translate",
    "read_scoring_data",
    "score_checkpoints",
]

_SCORING = ("read_scoring_data", "score_checkpoints")


def __getattr__(name: str):
    # score.py pulls in the model and training modules; import it only when asked for
    if name in _SCORING:
        from . import score as scoring  # the submodule; its core, score.score, is imported from it by name

        return getattr(scoring, name)
    raise AttributeError(name)
