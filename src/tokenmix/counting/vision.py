"""Operation counts of the vision mixers, as labelled steps over one ``H x W`` grid
(:class:`~tokenmix.counting.blocks.CountPart`, matrix products and convolutions marked for the
``FlopCounterMode`` cross-check): ``swin``, ``twins_lsa``, ``scalable_iwsa`` (window attention), ``pvt`` and
``twins_gsa`` (spatial reduction), ``scalable_ssa``. The building blocks and their derivations are in
:mod:`tokenmix.counting.blocks`; ``b = 1`` below when the projections have biases, else 0.
"""

from __future__ import annotations

import math

from ..mixers.pvt import SpatialReductionAttention
from ..mixers.scalablevit import InteractiveWindowAttention, ScalableSelfAttention
from ..mixers.swin import SwinWindowAttention
from ..mixers.twins import LocallyGroupedAttention
from ..ops.spatial import window_grid
from .blocks import (
    CountPart,
    attention_parts,
    conv2d_ops,
    gelu_ops,
    layernorm_ops,
    linear_part,
    window_attention_parts,
)
from .opcounts import elementwise
from .registry import grid

__all__ = ["swin_parts", "lsa_parts", "sra_parts", "ssa_parts", "iwsa_parts"]


@grid(SwinWindowAttention)
def swin_parts(mixer: SwinWindowAttention, hw: tuple[int, int]) -> list[CountPart]:
    """Q, K, V projections of the ``N = H W`` real cells (``N C`` dot products of length ``C`` each, plus
    ``N C`` bias additions each with ``bias=True``), then per window and head softmax attention of its
    ``T = mh mw`` cells over themselves with the relative position bias (one addition per score; the bias is
    gathered from the table by indexing, no arithmetic), then the output projection of the ``N`` cells.
    Counted over the grid padded to a multiple of the (clipped) window, exactly as the implementation
    computes it: ``nW = (H_p / mh)(W_p / mw)`` windows, all ``T^2`` scores of each (padded query rows and
    masked keys included). SW-MSA (``shift=True``) costs the same as W-MSA: the roll is data movement and
    the region mask, like the padding mask, is folded into the additive bias mask as ``-inf`` once (not per
    score, not counted). Closed form, with ``N_p = nW T``::

        mults = 4 N C^2 + 2 N_p T C
        adds  = 4 N C (C - 1) + 4 b N C + 2 N_p T C - N_p C - h N_p + h N_p T
        divs  = 2 h N_p T,    exps = h N_p T

    i.e. Chen (2023) Table 3's self-attention (every query seeing the ``T`` keys of its window) plus Swin's
    bias; ``O(M^2 N C)``, linear in N for a fixed window M (Ruggeri (2022) §3.1).
    """
    return window_attention_parts(window_grid(hw, mixer.window_size, mixer.shift), dim=mixer.dim,
                                  heads=mixer.num_heads, bias=mixer.q_proj.bias is not None, score_bias=True)


@grid(LocallyGroupedAttention)
def lsa_parts(mixer: LocallyGroupedAttention, hw: tuple[int, int]) -> list[CountPart]:
    """Q, K, V projections of the ``N = H W`` real cells, softmax attention inside each ``k1 x k2`` window
    (clipped to the grid) per head, the output projection; no score bias. As in the implementation the
    attention runs on the grid padded to a multiple of the window: ``nW`` windows of ``T = mh mw`` cells,
    all ``T^2`` scores of each (padded query rows and masked padded keys included; the padding mask is a
    selection, not counted). With ``N_p = nW T`` padded cells, ``C = dim``, ``h`` heads::

        mults = 4 N C^2 + 2 N_p T C
        adds  = 4 N C (C - 1) + 4 b N C + 2 N_p T C - N_p C - h N_p
        divs  = 2 h N_p T,    exps = h N_p T

    i.e. Swin's count without the relative position bias; ``O(k1 k2 H W d)``, linear in N for a fixed
    window (Ruggeri (2022) §3.3).
    """
    return window_attention_parts(window_grid(hw, mixer.window_size), dim=mixer.dim, heads=mixer.num_heads,
                                  bias=mixer.q_proj.bias is not None)


