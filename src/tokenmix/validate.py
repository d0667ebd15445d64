"""Argument checks shared by the whole package, so that every module rejects bad values the same way."""

from __future__ import annotations

__all__ = ["is_positive_int", "check_positive_int"]


def is_positive_int(value: object) -> bool:
    """An ``int`` (not a ``bool``) greater than zero."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check_positive_int(value: object, what: str, owner: str) -> None:
    """``ValueError("<owner>: <what> must be a positive int, got ...")`` unless :func:`is_positive_int`."""
    if not is_positive_int(value):
        raise ValueError(f"{owner}: {what} must be a positive int, got {value!r}")
