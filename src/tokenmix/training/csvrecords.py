"""The CSV files of a results folder (:mod:`tokenmix.training.results`): read with every damaged line named
(:class:`ResultsError`), checked for cells that are not numbers and for duplicated or conflicting keys
(:func:`checked_table`, through which ``tokenmix report`` reads every CSV too), written whole or not at all, and
upserted by key."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from .files import atomic_write_text

__all__ = ["ResultsError", "read_csv", "checked_table", "checked_rows", "write_csv", "upsert_rows"]

_RESTORE = "restore the file (git checkout -- {path}) or delete the line, and rerun the run it held"


class ResultsError(ValueError):
    """A results file that cannot be used as it is; the message names the file, the line(s) and what to do."""


def _read_lines(path: Path) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """The header and (line number, row) of every non-blank line; a line whose cells do not match the header, or
    that the csv module cannot read at all, raises :class:`ResultsError` naming the file and the line."""
    with open(path, newline="") as f:
        reader = csv.reader(f)
        try:
            header = next(reader, None) or []
            rows = []
            for cells in reader:
                if not cells or cells == [""]:
                    continue
                if len(cells) != len(header):
                    shown = ",".join(cells)
                    raise ResultsError(
                        f"{path}, line {reader.line_num}: {len(cells)} cells where the header has {len(header)} "
                        f"({shown[:60]!r}{'...' if len(shown) > 60 else ''}): the line is damaged; "
                        + _RESTORE.format(path=path))
                rows.append((reader.line_num, dict(zip(header, cells))))
        except csv.Error as error:
            raise ResultsError(f"{path}, line {reader.line_num}: not CSV ({error}): the line is damaged; "
                               f"{_RESTORE.format(path=path)}") from None
        except UnicodeDecodeError as error:
            raise ResultsError(f"{path}: not text ({error}): the file is damaged; restore it (git checkout -- "
                               f"{path})") from None
    return header, rows


def read_csv(path: str | Path) -> tuple[list[str], list[dict[str, str]]]:
    """The header and rows of ``path`` (empty when it does not exist); a malformed line raises
    :class:`ResultsError` naming the file and line."""
    path = Path(path)
    if not path.exists():
        return [], []
    header, rows = _read_lines(path)
    return header, [row for _, row in rows]


def checked_table(path: Path, key: tuple[str, ...] | None = None, same: list[str] | None = None,
                  numeric: dict[str, type] | None = None, *, optional: dict[str, type] | None = None,
                  duplicates: str = "refuse") -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """The header of ``path`` and its rows with their line numbers (nothing when it does not exist), checked:
    each cell of ``numeric`` parses as its type, each non-empty cell of ``optional`` too (a column the header
    lacks is not checked), and no ``key`` appears twice (None: rows are not keyed and may repeat; ``()``: the
    whole file is one key, a file of one row). Two rows of one key that differ on ``same`` (default: every
    column) conflict; identical ones are a duplicate, refused too unless ``duplicates="drop"`` (the first kept):
    a repeated evaluation says nothing new, while a repeated result row would count one run twice. Every
    failure raises :class:`ResultsError` naming the file, the line(s) and what is wrong."""
    if duplicates not in ("refuse", "drop"):
        raise ValueError(f"duplicates must be 'refuse' or 'drop', got {duplicates!r}")
    if not path.exists():
        return [], []
    header, rows = _read_lines(path)
    same = header if same is None else same
    seen: dict[tuple[str, ...], tuple[int, dict[str, str]]] = {}
    kept = []
    for line, row in rows:
        _check_numbers(path, line, row, numeric or {}, required=True)
        _check_numbers(path, line, row, optional or {}, required=False)
        if key is None:
            kept.append((line, row))
            continue
        k = tuple(row.get(c, "") for c in key)
        if k in seen:
            _check_repeat(path, key, k, seen[k], (line, row), same, duplicates)
            continue
        seen[k] = (line, row)
        kept.append((line, row))
    return header, kept


def _check_repeat(path: Path, key: tuple[str, ...], values: tuple[str, ...], first: tuple[int, dict[str, str]],
                  again: tuple[int, dict[str, str]], same: list[str], duplicates: str) -> None:
    """A second row of one key: an exact repeat passes with ``duplicates="drop"``; otherwise
    :class:`ResultsError` naming both lines."""
    (first_line, old), (line, row) = first, again
    where, what = f"{path}, lines {first_line} and {line}", ", ".join(f"{c} {v}" for c, v in zip(key, values))
    differs = [c for c in same if old.get(c, "") != row.get(c, "")]
    if not differs:
        if duplicates == "drop":
            return
        raise ResultsError(f"{where}: the same row twice ({what}): a duplicate, which would count one run twice; "
                           f"delete one of the two lines")
    detail = "; ".join(f"{c} {old.get(c)!r} vs {row.get(c)!r}" for c in differs[:3])
    rows = f"two different rows for {what}" if key else "two different rows where the file holds one"
    raise ResultsError(f"{where}: {rows} ({detail}): conflicting results for one run; keep the one its run produced "
                       f"(rerun it to know) and delete the other")


def checked_rows(path: Path, key: tuple[str, ...], same: list[str],
                 numeric: dict[str, type]) -> list[tuple[int, dict[str, str]]]:
    """The rows of ``path`` with their line numbers, checked by :func:`checked_table` (a duplicated row refused)."""
    return checked_table(path, key, same, numeric)[1]


def _check_numbers(path: Path, line: int, row: dict[str, str], columns: dict[str, type], required: bool) -> None:
    """Each of ``columns`` in ``row`` parses as its type (``required=False``: where the cell is there and not
    empty); else :class:`ResultsError` naming the file, the line and the cell."""
    for column, kind in columns.items():
        value = row.get(column)
        if not required and not value:
            continue
        try:
            kind(value if value is not None else "")
        except ValueError:
            shown = "missing" if value is None else repr(value)
            raise ResultsError(f"{path}, line {line}: {column} is {shown}, not a number: the line is damaged; "
                               f"{_RESTORE.format(path=path)}") from None


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
