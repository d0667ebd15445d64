"""The factorised patterns of the Sparse Transformer (Child et al. (2019) §4.2-4.3; Ruggeri (2022) §4.1)
as index sets, and the block-wise helpers of its fast path (used by :mod:`tokenmix.mixers.sparse`).

``kind`` is ``"strided"`` or ``"fixed"``; ``part`` is the set a head attends to: ``"union"``
(``A_i^(1) ∪ A_i^(2)``), ``"A1"`` or ``"A2"``. Positions are absolute indices ``0 .. N-1``; ``l = stride``,
``c = summary``.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

__all__ = ["sparse_sets", "sparse_pattern", "fast_score_shape", "causal_keys", "neighbour_blocks",
           "softmax_or_zero"]

_KINDS = ("strided", "fixed")
_PARTS = ("union", "A1", "A2")  # the keys a head attends to: A(1) ∪ A(2), A(1) only, A(2) only


def _check(fn: str, kind: str, stride: int, summary: int, part: str = "union") -> None:
    if kind not in _KINDS:
        raise ValueError(f"{fn}: kind must be one of {_KINDS}, got {kind!r}")
    if stride <= 0 or not 1 <= summary <= stride:
        raise ValueError(f"{fn}: need stride >= 1 and 1 <= summary <= stride, got {stride}, {summary}")
    if part not in _PARTS:
        raise ValueError(f"{fn}: part must be one of {_PARTS}, got {part!r}")


def sparse_sets(n: int, kind: str, stride: int, summary: int = 1, causal: bool = True,
                device: torch.device | str | None = None) -> tuple[Tensor, Tensor]:
    """The two factorised sets as dense (N, N) bool matrices ``(A1, A2)``, ``[i, j]`` True when ``j`` is in
    ``A_i^(1)`` (resp. ``A_i^(2)``).

    Positions are absolute indices ``0 .. N-1``; ``l = stride``, ``c = summary``.

    * ``"strided"`` (Child et al. (2019) §4.2; Ruggeri (2022) §4.1), causal: ``A(1) = {max(0, i - l), ..., i}``,
      ``A(2) = {j <= i : (i - j) mod l = 0}``; bidirectional: ``|i - j| <= l`` and ``(i - j) mod l = 0``.
    * ``"fixed"`` (Child et al. (2019) §4.3), causal: ``A(1) = {j <= i : floor(j / l) = floor(i / l)}``,
      ``A(2) = {j <= i : j mod l in {l - c, ..., l - 1}}``; bidirectional: the whole current block, and the
      summary positions of every block.

    (The key ``i - l`` of the strided ``A(1)`` also lies in ``A(2)``; with ``factorization="merged"`` only
    the union matters, with ``"split"`` both halves of the heads see it.)
    """
    _check("sparse_sets", kind, stride, summary)
    pos = torch.arange(n, device=device)
    i, j = pos[:, None], pos[None, :]
    if kind == "strided":
        d = i - j
        a1 = (d >= 0) & (d <= stride) if causal else d.abs() <= stride
        a2 = torch.remainder(d, stride) == 0
    else:
        a1 = i // stride == j // stride
        a2 = (torch.remainder(j, stride) >= stride - summary).expand(n, n)
    if causal:
        a1, a2 = a1 & (j <= i), a2 & (j <= i)
    return a1, a2


def sparse_pattern(n: int, kind: str, stride: int, summary: int = 1, causal: bool = True,
                   device: torch.device | str | None = None, part: str = "union") -> Tensor:
    """Dense (N, N) bool matrix, ``[i, j]`` True when query ``i`` may attend to key ``j`` in ``part``:
    ``"union"`` (``A_i^(1) ∪ A_i^(2)``, what every head uses with ``factorization="merged"``), ``"A1"`` or
    ``"A2"`` (the sets of :func:`sparse_sets`)."""
    _check("sparse_pattern", kind, stride, summary, part)
    a1, a2 = sparse_sets(n, kind, stride, summary, causal, device)
    return {"union": a1 | a2, "A1": a1, "A2": a2}[part]


def fast_score_shape(n: int, kind: str, stride: int, summary: int = 1, causal: bool = True,
                     part: str = "union") -> tuple[int, int, int]:
    """Shape ``(N / l blocks, l queries per block, keys scored per query)`` of the score tensor the fast
    path evaluates per (batch, head) attending to ``part``; its product is the number of (query, key) scores
    computed: ``ceil(N / l) l (w l + ceil(N / l) [c])`` for the union with ``w`` = 2 (strided causal),
    3 (strided bidir), 1 (fixed); the ``w l`` band alone for ``"A1"``; the ``ceil(N / l) [c]`` column alone
    for ``"A2"``."""
    _check("fast_score_shape", kind, stride, summary, part)
    nb = -(-n // stride)
    band = ((2 if causal else 3) if kind == "strided" else 1) * stride
    column = nb * (summary if kind == "fixed" else 1)
    return nb, stride, {"union": band + column, "A1": band, "A2": column}[part]


def neighbour_blocks(t: Tensor, before: int, after: int) -> Tensor:
    """Blocks ``t`` (..., nb, l, D) -> (..., nb, (before + 1 + after) l, D): block ``b`` followed by its
    neighbours ``b - before .. b + after`` concatenated in order (zeros / False beyond the ends)."""
    if before == 0 and after == 0:
        return t
    nb = t.shape[-3]
    pad = t.new_zeros(t.shape[:-3] + (1,) + t.shape[-2:])
    padded = torch.cat([pad] * before + [t] + [pad] * after, dim=-3)
    return torch.cat([padded[..., s:s + nb, :, :] for s in range(before + 1 + after)], dim=-2)


@functools.lru_cache(maxsize=4096)
def causal_keys(kind: str, stride: int, summary: int, t: int, part: str = "union") -> Tensor:
    """The keys query ``t`` sees in the causal pattern, ``part`` as in :func:`sparse_pattern` (cached:
    decoding asks for each position per layer). ``"A2"`` of the fixed pattern can be empty."""
    _check("causal_keys", kind, stride, summary, part)
    if kind == "strided":
        if part == "A1":
            return torch.arange(max(0, t - stride), t + 1)
        if part == "A2":
            return torch.arange(t % stride, t + 1, stride)
        start = max(0, t - stride + 1)
        far = torch.arange(t % stride, max(start, t % stride), stride)
    else:
        start = (t // stride) * stride
        if part == "A1":
            return torch.arange(start, t + 1)
        blocks = t // stride + (1 if part == "A2" else 0)  # A2: the current block's summaries <= t too
        far = (torch.arange(blocks)[:, None] * stride + torch.arange(stride - summary, stride)[None, :]).flatten()
        if part == "A2":
            return far[far <= t]
    return torch.cat([far, torch.arange(start, t + 1)])


def softmax_or_zero(masked_scores: Tensor, has_key: Tensor) -> Tensor:
    """Softmax over the last axis of scores already set to -inf where not allowed; a row with no allowed
    entry (``has_key`` False) gives zeros, with zero gradient (never NaN): attending to an empty set of keys
    contributes nothing."""
    return masked_scores.masked_fill(~has_key, 0.0).softmax(dim=-1).masked_fill(~has_key, 0.0)
