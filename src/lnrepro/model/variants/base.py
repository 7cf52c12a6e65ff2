"""The interface of a residual variant's torch module and the registry of modules by ``model.norm`` name.

A ``Residual`` is built once per sublayer (``per_layer`` False: self-attention, encoder attention, FFN) or once
per layer (``per_layer`` True: the variant's reference shares its scalars across a layer's sublayers). It owns
the variant's LayerNorm or scalars and computes the sublayer with its residual connection,
``forward(x, f, dropout)``. Two hooks set its initialization:

- ``init_weights(layer, stack, index, encoder_layers, decoder_layers, cfg)``, called by
  ``Transformer.reset_parameters`` after fairseq's initialization, for each residual module of each layer; it
  may change the layer's other weights (``layer.ffn.fc2``, ...). Parameters are created with constant values
  and drawn here, after fairseq's draws, so that a seed gives every variant fairseq's same initial weights
  except the ones its hook changes.
- ``init_from_data(model, batch)`` (a class method), called once by ``Transformer.init_from_data`` with a
  training batch before the first update and before gradinit measures: for variants whose initialization is
  profiled on data (Admin). A no-op here.
- ``init_model(model)`` (a class method), called by ``Transformer.reset_parameters`` after every layer's
  ``init_weights``: the weights outside the layers (T-Fixup scales the token embeddings). A no-op here.

A variant that carries more than the hidden tensor from layer to layer (ResiDual: a second, unnormalized
residual stream) names a ``Stream`` class: each stack then holds one ``Stream`` module (``encoder_stream``,
``decoder_stream``), whose ``begin`` turns the embeddings (after their dropout) into the state the first layer
takes, every residual module takes and returns that state, and whose ``end`` turns the last layer's state into
the stack's output. Without one (``stream`` None) the state is the hidden tensor.

``final_norm(cfg)`` builds the module after each stack where the description has one (a LayerNorm; DyT's own).
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...errors import LnReproError
from ..config import ModelConfig

Fn = Callable[[torch.Tensor], torch.Tensor]


class Stream(nn.Module):
    """What a stack carries between its layers beside the hidden tensor (one module per stack, built from the
    model's config; its parameters are the stack's, e.g. ``encoder_stream.norm.weight``)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()

    def begin(self, x: torch.Tensor) -> Any:
        """The state the stack's first layer takes, from the embeddings after their dropout."""
        raise NotImplementedError

    def end(self, state: Any) -> torch.Tensor:
        """The stack's output (before any final LayerNorm) from its last layer's state."""
        raise NotImplementedError


class Residual(nn.Module):
    """One sublayer's (or layer's) residual connection: ``forward(x, f, dropout)``, and the two init hooks."""

    per_layer: ClassVar[bool] = False  # one module for all of a layer's sublayers instead of one per sublayer
    # Names of this module's own parameters that gradinit measures beside the layer's weight matrices (ReZero's
    # scalar: at initialization it is the only parameter of a layer with a nonzero gradient).
    gradinit_params: ClassVar[tuple[str, ...]] = ()
    # The module each stack holds to carry a state beyond the hidden tensor (module docstring); None: the tensor.
    stream: ClassVar[type[Stream] | None] = None

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor, f: Fn, dropout: Fn) -> torch.Tensor:
        """The sublayer ``f`` with its residual connection; ``x`` the state the stack carries (the hidden tensor,
        or its ``stream``'s state), returned likewise."""
        raise NotImplementedError

    def init_weights(self, layer: nn.Module, stack: str, index: int, encoder_layers: int, decoder_layers: int,
                     cfg: ModelConfig) -> None:
        """After fairseq's initialization: this module's parameters, and any of ``layer``'s it changes.
        ``stack`` "encoder" | "decoder", ``index`` the layer's from 0."""

    @classmethod
    def init_from_data(cls, model: nn.Module, batch: tuple[torch.Tensor, ...]) -> None:
        """Once, before the first update: ``model`` the whole Transformer, (src, prev, target) a training batch on
        the CPU."""

    @classmethod
    def init_model(cls, model: nn.Module) -> None:
        """After every layer's ``init_weights``: ``model`` the whole Transformer, whose weights outside the layers
        (embeddings, output projection) the variant may change."""

    @classmethod
    def final_norm(cls, cfg: ModelConfig) -> nn.Module:
        """The module after the last layer of each stack, where the variant's description has one
        (``NormVariant.final_norm``): a LayerNorm, unless the variant replaces it. The model initializes it with its
        ``reset_parameters()``."""
        return nn.LayerNorm(cfg.d_model)


class LayerNormResidual(Residual):
    """A residual sublayer with one LayerNorm, whose gain and bias it holds as ``weight`` and ``bias`` (so its
    state-dict keys are those of the nn.LayerNorm fairseq names after the sublayer: ``self_attn_layer_norm.weight``)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.weight = nn.Parameter(torch.ones(cfg.d_model))
        self.bias = nn.Parameter(torch.zeros(cfg.d_model))

    def norm(self, x: torch.Tensor) -> torch.Tensor:
        """nn.LayerNorm's computation (eps 1e-5, fairseq's LayerNorm)."""
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)

    def init_weights(self, layer: nn.Module, stack: str, index: int, encoder_layers: int, decoder_layers: int,
                     cfg: ModelConfig) -> None:
        nn.init.ones_(self.weight)
        nn.init.zeros_(self.bias)


def linear_default_ffn(layer: nn.Module) -> None:
    """Draw ``layer``'s fc1 then fc2 again as ``nn.Linear`` builds them (its ``reset_parameters``: Kaiming-uniform
    weights with a = sqrt(5), biases uniform in +-1/sqrt(fan_in)), for the references that build their FFN with
    ``nn.Linear`` and leave it at that initialization instead of fairseq 0.9.0's Xavier weights and zero biases."""
    layer.ffn.fc1.reset_parameters()
    layer.ffn.fc2.reset_parameters()


# name -> module class, the torch side of lnrepro.norms.NORMS (same names).
RESIDUALS: dict[str, type[Residual]] = {}


def register_residual(name: str) -> Callable[[type[Residual]], type[Residual]]:
    """Class decorator: ``cls`` computes the variant ``name`` of lnrepro.norms (a name is registered once)."""

    def add(cls: type[Residual]) -> type[Residual]:
        if name in RESIDUALS:
            raise LnReproError(f"model.norm: a residual module for {name!r} is already registered")
        RESIDUALS[name] = cls
        return cls

    return add


def residual_class(name: str) -> type[Residual]:
    """The module class of the (described) variant ``name``."""
    try:
        return RESIDUALS[name]
    except KeyError:
        raise LnReproError(f"model.norm: variant {name!r} has no residual module (register one with "
                           "lnrepro.model.variants.register_residual)") from None
