"""How the study writes its numbers in verdicts and tables."""

from __future__ import annotations

import math

__all__ = ["num", "pvalue", "percent", "ranges"]


def num(x: float) -> str:
    """Four significant digits, thousands separated from 1,000 on; ``inf`` as ∞."""
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def pvalue(p: float) -> str:
    return f"{p:.3g}"


def percent(x: float) -> str:
    """A fraction as a percentage with two significant digits ("0.29 %", "12 %")."""
    value = 100 * x
    return f"{value:.2g} %" if abs(value) < 100 else f"{value:,.0f} %"


def ranges(numbers: list[int]) -> str:
    """Sorted integers as runs: 0, 1, 2, 4 -> "0-2, 4"."""
    parts, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            parts.append(f"{start}" if start == n else f"{start}-{n}")
            start = None
    return ", ".join(parts)
