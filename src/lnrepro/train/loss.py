"""Label-smoothed cross-entropy as fairseq 0.9.0 (fairseq/criterions/label_smoothed_cross_entropy.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..vocab import PAD


def label_smoothed_nll_loss(logits_or_lprobs: torch.Tensor, target: torch.Tensor, eps: float,
                            ignore_index: int = PAD) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss_sum, nll_sum) over non-padding targets: loss = (1-eps)*nll + eps/V * sum_v(-log p_v).

    Accepts logits or log-probabilities: log_softmax is computed in fp32 either way (it is idempotent on
    log-probabilities, so passing lprobs is safe). As in fairseq, the sums are over target tokens; the caller
    divides the gradient by the number of target tokens (fairseq's sample_size without --sentence-avg).
    """
    lprobs = F.log_softmax(logits_or_lprobs.float(), dim=-1)
    target = target.unsqueeze(-1)
    nll = -lprobs.gather(dim=-1, index=target)
    smooth = -lprobs.sum(dim=-1, keepdim=True)
    pad = target.eq(ignore_index)
    nll_sum = nll.masked_fill(pad, 0.0).sum()
    smooth_sum = smooth.masked_fill(pad, 0.0).sum()
    eps_i = eps / lprobs.size(-1)
    loss_sum = (1.0 - eps) * nll_sum + eps_i * smooth_sum
    return loss_sum, nll_sum