@grid(InteractiveWindowAttention)
def iwsa_parts(mixer: InteractiveWindowAttention, hw: tuple[int, int]) -> list[CountPart]:
    """The window attention counted as Swin's/LSA's (without a score bias), over the grid padded to a
    multiple of the (clipped) window as the implementation computes it: Q, K, V projections of the
    ``N = H W`` real cells (V computed once and shared with the LIM), all ``T^2`` scores of each of the
    ``nW`` windows of ``T = mh mw`` cells per head, the output projection of the ``N`` cells. Then the LIM, a
    depth-wise 3x3 conv with zero padding and a bias on the real ``H x W`` value map: ``N C`` outputs, each
    9 taps (those on the zero border included, as the conv computes them) plus the bias, ``9 N C`` mults and
    ``9 N C`` adds; and the residual ``Z + F(V)``, ``N C`` adds. With ``N_p = nW T``::

        mults = 4 N C^2 + 2 N_p T C + 9 N C
        adds  = 4 N C (C - 1) + 4 b N C + 2 N_p T C - N_p C - h N_p + 10 N C
        divs  = 2 h N_p T,    exps = h N_p T

    ``O(M^2 N C + 9 N C)``, linear in N for a fixed window (Ruggeri (2022) §3.4).
    """
    n, c = hw[0] * hw[1], mixer.dim
    parts = window_attention_parts(window_grid(hw, mixer.window_size), dim=c, heads=mixer.num_heads,
                                   bias=mixer.q_proj.bias is not None)
    parts[-1:-1] = [
        CountPart("LIM: depth-wise 3x3 Conv2d (zero padding) of the value map",
                  conv2d_ops(n, c, 9, mixer.lim.bias is not None), gemm=True),
        CountPart("Z + F(V)", elementwise(n * c, adds=1)),
    ]
    return parts


@grid(SpatialReductionAttention)
def sra_parts(mixer: SpatialReductionAttention, hw: tuple[int, int]) -> list[CountPart]:
    """PVT's SRA and Twins' GSA. With ``N = H W`` queries, ``N' = ceil(H/R) ceil(W/R)`` keys, ``C = dim``,
    ``h`` heads:

    * ``SR(x)`` (``R > 1``): the strided conv runs on the grid zero-padded to ``(ceil(H/R) R, ceil(W/R) R)``
      (as the implementation does; the padded taps are multiplied too), ``N' C`` outputs, each a dot product
      of length ``C R^2`` plus its bias: ``N' C^2 R^2`` mults and as many adds; then LayerNorm(C) on ``N'``
      rows (:func:`~tokenmix.counting.blocks.layernorm_ops`: ``2C`` mults, ``4C - 2`` adds, ``C + 2`` divs
      a row). With ``R = 1`` there is neither (``N' = N``);
    * Q projection of the ``N`` cells, K and V projections of the ``N'`` reduced cells, the output
      projection of the ``N`` cells (``C`` dot products of length ``C`` per row, ``+ b C`` adds);
    * softmax attention of ``N`` queries over ``N'`` keys per head (Chen (2023) Table 3, every query seeing
      all ``N'`` keys): ``2 N N' C`` mults, ``2 N N' C - N C - h N`` adds, ``2 h N N'`` divs, ``h N N'`` exps.

    Closed form (``R > 1``; drop the ``[R > 1]`` terms and set ``N' = N`` for ``R = 1``)::

        mults = 2 N C^2 + 2 N' C^2 + 2 N N' C + [R > 1] (N' C^2 R^2 + 2 C N')
        adds  = 2 (N + N') C (C - 1 + b) + 2 N N' C - N C - h N + [R > 1] (N' C^2 R^2 + (4 C - 2) N')
        divs  = 2 h N N' + [R > 1] (C + 2) N',    exps = h N N'

    ``O(N N' C) = O(N^2 C / R^2)``: quadratic in N, ``R^2`` times fewer scores than MHSA (Ruggeri (2022)
    §3.2). With ``R = 1`` and no biases this is Chen (2023) Table 3's multi-head self-attention with all
    ``N`` keys per query: ``4 N C^2 + 2 N^2 C`` mults, ``4 N C^2 + 2 N^2 C - 5 N C - h N`` adds,
    ``2 h N^2`` divs, ``h N^2`` exps.
    """
    (height, width), c, r = hw, mixer.dim, mixer.sr_ratio
    n = height * width
    bias = mixer.q_proj.bias is not None
    n_red = math.ceil(height / r) * math.ceil(width / r)
    parts: list[CountPart] = []
    if r > 1:
        parts += [
            CountPart(f"spatial reduction: Conv2d(C, C, kernel=stride={r}) on the padded grid, {n_red} cells",
                      conv2d_ops(n_red, c, c * r * r, mixer.sr.bias is not None), gemm=True),
            CountPart(f"LayerNorm({c}) of the {n_red} reduced cells",
                      layernorm_ops(n_red, c, mixer.norm.elementwise_affine)),
        ]
    return parts + [
        linear_part("q projection", n, c, c, bias),
        linear_part("k projection", n_red, c, c, bias),
        linear_part("v projection", n_red, c, c, bias),
        *attention_parts(heads=mixer.num_heads, queries=n, keys=n_red, d_qk=mixer.head_dim, d_v=mixer.head_dim),
        linear_part("output projection", n, c, c, bias),
    ]


