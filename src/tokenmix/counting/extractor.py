"""Operation counts of Chen (2023)'s Extractors: ``extractor_she``, ``extractor_he``, ``extractor_we``,
``extractor_me`` (Tables 3-6; at ``d = l = 128`` the totals of Table 7).

Each is the extraction (the causal convolution with ``l = max_len`` taps, :func:`extraction`) plus what
surrounds it: nothing for the ME; the adjustment and optional output projection for the SHE and WE
(:func:`adjustment`); those and ``W^in_ext`` for the HE. Training over ``l`` positions is the sum of the
incremental steps over ``t = 1..l``.
"""

from __future__ import annotations

from ..mixers.extractor import HE, ME, SHE, WE, Extractor
from .opcounts import OpCounts, elementwise, linear_ops
from .registry import step, training

__all__ = ["extraction", "extraction_training", "extraction_step", "adjustment", "adjusted_training",
           "adjusted_step", "he_training", "he_step", "me_training", "me_step"]


def extraction(mixer: Extractor, taps: int, positions: int) -> OpCounts:
    """The extraction (Chen (2023) eqs. 23, 26, 28, 29) of ``positions`` outputs that use ``taps`` taps in all:
    output ``i`` sums ``k_i = min(i, l)`` terms (``i`` as in the paper, which assumes ``i <= l``; the last
    ``l`` inputs beyond it), each a ``d x d`` matrix-vector product (SHE: ``d^2`` multiplications,
    ``d (d - 1)`` additions) or a ``d``-wide element-wise product (HE, WE: vector taps; ME: one scalar tap
    times a ``d``-vector; ``d`` multiplications), and adding the ``k_i`` terms costs ``(k_i - 1) d``
    additions. This is the direct sum of the equations, as the paper counts it; the FFT path computes the
    same outputs with a different mix of operations (O(d log l) per output and channel instead of O(l d)),
    which these counts do not describe."""
    d = mixer.dim
    per_tap = OpCounts(mults=d * d, adds=d * (d - 1)) if mixer.kind == "matrix" else OpCounts(mults=d)
    return taps * per_tap + OpCounts(adds=(taps - positions) * d)


def extraction_training(mixer: Extractor, length: int) -> OpCounts:
    """The extraction over ``length`` positions (Chen (2023) Tables 3-4, the sums over ``t = 1..l``), with
    ``sum_i min(i, l)`` taps in all (``l (l + 1) / 2`` when ``length = l``)."""
    full = min(length, mixer.taps)
    return extraction(mixer, full * (full + 1) // 2 + (length - full) * mixer.taps, length)


def extraction_step(mixer: Extractor, t: int) -> OpCounts:
    """Inference at length ``t`` (Chen (2023) Tables 5-6): one output over ``min(t, l)`` taps of the shift
    register."""
    return extraction(mixer, min(t, mixer.taps), 1)


def adjustment(mixer: SHE | HE | WE, rows: int) -> OpCounts:
    """The adjustment ``(x W^adj) o e`` (Chen (2023) eq. 24: ``d^2`` multiplications and ``d (d - 1)``
    additions for ``x W^adj`` (+ ``d`` additions with a bias), ``d`` multiplications for the Hadamard
    product) and the optional ``W^out`` (eq. 25: ``d^2`` and ``d (d - 1)``, + ``d`` with a bias), per
    position: the ``d d + d + d d`` multiplications and ``(d - 1) d + (d - 1) d`` additions of Tables 3-6."""
    d = mixer.dim
    around = linear_ops(rows, d, d, mixer.adj.bias is not None) + elementwise(rows * d, mults=1)
    if mixer.out is not None:
        around = around + linear_ops(rows, d, d, mixer.out.bias is not None)
    return around


@training(SHE, WE)
def adjusted_training(mixer: SHE | WE, length: int) -> OpCounts:
    """SHE (Table 3) and WE (Table 4): the extraction, then the adjustment and projection at every position."""
    return extraction_training(mixer, length) + adjustment(mixer, length)


@step(SHE, WE)
def adjusted_step(mixer: SHE | WE, t: int) -> OpCounts:
    return extraction_step(mixer, t) + adjustment(mixer, 1)


def _in_ext(mixer: HE, rows: int) -> OpCounts:
    """``X W^in_ext`` (Chen (2023) eq. 27: ``d^2`` multiplications, ``d (d - 1)`` additions per position,
    + ``d`` additions with a bias; Table 4's extra ``d d l``)."""
    return linear_ops(rows, mixer.dim, mixer.dim, mixer.in_ext.bias is not None)


@training(HE)
def he_training(mixer: HE, length: int) -> OpCounts:
    """HE (Table 4): ``W^in_ext``, the extraction, the adjustment and projection."""
    return _in_ext(mixer, length) + extraction_training(mixer, length) + adjustment(mixer, length)


@step(HE)
def he_step(mixer: HE, t: int) -> OpCounts:
    return _in_ext(mixer, 1) + extraction_step(mixer, t) + adjustment(mixer, 1)


@training(ME)
def me_training(mixer: ME, length: int) -> OpCounts:
    """ME (Table 4): the extraction alone (eq. 29 has nothing around it)."""
    return extraction_training(mixer, length)


@step(ME)
def me_step(mixer: ME, t: int) -> OpCounts:
    return extraction_step(mixer, t)
