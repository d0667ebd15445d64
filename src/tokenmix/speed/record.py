"""What a case gives (:class:`CaseResult`, with its :class:`Status`) and one row of ``speed.csv``
(:class:`SpeedRecord`: the case and its result, side by side)."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass
from enum import Enum

from .settings import SpeedCase

__all__ = ["Status", "CaseResult", "SpeedRecord", "COLUMNS"]

COLUMNS = ["mixer", "length", "pass", "causal", "value_range", "time_ms", "peak_mem_mb", "status", "time_min_ms",
           "time_max_ms", "dim", "heads", "batch", "device", "dtype", "threads", "repeats", "warmup", "mem_method",
           "grid"]
STATUS_WIDTH = 160  # the longest status text (an error's first line is cut there)


class Status(str, Enum):
    """How a case ended; the value is what ``speed.csv`` writes before the detail."""

    OK = "ok"
    OOM = "oom"
    OOM_KILLED = "oom (killed)"  # an isolated case killed by SIGKILL (the kernel's OOM killer)
    TIMEOUT = "timeout"
    ERROR = "error"
    SKIPPED = "skipped"  # a longer length after an out-of-budget one
    UNSUPPORTED = "unsupported"  # the mixer cannot run in the sweep's mode

    def __str__(self) -> str:
        return self.value

    @property
    def word(self) -> str:
        """The one word the relative table shows ("oom (killed)" is "oom")."""
        return "oom" if self is Status.OOM_KILLED else self.value

    @property
    def out_of_budget(self) -> bool:
        """Out of memory or time: the mixer's longer lengths (same pass) are skipped."""
        return self in (Status.OOM, Status.OOM_KILLED, Status.TIMEOUT)


@dataclass
class CaseResult:
    """What a case gives: its status (with a detail for errors, skips and unsupported modes), and the median
    (and fastest and slowest) time and the peak memory when it is ok."""

    status: Status
    time_ms: float | None = None
    peak_mem_mb: float | None = None
    mem_method: str = ""
    time_min_ms: float | None = None
    time_max_ms: float | None = None
    detail: str = ""
    skipped_after: Status | None = None  # the out-of-budget status that made a skipped case skipped

    def __post_init__(self) -> None:
        self.status = Status(self.status)  # a status read back from JSON is its value
        if self.skipped_after is not None:
            self.skipped_after = Status(self.skipped_after)

    @classmethod
    def measured(cls, times_ms: list[float], peak_mem_mb: float, mem_method: str) -> CaseResult:
        """An ok case: the timed passes' median, fastest and slowest, and the cold pass's peak memory."""
        return cls(Status.OK, statistics.median(times_ms), peak_mem_mb, mem_method, min(times_ms), max(times_ms))

    @classmethod
    def error(cls, message: str) -> CaseResult:
        """A case that failed otherwise than by running out of memory or time."""
        return cls(Status.ERROR, detail=message[:STATUS_WIDTH - len(f"{Status.ERROR}: ")])

    @classmethod
    def skipped(cls, after: Status, length: int) -> CaseResult:
        """A case not run because the same mixer and pass ran out of memory or time (``after``) at ``length``."""
        return cls(Status.SKIPPED, detail=f"{after.word} at {length}", skipped_after=after)

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @property
    def cause(self) -> Status:
        """Why there is (or is not) a measurement: a skipped case's reason, otherwise the status."""
        return self.skipped_after or self.status

    @property
    def status_text(self) -> str:
        """The ``status`` column: "ok", "oom", "skipped: oom at 1024", "error: ValueError: ..."."""
        return f"{self.status}: {self.detail}" if self.detail else str(self.status)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> CaseResult:
        return cls(**json.loads(text))


@dataclass
class SpeedRecord:
    """One row of ``speed.csv``: the case, its result and, for spatial mixers, the grid the length was laid out
    as ("HxW"). The properties are shortcuts for what the tables and plots read."""

    case: SpeedCase
    result: CaseResult
    grid: str = ""

    @property
    def mixer(self) -> str:
        return self.case.mixer

    @property
    def length(self) -> int:
        return self.case.length

    @property
    def pass_name(self) -> str:
        return self.case.pass_name

    @property
    def causal(self) -> bool:
        return self.case.causal

    @property
    def value_range(self) -> float:
        return self.case.value_range

    @property
    def status(self) -> Status:
        return self.result.status

    @property
    def ok(self) -> bool:
        return self.result.ok

    @property
    def time_ms(self) -> float | None:
        return self.result.time_ms

    @property
    def peak_mem_mb(self) -> float | None:
        return self.result.peak_mem_mb

    @property
    def mem_method(self) -> str:
        return self.result.mem_method

    def as_row(self) -> dict[str, object]:
        """The CSV row, keyed by :data:`COLUMNS` (times rounded to µs, memory to 0.1 MB, missing ones empty)."""
        case, result = self.case, self.result
        row: dict[str, object] = {name: getattr(case, name) for name in
                                  ("mixer", "length", "causal", "value_range", "dim", "heads", "batch", "device",
                                   "dtype", "threads", "repeats", "warmup")}
        row.update({"pass": case.pass_name, "status": result.status_text, "mem_method": result.mem_method,
                    "grid": self.grid, "peak_mem_mb": _rounded(result.peak_mem_mb, 1)})
        for name in ("time_ms", "time_min_ms", "time_max_ms"):
            row[name] = _rounded(getattr(result, name), 3)
        return {column: row[column] for column in COLUMNS}


def _rounded(value: float | None, digits: int) -> float | str:
    return "" if value is None else round(value, digits)
