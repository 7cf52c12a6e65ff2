"""Label-smoothed NLL as fairseq 0.9.0, against a hand computation."""

import math

import pytest
import torch

from lnrepro.train.loss import label_smoothed_nll_loss
from lnrepro.vocab import PAD

torch.set_num_threads(1)


def test_against_hand_computation():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 5, generator=g, dtype=torch.float64)
    target = torch.tensor([[4, 2, PAD], [0, 3, 2]])
    eps, V = 0.1, 5
    loss_h = nll_h = 0.0
    for b in range(2):
        for t in range(3):
            y = int(target[b, t])
            if y == PAD:
                continue
            z = [float(v) for v in logits[b, t]]
            lse = math.log(sum(math.exp(v) for v in z))
            logp = [v - lse for v in z]
            nll = -logp[y]
            nll_h += nll
            loss_h += (1 - eps) * nll + eps / V * sum(-lp for lp in logp)
    loss, nll = label_smoothed_nll_loss(logits, target, eps)
    assert math.isclose(float(loss), loss_h, rel_tol=1e-6)
    assert math.isclose(float(nll), nll_h, rel_tol=1e-6)
    # log-probabilities give the same result (log_softmax is idempotent on them)
    loss2, nll2 = label_smoothed_nll_loss(torch.log_softmax(logits, -1), target, eps)
    assert math.isclose(float(loss2), loss_h, rel_tol=1e-6) and math.isclose(float(nll2), nll_h, rel_tol=1e-6)


def test_padding_ignored_and_eps_zero_is_nll():
    logits = torch.randn(1, 4, 7)
    target = torch.tensor([[3, 5, PAD, PAD]])
    loss, nll = label_smoothed_nll_loss(logits, target, 0.0)
    ref = torch.nn.functional.cross_entropy(logits[0, :2], target[0, :2], reduction="sum")
    torch.testing.assert_close(loss, ref)
    torch.testing.assert_close(nll, ref)
    logits2 = logits.clone()
    logits2[0, 2:] = 1000.0  # garbage at padded positions changes nothing
    torch.testing.assert_close(label_smoothed_nll_loss(logits2, target, 0.1)[0],
                               label_smoothed_nll_loss(logits, target, 0.1)[0])


def _plain(logits, target, eps):
    """fairseq's formula through autograd: log_softmax over all rows, padded rows masked."""
    lprobs = torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)
    pad = target.eq(PAD).unsqueeze(-1)
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).masked_fill(pad, 0.0).sum()
    smooth = -lprobs.sum(-1, keepdim=True).masked_fill(pad, 0.0).sum()
    return (1 - eps) * nll + eps / logits.size(-1) * smooth, nll


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
def test_fused_gradient_equals_autograd_of_the_formula(dtype, tol):
    import lnrepro.train.loss as loss_module

    g = torch.Generator().manual_seed(0)
    rows = 3 * loss_module.ROWS_PER_CHUNK + 5  # several chunks and a partial one
    logits = (3 * torch.randn(rows, 2, 37, generator=g)).to(dtype).requires_grad_()
    target = torch.randint(0, 37, (rows, 2), generator=g)
    target[::3, 1] = PAD
    loss, nll = label_smoothed_nll_loss(logits, target, 0.1)
    ref_loss, ref_nll = _plain(logits, target, 0.1)
    torch.testing.assert_close(loss, ref_loss, rtol=tol, atol=0)
    torch.testing.assert_close(nll, ref_nll, rtol=tol, atol=0)
    (grad,) = torch.autograd.grad(loss * 0.37, logits)
    (ref_grad,) = torch.autograd.grad(ref_loss * 0.37, logits)
    assert grad.dtype == dtype
    torch.testing.assert_close(grad, ref_grad, rtol=tol, atol=tol * 0.37)
    assert torch.all(grad[target.eq(PAD)] == 0)
    assert not nll.requires_grad  # for logging only


def test_gradcheck_and_all_padding():
    logits = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    target = torch.tensor([1, 3, PAD, 6, 0])
    assert torch.autograd.gradcheck(lambda z: label_smoothed_nll_loss(z, target, 0.2)[0], (logits,))
    loss, nll = label_smoothed_nll_loss(logits, torch.full((5,), PAD), 0.1)
    assert float(loss.detach()) == 0.0 and float(nll) == 0.0
    loss.backward()
    assert torch.all(logits.grad == 0)


def test_unpadded_rows_equal_the_padded_batch():
    """The training step's packed rows (no target is padding: chunks are views) give the loss and gradient of the
    padded batch they come from."""
    import lnrepro.train.loss as loss_module

    g = torch.Generator().manual_seed(2)
    rows = 2 * loss_module.ROWS_PER_CHUNK + 3
    logits = torch.randn(rows, 3, 11, generator=g, dtype=torch.float64, requires_grad=True)
    target = torch.randint(2, 11, (rows, 3), generator=g)
    target[::2, 2] = PAD
    keep = target.ne(PAD)
    loss, nll = label_smoothed_nll_loss(logits, target, 0.1)
    packed_loss, packed_nll = label_smoothed_nll_loss(logits[keep], target[keep], 0.1)
    torch.testing.assert_close(packed_loss, loss, rtol=1e-12, atol=0)
    torch.testing.assert_close(packed_nll, nll, rtol=1e-12, atol=0)
    (grad,) = torch.autograd.grad(loss, logits)
    (packed_grad,) = torch.autograd.grad(packed_loss, logits)
    torch.testing.assert_close(packed_grad, grad, rtol=1e-12, atol=1e-15)
