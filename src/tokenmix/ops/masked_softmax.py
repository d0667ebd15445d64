"""A softmax over the real entries of one axis that never produces NaN (shared by "efficient" and
"contextualizer", whose softmaxes run over the sequence axis rather than over keys per query)."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["masked_softmax"]


def masked_softmax(logits: Tensor, real: Tensor | None, dim: int) -> Tensor:
    """Softmax of ``logits`` along ``dim`` over the entries where ``real`` (bool, broadcastable) is True.

    Masked entries get weight exactly 0 and no gradient; a slice with no real entry gets all-zero weights,
    never NaN, forward or backward: masked logits are -inf before ``exp``, the shift is the detached max
    over real entries (0 when there is none), and an empty sum is replaced by 1.
    """
    if real is None:
        return torch.softmax(logits, dim=dim)
    logits = logits.masked_fill(~real, float("-inf"))
    shift = logits.detach().amax(dim=dim, keepdim=True)
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    e = torch.exp(logits - shift)
    total = e.sum(dim=dim, keepdim=True)
    return e / torch.where(total > 0, total, torch.ones_like(total))
