"""The six variants registered before B2T, Sandwich-LN and DyT keep their initial weights and their first update
bitwise: the digests of a tiny model's state after its initialization and after one AdamW update on a fixed batch
(one thread, fp32, CPU), computed with the model as it was before those variants were added."""

from __future__ import annotations

import hashlib

import pytest
import torch

from lnrepro.train.loss import label_smoothed_nll_loss
from lnrepro.vocab import PAD
from variant_models import VOCAB, tiny_model

# norm -> (digest of the initial state, digest of the state after one update); `python tests/test_variants_unchanged.py`
# prints them.
DIGESTS = {
    'post': ('dbc5783cbbe44c15d82e6d15c4b49880730f47b3cf94a542fe4745f79f554926',
             '5364297750ead6ce387df57af2efe223d59333fd980d5b68d300ae110f03d068'),
    'pre': ('b61f712de19e0c091e243b215aa392805f50d8aeea2fae41d75f7daa957a54ba',
            '234eacfcbc9030496d6ab3f225ad5bf9b50fccf3cd999aef592c44c1ed6bc382'),
    'pre_nofinal': ('dbc5783cbbe44c15d82e6d15c4b49880730f47b3cf94a542fe4745f79f554926',
                    'ef8d955a115421c380772a43019d122bd54765657c07f005dfc12096e630f9ea'),
    'deepnorm': ('fde8faf47a41061475082efa7e8c1d923fb3bed48218d0a732e985b23273487d',
                 '9b1704c22e5f6b2419c1c4f95822f7a7a1aab4bac477dbbe8bcf3203b040e044'),
    'admin': ('25d48bab6d78af0a3961497b0692cf731c5ffde333865ecbd60c5da0fe66ebb7',
              '8c988070cbc49d653cc6c2b81f5a5a73934ffacb0c05eede799b477ea9d4317c'),
    'rezero': ('8fcca63d6131ef55a4e12ec690416856a5ddd2edde3df3b2dfe408b60699db33',
               'cccdb674122248dbbf7a1f1e6722d15b1b117074bc652d9c31dc79ab754bfbd6'),
}


def state_digest(model: torch.nn.Module) -> str:
    """SHA-256 of every tensor of the state dict, by key, as bytes."""
    h = hashlib.sha256()
    for key, value in model.state_dict().items():
        h.update(key.encode())
        h.update(value.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def digests(norm: str) -> tuple[str, str]:
    """The state's digests after initialization (seed 0) and after one AdamW update with dropout on."""
    torch.set_num_threads(1)
    model = tiny_model(norm, 0, dropout=0.1)
    first = state_digest(model)
    g = torch.Generator().manual_seed(5)
    src, prev = torch.randint(4, VOCAB, (3, 7), generator=g), torch.randint(4, VOCAB, (3, 6), generator=g)
    src[0, 5:], prev[1, 4:] = PAD, PAD
    target = torch.roll(prev, -1, dims=1)
    target[prev.eq(PAD)] = PAD
    model.init_from_data((src, prev, target))
    model.train()
    torch.manual_seed(7)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-8, weight_decay=1e-4)
    loss = label_smoothed_nll_loss(model(src, prev), target, 0.1)[0] / int(target.ne(PAD).sum())
    loss.backward()
    opt.step()
    return first, state_digest(model)


@pytest.mark.parametrize("norm", ["post", "pre", "pre_nofinal", "deepnorm", "admin", "rezero"])
def test_initial_weights_and_first_update_are_unchanged(norm):
    assert digests(norm) == DIGESTS[norm]


if __name__ == "__main__":
    for name in ("post", "pre", "pre_nofinal", "deepnorm", "admin", "rezero"):
        print(f"    {name!r}: {digests(name)!r},")  # one line per variant: wrap it at 120 characters
