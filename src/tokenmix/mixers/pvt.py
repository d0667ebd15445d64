"""PVT's spatial-reduction attention, SRA (Wang et al. 2021; Ruggeri (2022) §3.2)."""

from __future__ import annotations

import torch.nn as nn
from torch import Tensor

from ..ops.spatial import Attend, GridReducer, attend, attend_reference, reduce_grid, reduce_grid_reference
from ..registry import register_mixer
from ..validate import is_positive_int as _positive_int
from .base import SpatialMixer, merge_heads, split_heads
from .heads import QKVMixer


class ReducedKeyAttention(SpatialMixer):
    """Full-resolution queries attending to keys and values computed from a reduced copy of the grid: the
    shared shape of PVT's SRA, Twins' GSA and ScalableViT's SSA. Subclasses define ``q_proj``, ``k_proj``,
    ``v_proj``, ``proj`` and :meth:`_reduce`."""

    def reduce(self, x: Tensor, hw: tuple[int, int]) -> Tensor:
        """The tokens of the reduced grid, (B, H*W, dim) -> (B, N', width); ``x`` itself without a reduction."""
        return self._reduce(x, hw, reduce_grid)

    def reduce_reference(self, x: Tensor, hw: tuple[int, int]) -> Tensor:
        """:meth:`reduce` with the strided conv computed from the explicit blocks
        (:func:`tokenmix.ops.spatial.reduce_grid_reference`)."""
        return self._reduce(x, hw, reduce_grid_reference)

    def _reduce(self, x: Tensor, hw: tuple[int, int], reducer: GridReducer) -> Tensor:
        """:meth:`reduce` with the strided conv computed by ``reducer``."""
        raise NotImplementedError

    def _mix_spatial(self, x: Tensor, hw: tuple[int, int], mask: Tensor | None) -> Tensor:
        return self._attend_reduced(x, self.reduce(x, hw), attend)

    def _mix_spatial_reference(self, x: Tensor, hw: tuple[int, int], mask: Tensor | None) -> Tensor:
        return self._attend_reduced(x, self.reduce_reference(x, hw), attend_reference)

    def _attend_reduced(self, x: Tensor, reduced: Tensor, attention: Attend) -> Tensor:
        """Queries from ``x``, keys and values from ``reduced``, per head; then the output projection."""
        h = self.num_heads
        q = split_heads(self.q_proj(x), h)
        k, v = split_heads(self.k_proj(reduced), h), split_heads(self.v_proj(reduced), h)
        return self.proj(merge_heads(attention(q, k, v)))


@register_mixer(
    "pvt",
    paper="Wang et al. (2021) Pyramid Vision Transformer §3.3, SRA eqs. 2-4; Ruggeri (2022) §3.2",
    complexity="O(H^2 W^2 / R^2) (Ruggeri (2022) §3.2; O(N^2 d / R^2) with N = HW, R = sr_ratio)",
    causal=False,
    padding=False,
    spatial=True,
)
class SpatialReductionAttention(ReducedKeyAttention, QKVMixer):
    """Spatial-reduction attention (Ruggeri (2022) §3.2; PVT eqs. 2-4)::

        SR(x)   = Norm(Reshape(x, R) W^S)
        head_j  = Attention(x W_j^Q, SR(x) W_j^K, SR(x) W_j^V)
        SRA(x)  = Concat(head_0, ..., head_{h-1}) W^O

    Queries stay at full resolution (N = H W); keys and values come from the grid reduced R-fold in each
    dimension: ``Reshape(., R) W^S`` is a ``Conv2d(dim, dim, kernel=R, stride=R)`` (attribute ``sr``)
    and ``Norm`` a LayerNorm (``norm``), so there are ``ceil(H/R) ceil(W/R) ~ N / R^2`` keys. With
    ``sr_ratio=1`` there is no conv and no norm: plain multi-head attention.

    Complexity (Ruggeri (2022) §3.2): ``O(H^2 W^2 / R^2)``, quadratic in N but R^2 times cheaper than MHSA.

    Grids not divisible by R: ceil mode. The grid is zero-padded at the bottom/right to a multiple of R
    before the strided conv, so each reduced cell is the conv over the real cells of its clipped R x R
    block (padded positions contribute exactly zero; no reduced cell is all padding). The released PVT
    code's floor-mode conv would instead drop the last ``H mod R`` rows / ``W mod R`` columns from the keys.
    The reference builds ``Reshape(x, R)`` explicitly (:func:`tokenmix.ops.spatial.grid_blocks`) and
    multiplies by the conv weight, then forms the N x N' score matrix.

    Options:
        sr_ratio: R (default 2; PVT uses R = 8, 4, 2, 1 in stages 1-4, and 2 is the ratio of stage 3,
            which holds most of its layers).
        bias: biases in the Q/K/V and output projections (default True, PVT's released ``qkv_bias=True``;
            its output projection always has one).
    """

    def __init__(
        self,
        dim: int,
        *,
        num_heads: int = 1,
        causal: bool = False,
        max_len: int | None = None,
        sr_ratio: int = 2,
        bias: bool = True,
    ) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, bias=bias)
        if not _positive_int(sr_ratio):
            self._fail(f"sr_ratio must be a positive int, got {sr_ratio!r}")
        self.sr_ratio = sr_ratio
        if sr_ratio > 1:
            self.sr = nn.Conv2d(dim, dim, kernel_size=sr_ratio, stride=sr_ratio)
            self.norm = nn.LayerNorm(dim)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, sr_ratio={self.sr_ratio}"

    def _reduce(self, x: Tensor, hw: tuple[int, int], reducer: GridReducer) -> Tensor:
        """SR(x): (B, H*W, dim) -> (B, N', dim); the identity when ``sr_ratio == 1``."""
        if self.sr_ratio == 1:
            return x
        reduced, _ = reducer(x, hw, self.sr)
        return self.norm(reduced)
