"""Which function counts which mechanism, and the entry points :func:`count_ops` and :func:`count_step_ops`.

The family modules register their count functions here against mixer classes. A function registered for a
class is found for its subclasses too (the nearest class in the MRO wins), so e.g. Twins' GSA, a subclass of
PVT's SRA, is counted as SRA is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ..mixers.base import Mixer, SpatialMixer
from ..validate import is_positive_int
from .blocks import CountPart, total
from .opcounts import OpCounts

__all__ = ["training", "step", "grid", "count_ops", "count_step_ops", "grid_parts", "fail"]

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


def _check_length(mixer: Mixer, length: int, label: str, shown: str) -> None:
    """``length`` (called ``label``, shown as ``shown``) is a positive int within ``max_len`` unless that is a
    sliding window."""
    if not is_positive_int(length):
        fail(mixer, f"{label} must be a positive int, got {length!r}")
    if mixer.max_len is not None and length > mixer.max_len and not mixer.info.sliding_window:
        fail(mixer, f"{shown} exceeds max_len={mixer.max_len}")


def count_ops(mixer: Mixer, length: int, *, hw: tuple[int, int] | None = None) -> OpCounts:
    """Multiplications, additions, divisions and exponentiations of one forward pass of ``mixer`` over one
    sequence of ``length`` tokens (Chen (2023) Tables 3-4 count the same way); a spatial mixer also needs the
    grid ``hw``. A causal mixer counts the causal computation."""
    _check_length(mixer, length, "length", f"length {length}")
    if mixer.info.spatial:
        assert isinstance(mixer, SpatialMixer)
        hw = mixer.check_hw(None, hw)
        if hw[0] * hw[1] != length:
            fail(mixer, f"hw={hw} has {hw[0] * hw[1]} cells but length={length}")
        return total(grid_parts(mixer, hw))
    if hw is not None:
        fail(mixer, "hw is only for spatial mixers")
    return _lookup(_TRAINING, mixer, "operation counts")(mixer, length)


def count_step_ops(mixer: Mixer, t: int) -> OpCounts:
    """The extra operations for the output of token ``t`` (1-based) when tokens ``1..t-1`` were already
    processed and their cache/state is kept (Chen (2023) Tables 5-6). Causal mixers only."""
    if not mixer.causal:
        fail(mixer, "count_step_ops needs a causal mixer (incremental inference is causal)")
    _check_length(mixer, t, "t", f"t={t}")
    return _lookup(_STEP, mixer, "incremental operation counts")(mixer, t)


def grid_parts(mixer: Any, hw: tuple[int, int]) -> list[CountPart]:
    """The labelled steps of one forward pass of a vision mixer over the ``hw`` grid, matrix products and
    convolutions marked (:class:`~tokenmix.counting.blocks.CountPart`); their sum is :func:`count_ops`."""
    return _lookup(_GRID, mixer, "operation counts")(mixer, hw)
