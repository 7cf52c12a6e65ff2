"""Label-smoothed NLL as fairseq 0.9.0, against a hand computation."""

import math

import pytest
import torch

from lnrepro.train.loss import label_smoothed_nll_loss, projected_label_smoothed_nll_loss
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


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_projected_loss_equals_loss_of_the_projection(monkeypatch, dtype, tol):
    """The fused projection and loss of the training step: the loss, NLL and gradients of x and of the weight
    are those of label_smoothed_nll_loss(F.linear(x, weight)) (bf16: its GEMMs in bf16, as under autocast)."""
    import lnrepro.train.loss as loss_module

    monkeypatch.setattr(loss_module, "PROJECTION_ROWS", 8)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8 * 3 + 5, 16, generator=g, dtype=torch.float64 if dtype == torch.float64 else torch.float32)
    x.requires_grad_()
    weight = (0.5 * torch.randn(37, 16, generator=g, dtype=x.dtype)).requires_grad_()
    target = torch.randint(2, 37, (x.size(0),), generator=g)
    loss, nll = projected_label_smoothed_nll_loss(x, weight, target, 0.1, dtype)
    logits = torch.nn.functional.linear(x.to(dtype), weight.to(dtype))
    ref_loss, ref_nll = label_smoothed_nll_loss(logits, target, 0.1)
    torch.testing.assert_close(loss, ref_loss.to(loss.dtype), rtol=tol, atol=0)
    torch.testing.assert_close(nll, ref_nll.to(nll.dtype), rtol=tol, atol=0)
    grads = torch.autograd.grad(loss * 0.37, (x, weight))
    ref_grads = torch.autograd.grad(ref_loss * 0.37, (x, weight))
    for a, r in zip(grads, ref_grads):
        assert a.dtype == r.dtype == x.dtype
        torch.testing.assert_close(a, r, rtol=tol, atol=tol * 0.37 * float(r.abs().max()))
    assert not nll.requires_grad
    with pytest.raises(ValueError, match="padded"):
        projected_label_smoothed_nll_loss(x, weight, torch.full((x.size(0),), PAD), 0.1)
