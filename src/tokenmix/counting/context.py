"""Operation counts of the mechanisms without attention scores: ``relation`` (Yamada et al. (2022)),
``average`` (Zhang et al. (2018)), the ``mlp`` baseline, the ``contextualizer`` (Maupomé & Meurs (2021)) and
``baseconv`` (Arora et al. (2023)).
"""

from __future__ import annotations

import torch.nn as nn

from ..mixers.average import AverageAttention
from ..mixers.baseconv import BaseConv
from ..mixers.contextualizer import Contextualizer
from ..mixers.mlp import PointwiseMLP
from ..mixers.relation import Relation
from .blocks import gelu_ops
from .opcounts import OpCounts, elementwise, linears, matmul_ops, softmax_ops
from .registry import step, training

__all__ = ["relation_pointwise", "relation_training", "relation_step", "average_gate",
           "average_training", "average_step", "mlp_training", "mlp_step", "contextualizer_training",
           "baseconv_training", "baseconv_step"]


def running_mean(length: int, width: int, causal: bool) -> OpCounts:
    """The mean of ``length`` rows of ``width``: ``width (length - 1)`` additions either way (a sum, or a
    running sum when causal), then ``width`` divisions (one mean, broadcast) or, causally, ``length width``
    (each running sum divided by its count)."""
    return OpCounts(adds=(length - 1) * width, divs=length * width if causal else width)


def running_mean_step(t: int, width: int) -> OpCounts:
    """The new row added into the running sum (``width`` additions, none at ``t = 1``) and the sum divided
    by the count ``t`` (``width`` divisions)."""
    return OpCounts(adds=width if t > 1 else 0, divs=width)


# -- relation ---------------------------------------------------------------------------------------------
def _activation(mixer: Relation, count: int) -> OpCounts:
    """phi on ``count`` entries: ReLU is a comparison and the identity nothing (0 operations); exact GELU,
    ``0.5 x (1 + erf(x / sqrt 2))``, 2 multiplications, 1 addition and 1 division per entry (erf, like cos,
    is a primitive that is not counted)."""
    if isinstance(mixer.phi, nn.GELU):
        return gelu_ops(count)
    return OpCounts()


def relation_pointwise(mixer: Relation, rows: int) -> OpCounts:
    """Everything but the mean, for ``rows`` positions: ``W_G`` and ``W_H`` (Yamada et al. (2022) eqs. 7-8),
    ``G * H'`` (``u`` multiplications per row, ``u = inner_dim``), ``W`` and phi (eq. 12), ``W_O`` when
    ``out_proj``; the linear layers with their biases."""
    u = mixer.inner_dim
    layers = [mixer.g_proj, mixer.h_proj, mixer.w] + ([] if mixer.proj is None else [mixer.proj])
    return linears(rows, layers) + elementwise(rows * u, mults=1) + _activation(mixer, rows * u)


@training(Relation)
def relation_training(mixer: Relation, length: int) -> OpCounts:
    """The pointwise parts at every position plus the mean of eq. 10 over ``l = length`` rows of width
    ``u = inner_dim`` (:func:`running_mean`). Causal: the sum of :func:`relation_step` over ``t = 1..l``.

    Yamada et al. (2022) §4.2 count ``N d^2 + 2 N d m + N d`` for Relation (``m = dim``, ``d = u``,
    ``N = l``): the multiplications of ``W_G``, ``W_H`` (``2 N d m``), ``G * H'`` (``N d``) and ``W``
    (``N d^2``), which are exactly this count's ``mults`` with ``out_proj=False``. Their formula leaves out
    the additions (of the matrix products, the biases and the mean's sum) and the mean's ``d`` divisions."""
    return relation_pointwise(mixer, length) + running_mean(length, mixer.inner_dim, mixer.causal)


@step(Relation)
def relation_step(mixer: Relation, t: int) -> OpCounts:
    """The new token's pointwise parts and the running mean (:func:`running_mean_step`): O(d^2) whatever
    ``t``."""
    return relation_pointwise(mixer, 1) + running_mean_step(t, mixer.inner_dim)


# -- average attention ------------------------------------------------------------------------------------
def average_gate(mixer: AverageAttention, rows: int) -> OpCounts:
    """The FFN, the gates and the LayerNorm (Zhang et al. (2018) §3) for ``rows`` positions, ``d = dim``: the
    FFN (two linear layers with their biases; ReLU not counted); the gate layer on ``[x; g]`` (``2d -> 2d``;
    the concatenation is free); the sigmoid of its ``2d`` outputs (1 exp, 1 addition, 1 division each);
    ``i * x + f * g + x`` (``2d`` multiplications, ``2d`` additions); LayerNorm: the mean (``d - 1``
    additions, 1 division), centring (``d`` additions), the variance (``d`` multiplications, ``d - 1``
    additions, 1 division), ``+ eps`` (1 addition), ``d`` divisions by the standard deviation (the square
    root is not counted) and the affine ``d`` multiplications and ``d`` additions (when the norm has them)."""
    d = mixer.dim
    cost = linears(rows, [m for m in mixer.ffn if isinstance(m, nn.Linear)] + [mixer.gates])
    cost = cost + elementwise(rows * 2 * d, adds=1, divs=1, exps=1) + elementwise(rows * 2 * d, mults=1, adds=1)
    norm = OpCounts(mults=d, adds=(d - 1) + d + (d - 1) + 1, divs=2 + d)
    if mixer.norm.weight is not None:
        norm = norm + OpCounts(mults=d)
    if mixer.norm.bias is not None:
        norm = norm + OpCounts(adds=d)
    return cost + norm * rows


