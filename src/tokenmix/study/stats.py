"""The exact tests behind the verdicts, from :mod:`scipy.stats`, and what each design can reach.

* Independent samples (one value per seed): the one-sided exact Mann-Whitney U test. Without ties
  ``scipy.stats.mannwhitneyu(..., method="exact")``; with ties its exact distribution (of untied ranks) is not
  the right one, so the same U (mid-ranks) goes through ``scipy.stats.permutation_test`` with every one of
  the C(n + m, n) splits enumerated. Past :data:`ENUMERATE_AT_MOST` splits, ties or not, the same exact null
  distribution is counted instead (subsets by size and doubled mid-rank sum; untied, it equals scipy's exact
  p, and the two tests take the same route). A target never reached is ``inf`` and ranks last, like any value.
* One sample against a constant: the exact sign test, ``scipy.stats.binomtest`` (ties with the constant
  count as "not above", as the hand-written test did).
* Paired samples (harness rounds): the exact Wilcoxon signed-rank test of the differences,
  ``scipy.stats.wilcoxon(..., method="exact")``; with zero differences dropped, and with tied magnitudes
  through ``permutation_test`` (every one of the 2^n sign flips); past :data:`ENUMERATE_AT_MOST` flips
  (100 harness rounds: 2^100), ties or not, the same exact null counted one doubled mid-rank at a time, its
  upper tail summed: scipy's exact p there is 1 - cdf, which cancels to 0 or -2.2e-16 for 100 untied rounds.
* How many seeds (or rounds) would decide an open claim: for a direction, the count the exact rank test itself
  needs (Noether 1987), from the share of comparisons on the claimed side; for a margin, the normal
  approximation. Never fewer than the smallest p each design can give allows (that floor and Holm's correction
  are :mod:`tokenmix.study.power`'s, shared with ``tokenmix compare --dry-run``).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from .power import ALPHA, smallest_p_independent

__all__ = ["mann_whitney_greater", "sign_test_greater", "wilcoxon_greater", "rank_sum_null_greater",
           "signed_rank_null_greater", "rank_sum_statistic", "positive_rank_sum_statistic", "fewest_for_floor",
           "normal_count", "rank_count", "ENUMERATE_AT_MOST"]

POWER = 0.8  # of the seed counts that say what would decide a claim
# splits / sign flips permutation_test enumerates; beyond, the null is counted (exact as well, in milliseconds,
# where enumerating 10 vs 10 tied values, 184,756 splits, takes 1.4 s)
ENUMERATE_AT_MOST = 20_000


def _scipy():
    """scipy.stats, imported when a test runs (planning and parsing claims do not need it)."""
    try:
        from scipy import stats
    except ModuleNotFoundError:
        raise ModuleNotFoundError("the report's exact tests need scipy: pip install 'tokenmix-lab[report]'") from None
    return stats


def _has_ties(values: np.ndarray) -> bool:
    return len(np.unique(values)) < len(values)


def rank_sum_statistic(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """The rank sum of ``x`` in the pooled sample (mid-ranks for ties): U plus a constant, along ``axis``
    (vectorised for permutation_test)."""
    pooled = np.concatenate([x, y], axis=axis)
    ranks = _scipy().rankdata(pooled, axis=axis)
    return np.take(ranks, np.arange(x.shape[axis]), axis=axis).sum(axis=axis)


def mann_whitney_greater(a: list[float], b: list[float]) -> float:
    """Exact one-sided p for "``a`` is stochastically larger than ``b``": P(U >= observed U) over every split
    of the pooled values into groups of len(a) and len(b)."""
    if not a or not b:
        raise ValueError("mann_whitney_greater needs at least one value on each side")
    sps = _scipy()
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if math.comb(len(x) + len(y), len(x)) > ENUMERATE_AT_MOST:
        return rank_sum_null_greater(x, y)
    if not _has_ties(np.concatenate([x, y])):
        return float(sps.mannwhitneyu(x, y, alternative="greater", method="exact").pvalue)
    if min(len(x), len(y)) == 1:  # permutation_test wants two values a side; the n + m splits directly
        ranks = sps.rankdata(np.concatenate([x, y]))
        if len(x) == 1:
            return float(np.mean(ranks >= ranks[0] - 1e-9))
        return float(np.mean(ranks <= ranks[-1] + 1e-9))
    result = sps.permutation_test((x, y), rank_sum_statistic, permutation_type="independent",
                                  alternative="greater", n_resamples=np.inf, vectorized=True)
    return float(result.pvalue)


def rank_sum_null_greater(x: np.ndarray, y: np.ndarray) -> float:
    """P(rank sum of ``x`` >= observed) over every split of the pooled values into len(x) and len(y), ties at
    mid-ranks: the exact null counted by subset size and doubled rank sum (integers) rather than enumerated."""
    doubled = np.rint(2 * _scipy().rankdata(np.concatenate([x, y]))).astype(int)
    n = len(x)
    ways = np.zeros((n + 1, int(doubled.sum()) + 1))
    ways[0, 0] = 1.0
    for rank in doubled:  # ways[k, s]: subsets of the values so far with k members and doubled rank sum s
        ways[1:, rank:] += ways[:-1, :-rank].copy()
    return float(ways[n, int(doubled[:n].sum()):].sum() / math.comb(len(doubled), n))


def sign_test_greater(above: int, n: int) -> float:
    """Exact one-sided sign test: P(Binomial(n, 1/2) >= above)."""
    if n < 1 or not 0 <= above <= n:
        raise ValueError(f"sign test needs 0 <= above <= n and n >= 1, got above={above}, n={n}")
    return float(_scipy().binomtest(above, n, 0.5, alternative="greater").pvalue)


def positive_rank_sum_statistic(d: np.ndarray, axis: int = -1) -> np.ndarray:
    """T+: the sum of the mid-ranks of |d| where d > 0, along ``axis`` (vectorised for permutation_test)."""
    ranks = _scipy().rankdata(np.abs(d), axis=axis)
    return np.where(d > 0, ranks, 0.0).sum(axis=axis)


def wilcoxon_greater(differences: list[float]) -> float:
    """Exact one-sided signed-rank p for "the paired differences are centred above 0" (zeros dropped)."""
    if not len(differences):
        raise ValueError("wilcoxon_greater needs at least one pair")
    sps = _scipy()
    d = np.asarray([v for v in differences if v != 0], dtype=float)
    if len(d) == 0:
        return 1.0  # every pair equal: no evidence either way
    if 2 ** len(d) > ENUMERATE_AT_MOST:
        return signed_rank_null_greater(d)
    if not _has_ties(np.abs(d)):
        return float(sps.wilcoxon(d, alternative="greater", method="exact").pvalue)
    result = sps.permutation_test((d,), positive_rank_sum_statistic, permutation_type="samples",
                                  alternative="greater", n_resamples=np.inf, vectorized=True)
    return float(result.pvalue)


def signed_rank_null_greater(d: np.ndarray) -> float:
    """P(T+ >= observed) under independent random signs, T+ the sum of the mid-ranks of |d| where d > 0 (no zero
    in ``d``): the exact null counted one doubled rank (an integer) at a time rather than over all 2^n flips."""
    doubled = np.rint(2 * _scipy().rankdata(np.abs(d))).astype(int)
    null = np.zeros(int(doubled.sum()) + 1)
    null[0] = 1.0
    for rank in doubled:  # each rank joins T+ with probability 1/2
        shifted = np.zeros_like(null)
        shifted[rank:] = null[:-rank]
        null = 0.5 * (null + shifted)
    return float(null[int(doubled[d > 0].sum()):].sum())


def fewest_for_floor(design: str, factor: int, alpha: float = ALPHA) -> int:
    """The fewest seeds per label ("independent") or values ("sign", "paired") whose smallest attainable p,
    times the Holm factor ``factor``, is at most ``alpha``."""
    n = 1
    while True:
        floor = smallest_p_independent(n, n) if design == "independent" else 0.5 ** n
        if floor * factor <= alpha:
            return n
        n += 1


def normal_count(delta: float, sd: float, design: str, factor: int, alpha: float = ALPHA) -> int | None:
    """About how many seeds per label (``design`` "independent": two samples, n each) or values ("sign",
    "paired": one sample of n) a true difference ``delta`` with standard deviation ``sd`` needs for a one-sided
    test at ``alpha / factor`` (Holm's first step) to reject with probability :data:`POWER`, by the normal
    approximation: n = k (z_(1-alpha/factor) + z_power)^2 sd^2 / delta^2, k = 2 for two samples, 1 for one.
    Never fewer than :func:`fewest_for_floor`; None when ``delta`` <= 0 (no count would do)."""
    if not delta > 0:
        return None
    floor = fewest_for_floor(design, factor, alpha)
    if sd <= 0:
        return floor
    z = NormalDist().inv_cdf(1 - alpha / factor) + NormalDist().inv_cdf(POWER)
    k = 2 if design == "independent" else 1
    return max(floor, math.ceil(k * (z * sd / delta) ** 2))


# Noether (1987)'s denominators: 12 c (1 - c) with equal groups (c = 1/2), halved for the count per label;
# 3 for the signed-rank test; 4 for the sign test
_NOETHER = {"independent": 6.0, "paired": 3.0, "sign": 4.0}


def rank_count(share: float, design: str, factor: int, alpha: float = ALPHA) -> int | None:
    """About how many seeds per label (``design`` "independent") or values ("sign", "paired") the report's exact
    rank test needs to reject at ``alpha / factor`` with probability :data:`POWER`, when a comparison lands on
    the tested side with probability ``share``: P(a > b) for the Mann-Whitney test, P(d + d' > 0) for two of
    the paired differences (the signed-rank test), P(a > c) for the sign test. Noether (1987):
    n = (z_(1-alpha/factor) + z_power)^2 / (k (share - 1/2)^2), k = 6 per label of two equal samples, 3 for the
    signed-rank test, 4 for the sign test. Unlike :func:`normal_count` it reads no mean or sd, so values in
    two clusters (runs that learnt and runs that stalled) do not make a difference look surer than the ranks
    say. Never fewer than :func:`fewest_for_floor`; None when ``share`` <= 1/2 (no count would do)."""
    if not share > 0.5:
        return None
    z = NormalDist().inv_cdf(1 - alpha / factor) + NormalDist().inv_cdf(POWER)
    n = math.ceil(z ** 2 / (_NOETHER[design] * (share - 0.5) ** 2) - 1e-9)
    return max(fewest_for_floor(design, factor, alpha), n)
