"""Which function counts which mechanism: the count functions of the family modules register here against
mixer classes, and :meth:`tokenmix.mixers.Mixer.count_ops` / ``count_step_ops`` look them up.

A function is registered for a class and found for its subclasses too (the nearest class in the MRO wins),
so e.g. Twins' GSA, a subclass of PVT's SRA, is counted as SRA is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ..ops.opcounts import OpCounts
from ..ops.spatial_counts import CountPart

__all__ = ["training", "step", "grid", "training_ops", "step_ops", "grid_parts", "fail"]

# (mixer, length) -> the operations of one forward pass over ``length`` tokens.
TrainingCount = Callable[[Any, int], OpCounts]
# (mixer, t) -> the extra operations of the output of token ``t`` given the cache/state of ``1..t-1``.
StepCount = Callable[[Any, int], OpCounts]
# (mixer, (H, W)) -> the labelled steps of one forward pass over an ``H x W`` grid.
GridCount = Callable[[Any, tuple[int, int]], list[CountPart]]

_F = TypeVar("_F", bound=Callable[..., Any])

_TRAINING: dict[type, TrainingCount] = {}
_STEP: dict[type, StepCount] = {}
_GRID: dict[type, GridCount] = {}


def _register(table: dict[type, Callable[..., Any]], classes: tuple[type, ...]) -> Callable[[_F], _F]:
    def decorate(fn: _F) -> _F:
        for cls in classes:
            table[cls] = fn
        return fn
    return decorate


def training(*classes: type) -> Callable[[_F], _F]:
    """Register ``fn(mixer, length) -> OpCounts``, one forward pass over ``length`` tokens, for ``classes``."""
    return _register(_TRAINING, classes)


def step(*classes: type) -> Callable[[_F], _F]:
    """Register ``fn(mixer, t) -> OpCounts``, one incremental step at length ``t``, for ``classes``."""
    return _register(_STEP, classes)


def grid(*classes: type) -> Callable[[_F], _F]:
    """Register ``fn(mixer, (H, W)) -> list[CountPart]``, one forward pass over a grid, for ``classes``."""
    return _register(_GRID, classes)


def fail(mixer: Any, message: str, error: type[Exception] = ValueError) -> None:
    """Raise ``error`` naming the mechanism, as the mixers' own errors do."""
    raise error(f"{mixer.info.name}: {message}")


def _lookup(table: dict[type, Callable[..., Any]], mixer: Any, what: str) -> Callable[..., Any]:
    for cls in type(mixer).__mro__:
        if cls in table:
            return table[cls]
    fail(mixer, f"{what} are not derived for this mechanism", NotImplementedError)
    raise AssertionError  # unreachable


def training_ops(mixer: Any, length: int) -> OpCounts:
    """One forward pass of ``mixer`` over ``length`` tokens (arguments already checked by ``count_ops``)."""
    return _lookup(_TRAINING, mixer, "operation counts")(mixer, length)


def step_ops(mixer: Any, t: int) -> OpCounts:
    """One incremental step of ``mixer`` at length ``t`` (arguments already checked by ``count_step_ops``)."""
    return _lookup(_STEP, mixer, "incremental operation counts")(mixer, t)


def grid_parts(mixer: Any, hw: tuple[int, int]) -> list[CountPart]:
    """The labelled steps of one forward pass of a vision mixer over the ``hw`` grid, matrix products and
    convolutions marked (:class:`~tokenmix.ops.spatial_counts.CountPart`); their sum is ``count_ops``."""
    return _lookup(_GRID, mixer, "operation counts")(mixer, hw)
