"""Complexity as growth: how a time grows with the sequence length N, rather than one mean over the lengths.

A mean log-log slope over N = 256-4,096 can call a mechanism linear while its cost turns quadratic past the
lengths measured (an O(N d^2 + N^2 / r) mixer is ~linear while N d^2 dominates). So the growth is read in
three ways:

* :func:`local_slopes`: the log-log slope of each step between consecutive lengths, ``log2(t(2N) / t(N))``
  for a doubling: 1 for linear time, 2 for quadratic; a slope that rises with N is a higher-order term taking
  over;
* :func:`quadratic_fit`: ``t = c + a N + b N^2`` by least squares on relative errors (weights ``1 / t^2``),
  with a ``level`` confidence interval on ``b`` (Student's t on the residual degrees of freedom) and the
  crossover ``N = a / b`` where the quadratic term overtakes the linear one;
* :func:`growth_summary`: both from per-round samples (the harness rounds of ``tokenmix steptime``), with
  the slope of the longest step and the range of its per-round slopes, an order-statistic interval for their
  median.

Imports nothing else of tokenmix; scipy (for the t quantile) is imported when a fit is made.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import median

import numpy as np

__all__ = ["QuadraticFit", "GrowthSummary", "local_slopes", "quadratic_fit", "growth_summary"]


@dataclass(frozen=True)
class QuadraticFit:
    """``t = c + a N + b N^2`` (times in the samples' unit, N in tokens) and a ``level`` interval on ``b``.

    ``crossover``: the N where ``b N^2 = a N``, i.e. ``a / b``, past which the quadratic term is the larger;
    None unless ``a > 0`` and the interval on ``b`` lies above 0 (a ``b`` the data cannot tell from 0 gives
    no crossover, however large its estimate's ``a / b``). ``dof``: residual degrees of freedom (points - 3);
    with 0 (three points, an exact fit) nothing sizes the error, and the interval is (-inf, inf)."""

    a: float
    b: float
    c: float
    b_low: float
    b_high: float
    crossover: float | None
    level: float = 0.95
    dof: int = 0


@dataclass(frozen=True)
class GrowthSummary:
    """What :func:`growth_summary` reads from per-round samples.

    ``lengths`` (ascending) and ``medians`` (the median time per length); ``slopes``: :func:`local_slopes` of
    the medians; ``last_pair``: the longest step measured (the two largest lengths); ``last_slope``: the
    median of that step's per-round slopes (round i at the longer length over round i at the shorter), and
    ``last_low``/``last_high`` their minimum and maximum: an interval that holds the median per-round slope
    with probability ``last_coverage`` = 1 - 2^(1 - k) for k paired rounds (order statistics; no bootstrap);
    ``fit``: :func:`quadratic_fit` of the medians (None with fewer than 3 lengths)."""

    lengths: list[int]
    medians: list[float]
    slopes: list[tuple[int, int, float]]
    last_pair: tuple[int, int]
    last_slope: float
    last_low: float
    last_high: float
    last_coverage: float
    fit: QuadraticFit | None


def _check_times(times: list[float], where: str) -> list[float]:
    values = list(times)
    if not values or not all(isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and t > 0
                             for t in values):
        raise ValueError(f"{where}: times must be a non-empty list of finite numbers > 0, got {times!r}")
    return [float(t) for t in values]


def _check_lengths(lengths: list[int], where: str) -> list[int]:
    values = list(lengths)
    if not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n > 0 for n in values):
        raise ValueError(f"{where}: lengths must be ints > 0, got {lengths!r}")
    return [int(n) for n in values]


def local_slopes(lengths: list[int], times: list[float]) -> list[tuple[int, int, float]]:
    """``(N1, N2, slope)`` for each pair of consecutive lengths (ascending): the log-log slope
    ``log(t(N2) / t(N1)) / log(N2 / N1)``, which is ``log2(t(2N) / t(N))`` for a doubling. One time per length;
    at least two lengths, all distinct."""
    ns, ts = _check_lengths(lengths, "local_slopes"), _check_times(times, "local_slopes")
    if len(ns) != len(ts):
        raise ValueError(f"local_slopes: {len(ns)} lengths but {len(ts)} times")
    if len(ns) < 2 or len(set(ns)) != len(ns):
        raise ValueError(f"local_slopes: needs at least two distinct lengths (one time each), got {lengths!r}")
    pairs = sorted(zip(ns, ts))
    return [(n1, n2, math.log(t2 / t1) / math.log(n2 / n1)) for (n1, t1), (n2, t2) in zip(pairs, pairs[1:])]


def _t_quantile(p: float, dof: int) -> float:
    try:
        from scipy import stats
    except ModuleNotFoundError:
        raise ModuleNotFoundError("quadratic_fit's interval needs scipy: pip install 'tokenmix-lab[report]'") from None
    return float(stats.t.ppf(p, dof))


def quadratic_fit(lengths: list[int], times: list[float], level: float = 0.95) -> QuadraticFit:
    """Least squares ``t = c + a N + b N^2`` on relative errors (minimises ``sum ((t_i - fit_i) / t_i)^2``,
    i.e. weights ``1 / t_i^2``, so that the short lengths count as much as the long ones), with a ``level``
    interval on ``b``: ``b +- t_{(1 + level) / 2, n - 3} se(b)``, the standard error from the weighted
    residuals. A length may repeat (several rounds); at least three distinct lengths. See :class:`QuadraticFit`
    for ``crossover``."""
    ns, ts = _check_lengths(lengths, "quadratic_fit"), _check_times(times, "quadratic_fit")
    if len(ns) != len(ts):
        raise ValueError(f"quadratic_fit: {len(ns)} lengths but {len(ts)} times")
    if len(set(ns)) < 3:
        raise ValueError(f"quadratic_fit: needs at least three distinct lengths for c, a and b, got {lengths!r}")
    if not isinstance(level, (int, float)) or isinstance(level, bool) or not 0 < level < 1:
        raise ValueError(f"quadratic_fit: level must be a number in (0, 1), got {level!r}")
    scale = float(max(ns))  # N / max N in the design: N^2 up to ~1e9 would swamp the constant column
    x, t = np.asarray(ns, dtype=float) / scale, np.asarray(ts)
    design = np.stack([np.ones_like(x), x, x * x], axis=1) / t[:, None]  # each row divided by its t: relative
    coef, _, rank, _ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    if rank < 3:
        raise ValueError(f"quadratic_fit: the lengths {sorted(set(ns))} do not determine c, a and b")
    c, a, b = float(coef[0]), float(coef[1]) / scale, float(coef[2]) / scale ** 2
    dof = len(ns) - 3
    if dof == 0:
        low, high = -math.inf, math.inf
    else:
        residual = np.ones_like(t) - design @ coef
        sigma2 = float(residual @ residual) / dof
        se = math.sqrt(sigma2 * float(np.linalg.inv(design.T @ design)[2, 2])) / scale ** 2
        half = _t_quantile((1 + level) / 2, dof) * se
        low, high = b - half, b + half
    crossover = a / b if a > 0 and low > 0 else None
    return QuadraticFit(a, b, c, low, high, crossover, float(level), dof)


def growth_summary(samples: dict[int, list[float]], level: float = 0.95) -> GrowthSummary:
    """The growth of per-round times ``samples`` (length -> the times of its rounds, round i of every length
    measured in the same round): the median per length, the :func:`local_slopes` of the medians, the longest
    step's per-round slopes (rounds paired by index; the first ``min`` of the two counts when they differ)
    and the :func:`quadratic_fit` of the medians at ``level`` (see :class:`GrowthSummary`)."""
    if not isinstance(samples, dict) or len(samples) < 2:
        raise ValueError(f"growth_summary: needs samples at two lengths or more (length -> times), got {samples!r}")
    lengths = sorted(_check_lengths(list(samples), "growth_summary"))
    rounds = {n: _check_times(samples[n], f"growth_summary: length {n}") for n in lengths}
    medians = [float(median(rounds[n])) for n in lengths]
    n1, n2 = lengths[-2], lengths[-1]
    k = min(len(rounds[n1]), len(rounds[n2]))
    per_round = sorted(math.log(rounds[n2][i] / rounds[n1][i]) / math.log(n2 / n1) for i in range(k))
    fit = quadratic_fit(lengths, medians, level) if len(lengths) >= 3 else None
    return GrowthSummary(lengths, medians, local_slopes(lengths, medians), (n1, n2), float(median(per_round)),
                         per_round[0], per_round[-1], 1 - 2.0 ** (1 - k), fit)
