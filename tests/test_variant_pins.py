"""The six first variants' initial weights and first update are pinned: a change to the model's shared code (its
hooks, its initialization, the order of its draws) that moves any of them fails here.

For each variant, at a fixed seed: the sha256 of the initial state dict (fairseq's draws and the variant's
``init_weights``: the generator's draws and exact scalings, the same bytes on every CPU), and, after its
data-dependent initialization (Admin's profile) and one AdamW update in training mode (every dropout on), one
random projection per tensor of the state dict, compared within 1e-6 relative: the update's arithmetic goes
through matmul kernels that may round differently on another CPU, so those are pinned as values, not bytes.
``k_proj.bias`` is left out of the updated state: its gradient is zero but for rounding (the softmax does not
see a bias added to every key), and Adam's first step turns that rounding into a step of about lr.

Regenerate (only for an intended change of these variants): ``python tests/test_variant_pins.py``.
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


def projections(model: Transformer) -> dict[str, float]:
    """Each tensor (but k_proj.bias) against a fixed random vector of its size, in float64."""
    g = torch.Generator().manual_seed(12345)
    out = {}
    for name, t in model.state_dict().items():
        direction = torch.randn(t.numel(), generator=g, dtype=torch.float64)
        if not name.endswith("k_proj.bias"):
            out[name] = float(t.detach().double().reshape(-1) @ direction)
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
    """What is pinned for ``norm``: the initial digest and the projections after one update."""
    torch.set_num_threads(1)
    model = tiny_model(norm, seed=3, **DROPOUTS)
    initial = initial_digest(model)
    src, prev, target = batch()
    model.init_from_data((src, prev, target))
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-8, weight_decay=1e-4)
    loss = label_smoothed_nll_loss(model(src, prev), target, 0.1)[0] / int(target.ne(PAD).sum())
    loss.backward()
    opt.step()
    return {"initial_sha256": initial, "updated": projections(model)}


@pytest.mark.parametrize("norm", PINNED)
def test_initial_weights_and_first_update_are_pinned(norm: str) -> None:
    pinned, now = json.loads(PINS.read_text())[norm], pins_of(norm)
    assert now["initial_sha256"] == pinned["initial_sha256"], f"{norm}: the initial weights changed"
    assert list(now["updated"]) == list(pinned["updated"]), f"{norm}: the state dict's tensors changed"
    for name, value in pinned["updated"].items():
        assert now["updated"][name] == pytest.approx(value, rel=1e-6, abs=1e-9), f"{norm}: {name} after one update"


if __name__ == "__main__":
    PINS.write_text(json.dumps({norm: pins_of(norm) for norm in PINNED}, indent=1) + "\n")
