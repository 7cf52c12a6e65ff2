"""The model sizes the bench measures, and the training and decoding settings it measures them with.

The values are copied from the configuration they stand for (named beside each), not read from it: the bench
measures the cost of a shape, and it must keep running while the configuration layer changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from ..config.settings import OptimSettings, ScheduleSettings

if TYPE_CHECKING:  # lnrepro.model imports torch; the CLI reads SIZES to build its parser without it
    from ..model import ModelConfig


MAX_TOKENS = 4096  # config.yaml defaults.train.max_tokens (the paper's batch)


@dataclass(frozen=True)
class Size:
    """One model shape: ModelConfig fields (vocabulary apart) and the vocabulary its BPE is learned with."""

    name: str
    vocab: int
    model: dict = field(default_factory=dict)
    about: str = ""
    max_tokens: int = MAX_TOKENS  # the training batch of the configuration it stands for

    def config(self, norm: str = "pre") -> "ModelConfig":
        """The project's ModelConfig; Pre-LN by default, the placement the reference (norm_first=True) has."""
        from ..model import ModelConfig

        return ModelConfig(vocab_size=self.vocab, norm=norm, **self.model)


SIZES: dict[str, Size] = {
    # presets/multi30k.yaml: the paper's depth at width 256
    "multi30k": Size("multi30k", 8000, {"encoder_layers": 6, "decoder_layers": 6, "d_model": 256, "heads": 4,
                                        "ffn_dim": 512}, "Multi30k preset: 6+6 layers, d_model 256, 4 heads, FFN 512"),
    # config.yaml defaults: transformer_iwslt_de_en
    "paper": Size("paper", 10000, {"encoder_layers": 6, "decoder_layers": 6, "d_model": 512, "heads": 4,
                                   "ffn_dim": 1024}, "paper: 6+6 layers, d_model 512, 4 heads, FFN 1024"),
    # presets/study-cpu.yaml: the published CPU study (the size a 2-core CPU trains), 2,048-token batches
    "study": Size("study", 4000, {"encoder_layers": 6, "decoder_layers": 6, "d_model": 64, "heads": 4,
                                  "ffn_dim": 128}, "CPU study preset: 6+6 layers, d_model 64, 4 heads, FFN 128, "
                                  "2,048-token batches", max_tokens=2048),
    # presets/demo.yaml: what --quick and the growth measurements use
    "tiny": Size("tiny", 600, {"encoder_layers": 2, "decoder_layers": 2, "d_model": 64, "heads": 4,
                               "ffn_dim": 128}, "demo preset: 2+2 layers, d_model 64, 4 heads, FFN 128"),
}

# config.yaml defaults.optim: the optimizer the training loop builds from it (build_optimizer), the label smoothing
OPTIM = OptimSettings(name="adamw", lr_max=5e-4, betas=(0.9, 0.98), eps=1e-8, weight_decay=1e-4, clip_norm=0.0,
                      label_smoothing=0.1)
LABEL_SMOOTHING = OPTIM.label_smoothing
# The bench's updates run at lr_max: a constant schedule (training's schedules are timed the same: lr_at is
# evaluated once per update)
CONSTANT = ScheduleSettings(warmup=False, decay="constant", warmup_updates=None, anchor_updates=None,
                            decay_epochs=None, decay_factor=None)
BATCH_MULTIPLE = 8  # train.required_batch_size_multiple
# config.yaml defaults.eval (the Multi30k preset keeps it): every split decoded alike, both splits scored
DECODING = {"beam": 5, "lenpen": 1.2, "max_len_a": 0, "max_len_b": 200, "precision": "fp32"}
EVAL_SPLITS = ("valid", "test")
EVAL_MAX_TOKENS = 8000


def eval_slice(splits: Sequence[str]) -> dict:
    """The scoring slice (ScoreSettings) of ``splits`` as the workflow writes it, with the label smoothing."""
    return {"splits": {s: DECODING for s in splits}, "max_tokens": EVAL_MAX_TOKENS, "label_smoothing": LABEL_SMOOTHING}
