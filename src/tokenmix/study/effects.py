"""Effects with intervals, from the same rank statistics the tests use.

Each claim compares label *a* with *f*·*b* (or with a constant). The effect is the Hodges-Lehmann estimate of the
shift of *a* against *f*·*b*, with the distribution-free confidence interval that inverts the claim's own exact
test (Hollander, Wolfe & Chicken, *Nonparametric Statistical Methods*, 3rd ed., §4.3, §3.2, §3.5):

* independent seeds: the median of the n·m differences aᵢ − f·bⱼ; the interval runs from the (k+1)-th to the
  (nm−k)-th smallest difference, k the largest count with P(U ≤ k) ≤ (1 − level)/2 under the Mann-Whitney null
  (counted exactly);
* paired rounds: the median of the Walsh averages of the differences dᵢ = aᵢ − f·bᵢ, the interval from the
  signed-rank null (counted exactly);
* against a constant: the median of aᵢ − c, the interval from the binomial (sign test) order statistics.

An interval's coverage is at least ``level`` (the nulls are discrete). The report shows each shift relative to
the reference's mean (a percentage), beside the margin the claim was judged against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Effect", "shift_independent", "shift_paired", "shift_constant", "mann_whitney_null",
           "signed_rank_null"]


@dataclass(frozen=True)
class Effect:
    """A shift estimate and its interval (same units as the data), and the level of the interval."""

    estimate: float
    low: float
    high: float
    level: float

    def relative(self, reference: float) -> "Effect":
        scale = abs(reference) if reference else 1.0
        return Effect(self.estimate / scale, self.low / scale, self.high / scale, self.level)


def mann_whitney_null(n: int, m: int) -> np.ndarray:
    """Counts of U = 0..nm over all C(n + m, n) splits (no ties), by the recursion on the largest value."""
    table = {(0, j): np.ones(1) for j in range(m + 1)}
    for i in range(1, n + 1):
        table[(i, 0)] = np.ones(1)
        for j in range(1, m + 1):
            with_i = np.concatenate([np.zeros(j), table[(i - 1, j)]])  # the largest is an a: it beats all j b's
            without = table[(i, j - 1)]
            size = i * j + 1
            counts = np.zeros(size)
            counts[:len(with_i)] += with_i[:size]
            counts[:len(without)] += without
            table[(i, j)] = counts
    return table[(n, m)]


def signed_rank_null(n: int) -> np.ndarray:
    """Counts of the positive rank sum T = 0..n(n+1)/2 over all 2ⁿ sign patterns."""
    counts = np.ones(1)
    for rank in range(1, n + 1):
        grown = np.zeros(len(counts) + rank)
        grown[:len(counts)] += counts
        grown[rank:] += counts
        counts = grown
    return counts


def _cut(null: np.ndarray, level: float) -> int:
    """The largest k with P(statistic <= k) <= (1 - level) / 2 under ``null`` (counts), or -1."""
    cdf = np.cumsum(null) / null.sum()
    below = np.nonzero(cdf <= (1 - level) / 2 + 1e-12)[0]
    return int(below[-1]) if len(below) else -1


def _interval(values: np.ndarray, k: int, level: float) -> Effect:
    values = np.sort(values)
    with np.errstate(over="ignore", invalid="ignore"):  # a target never reached: infinite differences
        estimate = float(np.median(values))
    if k < 0:
        return Effect(estimate, -math.inf, math.inf, level)
    return Effect(estimate, float(values[k]), float(values[len(values) - 1 - k]), level)


def shift_independent(a: list[float], b: list[float], level: float = 0.95) -> Effect:
    """Hodges-Lehmann shift of ``a`` against ``b`` with the exact Mann-Whitney interval."""
    with np.errstate(invalid="ignore"):  # inf - inf: both never reached the target, counted as no difference
        differences = np.subtract.outer(np.asarray(a, float), np.asarray(b, float)).ravel()
    differences = np.nan_to_num(differences, nan=0.0)
    return _interval(differences, _cut(mann_whitney_null(len(a), len(b)), level), level)


def shift_paired(differences: list[float], level: float = 0.95) -> Effect:
    """Hodges-Lehmann shift (median of the Walsh averages) with the exact signed-rank interval."""
    d = np.asarray(differences, float)
    i, j = np.triu_indices(len(d))
    return _interval((d[i] + d[j]) / 2, _cut(signed_rank_null(len(d)), level), level)


def shift_constant(a: list[float], constant: float, level: float = 0.95) -> Effect:
    """Median of ``a`` − ``constant`` with the sign test's order-statistic interval."""
    n = len(a)
    null = np.array([math.comb(n, k) for k in range(n + 1)], float)
    return _interval(np.asarray(a, float) - constant, _cut(null, level), level)