def _ssa_reduction(mixer: ScalableSelfAttention, hw: tuple[int, int]) -> list[CountPart]:
    """SSA's shared reduction (``r_n > 1``) of ``N' = ceil(H/r_n) ceil(W/r_n)`` cells."""
    r, c, qk = mixer.r_n, mixer.dim, mixer.qk_dim
    n_red = math.ceil(hw[0] / r) * math.ceil(hw[1] / r)
    return [
        CountPart(f"reduction: depth-wise Conv2d(C, C, kernel=stride={r}) on the padded grid, {n_red} cells",
                  conv2d_ops(n_red, c, r * r, mixer.reduce_conv.bias is not None), gemm=True),
        linear_part("reduction: 1x1 conv", n_red, c, qk, mixer.reduce_pointwise.bias is not None),
        CountPart(f"reduction: LayerNorm({qk}) of the {n_red} reduced cells",
                  layernorm_ops(n_red, qk, mixer.norm.elementwise_affine)),
        CountPart("reduction: GELU", gelu_ops(n_red * qk)),
    ]


@grid(ScalableSelfAttention)
def ssa_parts(mixer: ScalableSelfAttention, hw: tuple[int, int]) -> list[CountPart]:
    """With ``N = H W`` queries, ``N' = ceil(H/r_n) ceil(W/r_n)`` keys, ``C = dim``, ``Q = qk_dim`` (all heads'
    query/key width, ``h round(C r_c / h)``), ``h`` heads:

    * the shared reduction (``r_n > 1``): the depth-wise strided conv on the grid zero-padded to a multiple
      of ``r_n`` (padded taps multiplied too, as the implementation does), ``N' C`` outputs, each a dot
      product of length ``r_n^2`` plus its bias: ``N' C r_n^2`` mults and adds; the 1x1 conv ``C -> Q`` with
      bias: ``N' Q C`` mults and adds; LayerNorm(Q) on ``N'`` rows (``2Q`` mults, ``4Q - 2`` adds, ``Q + 2``
      divs a row); GELU on ``N' Q`` elements (2 mults, 1 add, 1 div each; ``erf`` not counted, see
      :func:`~tokenmix.counting.blocks.gelu_ops`);
    * ``f_q``: ``N`` rows ``C -> Q``; ``f_k``: ``N'`` rows ``Q -> Q``; ``f_v``: ``N'`` rows ``Q -> C`` (with
      ``r_n = 1``: ``N`` rows ``C -> Q`` and ``C -> C``); the output projection ``N`` rows ``C -> C``; each
      output a dot product over the input width, ``+ b`` bias add;
    * softmax attention of ``N`` queries over ``N'`` keys per head (Chen (2023) Table 3), query/key width
      ``Q / h``, value width ``C / h``: ``N N' (Q + C)`` mults, ``N N' (Q + C) - N C - h N`` adds,
      ``2 h N N'`` divs, ``h N N'`` exps.

    Closed form for ``r_n > 1``::

        mults = N C Q + N' Q^2 + N' Q C + N C^2 + N N' (Q + C) + N' C r_n^2 + N' Q C + 2 N' Q + 2 N' Q
        adds  = N Q (C - 1) + N' Q (Q - 1) + N' C (Q - 1) + N C (C - 1) + b (N Q + N' Q + N' C + N C)
                + N N' (Q + C) - N C - h N + N' C r_n^2 + N' Q C + (4 Q - 2) N' + N' Q
        divs  = 2 h N N' + (Q + 2) N' + N' Q,    exps = h N N'

    (the last terms: conv, 1x1 conv, LayerNorm, GELU). ``O(N N' (Q + C))``, Ruggeri (2022) §3.4's
    ``O(N N_{r_N} C + N N_{r_N} C_{r_C})``: quadratic in N with ``r_n^2`` times fewer keys than MHSA.
    """
    (height, width), c, r, qk = hw, mixer.dim, mixer.r_n, mixer.qk_dim
    n = height * width
    bias = mixer.q_proj.bias is not None
    parts = _ssa_reduction(mixer, hw) if r > 1 else []
    kv_rows, kv_in = (math.ceil(height / r) * math.ceil(width / r), qk) if r > 1 else (n, c)
    return parts + [
        linear_part("f_q", n, c, qk, bias),
        linear_part("f_k", kv_rows, kv_in, qk, bias),
        linear_part("f_v", kv_rows, kv_in, c, bias),
        *attention_parts(heads=mixer.num_heads, queries=n, keys=kv_rows, d_qk=qk // mixer.num_heads,
                         d_v=mixer.head_dim),
        linear_part("output projection", n, c, c, bias),
    ]
