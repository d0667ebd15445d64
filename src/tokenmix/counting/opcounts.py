"""Arithmetic-operation counts: the bookkeeping behind ``tokenmix count`` (Chen (2023) §7, Tables 3-7).

Conventions (those of Chen (2023) Tables 3-6, applied to every mechanism):

* one sequence (batch 1), the forward pass only; "training" means computing all ``l`` outputs of a
  sequence of length ``l`` at once, "inference step at length t" the extra work for token ``t`` when the
  previous ``t - 1`` tokens were already processed (KV cache / recurrent state reused);
* a dot product of length ``k`` costs ``k`` multiplications and ``k - 1`` additions, a product of an
  ``m x k`` by a ``k x n`` matrix ``m n k`` multiplications and ``m n (k - 1)`` additions; a bias adds one
  addition per output element;
* ``exps`` counts evaluations of ``exp`` (softmax, FAVOR+ features, sigmoid, elu); ``divs`` counts
  divisions (including multiplying by a scale computed as ``1 / x``, which the papers write as a division);
  square roots are counted as divisions' kin in ``divs`` only when the paper writes them as such; any other
  primitive (max, comparison, cos/sin lookup) is documented by the mechanism that uses it and not counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch.nn as nn

__all__ = ["OpCounts", "matmul_ops", "linear_ops", "linears", "dot_ops", "elementwise", "short_conv_ops", "softmax_ops",
           "softmax_attention_ops", "attention_pairs_ops"]


@dataclass(frozen=True)
class OpCounts:
    """Numbers of multiplications, additions, divisions and exponentiations."""

    mults: int = 0
    adds: int = 0
    divs: int = 0
    exps: int = 0

    def __add__(self, other: OpCounts) -> OpCounts:
        if not isinstance(other, OpCounts):
            return NotImplemented
        return OpCounts(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def __mul__(self, factor: int) -> OpCounts:
        if not isinstance(factor, int) or isinstance(factor, bool):
            return NotImplemented
        return OpCounts(*(getattr(self, f.name) * factor for f in fields(self)))

    __rmul__ = __mul__

    @property
    def total(self) -> int:
        """All arithmetic operations (Chen (2023) Table 7's "total arithmetic operations")."""
        return self.mults + self.adds + self.divs + self.exps

    def as_dict(self) -> dict[str, int]:
        """The four counts by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def matmul_ops(m: int, k: int, n: int) -> OpCounts:
    """(m x k) @ (k x n): ``m n k`` multiplications, ``m n (k - 1)`` additions."""
    return OpCounts(mults=m * n * k, adds=m * n * (k - 1))


def linear_ops(rows: int, d_in: int, d_out: int, bias: bool = False) -> OpCounts:
    """``rows`` vectors through an ``nn.Linear(d_in, d_out)``."""
    return matmul_ops(rows, d_in, d_out) + OpCounts(adds=rows * d_out if bias else 0)


def linears(rows: int, layers: Iterable[nn.Linear]) -> OpCounts:
    """``rows`` vectors through each of ``layers``, with their biases (:func:`linear_ops`)."""
    return sum((linear_ops(rows, m.in_features, m.out_features, m.bias is not None) for m in layers), OpCounts())


def dot_ops(k: int, count: int = 1) -> OpCounts:
    """``count`` dot products of length ``k``."""
    return OpCounts(mults=count * k, adds=count * (k - 1))


def elementwise(n: int, *, mults: int = 0, adds: int = 0, divs: int = 0, exps: int = 0) -> OpCounts:
    """``n`` elements, each costing the given numbers of each operation."""
    return OpCounts(mults=n * mults, adds=n * adds, divs=n * divs, exps=n * exps)


def short_conv_ops(conv: nn.Module | None) -> OpCounts:
    """One token through a short convolution (:class:`tokenmix.mixers.shortconv.ShortConvolution`; None: none): per
    channel a dot product over its ``size`` taps (the state's zeros before the first tokens multiplied like any
    input), and the bias added where there is one."""
    if conv is None:
        return OpCounts()
    channels = conv.conv.in_channels
    return dot_ops(conv.size, channels) + OpCounts(adds=channels if conv.conv.bias is not None else 0)


def softmax_ops(width: int, count: int = 1) -> OpCounts:
    """``count`` softmaxes over ``width`` entries each: ``width`` exps, ``width - 1`` additions (the sum) and
    ``width`` divisions (the normalisation) apiece. The max subtracted for numerical range (it cancels
    exactly) is a comparison plus a shift that Chen (2023) does not count, and neither is it counted here."""
    return OpCounts(adds=count * (width - 1), divs=count * width, exps=count * width)


def softmax_attention_ops(queries: int, keys: int, head_dim: int) -> OpCounts:
    """One head of ``softmax(q k^T / sqrt(head_dim)) v`` for ``queries`` queries that each attend to ``keys``
    keys (projections excluded); see :func:`attention_pairs_ops`, of which this is the case
    ``pairs = queries keys``. Per query: ``2 keys head_dim`` multiplications, ``2 keys head_dim - head_dim - 1``
    additions, ``2 keys`` divisions and ``keys`` exps (Chen (2023) Table 3's summand at t = ``keys``)."""
    return attention_pairs_ops(queries * keys, queries, head_dim)


def attention_pairs_ops(pairs: int, queries: int, head_dim: int) -> OpCounts:
    """One head of softmax attention with ``pairs`` (query, key) scores in all over ``queries`` queries (each
    with at least one key; e.g. ``l (l + 1) / 2`` pairs over ``l`` queries for causal attention), counted as
    Chen (2023) Table 3 counts one query with t keys: t dot products of length ``head_dim`` (the scores; t
    ``head_dim`` multiplications, t (``head_dim`` - 1) additions), t divisions by ``sqrt(head_dim)``, a
    :func:`softmax_ops` over t entries, and the weighted sum of t value rows (t ``head_dim``
    multiplications, (t - 1) ``head_dim`` additions). The cost is affine in t, so summing over queries
    needs only the totals."""
    e = head_dim
    return OpCounts(mults=2 * pairs * e, adds=2 * pairs * e - queries * (e + 1), divs=2 * pairs, exps=pairs)
