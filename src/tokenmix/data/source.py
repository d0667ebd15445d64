"""Where a data set is and how it is got: :class:`DataSource`, one per loader, for ``tokenmix data``.

A task names its source (``Task.data_source``; ``None`` for generated tasks); ``tokenmix data``
(:mod:`tokenmix.tasks.datacheck`) reports ``locate()`` for each task and calls ``fetch`` for what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

__all__ = ["DataSource"]


@dataclass(frozen=True)
class DataSource:
    """``name``: the data set, for people (``"Fashion-MNIST"``).

    ``locate()``: where the data are now, found without fetching anything (a path, or a short description
    such as ``"installed R package /usr/lib/..."``), or ``None`` when they are missing. ``None`` in place of
    the function: tokenmix cannot tell (data that another library fetches itself, e.g. Hugging Face
    ``datasets``); ``how`` then says how they are got.

    ``fetch(progress)``: gets the data (``progress``: show it; ``None``: only on a terminal) and returns
    where they are now, or raises an error that says what was tried and how to get them by hand.
    ``None``: tokenmix does not fetch this data set itself.

    ``how``: how to get the data by hand (or how they are got, where tokenmix cannot tell)."""

    name: str
    how: str
    locate: Callable[[], str | None] | None = None
    fetch: Callable[[bool | None], str] | None = None
