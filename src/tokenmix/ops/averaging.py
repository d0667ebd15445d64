"""Means over the real tokens of a sequence, whole or running (prefix), shared by "relation" and "average".

``masked_mean`` computes, at every position i, the mean of ``h_j`` over real ``j`` (``j <= i`` when
causal) with a (cumulative) sum divided by the real count: O(N d), no N x N matrix. A position with no
real token in range gets 0. ``masked_mean_reference`` forms the explicit N x N averaging matrix.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["masked_mean", "masked_mean_reference"]


def masked_mean(h: Tensor, mask: Tensor | None, causal: bool) -> Tensor:
    """(B, N, d) -> (B, N, d) (non-causal: the same mean broadcast to every position)."""
    weight = torch.ones_like(h[..., :1]) if mask is None else mask[..., None].to(h.dtype)
    if causal:
        total, count = (h * weight).cumsum(dim=1), weight.cumsum(dim=1)
    else:
        total, count = (h * weight).sum(dim=1, keepdim=True), weight.sum(dim=1, keepdim=True)
    return (total / count.clamp(min=1.0)).expand_as(h)


def masked_mean_reference(h: Tensor, mask: Tensor | None, causal: bool) -> Tensor:
    """The same through A_ij = [j allowed for i] / #allowed, an explicit (B, N, N) matrix."""
    n = h.shape[1]
    allowed = torch.ones(h.shape[0], n, n, dtype=h.dtype, device=h.device)
    if causal:
        allowed = allowed.tril()
    if mask is not None:
        allowed = allowed * mask[:, None, :].to(h.dtype)
    return (allowed / allowed.sum(dim=-1, keepdim=True).clamp(min=1.0)) @ h
