"""The one timing helper of the project: every time that a report states comes from :func:`measure`.

Why one helper: hand-written ``time.perf_counter`` loops each choose their own warm-up, repeat count, thread
setting and statistic, so two numbers in the same report could not be compared. :func:`measure` leaves all of
that to ``torch.utils.benchmark.Timer`` (``blocked_autorange``): it runs the function once to size its blocks
(which also warms it up), then in blocks until ``min_run_time`` seconds have been spent, under a fixed number
of torch threads, synchronising CUDA before each clock reading, and reports the median of the blocks (per
call) with their spread. ``tokenmix steptime`` uses it; ``tokenmix speed`` and ``benchmarks/`` still have their
own loops and are to be moved onto it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable, Iterable

from torch.utils.benchmark import Timer

__all__ = ["Timing", "measure", "median_interval"]


@dataclass(frozen=True)
class Timing:
    """One measurement: per-call seconds of each block (``times``), their median, mean and interquartile
    range, how many blocks were timed (``runs``) and the calls per block (``number_per_run``)."""

    median: float
    mean: float
    iqr: float
    runs: int
    number_per_run: int
    times: tuple[float, ...]


def measure(fn: Callable[[], object], *, min_run_time: float = 0.2, threads: int = 1, warmup: int = 0) -> Timing:
    """Time ``fn()`` with ``torch.utils.benchmark.Timer.blocked_autorange``.

    ``warmup`` untimed calls come first (the Timer's own block-size estimate is one more untimed call);
    ``threads`` is the number of torch intra-op threads during the measurement (restored afterwards); timing
    stops once ``min_run_time`` seconds of blocks have run (at least one block, however long a call takes).
    """
    if min_run_time <= 0:
        raise ValueError(f"min_run_time must be positive, got {min_run_time!r}")
    if threads < 1 or warmup < 0:
        raise ValueError(f"threads must be >= 1 and warmup >= 0, got {threads!r} and {warmup!r}")
    for _ in range(warmup):
        fn()
    timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
    result = timer.blocked_autorange(min_run_time=min_run_time)
    return Timing(median=float(result.median), mean=float(result.mean), iqr=float(result.iqr),
                  runs=len(result.times), number_per_run=int(result.number_per_run),
                  times=tuple(float(t) for t in result.times))


def median_interval(values: Iterable[float], level: float = 0.95) -> tuple[float, float, float]:
    """(median, low, high): the distribution-free interval for the median from order statistics, the
    narrowest ``[x(k), x(n+1-k)]`` whose binomial coverage is at least ``level`` (n = 10: the 2nd and 9th
    smallest, 97.9%). Below 6 values no such interval exists; the range (coverage 1 - 2^(1-n)) is returned."""
    xs = sorted(float(v) for v in values)
    n = len(xs)
    if n == 0:
        raise ValueError("median_interval needs at least one value")
    k, below = 1, 1 / 2 ** n  # below = P(Binomial(n, 1/2) <= k - 1); [x(k), x(n+1-k)] covers 1 - 2 below
    while k < (n + 1) // 2:
        below_next = below + math.comb(n, k) / 2 ** n
        if 1 - 2 * below_next < level:
            break
        k, below = k + 1, below_next
    return statistics.median(xs), xs[k - 1], xs[n - k]
