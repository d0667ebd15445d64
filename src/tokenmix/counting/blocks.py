"""Operation counts of the vision mixers' building blocks ("swin", "twins_lsa", "scalable_iwsa", "pvt",
"twins_gsa", "scalable_ssa"), in the conventions of :mod:`tokenmix.counting.opcounts` (Chen (2023) Tables 3-4).

A count is kept as a list of labelled :class:`CountPart`\\ s so that the matrix products and convolutions
(``gemm=True``) can be told apart from the rest: ``2 * gemm_mults(parts)`` is what
``torch.utils.flop_counter.FlopCounterMode`` reports for the same forward (it counts 2 per multiply-add
of mm/bmm/addmm/conv/attention kernels and ignores element-wise work), which the tests check exactly.

Softmax attention of ``q`` queries over ``k`` keys, per head (Chen (2023) Table 3, the self-attention column, with
every query seeing all ``k`` keys instead of the causal ``t``):

* scores ``Q K^T``: ``q k`` dot products of length ``d_qk``: ``q k d_qk`` mults, ``q k (d_qk - 1)`` adds;
* scaling by ``1 / sqrt(d_qk)``: one division per score, ``q k`` divs (the kernels fold the scale into
  ``Q`` and ``K``; the paper writes it as a division of each score, and so it is counted);
* an additive score bias (Swin's relative position bias): one addition per score, ``q k`` adds; a boolean
  or ``-inf`` mask (padded cells, Swin's shifted-window regions) is a selection, not arithmetic: not counted;
* softmax: one ``exp`` per score (``q k`` exps), the normaliser's sum ``q (k - 1)`` adds, one division per
  score (``q k`` divs); the running maximum that keeps ``exp`` finite is a comparison, not counted (as in
  the paper);
* the weighted sum ``A V``: ``q d_v`` dot products of length ``k``: ``q d_v k`` mults, ``q d_v (k - 1)`` adds.

Other blocks (each documented at its function): a convolution output is a dot product over its receptive
field plus the bias; LayerNorm; GELU.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..ops.spatial import WindowGrid
from .opcounts import OpCounts, dot_ops, elementwise, linear_ops, matmul_ops, softmax_ops

__all__ = [
    "CountPart",
    "total",
    "gemm_mults",
    "linear_part",
    "attention_parts",
    "window_attention_parts",
    "conv2d_ops",
    "layernorm_ops",
    "gelu_ops",
]


@dataclass(frozen=True)
class CountPart:
    """One step of a mixer's forward pass and its operation count.

    Attributes:
        label: what the step computes, e.g. ``"q projection (196 x 64 -> 64, bias)"``.
        ops: its operations.
        gemm: it is a matrix product or a convolution (the work ``FlopCounterMode`` measures).
    """

    label: str
    ops: OpCounts
    gemm: bool = False


def total(parts: Iterable[CountPart]) -> OpCounts:
    """The sum of the parts' counts."""
    out = OpCounts()
    for part in parts:
        out = out + part.ops
    return out


def gemm_mults(parts: Iterable[CountPart]) -> int:
    """Multiplications done inside matrix products and convolutions (= multiply-adds of those kernels)."""
    return sum(part.ops.mults for part in parts if part.gemm)


def linear_part(label: str, rows: int, d_in: int, d_out: int, bias: bool) -> CountPart:
    """``rows`` vectors through ``nn.Linear(d_in, d_out)``: ``rows d_out`` dot products of length ``d_in``,
    plus ``rows d_out`` bias additions when it has a bias."""
    detail = f"{rows} x {d_in} -> {d_out}{', bias' if bias else ''}"
    return CountPart(f"{label} ({detail})", linear_ops(rows, d_in, d_out, bias), gemm=True)


def attention_parts(*, heads: int, queries: int, keys: int, d_qk: int, d_v: int, groups: int = 1,
                    score_bias: bool = False) -> list[CountPart]:
    """Softmax attention (module docstring) in ``groups`` independent blocks (windows; 1 for global
    attention) of ``heads`` heads each, every block having ``queries`` queries over ``keys`` keys;
    ``d_qk``/``d_v`` are the per-head query-key and value widths."""
    if min(heads, queries, keys, d_qk, d_v, groups) <= 0:
        raise ValueError("attention counts: heads, queries, keys, d_qk, d_v and groups must be positive, got "
                         f"{(heads, queries, keys, d_qk, d_v, groups)}")
    blocks = groups * heads
    scores = blocks * queries * keys
    where = f"{groups} x {heads} heads x {queries} queries x {keys} keys"
    parts = [
        CountPart(f"scores Q K^T ({where}, d_qk={d_qk})", matmul_ops(queries, d_qk, keys) * blocks, gemm=True),
        CountPart("scaling by 1/sqrt(d_qk), one division per score", elementwise(scores, divs=1)),
    ]
    if score_bias:
        parts.append(CountPart("score bias, one addition per score", elementwise(scores, adds=1)))
    parts += [
        CountPart("softmax: exp per score, normaliser sum, division per score", softmax_ops(keys, blocks * queries)),
        CountPart(f"weighted sum A V ({where}, d_v={d_v})", matmul_ops(queries, keys, d_v) * blocks, gemm=True),
    ]
    return parts


