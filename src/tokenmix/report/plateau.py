"""Has a run stopped improving? A claim that rests on runs still improving may change with longer training.

A run has **plateaued** when its best validation metric improved by less than :data:`THRESHOLD` (1 %,
relative) over the last quarter of the run: the best of the evaluations after 3/4 of its last step against
the best before, for a higher-is-better metric a gain of (after - before) / |before| < 1 %, for a lower one
(perplexity) a fall of (before - after) / |before| < 1 %. A run with no evaluation in its first three
quarters cannot be judged (None).
"""

from __future__ import annotations

from typing import Iterable

__all__ = ["THRESHOLD", "CRITERION", "plateaued", "plateau_count"]

THRESHOLD = 0.01
CRITERION = ("A run has *plateaued* when its best validation metric improved by less than 1 % (relative) over the "
             "last quarter of its steps: the best evaluation after 3/4 of the run against the best before "
             "(perplexity: fell by less than 1 %).")


def plateaued(history: Iterable[tuple[int, float]], higher_is_better: bool = True,
              threshold: float = THRESHOLD) -> bool | None:
    """``history``: (step, validation metric) pairs of one run. True when the best value gained less than
    ``threshold`` (relative) over the last quarter of the run, False when it gained more, None when there
    is no evaluation before the last quarter (or none at all)."""
    points = sorted((int(step), float(value)) for step, value in history)
    if not points:
        return None
    cut = 0.75 * points[-1][0]
    before = [v for s, v in points if s <= cut]
    if not before:
        return None
    best = max if higher_is_better else min
    old, new = best(before), best(v for _, v in points)
    gain = (new - old) if higher_is_better else (old - new)
    return gain < threshold * abs(old) if old != 0 else gain <= 0


def plateau_count(histories: list[list[tuple[int, float]]], higher_is_better: bool = True) -> tuple[int, int]:
    """(runs plateaued, runs that can be judged) over ``histories``."""
    judged = [plateaued(h, higher_is_better) for h in histories]
    known = [j for j in judged if j is not None]
    return sum(known), len(known)
