"""A label's values of one measure: the samples every test of the study compares."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Values"]


@dataclass(frozen=True)
class Values:
    """One label's values of a measure: per seed (``unit`` "seed", independent runs) or per harness round
    ("round", paired with another label's same round); ``keys`` are the seeds or rounds."""

    unit: str
    keys: tuple[int, ...]
    values: tuple[float, ...]

    def scaled(self, factor: float) -> "Values":
        return Values(self.unit, self.keys, tuple(v * factor for v in self.values))

    def __len__(self) -> int:
        return len(self.values)
