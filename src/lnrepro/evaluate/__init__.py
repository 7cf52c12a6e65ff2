"""Evaluation: fairseq-0.9.0-style beam search with the KV cache, both BLEU kinds, per-checkpoint scoring."""

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
    "score_checkpoint",
]


def __getattr__(name: str):
    # score.py pulls in the model and training modules; import it only when asked for
    if name == "score_checkpoint":
        from .score import score_checkpoint

        return score_checkpoint
    raise AttributeError(name)
