"""Means over the real tokens of a sequence, whole or running (prefix), shared by "relation" and "average".

``masked_mean`` computes, at every position i, the mean of ``h_j`` over real ``j`` (``j <= i`` when
causal) with a (cumulative) sum divided by the real count: O(N d), no N x N matrix. A position with no
real token in range gets 0. ``masked_mean_reference`` forms the explicit N x N averaging matrix.

The causal running mean also comes with a state passed in and out, in the three forms of the other recurrences
(:mod:`tokenmix.ops.linear_attn`: it is linear attention with a constant feature map, ``phi = 1``): the state is
``(sum, count)``, the sum of the values seen (B, ...) and how many there were (a scalar tensor, or (B,) per row);
``naive_recurrent_mean`` sums each prefix anew (the reference), ``fused_recurrent_mean`` adds one token at a time
(decoding), ``chunk_mean`` takes cumulative sums over the whole input at once (prompts). Values ``v`` (B, T, ...).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["masked_mean", "masked_mean_reference", "naive_recurrent_mean", "fused_recurrent_mean", "chunk_mean"]

MeanState = tuple[Tensor, Tensor]


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


def _start(name: str, v: Tensor, initial_state: MeanState | None) -> MeanState:
    if v.dim() < 2:
        raise ValueError(f"tokenmix.ops.averaging.{name}: v must be (B, T, ...), got {tuple(v.shape)}")
    if initial_state is None:
        return torch.zeros_like(v[:, 0]), torch.zeros((), dtype=v.dtype, device=v.device)
    total, count = initial_state
    if total.shape != v[:, 0].shape:
        raise ValueError(f"tokenmix.ops.averaging.{name}: the state's sum must be (B, ...) = {tuple(v[:, 0].shape)}, "
                         f"got {tuple(total.shape)}")
    return total, count


def _rows(count: Tensor, like: Tensor) -> Tensor:
    """``count`` shaped to divide ``like`` (B, ...): as it is when a scalar, (B, 1, ...) when one per row."""
    return count if count.dim() == 0 else count.view(count.shape[0], *[1] * (like.dim() - 1))


def naive_recurrent_mean(v: Tensor, initial_state: MeanState | None = None,
                         output_final_state: bool = False) -> tuple[Tensor, MeanState | None]:
    """The reference: at each t, the state's sum and every value up to t summed anew, over the count."""
    total, count = _start("naive_recurrent_mean", v, initial_state)
    means = [(total + v[:, :t + 1].sum(dim=1)) / _rows(count + t + 1, total) for t in range(v.shape[1])]
    out = torch.stack(means, dim=1) if means else torch.zeros_like(v)
    final = (total + v.sum(dim=1), count + v.shape[1])
    return out, (final if output_final_state else None)


def fused_recurrent_mean(v: Tensor, initial_state: MeanState | None = None,
                         output_final_state: bool = False) -> tuple[Tensor, MeanState | None]:
    """The recurrent form decoding runs: one token added to the sum at a time."""
    total, count = _start("fused_recurrent_mean", v, initial_state)
    means = []
    for t in range(v.shape[1]):
        total, count = total + v[:, t], count + 1
        means.append(total / _rows(count, total))
    out = torch.stack(means, dim=1) if means else torch.zeros_like(v)
    return out, ((total, count) if output_final_state else None)


def chunk_mean(v: Tensor, initial_state: MeanState | None = None,
               output_final_state: bool = False) -> tuple[Tensor, MeanState | None]:
    """The parallel form: cumulative sums over the whole input, from the state."""
    total, count = _start("chunk_mean", v, initial_state)
    sums = total[:, None] + v.cumsum(dim=1)
    steps = torch.arange(1, v.shape[1] + 1, dtype=v.dtype, device=v.device).view(1, -1, *[1] * (v.dim() - 2))
    counts = _rows(count, total).unsqueeze(1) + steps if count.dim() else count + steps
    final = (sums[:, -1], count + v.shape[1]) if v.shape[1] else (total, count)
    return sums / counts, (final if output_final_state else None)
