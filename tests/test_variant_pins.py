"""The six first variants' initial weights and first gradient are pinned: a change to the model's shared code (its
hooks, its initialization, the order of its draws) that moves any of them fails here.

For each variant, at a fixed seed: the sha256 of the initial state dict (fairseq's draws and the variant's
``init_weights``: the generator's draws and exact scalings, the same bytes on every CPU); then, after its
data-dependent initialization (Admin's profile), each tensor of the state dict, and after one forward and backward
pass in training mode (every dropout on), the loss and each parameter's gradient, as one random projection of each
with its norm. These go through matmul kernels that round differently on other CPUs (about 1e-6 of a tensor's
norm), so they are pinned as values within a fraction of the tensor's norm, which any change to the model's code
exceeds by orders of magnitude. Dropout's random masks are drawn by the kernels of the CPU's instruction set
(PyTorch's CPU capability, AVX2 or AVX512), which fill them in a different order: the gradient is pinned per
capability, each set made on a CPU of its kind. The gradient is pinned rather than an optimizer's step: Adam's first step divides
each gradient element by its own size, so an element that is zero but for rounding moves by about lr on one CPU
and not on another. ``k_proj.bias``'s gradient is left out: it is zero but for rounding (the softmax does not see
a bias added to every key).

Regenerate (only for an intended change of these variants): ``python tests/test_variant_pins.py`` on a CPU of each
capability (it rewrites its own capability's set and keeps the others).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from lnrepro.model import Transformer
from lnrepro.train.loss import label_smoothed_nll_loss
from lnrepro.vocab import PAD
from variant_models import VOCAB, tiny_model

PINS = Path(__file__).with_name("variant_pins.json")
PINNED = ("post", "pre", "pre_nofinal", "deepnorm", "admin", "rezero")
DROPOUTS = dict(dropout=0.1, attention_dropout=0.1, activation_dropout=0.1)


def initial_digest(model: Transformer) -> str:
    """sha256 over the state dict's names, shapes and bytes, in its order."""
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(f"{name}{tuple(t.shape)}".encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def projections(tensors: dict[str, torch.Tensor]) -> dict[str, tuple[float, float]]:
    """Each tensor's (projection on a fixed random vector of its size, norm), in float64; k_proj.bias left out."""
    g = torch.Generator().manual_seed(12345)
    out = {}
    for name, t in tensors.items():
        direction = torch.randn(t.numel(), generator=g, dtype=torch.float64)
        if not name.endswith("k_proj.bias"):
            flat = t.detach().double().reshape(-1)
            out[name] = (float(flat @ direction), float(flat.norm()))
    return out


def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A right-padded batch (padding in sources and targets; prev starts with EOS)."""
    g = torch.Generator().manual_seed(7)
    src, target = torch.randint(4, VOCAB, (4, 9), generator=g), torch.randint(4, VOCAB, (4, 7), generator=g)
    src[1, 6:], target[2, 4:] = PAD, PAD
    prev = torch.cat([torch.full((4, 1), 2), target[:, :-1]], dim=1)
    prev[2, 5:] = PAD
    return src, prev, target


def pins_of(norm: str) -> dict:
    """What is pinned for ``norm``: the initial digest, the state after the data-dependent initialization, and the
    loss and gradient of one training-mode pass."""
    torch.set_num_threads(1)
    model = tiny_model(norm, seed=3, **DROPOUTS)
    initial = initial_digest(model)
    src, prev, target = batch()
    model.init_from_data((src, prev, target))
    profiled = projections(model.state_dict())
    model.train()
    loss = label_smoothed_nll_loss(model(src, prev), target, 0.1)[0] / int(target.ne(PAD).sum())
    loss.backward()
    gradient = projections({name: p.grad for name, p in model.named_parameters()})
    return {"initial_sha256": initial, "profiled": profiled, "loss": float(loss.detach()), "gradient": gradient}


# How far a projection or norm may move, as a fraction of the norm: other CPUs round the matmuls differently
# (3e-6 at most measured between two kernel paths of one CPU, MKL_CBWR=COMPATIBLE against the default).
TOLERANCE = 1e-4


def _moved(pinned: dict[str, list[float]], now: dict[str, tuple[float, float]]) -> list[str]:
    """The tensors whose projection or norm moved by more than TOLERANCE of their pinned norm."""
    return [name for name, (projection, size) in pinned.items()
            if abs(now[name][0] - projection) > TOLERANCE * size or abs(now[name][1] - size) > TOLERANCE * size]


def capability() -> str:
    """The CPU kernels PyTorch runs here ("AVX2", "AVX512"): the pins' set."""
    return torch.backends.cpu.get_cpu_capability()


@pytest.mark.parametrize("norm", PINNED)
def test_initial_weights_and_first_gradient_are_pinned(norm: str) -> None:
    sets = json.loads(PINS.read_text())
    if capability() not in sets:
        pytest.fail(f"no pins for PyTorch's {capability()} kernels (pinned: {', '.join(sets)}): run "
                    "`python tests/test_variant_pins.py` on this CPU to pin them", pytrace=False)
    pinned, now = sets[capability()][norm], pins_of(norm)
    assert now["initial_sha256"] == pinned["initial_sha256"], f"{norm}: the initial weights changed"
    for part in ("profiled", "gradient"):
        assert list(now[part]) == list(pinned[part]), f"{norm}: the {part} tensors changed"
        assert not _moved(pinned[part], now[part]), f"{norm}: {part} moved: {_moved(pinned[part], now[part])}"
    assert now["loss"] == pytest.approx(pinned["loss"], rel=TOLERANCE), f"{norm}: the loss moved"


if __name__ == "__main__":
    sets = {**(json.loads(PINS.read_text()) if PINS.exists() else {}),
            capability(): {norm: pins_of(norm) for norm in PINNED}}
    PINS.write_text(json.dumps(dict(sorted(sets.items())), indent=1) + "\n")
