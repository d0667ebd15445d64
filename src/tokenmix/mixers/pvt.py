"""PVT's spatial-reduction attention, SRA (Wang et al. 2021; 002 §3.2)."""

from __future__ import annotations

import math

import torch.nn as nn
from torch import Tensor

from ..ops.spatial import Attend, GridReducer, attend, attend_reference, reduce_grid, reduce_grid_reference
from ..ops.spatial_counts import CountPart, attention_parts, conv2d_ops, layernorm_ops, linear_part
from ..registry import register_mixer
from .base import QKVMixer, SpatialMixer, merge_heads, split_heads


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
    paper="Wang et al. (2021) Pyramid Vision Transformer §3.3, SRA eqs. 2-4; 002 §3.2",
    complexity="O(H^2 W^2 / R^2) (002 §3.2; O(N^2 d / R^2) with N = HW, R = sr_ratio)",
    causal=False,
    padding=False,
    spatial=True,
)
class SpatialReductionAttention(ReducedKeyAttention, QKVMixer):
    """Spatial-reduction attention (002 §3.2; PVT eqs. 2-4)::

        SR(x)   = Norm(Reshape(x, R) W^S)
        head_j  = Attention(x W_j^Q, SR(x) W_j^K, SR(x) W_j^V)
        SRA(x)  = Concat(head_0, ..., head_{h-1}) W^O

    Queries stay at full resolution (N = H W); keys and values come from the grid reduced R-fold in each
    dimension: ``Reshape(., R) W^S`` is a ``Conv2d(dim, dim, kernel=R, stride=R)`` (attribute ``sr``)
    and ``Norm`` a LayerNorm (``norm``), so there are ``ceil(H/R) ceil(W/R) ~ N / R^2`` keys. With
    ``sr_ratio=1`` there is no conv and no norm: plain multi-head attention.

    Complexity (002 §3.2): ``O(H^2 W^2 / R^2)``, quadratic in N but R^2 times cheaper than MHSA.

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
        if not isinstance(sr_ratio, int) or isinstance(sr_ratio, bool) or sr_ratio <= 0:
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

    # -- operation counts (tokenmix count; conventions in tokenmix.ops.opcounts / spatial_counts) ----------
    def _count_parts(self, hw: tuple[int, int]) -> list[CountPart]:
        """The steps of one forward pass over one ``H x W`` image and their counts (also twins_gsa's).

        With ``N = H W`` queries, ``N' = ceil(H/R) ceil(W/R)`` keys, ``C = dim``, ``h`` heads, ``b = 1`` with
        projection biases:

        * ``SR(x)`` (``R > 1``): the strided conv runs on the grid zero-padded to ``(ceil(H/R) R, ceil(W/R) R)``
          (as the implementation does; the padded taps are multiplied too), ``N' C`` outputs, each a dot
          product of length ``C R^2`` plus its bias: ``N' C^2 R^2`` mults and as many adds; then LayerNorm(C)
          on ``N'`` rows (:func:`tokenmix.ops.spatial_counts.layernorm_ops`: ``2C`` mults, ``4C - 2`` adds,
          ``C + 2`` divs a row). With ``R = 1`` there is neither (``N' = N``);
        * Q projection of the ``N`` cells, K and V projections of the ``N'`` reduced cells, the output
          projection of the ``N`` cells (``C`` dot products of length ``C`` per row, ``+ b C`` adds);
        * softmax attention of ``N`` queries over ``N'`` keys per head (004 Table 3, every query seeing all
          ``N'`` keys): ``2 N N' C`` mults, ``2 N N' C - N C - h N`` adds, ``2 h N N'`` divs, ``h N N'`` exps.

        Closed form (``R > 1``; drop the ``[R > 1]`` terms and set ``N' = N`` for ``R = 1``)::

            mults = 2 N C^2 + 2 N' C^2 + 2 N N' C + [R > 1] (N' C^2 R^2 + 2 C N')
            adds  = 2 (N + N') C (C - 1 + b) + 2 N N' C - N C - h N + [R > 1] (N' C^2 R^2 + (4 C - 2) N')
            divs  = 2 h N N' + [R > 1] (C + 2) N',    exps = h N N'

        ``O(N N' C) = O(N^2 C / R^2)``: quadratic in N, ``R^2`` times fewer scores than MHSA (002 §3.2). With
        ``R = 1`` and no biases this is 004 Table 3's multi-head self-attention with all ``N`` keys per query:
        ``4 N C^2 + 2 N^2 C`` mults, ``4 N C^2 + 2 N^2 C - 5 N C - h N`` adds, ``2 h N^2`` divs, ``h N^2`` exps.
        """
        (height, width), c, r = hw, self.dim, self.sr_ratio
        n = height * width
        bias = self.q_proj.bias is not None
        n_red = math.ceil(height / r) * math.ceil(width / r)
        parts: list[CountPart] = []
        if r > 1:
            parts += [
                CountPart(f"spatial reduction: Conv2d(C, C, kernel=stride={r}) on the padded grid, {n_red} cells",
                          conv2d_ops(n_red, c, c * r * r, self.sr.bias is not None), gemm=True),
                CountPart(f"LayerNorm({c}) of the {n_red} reduced cells",
                          layernorm_ops(n_red, c, self.norm.elementwise_affine)),
            ]
        parts += [
            linear_part("q projection", n, c, c, bias),
            linear_part("k projection", n_red, c, c, bias),
            linear_part("v projection", n_red, c, c, bias),
            *attention_parts(heads=self.num_heads, queries=n, keys=n_red, d_qk=self.head_dim, d_v=self.head_dim),
            linear_part("output projection", n, c, c, bias),
        ]
        return parts
