"""Label-smoothed NLL as fairseq 0.9.0, against a hand computation."""

import math

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
