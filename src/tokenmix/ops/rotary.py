"""Rotary position embedding (Su et al., 2021, RoFormer, eqs. 13-16 and 34): each pair of features
``(x_{2i}, x_{2i+1})`` of the vector at position m is rotated by the angle ``m theta_i``, ``theta_i =
base^(-2i/d)``, so that the dot product of a rotated query at m and a rotated key at n depends on m - n only.

:func:`rotate` is the fast form (element-wise, eq. 34); :func:`rotation_matrix` is the block-diagonal ``R^d_m`` of
eq. 15, for references and tests.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["rotary_angles", "rotate", "rotation_matrix"]


def rotary_angles(positions: Tensor, dim: int, base: float = 10_000.0) -> tuple[Tensor, Tensor]:
    """(cos, sin) of ``m theta_i`` for each position m of ``positions`` (N,) and pair i < dim / 2: (N, dim / 2)
    each, in float64 (cast where used). ``dim`` must be even."""
    if dim % 2:
        raise ValueError(f"rotary positions rotate pairs of features: the width must be even, got {dim}")
    theta = base ** (-torch.arange(0, dim, 2, dtype=torch.float64, device=positions.device) / dim)
    angles = positions.to(torch.float64)[:, None] * theta[None, :]
    return angles.cos(), angles.sin()


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """``x`` (..., N, dim) with each position's feature pairs rotated by (cos, sin) (N, dim / 2)."""
    c, s = cos.to(x.dtype), sin.to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * c - odd * s, even * s + odd * c], dim=-1).flatten(-2)


def rotation_matrix(position: int, dim: int, base: float = 10_000.0) -> Tensor:
    """RoFormer's ``R^d_m`` (eq. 15): the (dim, dim) block-diagonal rotation at position m, float64; ``x @ R.T``
    is ``rotate(x)`` at that position."""
    cos, sin = rotary_angles(torch.tensor([position]), dim, base)
    blocks = [torch.tensor([[c, -s], [s, c]], dtype=torch.float64) for c, s in zip(cos[0], sin[0])]
    return torch.block_diag(*blocks)
