"""The one timing helper of the project: every time that ``tokenmix`` or ``benchmarks/`` states comes from
:func:`measure`.

Why one helper: hand-written ``time.perf_counter`` loops each choose their own warm-up, repeat count, thread
setting, clock and statistic, so two numbers in the same report could not be compared. :func:`measure` reads
the clock of ``torch.utils.benchmark`` (``timer``: it synchronises the accelerator before each reading), runs
under a fixed number of torch threads and reports the median of its samples with their spread, in one of two
ways:

* by time (``min_run_time``, the default): ``torch.utils.benchmark.Timer.blocked_autorange`` runs the function
  once to size its blocks (which also warms it up), then in blocks until ``min_run_time`` seconds have been
  spent; a sample is a block's time per call. ``tokenmix steptime`` times this way.
* by count (``repeats``): exactly ``repeats`` timed calls, one sample each, after ``warmup`` untimed ones and
  nothing else (``blocked_autorange`` cannot be told a count, and ``Timer.timeit`` adds two untimed calls per
  sample). ``tokenmix speed``, ``tokenmix demo`` and ``benchmarks/`` time this way, where a pass can take
  seconds and the report says "median of N".

A :class:`Deadline` stops either way (:class:`DeadlinePassed`) once it has passed: it is checked after each
warm-up call and each sample (or block), so the one that crosses it finishes and none starts after it
(``tokenmix speed``'s per-case budget).
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import torch
from torch.utils.benchmark import Timer, timer

__all__ = ["Timing", "Deadline", "DeadlinePassed", "measure", "median_interval"]


@dataclass(frozen=True)
class Timing:
    """One measurement: per-call seconds of each sample (``times``: a block's time per call, or one call's
    time), their median, mean and interquartile range, how many samples were taken (``runs``) and the calls
    per sample (``number_per_run``)."""

    median: float
    mean: float
    iqr: float
    runs: int
    number_per_run: int
    times: tuple[float, ...]

    @classmethod
    def of(cls, times: Iterable[float], number_per_run: int = 1) -> Timing:
        """The statistics of per-call ``times`` (the quartiles interpolated linearly, as ``Timer``'s)."""
        xs = tuple(float(t) for t in times)
        if not xs:
            raise ValueError("a Timing needs at least one sample")
        q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else (xs[0],) * 3
        return cls(median=statistics.median(xs), mean=statistics.fmean(xs), iqr=q3 - q1, runs=len(xs),
                   number_per_run=number_per_run, times=xs)


class DeadlinePassed(Exception):
    """A measurement ran past its :class:`Deadline`."""


class Deadline:
    """A moment ``seconds`` after this object is made (monotonic clock): :meth:`check` raises once it has come."""

    def __init__(self, seconds: float) -> None:
        self.seconds = float(seconds)
        self.at = time.monotonic() + self.seconds

    @property
    def passed(self) -> bool:
        """Whether the moment has come."""
        return time.monotonic() >= self.at

    def check(self, done: str) -> None:
        """Raise :class:`DeadlinePassed` (naming what was ``done``) if the deadline has passed."""
        if self.passed:
            raise DeadlinePassed(f"past the {self.seconds:g} s budget after {done}")


@contextlib.contextmanager
def _torch_threads(threads: int | None) -> Iterator[None]:
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def measure(fn: Callable[[], object], *, min_run_time: float = 0.2, repeats: int | None = None,
            threads: int | None = 1, warmup: int = 0, deadline: Deadline | None = None) -> Timing:
    """Time ``fn()``: with ``repeats``, exactly that many single calls; otherwise with
    ``torch.utils.benchmark.Timer.blocked_autorange`` until ``min_run_time`` seconds of blocks have run (at
    least one block, however long a call takes; its block-size estimate is one more untimed call).

    ``warmup`` untimed calls come first; ``threads`` is the number of torch intra-op threads for all of them
    (restored afterwards; None: torch's current setting); ``deadline`` raises :class:`DeadlinePassed` after the
    first warm-up call, sample or block that ends past it (the Timer's block-size estimate is not checked).
    """
    if min_run_time <= 0:
        raise ValueError(f"min_run_time must be positive, got {min_run_time!r}")
    if repeats is not None and (isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1):
        raise ValueError(f"repeats must be None or an int >= 1, got {repeats!r}")
    if (threads is not None and threads < 1) or warmup < 0:
        raise ValueError(f"threads must be None or >= 1 and warmup >= 0, got {threads!r} and {warmup!r}")
    check = deadline.check if deadline is not None else lambda done: None
    with _torch_threads(threads):
        for i in range(warmup):
            fn()
            check(f"{i + 1} warm-up call(s)")
        if repeats is not None:
            times = []
            for _ in range(repeats):
                start = timer()
                fn()
                times.append(timer() - start)
                check(f"{len(times)} timed call(s)")
            return Timing.of(times)
        blocks = []

        def after_block(number: int, seconds: float) -> None:
            blocks.append(seconds)
            check(f"{len(blocks)} timed block(s)")

        result = Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads()).blocked_autorange(
            callback=after_block, min_run_time=min_run_time)
    return Timing.of(result.times, int(result.number_per_run))


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
