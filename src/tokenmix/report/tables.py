"""The report's one markdown table writer and its number formats.

* :func:`mean_sd`: mean ± sd printed to the sd's precision: the sd to two significant digits when its first
  digit is 1, else one, and the mean rounded to the same decimal ("0.765 ± 0.009", "127.1 ± 0.9",
  "5.28 ± 0.01", "0.0145 ± 0.0012"); thousands separated ("1,560 ± 400").
* :func:`num`: a single number, four significant digits, thousands separated from 1,000 on.
* :func:`pvalue`: three significant digits.
"""

from __future__ import annotations

import math
import statistics

from ..study.numbers import num, percent, pvalue, ranges
from ..tabulate import markdown_table

__all__ = ["table", "mean_sd", "mean_sd_text", "num", "pvalue", "percent", "ranges"]


def table(head: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table as lines (:func:`tokenmix.tabulate.markdown_table`)."""
    return markdown_table(head, rows).split("\n")


def _fixed(x: float, decimals: int) -> str:
    if decimals <= 0:
        return f"{round(x, decimals):,.0f}"
    return f"{x:,.{decimals}f}" if abs(x) >= 1000 else f"{x:.{decimals}f}"


def mean_sd(mean: float, sd: float) -> str:
    """``mean ± sd`` to the sd's precision (see the module docstring); an sd of 0 keeps four digits."""
    if abs(sd) <= 1e-9 * max(1.0, abs(mean)):  # float noise of equal values (2e-16): no spread
        sd = 0.0
    if sd == 0 or not math.isfinite(sd):
        return f"{num(mean)} ± 0" if sd == 0 else num(mean)
    exponent = math.floor(math.log10(abs(sd)))
    digits = 2 if int(abs(sd) / 10 ** exponent) == 1 else 1
    rounded = round(sd, digits - 1 - exponent)
    decimals = digits - 1 - math.floor(math.log10(abs(rounded)))  # 0.0095 -> 0.01: one digit, two decimals
    return f"{_fixed(mean, decimals)} ± {_fixed(rounded, decimals)}"


def mean_sd_text(sample: list[float] | tuple[float, ...]) -> str:
    """The table cell of a sample: mean ± sd of its finite values (one value: the value), "(k/n reached)"
    when some are infinite (a target never reached), "not reached" when none is finite."""
    finite = [v for v in sample if math.isfinite(v)]
    if not finite:
        return "—" if not sample else "not reached"
    text = mean_sd(statistics.mean(finite), statistics.stdev(finite)) if len(finite) > 1 else num(finite[0])
    if len(finite) < len(sample):
        text += f" ({len(finite)}/{len(sample)} reached)"
    return text
