"""Where the LayerNorm goes: the torch-free descriptions of the norm variants, keyed by the config's ``model.norm``.

A variant is the residual/normalization arrangement of every sublayer (self-attention, encoder attention or
FFN), whether each stack ends with one more LayerNorm, and what else it changes (parameters, learned scalars,
residual scaling, initialization, LayerNorms removed, residual connections). Its computation is a torch module in
``lnrepro.model.variants`` registered under the same name. The schema's enum (``config/load.py``), the
Snakefile, the figures (labels, line styles), gradinit (every registered variant) and the confound analysis
(``differences``) read this registry, which imports no torch, so they do not load it.

Xiong et al. 2020 (arXiv 2002.04745), Table 1, in short: Post-LN x_{l+1} = LN(x_l + F(x_l)), Pre-LN
x_{l+1} = x_l + F(LN(x_l)); fairseq 0.9.0 fairseq/models/transformer.py adds one LayerNorm after the last
layer of the encoder and of the decoder iff ``normalize_before`` (Pre-LN): ``final_norm``. The proof of the
paper's Theorem 1 gets Pre-LN's 1/sqrt(L) gradient scale from that final LayerNorm; ``pre_nofinal`` drops it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import LnReproError

# What a variant can change beside the norm position, one kind per ``Difference``.
DIFFERENCE_KINDS = ("parameters", "residual scaling", "initialization", "layernorms removed", "residual connections")


@dataclass(frozen=True)
class Difference:
    """One thing a variant changes beside where the LayerNorm goes (what the confound analysis prints)."""

    kind: str  # one of DIFFERENCE_KINDS
    what: str  # e.g. "no LayerNorm after the last layer of each stack"

    def __post_init__(self) -> None:
        if self.kind not in DIFFERENCE_KINDS:
            raise LnReproError(f"model.norm: difference kind {self.kind!r} is not one of {DIFFERENCE_KINDS}")


@dataclass(frozen=True)
class NormVariant:
    """One value of ``model.norm``: its name, label and what it changes; the computation is its torch module."""

    name: str  # the config value, and the name of its module in lnrepro.model.variants
    label: str  # for plots and tables, e.g. "Post-LN"
    final_norm: bool  # one LayerNorm after the last layer of each stack (fairseq: iff normalize_before)
    settings: tuple[str, ...] = ()  # the model.* settings its module reads beyond the architecture every variant has
    differences: tuple[Difference, ...] = ()  # beside the norm position; () for the paper's two


# name -> variant, in registration order: the order figures and tables list the variants in.
NORMS: dict[str, NormVariant] = {}


def register_norm(variant: NormVariant) -> NormVariant:
    """Add ``variant`` under its name (a name is registered once) and return it."""
    if variant.name in NORMS:
        raise LnReproError(f"model.norm: variant {variant.name!r} is already registered")
    NORMS[variant.name] = variant
    return variant


def norm_variant(name: str) -> NormVariant:
    """The registered variant called ``name``; a clear error naming model.norm and the choices otherwise."""
    try:
        return NORMS[name]
    except (KeyError, TypeError):  # TypeError: an unhashable value from a hand-written config
        raise LnReproError(f"model.norm: expected one of {', '.join(map(repr, NORMS))}, got {name!r}") from None


# The paper's two arrangements first (post: the original Transformer, the baseline every figure starts with).
register_norm(NormVariant("post", "Post-LN", final_norm=False))
register_norm(NormVariant("pre", "Pre-LN", final_norm=True))
register_norm(NormVariant("pre_nofinal", "Pre-LN without final LN", final_norm=False, differences=(
    Difference("layernorms removed", "no LayerNorm after the last layer of each stack"),)))
register_norm(NormVariant("deepnorm", "DeepNorm", final_norm=False, differences=(
    Difference("residual scaling", "the residual multiplied by alpha before each LayerNorm, LN(alpha x + F(x)): "
                                   "encoder 0.81 (N^4 M)^(1/16), decoder (3M)^(1/4)"),
    Difference("initialization", "xavier_normal_ with gain beta for fc1, fc2 and every attention's value and output "
                                 "projections, gain 1 for query and key: encoder beta 0.87 (N^4 M)^(-1/16), decoder "
                                 "(12M)^(-1/4)"))))
register_norm(NormVariant("admin", "Admin", final_norm=False, differences=(
    Difference("parameters", "a learned vector omega of width d_model per sublayer"),
    Difference("residual scaling", "x <- LN(omega * x + F(x)): the residual scaled by omega"),
    Difference("initialization", "omega profiled on the run's first training batch (Admin, Liu et al. 2020)"))))
register_norm(NormVariant("rezero", "ReZero", final_norm=False, differences=(
    Difference("parameters", "one learned scalar a per layer, shared by its sublayers"),
    Difference("layernorms removed", "every LayerNorm: none in the sublayers, none after the stacks"),
    Difference("residual scaling", "each branch multiplied by its layer's scalar, x + a F(x), a initialized to 0"))))
register_norm(NormVariant("tfixup", "T-Fixup", final_norm=False, differences=(
    Difference("layernorms removed", "every LayerNorm: none in the sublayers, none after the stacks (the reference's "
                                     "decoder layers keep an unused encoder_attn_layer_norm: not built here)"),
    Difference("initialization", "v_proj times sqrt(2) (xavier gain 1), then v_proj, out_proj, fc1 and fc2 times "
                                 "0.67 N^(-1/4) in the encoder and (9M)^(-1/4) in the decoder (its self- and "
                                 "encoder attention both); the token embeddings times (9N)^(-1/4) (encoder) and "
                                 "(9M)^(-1/4) (decoder, and the output projection shared with it; the encoder's "
                                 "factor only under share_all_embeddings), as layer6ai-labs/T-Fixup scales them"))))
register_norm(NormVariant("resi_dual", "ResiDual", final_norm=False, differences=(
    Difference("residual connections", "a second, unnormalized stream y beside Post-LN's x: y starts as the "
                                       "embeddings, each dropped-out branch is added to it too, and each stack "
                                       "outputs x + LN(y) (microsoft/ResiDual; its encoder also zeroes the padded "
                                       "source embeddings first, not done here: only padded positions differ)"),
    Difference("parameters", "one LayerNorm (eps 1e-7, gain and bias of width d_model) per stack, on y"),
    Difference("initialization", "fc1 and fc2 as nn.Linear initializes them (Kaiming-uniform weights, a = sqrt(5); "
                                 "biases uniform in +-1/sqrt(fan_in)), as the reference's fairseq 0.12.2 layers "
                                 "build them, instead of fairseq 0.9.0's Xavier weights and zero biases"))))
register_norm(NormVariant("b2t", "B2T", final_norm=False, differences=(
    Difference("residual scaling", "one more residual in each layer, from the layer's input to the input of its "
                                   "last LayerNorm: LN(h + F(h) + x), x the layer's input (B2T connection)"),
    Difference("initialization", "fc1 and fc2 as nn.Linear initializes them (Kaiming-uniform weights, a = sqrt(5); "
                                 "biases uniform in +-1/sqrt(fan_in)), as the reference builds them, instead of "
                                 "fairseq 0.9.0's Xavier weights and zero biases; then every weight matrix of a layer "
                                 "(attention q, k, v, out; fc1, fc2) multiplied by N^-1/2, N its stack's number of "
                                 "layers (encoder and decoder apart), biases left"))))
register_norm(NormVariant("sandwich", "Sandwich-LN", final_norm=True, differences=(
    Difference("parameters", "a second LayerNorm per sublayer, on the branch's output: x + LN_out(F(LN_in(x)))"),
    Difference("residual scaling", "the branch normalized before it is added, then dropped out: "
                                   "x + dropout(LN_out(F(LN_in(x)))), fairseq's place for dropout (x-transformers' "
                                   "sandwich_norm has none there; CogView drops out before LN_out, "
                                   "x + LN_out(dropout(F(LN_in(x))))); no LayerNorm on the embeddings' output"))))
register_norm(NormVariant("dyt", "DyT", final_norm=True, differences=(
    Difference("layernorms removed", "every LayerNorm of Pre-LN (the sublayers' and each stack's last) replaced by "
                                     "DyT(x) = gamma * tanh(alpha x) + beta"),
    Difference("parameters", "one learned scalar alpha per DyT, initialized to 0.5 (DynamicTanh's "
                             "alpha_init_value default)"))))