@training(AverageAttention)
def average_training(mixer: AverageAttention, length: int) -> OpCounts:
    """The average over ``l = length`` inputs of width ``d`` (:func:`running_mean`), then
    :func:`average_gate` at every position. Non-causally the module broadcasts the one mean and runs the FFN
    on every row, and that is what is counted (the FFN of one row would do). Causal: the sum of
    :func:`average_step` over ``t = 1..l``."""
    return running_mean(length, mixer.dim, mixer.causal) + average_gate(mixer, length)


@step(AverageAttention)
def average_step(mixer: AverageAttention, t: int) -> OpCounts:
    """``x_t`` into the running average (:func:`running_mean_step`) and :func:`average_gate` for the new
    token: O(d^2) whatever ``t``."""
    return running_mean_step(t, mixer.dim) + average_gate(mixer, 1)


# -- the pointwise MLP baseline ---------------------------------------------------------------------------
def _mlp_rows(mixer: PointwiseMLP, rows: int) -> OpCounts:
    """``rows`` tokens through ``Linear(dim, hidden)``, ReLU (a comparison, not counted) and
    ``Linear(hidden, dim)``: ``2 rows dim hidden`` multiplications, ``rows (dim - 1) hidden + rows
    (hidden - 1) dim`` additions, + ``rows (hidden + dim)`` with biases."""
    return linears(rows, [m for m in mixer.net if isinstance(m, nn.Linear)])


@training(PointwiseMLP)
def mlp_training(mixer: PointwiseMLP, length: int) -> OpCounts:
    """Every position on its own, causal or not: ``length`` rows."""
    return _mlp_rows(mixer, length)


@step(PointwiseMLP)
def mlp_step(mixer: PointwiseMLP, t: int) -> OpCounts:
    """The new token alone (nothing crosses positions): one row, whatever ``t``."""
    return _mlp_rows(mixer, 1)


# -- the contextualizer -----------------------------------------------------------------------------------
@training(Contextualizer)
def contextualizer_training(mixer: Contextualizer, length: int) -> OpCounts:
    """Algorithm 1 of Maupomé & Meurs (2021) over ``l = length`` tokens, ``d = dim``, ``u = rank``,
    ``K = steps`` (their Table 1: O(l u d) per step):

    * ``U x_i`` for every token (``l u d`` multiplications, ``l u (d - 1)`` additions, + ``l u`` with
      ``bias``): once when ``recurrent`` (the products are reused), at every step otherwise;
    * per step: ``V c`` (``u d``, ``u (d - 1)``, + ``u``); ``U x_i * V c`` (``l u`` multiplications);
      ``W (.)`` ([2a]: ``l d u`` multiplications, ``l d (u - 1)`` additions, + ``l d``); the softmax over
      the ``l`` tokens of each of the ``d`` features ([2b]); ``c = sum_i alpha_i * x_i`` ([2c]: ``l d``
      multiplications, ``(l - 1) d`` additions).

    c^(0) costs nothing (a constant, a parameter, or a random draw, which is not arithmetic) and the
    broadcast of c^(K) to every position is a copy. Bidirectional only, so no incremental count."""
    n, d, u = length, mixer.dim, mixer.rank

    def biased(rows: int, width: int) -> OpCounts:
        return OpCounts(adds=rows * width if mixer.bias else 0)

    project_x = matmul_ops(n, d, u) + biased(n, u)
    per_step = (matmul_ops(1, d, u) + biased(1, u) + OpCounts(mults=n * u)
                + matmul_ops(n, u, d) + biased(n, d) + softmax_ops(n, d)
                + OpCounts(mults=n * d, adds=(n - 1) * d))
    projections = project_x * (1 if mixer.recurrent else mixer.steps)
    return projections + per_step * mixer.steps


# -- BaseConv ---------------------------------------------------------------------------------------------
def _baseconv_rows(mixer: BaseConv, rows: int) -> OpCounts:
    """Per position, ``d = dim``, ``k = kernel_size``: the projection (with its bias), the depthwise filter's
    ``k`` multiplications and ``k - 1`` additions per channel (plus its bias), every tap counted as computed
    (the zeros before the first token included), and the gate's ``d`` multiplications."""
    d, k = mixer.dim, mixer.kernel_size
    bias = 1 if mixer.conv.bias is not None else 0
    return linears(rows, [mixer.projection]) + elementwise(rows * d, mults=k + 1, adds=k - 1 + bias)


@training(BaseConv)
def baseconv_training(mixer: BaseConv, length: int) -> OpCounts:
    """Every position's :func:`_baseconv_rows`, causal or not: O(N d^2 + N d k)."""
    return _baseconv_rows(mixer, length)


@step(BaseConv)
def baseconv_step(mixer: BaseConv, t: int) -> OpCounts:
    """The new token over its window of the last ``k`` inputs: one row, whatever ``t``."""
    return _baseconv_rows(mixer, 1)