def window_attention_parts(grid: WindowGrid, *, dim: int, heads: int, bias: bool,
                           score_bias: bool = False) -> list[CountPart]:
    """Q/K/V projections of the ``N = H W`` real cells, attention inside each window of ``grid`` and the
    output projection: what :func:`tokenmix.ops.spatial.window_attention` and the mixers around it compute.

    The attention is counted over the padded grid, as the implementation computes it: ``grid.num_windows``
    windows of ``T = mh mw`` cells each, ``T x T`` scores per window and head, including the rows of padded
    query cells (cropped afterwards) and the scores of padded or other-region keys (masked to ``-inf``; the
    masking is a selection and not counted, the scores, exps and divisions are). The zero padding, the
    cyclic roll and the window partition move data and cost nothing. With ``N_p = H_p W_p = nW T`` cells on
    the padded grid, ``C = dim``, ``h`` heads and ``b = 1`` with projection biases (0 without)::

        mults = 4 N C^2 + 2 N_p T C
        adds  = 4 N C (C - 1) + 4 b N C + 2 N_p T C - N_p C - h N_p + [score_bias] h N_p T
        divs  = 2 h N_p T
        exps  = h N_p T

    linear in ``N`` for a fixed window (Ruggeri (2022) §3.1: ``O(M^2 N C)``).
    """
    n, t = grid.hw[0] * grid.hw[1], grid.window_cells
    head_dim = dim // heads
    return [
        *(linear_part(f"{name} projection", n, dim, dim, bias) for name in ("q", "k", "v")),
        *attention_parts(heads=heads, queries=t, keys=t, d_qk=head_dim, d_v=head_dim, groups=grid.num_windows,
                         score_bias=score_bias),
        linear_part("output projection", n, dim, dim, bias),
    ]


def conv2d_ops(out_cells: int, out_channels: int, fan_in: int, bias: bool) -> OpCounts:
    """A convolution with ``out_cells`` output positions and ``out_channels`` channels, each output a dot
    product of length ``fan_in = (in_channels / groups) * kh * kw`` (taps on zero padding included: the
    kernel multiplies them too), plus one addition for the bias."""
    outputs = out_cells * out_channels
    return dot_ops(fan_in, outputs) + OpCounts(adds=outputs if bias else 0)


def layernorm_ops(rows: int, d: int, affine: bool = True) -> OpCounts:
    """``nn.LayerNorm(d)`` over ``rows`` vectors. Per vector:

    * mean: ``d - 1`` adds, 1 div;
    * variance: ``d`` subtractions of the mean (counted as adds), ``d`` squares (mults), ``d - 1`` adds,
      1 div;
    * normalisation: ``d`` divisions of the centred values by ``sqrt(var + eps)`` (counted as divisions,
      like the softmax's normalisation; the ``+ eps`` and the square root, once per vector, are not counted);
    * affine (``elementwise_affine``): ``d`` mults by the weight, ``d`` adds of the bias.

    Total per vector: ``2d`` mults, ``4d - 2`` adds, ``d + 2`` divs (affine) or ``d`` mults, ``3d - 2``
    adds, ``d + 2`` divs (no affine).
    """
    per_row = OpCounts(mults=d, adds=(d - 1) + d + (d - 1), divs=1 + 1 + d)
    if affine:
        per_row = per_row + OpCounts(mults=d, adds=d)
    return per_row * rows


def gelu_ops(n: int) -> OpCounts:
    """Exact GELU ``0.5 x (1 + erf(x / sqrt(2)))`` on ``n`` elements: the scaling by ``1/sqrt(2)`` one
    division, ``1 +`` one addition, the two products two multiplications; ``erf`` itself is a primitive
    outside the four counted ones (like a table lookup) and is not counted."""
    return elementwise(n, mults=2, adds=1, divs=1)
