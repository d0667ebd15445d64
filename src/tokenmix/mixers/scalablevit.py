"""ScalableViT's scalable self-attention (SSA) and interactive window-based self-attention (IWSA)
(Yang et al. 2022; Ruggeri (2022) §3.4)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ..ops.spatial import (
    GridReducer,
    WindowAttention,
    window_attention,
    window_attention_reference,
    window_grid,
)
from ..registry import register_mixer
from ..validate import is_positive_int as _positive_int
from .base import SpatialMixer
from .heads import QKVMixer
from .pvt import ReducedKeyAttention


@register_mixer(
    "scalable_ssa",
    paper="Yang et al. (2022) ScalableViT §3.1, scalable self-attention (SSA); Ruggeri (2022) §3.4",
    complexity="O(N N_{r_N} C + N N_{r_N} C_{r_C}) (Ruggeri (2022) §3.4; N_{r_N} = N / r_n^2 keys, C_{r_C} = r_c C)",
    causal=False,
    padding=False,
    spatial=True,
)
class ScalableSelfAttention(ReducedKeyAttention):
    """Scalable self-attention (Ruggeri (2022) §3.4; ScalableViT §3.1)::

        SSA(X) = softmax(Q' K'^T / sqrt(d'_k)) V',
        Q' = f_q(X) in R^{N x C r_c},   K' = f_k(X) in R^{N' x C r_c},   V' = f_v(X) in R^{N' x C},

    per head (``d'_k`` = the per-head query/key width), then the output projection. As in the released
    code, with ``r_n > 1`` the scaling operators share a spatial reduction of X: a depth-wise
    ``Conv2d(C, C, kernel=r_n, stride=r_n, groups=C)`` (``reduce_conv``), a 1x1 conv to ``C r_c`` channels
    (``reduce_pointwise``, an ``nn.Linear``, identical to the 1x1 ``Conv2d``), LayerNorm (``norm``) and GELU;
    then ``f_k``, ``f_v`` are linear maps of the reduced map (``C r_c -> C r_c`` and ``C r_c -> C``) and
    ``f_q`` a linear map ``C -> C r_c`` of X. There are ``N' = ceil(H/r_n) ceil(W/r_n) ~ N / r_n^2`` keys.
    With ``r_n = 1`` there is no reduction: ``f_k, f_v`` are linear maps of X (``C -> C r_c``, ``C -> C``;
    the released code then ignores ``r_c``, here it is honoured), and with ``r_c = 1`` as well SSA is plain
    multi-head attention.

    ``r_c`` sets the per-head query/key width to ``round(head_dim * r_c)`` (at least 1), so that it always
    splits evenly over the heads (the released code's ``int(C r_c)`` equals this for its configurations).

    Complexity (Ruggeri (2022) §3.4): ``O(N N_{r_N} C + N N_{r_N} C_{r_C})``, linear in N for a fixed number of keys.

    Grids not divisible by ``r_n``: ceil mode, as for PVT's SRA (zero padding at the bottom/right before the
    strided conv; each reduced cell is the conv over the real cells of its clipped block, nothing else).
    Reference: the reduction computed from the explicit blocks, and the explicit N x N' score matrix.

    Options:
        r_n: the spatial reduction stride (default 2; ScalableViT uses 8, 4, 2, 1 in stages 1-4, 2 being
            the stage that holds most layers). Ruggeri (2022) writes the spatial scale as the fraction N -> N r_N; here
            ``r_n`` is the stride, the key count shrinking by ``r_n^2``.
        r_c: the channel scale of queries and keys (default 1.25, ScalableViT-S stages 1-3).
        bias: biases in the Q/K/V and output projections (default True, ScalableViT's ``qkv_bias=True``;
            its output projection always has one).
    """

    def __init__(
        self,
        dim: int,
        *,
        num_heads: int = 1,
        causal: bool = False,
        max_len: int | None = None,
        r_n: int = 2,
        r_c: float = 1.25,
        bias: bool = True,
    ) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len)
        if not _positive_int(r_n):
            self._fail(f"r_n must be a positive int, got {r_n!r}")
        if isinstance(r_c, bool) or not isinstance(r_c, (int, float)) or not math.isfinite(r_c) or r_c <= 0:
            self._fail(f"r_c must be a positive number, got {r_c!r}")
        self.r_n, self.r_c = r_n, float(r_c)
        self.qk_dim = num_heads * max(1, round(self.head_dim * self.r_c))
        self.q_proj = nn.Linear(dim, self.qk_dim, bias=bias)
        kv_in = dim
        if r_n > 1:
            self.reduce_conv = nn.Conv2d(dim, dim, kernel_size=r_n, stride=r_n, groups=dim)
            self.reduce_pointwise = nn.Linear(dim, self.qk_dim)
            self.norm = nn.LayerNorm(self.qk_dim)
            kv_in = self.qk_dim
        self.k_proj = nn.Linear(kv_in, self.qk_dim, bias=bias)
        self.v_proj = nn.Linear(kv_in, dim, bias=bias)
        self.proj = nn.Linear(dim, dim, bias=bias)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, r_n={self.r_n}, r_c={self.r_c}, qk_dim={self.qk_dim}"

    def _reduce(self, x: Tensor, hw: tuple[int, int], reducer: GridReducer) -> Tensor:
        """The shared reduction of X, (B, H*W, C) -> (B, N', C r_c); the identity when ``r_n == 1``."""
        if self.r_n == 1:
            return x
        reduced, _ = reducer(x, hw, self.reduce_conv)
        return F.gelu(self.norm(self.reduce_pointwise(reduced)))


def _value_map(v: Tensor, hw: tuple[int, int]) -> Tensor:
    """The values as an image: (B, H*W, C) -> (B, C, H, W)."""
    return v.transpose(1, 2).reshape(v.shape[0], v.shape[2], *hw)


@register_mixer(
    "scalable_iwsa",
    paper="Yang et al. (2022) ScalableViT §3.2, interactive window-based self-attention (IWSA, LIM); "
          "Ruggeri (2022) §3.4",
    complexity="O(N) (Ruggeri (2022) §3.4; O(M^2 N d) window attention + O(9 N d) LIM)",
    causal=False,
    padding=False,
    spatial=True,
)
class InteractiveWindowAttention(SpatialMixer, QKVMixer):
    """Interactive window-based self-attention (Ruggeri (2022) §3.4; ScalableViT §3.2)::

        Z' = Z + F(V),     output = Z' W^O,

    where ``Z`` is multi-head self-attention inside non-overlapping M x M windows, merged back to the grid,
    and the local interactive module (LIM) ``F`` is a depth-wise 3x3 convolution with zero padding (and a
    bias; attribute ``lim``) over ``V``, the per-window values merged back into the H x W value map, which
    connects adjacent windows. No relative position bias and no shift (the LIM's zero padding encodes
    position implicitly).

    Complexity (Ruggeri (2022) §3.4): ``O(N)``; window attention costs ``O(M^2 N d)`` and the LIM ``O(9 N d)``.

    Grids that do not fit: the window attention clips, pads and masks exactly as Swin/LSA (padded cells are
    never keys; see :mod:`tokenmix.ops.spatial`). The LIM runs on the real H x W value map with its own
    zero border, so padded cells do not reach it either (the released code convolves the padded map, whose
    padded values are the V bias). Reference: dense window attention with the explicit N x N mask, and the
    LIM as an explicit 9-tap stencil.

    Options:
        window_size: M (default 7, ScalableViT's window in every stage).
        bias: biases in the Q/K/V and output projections (default True, ScalableViT's ``qkv_bias=True``).
    """

    def __init__(
        self,
        dim: int,
        *,
        num_heads: int = 1,
        causal: bool = False,
        max_len: int | None = None,
        window_size: int = 7,
        bias: bool = True,
    ) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, bias=bias)
        if not _positive_int(window_size):
            self._fail(f"window_size must be a positive int, got {window_size!r}")
        self.window_size = window_size
        self.lim = nn.Conv2d(dim, dim, kernel_size=3, padding=1, groups=dim)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, window_size={self.window_size}"

    def local_interaction(self, v: Tensor, hw: tuple[int, int]) -> Tensor:
        """LIM: the depth-wise 3x3 conv (zero padding) of the value map, (B, H*W, C) -> (B, H*W, C)."""
        return self.lim(_value_map(v, hw)).flatten(2).transpose(1, 2)

    def local_interaction_reference(self, v: Tensor, hw: tuple[int, int]) -> Tensor:
        """:meth:`local_interaction` as an explicit 9-tap stencil over the zero-bordered value map."""
        h, w = hw
        padded = F.pad(_value_map(v, hw), (1, 1, 1, 1))
        weight = self.lim.weight[:, 0]  # (C, 3, 3)
        out = self.lim.bias[None, :, None, None] if self.lim.bias is not None else 0.0
        for i in range(3):
            for j in range(3):
                out = out + weight[None, :, i, j, None, None] * padded[:, :, i:i + h, j:j + w]
        return out.flatten(2).transpose(1, 2)

    def _mix_spatial(self, x: Tensor, hw: tuple[int, int], mask: Tensor | None) -> Tensor:
        return self._interactive(x, hw, window_attention, self.local_interaction)

    def _mix_spatial_reference(self, x: Tensor, hw: tuple[int, int], mask: Tensor | None) -> Tensor:
        return self._interactive(x, hw, window_attention_reference, self.local_interaction_reference)

    def _interactive(self, x: Tensor, hw: tuple[int, int], attention: WindowAttention,
                     lim: Callable[[Tensor, tuple[int, int]], Tensor]) -> Tensor:
        """``(Z + F(V)) W^O`` with the window attention ``Z`` by ``attention`` and the LIM ``F`` by ``lim``."""
        v = self.v_proj(x)
        z = attention(self.q_proj(x), self.k_proj(x), v, window_grid(hw, self.window_size), self.num_heads)
        return self.proj(z + lim(v, hw))
