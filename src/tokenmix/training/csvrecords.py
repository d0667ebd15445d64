"""The CSV files of a results folder (:mod:`tokenmix.training.results`): read with every damaged line named
(:class:`ResultsError`), checked for duplicated or conflicting keys, written whole or not at all, and upserted
by key."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from .files import atomic_write_text

__all__ = ["ResultsError", "read_csv", "checked_rows", "write_csv", "upsert_rows"]


class ResultsError(ValueError):
    """A results file that cannot be used as it is; the message names the file, the line(s) and what to do."""


def _read_lines(path: Path) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """The header and (line number, row) of every non-blank line; a line whose cells do not match the header
    raises :class:`ResultsError` naming the file and the line."""
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None) or []
        rows = []
        for cells in reader:
            if not cells or cells == [""]:
                continue
            if len(cells) != len(header):
                shown = ",".join(cells)
                raise ResultsError(
                    f"{path}, line {reader.line_num}: {len(cells)} cells where the header has {len(header)} "
                    f"({shown[:60]!r}{'...' if len(shown) > 60 else ''}): the line is damaged; restore the file "
                    f"(git checkout -- {path}) or delete the line, and rerun the run it held")
            rows.append((reader.line_num, dict(zip(header, cells))))
    return header, rows


def read_csv(path: str | Path) -> tuple[list[str], list[dict[str, str]]]:
    """The header and rows of ``path`` (empty when it does not exist); a malformed line raises
    :class:`ResultsError` naming the file and line."""
    path = Path(path)
    if not path.exists():
        return [], []
    header, rows = _read_lines(path)
    return header, [row for _, row in rows]


def checked_rows(path: Path, key: tuple[str, ...], same: list[str],
                  numeric: dict[str, type]) -> list[tuple[int, dict[str, str]]]:
    """The rows of ``path`` with their line numbers, checked: each cell of ``numeric`` parses as its type, and no
    ``key`` appears twice (identical on ``same``: a duplicated row; otherwise conflicting rows): either raises
    :class:`ResultsError` naming the file and both lines."""
    if not path.exists():
        return []
    _, rows = _read_lines(path)
    seen: dict[tuple[str, ...], tuple[int, dict[str, str]]] = {}
    for line, row in rows:
        for column, kind in numeric.items():
            try:
                kind(row.get(column, ""))
            except ValueError:
                raise ResultsError(f"{path}, line {line}: {column} is {row.get(column)!r}, not a number: the line is "
                                   f"damaged; restore the file (git checkout -- {path}) or delete the line") from None
        k = tuple(row.get(c, "") for c in key)
        if k in seen:
            first, other = seen[k]
            what = ", ".join(f"{c} {v}" for c, v in zip(key, k))
            differs = [c for c in same if other.get(c, "") != row.get(c, "")]
            if not differs:
                raise ResultsError(f"{path}, lines {first} and {line}: the same row twice ({what}): a duplicate, "
                                   f"which would count one run twice; delete one of the two lines")
            detail = "; ".join(f"{c} {other.get(c)!r} vs {row.get(c)!r}" for c in differs[:3])
            raise ResultsError(f"{path}, lines {first} and {line}: two different rows for {what} ({detail}): "
                               f"conflicting results for one run; keep the one its run produced (rerun it to know) "
                               f"and delete the other")
        seen[k] = (line, row)
    return rows


def write_csv(path: str | Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    """Write ``rows`` under ``columns`` (missing cells empty), atomically (:func:`~.files.atomic_write_text`)."""
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=columns, restval="", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, text.getvalue())


def upsert_rows(path: str | Path, columns: list[str], rows: list[dict[str, Any]],
                key: tuple[str, ...] = ("label", "seed")) -> None:
    """Put ``rows`` into the CSV ``path``, replacing the rows with the same ``key`` (in place: the block of
    new rows of a key goes where its first old row was) and keeping every other row; atomic. The header is
    ``columns`` followed by any other column the file had."""
    header, old = read_csv(path)
    columns = list(columns) + [c for c in header if c not in columns]

    def key_of(row: dict[str, Any]) -> tuple[str, ...]:
        return tuple(str(row.get(k, "")) for k in key)

    new: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in rows:
        new.setdefault(key_of(row), []).append(row)
    replaced = set(new)
    merged: list[dict[str, Any]] = []
    for row in old:
        k = key_of(row)
        if k not in replaced:
            merged.append(row)
        elif k in new:
            merged += new.pop(k)  # the first old row of this key: the new block goes here; later ones go
    for block in new.values():
        merged += block
    write_csv(path, columns, merged)
