"""The paper's fixed facts (a leaf: it imports nothing of the package): what Xiong et al. 2020 leave
unstated, the implementation's deliberate deviations, fairseq's IWSLT14 dictionary sizes, the model-size keys, and
the published numbers (``analysis/published.yaml``) with their loader.

The configuration layer, the analysis and the report read these; none of them is computed from an experiment
(``lnrepro.analysis.render.deviations`` renders them against one).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


# The published numbers, each with its source (installed with the package; the report rule's input).
PUBLISHED = Path(__file__).parent / "analysis" / "published.yaml"

# The model settings that make its size: an absolute number is compared only where they are the paper's.
SIZE_KEYS = ("encoder_layers", "decoder_layers", "d_model", "ffn_dim", "heads")


@functools.cache
def published() -> dict[str, Any]:
    """published.yaml: ``paper`` (citation, scale, setup), ``figure4`` and ``claims`` (each claim's ``measure``
    kind is checked against ``lnrepro.analysis.sections.claims.MEASURES`` where the claims are measured)."""
    with open(PUBLISHED, encoding="utf-8") as f:
        return yaml.safe_load(f)


@dataclass(frozen=True)
class Unstated:
    """A setting the paper does not state: what fairseq's IWSLT recipe does, and the value used here (the
    config key ``key`` holds it; ``fixed`` says it when no key does)."""

    setting: str
    recipe: str
    key: str | None = None
    fixed: str = ""


UNSTATED: tuple[Unstated, ...] = (
    Unstated("weight decay", "--weight-decay 0.0001 (decoupled, every parameter)", "optim.weight_decay"),
    Unstated("Adam eps", "fairseq's default --adam-eps 1e-8", "optim.eps"),
    Unstated("gradient clipping", "--clip-norm 0.0 (none)", "optim.clip_norm", "0 means no clipping"),
    Unstated("number of epochs", "--max-epoch as the user sets it", "train.epochs", "one checkpoint per epoch"),
    Unstated("checkpoint averaging", "none unless scripts/average_checkpoints.py is run", None,
             "none: every checkpoint is scored as saved"),
    Unstated("BLEU script and split", "fairseq-generate's BLEU on the tokenized text (--remove-bpe)", "eval.splits",
             "tokenized BLEU (the Moses-tokenized lowercased text, sacrebleu with tokenize none), sacreBLEU beside "
             "it; curves, selection and claims on valid"),
    Unstated("GPUs behind one 4,096-token batch", "one GPU, --max-tokens 4096, no --update-freq", "train.max_tokens",
             "one device computes each batch of at most this many tokens; no gradient accumulation"),
)

# Deliberate differences of the implementation from the paper's setup (fairseq 0.9.0 on IWSLT14) that hold
# whatever the config.
DEVIATIONS: tuple[str, ...] = (
    "Padding: source and target are padded on the right with attention masks; fairseq pads the source on the left. "
    "Masked positions do not change any result.",
    "Optimizer: torch.optim.AdamW (decoupled weight decay as fairseq's Adam); its eps is added after the bias "
    "correction, fairseq's before it, a difference negligible at eps 1e-8.",
    "Pre-LN's schedule is read as one x0.1 drop at the first update of epoch 8; fairseq's --force-anneal 8 would "
    "instead multiply the learning rate by 0.1 at every epoch from epoch 9 on.",
    "Admin (model.norm admin): every run profiles omega on its own initial weights and first training batch (fp32, "
    "training mode, its generators' states restored after); Transformer-Clinic's recipe profiles once (seed 1111, "
    "fp16) and trains every seed from that one profile.",
)

# fairseq's IWSLT14 dictionaries (its prepare-iwslt14.sh and fairseq-preprocess, separate per language) and
# the parameter counts of the paper's model with them and with the joint vocabulary of 10,000 pieces.
FAIRSEQ_DICTS = {"de": 8848, "en": 6632}
PAPER_PARAMS_M = {"fairseq": 39.47, "joint": 41.78}
