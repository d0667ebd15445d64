"""The one table writer of the CLI, the sweep, the counts, the speed report and the leaderboard.

* :func:`text_table`: columns padded with spaces, two apart, a rule line under the header (across the table,
  or one run per column), trailing spaces cut; per column left- or right-aligned; ``max_width`` cuts the
  widest columns (cells ending in "…") until each line fits.
* :func:`markdown_table`: a GitHub table, ``|---|`` under the header (``|---:|`` for a right-aligned
  column); a ``|`` inside a cell is written ``\\|`` and a line break as a space.

A leaf: it imports nothing from tokenmix.
"""

from __future__ import annotations

__all__ = ["text_table", "markdown_table", "GAP", "MIN_CUT_WIDTH"]

GAP = "  "  # between two columns of a text table
MIN_CUT_WIDTH = 12  # max_width cuts no column below this many characters


def _check(header: list[str], rows: list[list[str]], align: str | None) -> str:
    """``align`` spelled out per column ("l" unless given); ragged rows and unknown alignments raise."""
    for i, row in enumerate(rows):
        if len(row) != len(header):
            raise ValueError(f"row {i} has {len(row)} cells, the header {len(header)}: {row!r}")
    if align is None:
        return "l" * len(header)
    if len(align) != len(header) or set(align) - {"l", "r"}:
        raise ValueError(f"align must be one 'l' or 'r' per column ({len(header)}), got {align!r}")
    return align


def _cut(cell: str, width: int) -> str:
    return cell if len(cell) <= width else cell[:width - 1] + "…"


def text_table(header: list[str], rows: list[list[str]], *, align: str | None = None, rule: str = "-",
               max_width: int | None = None, rule_per_column: bool = False) -> str:
    """``header`` and ``rows`` as space-padded columns with a line of ``rule`` under the header (no rule line
    when ``rule`` is empty; ``rule_per_column``: one run per column, blank in the gaps). ``align``: one ``l`` or
    ``r`` per column (default: all left). ``max_width``: while a line would be wider, the widest column loses a
    character (not below :data:`MIN_CUT_WIDTH`), and the cells longer than their column end in "…"."""
    align = _check(header, rows, align)
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]
    if max_width is not None:
        while sum(widths) + len(GAP) * (len(widths) - 1) > max_width:
            widest = max(range(len(widths)), key=lambda i: widths[i])
            if widths[widest] <= MIN_CUT_WIDTH:
                break
            widths[widest] -= 1
        header, rows = ([_cut(c, w) for c, w in zip(header, widths)],
                        [[_cut(c, w) for c, w in zip(row, widths)] for row in rows])

    def line(cells: list[str]) -> str:
        return GAP.join(c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(cells, widths, align)).rstrip()

    total = sum(widths) + len(GAP) * (len(widths) - 1)
    ruled = GAP.join(rule * w for w in widths) if rule_per_column else rule * total
    return "\n".join([line(header), *([ruled] if rule else []), *(line(row) for row in rows)])


def _escape(cell: str) -> str:
    return cell.replace("|", "\\|").replace("\r\n", " ").replace("\n", " ")


def markdown_table(header: list[str], rows: list[list[str]], *, align: str | None = None) -> str:
    """``header`` and ``rows`` as a GitHub markdown table: ``| a | b |`` lines with ``|---|---|`` under the
    header (``---:`` where ``align`` has an ``r``); ``|`` in a cell is escaped, line breaks become spaces."""
    align = _check(header, rows, align)

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(map(_escape, cells)) + " |"

    return "\n".join([line(header), "|" + "".join("---:|" if a == "r" else "---|" for a in align),
                      *(line(row) for row in rows)])
