"""How long an experiment's runs take, from the training wall time its recorded runs took: the ``wall_s`` column
of ``<name>.csv`` in a results folder (:mod:`tokenmix.training.results`). ``tokenmix compare --dry-run`` and
``--status`` print it, and ``tokenmix report`` states it beside the command that reruns an experiment.

``wall_s`` is a run's training time, evaluations not counted, on the machine that recorded it: the committed
record in ``docs/reproduction`` was measured on 2 CPU cores, two runs at a time (``--jobs 2``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Sequence

from .experiment import RunSpec
from .results import read_csv

__all__ = ["RECORD_DIR", "TimeEstimate", "estimate_time", "borrowed_estimate", "steptime_estimate", "borrowed_note",
           "estimate_line", "hours"]

RECORD_DIR = Path("docs/reproduction")  # the committed record, relative to a checkout


@dataclass(frozen=True)
class TimeEstimate:
    """Per run (:attr:`RunSpec.key`), its expected training seconds; the CSV they come from and its rows used.
    ``unmatched``: runs with no comparable recorded run, left out of ``per_run`` (estimates from other
    experiments' runs only: ``csv`` is then the folder)."""

    per_run: dict[str, float]
    csv: Path
    recorded: int
    unmatched: int = 0
    borrowed: bool = False  # from other experiments' records (:func:`borrowed_estimate`)
    # of a recorded experiment: runs whose label has no row, timed as in :func:`borrowed_estimate`
    borrowed_runs: int = 0
    steptime: bool = False  # from the step-time harness's rows (:func:`steptime_estimate`), nothing trained yet
    factor: float = 1.0  # steptime: the recorded runs' time per step over the harness's (1.0: none recorded)
    calibrated: int = 0  # steptime: the recorded runs the factor comes from
    # borrowed: runs with no comparable record timed by the step-time harness instead (``harness_csv``, ``factor``)
    timed_runs: int = 0
    harness_csv: Path | None = None

    @property
    def seconds(self) -> float:
        """Every run's training time, one after the other."""
        return sum(self.per_run.values())


def hours(seconds: float) -> str:
    """``seconds`` in hours (one decimal), or in minutes below a tenth of an hour."""
    return f"{seconds / 3600:.1f} h" if seconds >= 360 else f"{seconds / 60:.0f} min"


def _wall(row: dict[str, str]) -> float | None:
    try:
        value = float(row.get("wall_s") or "")
    except ValueError:
        return None
    return value if value > 0 else None


def _took(row: dict[str, str]) -> int:
    """The steps a recorded run took (0 when the row does not say)."""
    try:
        return int(row.get("steps") or 0)
    except ValueError:
        return 0


def _scaled(row: dict[str, str], wall: float, steps: int | None) -> float:
    """A recorded run's wall time for a run of ``steps`` planned steps: shortened in proportion when fewer steps
    are planned than it took (a shorter budget), never lengthened (it may have stopped early)."""
    took = _took(row)
    return wall * min(1.0, steps / took) if steps is not None and took > 0 else wall


def estimate_time(name: str, runs: Sequence[RunSpec], folders: Iterable[str | Path | None],
                  steps: dict[str, int] | None = None, params: dict[str, int] | None = None,
                  task: str | None = None, threads: int | None = None) -> TimeEstimate | None:
    """The expected training time of ``runs`` of the experiment ``name`` from the first of ``folders`` whose
    ``<name>.csv`` has rows with a wall time: each run its own recorded row's, else the mean of its label's
    rows, else (with ``steps``, ``params`` and ``task``) the time borrowed from comparable records as below, else
    the mean of all rows; with ``steps`` (planned steps per :attr:`RunSpec.key`) each recorded time is shortened
    to the planned steps where fewer are planned. Where no folder has such rows and ``steps``, ``params`` (per
    key) and ``task`` are given, a new experiment borrows from the others' records: per run, the mean time per
    step of the recorded runs of any experiment in the folders with the same task, parameter count and
    ``threads``, times its planned steps (:func:`borrowed_estimate`). None when nothing is recorded."""
    unique: dict[Path, Path] = {}
    for f in folders:
        if f is not None:
            unique.setdefault(Path(f).resolve(), Path(f))
    folders = list(unique.values())
    can_borrow = bool(steps and params and task)
    for folder in folders:
        csv = Path(folder) / f"{name}.csv"
        rows = [(row, wall) for row in read_csv(csv)[1] if (wall := _wall(row)) is not None]
        if not rows:
            continue
        recorded_labels = {row["label"] for row, _ in rows}
        unrecorded = [run for run in runs if run.label not in recorded_labels]
        borrowed = (borrowed_estimate(unrecorded, folders, steps, params, task, threads)
                    if can_borrow and unrecorded else None)
        per_run, borrowed_runs = {}, 0
        for run in runs:
            planned = (steps or {}).get(run.key)
            mine = [(row, wall) for row, wall in rows if (row["label"], int(row["seed"])) == (run.label, run.seed)]
            label = [(row, wall) for row, wall in rows if row["label"] == run.label]
            if not label and borrowed is not None and run.key in borrowed.per_run:
                per_run[run.key], borrowed_runs = borrowed.per_run[run.key], borrowed_runs + 1
                continue
            chosen = mine or label or rows
            per_run[run.key] = sum(_scaled(row, wall, planned) for row, wall in chosen) / len(chosen)
        return TimeEstimate(per_run, csv, len(rows), borrowed_runs=borrowed_runs)
    found = borrowed_estimate(runs, folders, steps, params, task, threads) if can_borrow else None
    timed = steptime_estimate(name, runs, folders, steps) if steps else None
    if found is None or timed is None or not found.unmatched:
        return found or timed
    fill = {key: seconds for key, seconds in timed.per_run.items() if key not in found.per_run}
    return replace(found, per_run={**found.per_run, **fill}, unmatched=found.unmatched - len(fill),
                   timed_runs=len(fill), harness_csv=timed.csv, factor=timed.factor, calibrated=timed.calibrated)


def steptime_estimate(name: str, runs: Sequence[RunSpec], folders: Sequence[Path],
                      steps: dict[str, int]) -> TimeEstimate | None:
    """Before any run is recorded: per run, the median time of one training step of its label at the
    experiment's shapes, measured by ``tokenmix steptime --config <file>`` (``<name>-steptime.csv``, rows of
    kind "experiment"), times its planned steps, times how much longer recorded runs' steps took than the harness's
    (:func:`_calibration`). A learning-rate stage (``<name>-lr``, labels ``<label>.lr<rate>``) reads its
    experiment's file and labels. None without such rows."""
    base = name[:-len("-lr")] if name.endswith("-lr") else name
    for folder in folders:
        csv = Path(folder) / f"{base}-steptime.csv"
        harness = _harness_times(csv)
        if not harness:
            continue
        factor, calibrated = _calibration(Path(folder))
        per_run = {}
        for run in runs:
            label = run.label if run.label in harness or base == name else run.label.rsplit(".lr", 1)[0]
            if label in harness and run.key in steps:
                per_run[run.key] = factor * harness[label] * steps[run.key]
        if per_run:
            return TimeEstimate(per_run, csv, len(harness), len(runs) - len(per_run), steptime=True, factor=factor,
                                calibrated=calibrated)
    return None


def _harness_times(csv: Path) -> dict[str, float]:
    """Each label's median training step (rows of kind "experiment") in a ``<name>-steptime.csv``."""
    times: dict[str, list[float]] = {}
    for row in read_csv(csv)[1]:
        if row.get("kind") == "experiment" and row.get("step_s"):
            times.setdefault(row["label"], []).append(float(row["step_s"]))
    return {label: statistics.median(values) for label, values in times.items()}


def _calibration(folder: Path) -> tuple[float, int]:
    """How much longer a recorded run's training step took than the harness's for its label (pinned numerics,
    runs sharing the cores): the median ratio over the rows of every experiment in ``folder`` that has both
    step-time rows and recorded runs (``<name>.csv`` and its learning-rate stage's ``<name>-lr.csv``), and how
    many rows gave it; (1.0, 0) without such rows."""
    ratios = []
    for timed in sorted(folder.glob("*-steptime.csv")):
        base = timed.name[:-len("-steptime.csv")]
        harness = _harness_times(timed)
        for csv, stage in ((folder / f"{base}.csv", False), (folder / f"{base}-lr.csv", True)):
            for row in read_csv(csv)[1]:
                wall, took = _wall(row), _took(row)
                label = row.get("label", "").rsplit(".lr", 1)[0] if stage else row.get("label", "")
                if wall is not None and took > 0 and harness.get(label, 0) > 0:
                    ratios.append(wall / took / harness[label])
    return (statistics.median(ratios), len(ratios)) if ratios else (1.0, 0)

def _per_step(row: dict[str, str], wall: float) -> float | None:
    took = _took(row)
    return wall / took if took > 0 else None


def borrowed_estimate(runs: Sequence[RunSpec], folders: Sequence[Path], steps: dict[str, int],
                      params: dict[str, int], task: str, threads: int | None = None) -> TimeEstimate | None:
    """Per run, the mean time per step of the recorded runs (every results CSV in ``folders``) with the same
    ``task``, parameter count and ``threads`` (any, when None), times the run's planned steps; runs without
    such a record are counted in ``unmatched``. None when no run has one."""
    rates: dict[tuple[str, str, str], list[tuple[str, float]]] = {}  # (task, params, threads) -> (row id, s/step)
    for folder in folders:
        for csv in sorted(Path(folder).glob("*.csv")):
            header, rows = read_csv(csv)
            if not {"task", "params", "steps", "wall_s"} <= set(header):
                continue
            for i, row in enumerate(rows):
                wall = _wall(row)
                rate = _per_step(row, wall) if wall is not None else None
                if rate is not None:
                    key = (row["task"], row["params"], row.get("threads", ""))
                    rates.setdefault(key, []).append((f"{csv}:{i}", rate))
    per_run, unmatched, used = {}, 0, set()
    for run in runs:
        found = [got for (t, p, th), got in rates.items() if t == task and p == str(params.get(run.key))
                 and (threads is None or th == str(threads))]
        found = [item for got in found for item in got]
        if not found or run.key not in steps:
            unmatched += 1
            continue
        per_run[run.key] = steps[run.key] * sum(rate for _, rate in found) / len(found)
        used.update(row for row, _ in found)
    return TimeEstimate(per_run, folders[0], len(used), unmatched, borrowed=True) if per_run else None


def estimate_line(estimate: TimeEstimate | None, jobs: int, name: str, folders: Iterable[str | Path | None]) -> str:
    """One line: the estimate at ``jobs`` runs at a time, or why there is none."""
    if estimate is None:
        where = " or ".join(dict.fromkeys(str(Path(f) / f"{name}.csv") for f in folders if f is not None))
        return f"estimated time: no estimate (no recorded run with a wall time in {where})"
    if estimate.steptime:
        left = f"; {estimate.unmatched} runs have no timed label and are not counted" if estimate.unmatched else ""
        scaled = (f", times {estimate.factor:.2f}: the recorded runs' time per step over the harness's (median of "
                  f"{estimate.calibrated} runs: pinned numerics, runs sharing the cores)" if estimate.calibrated
                  else "; runs sharing the cores and pinned numerics not counted: nothing recorded to scale by")
        return (f"estimated time: {hours(estimate.seconds / jobs)} of training at --jobs {jobs} (not recorded yet: "
                f"each label's median training step in {estimate.csv} ({estimate.recorded} labels timed, one process), "
                f"times the planned steps{scaled}; evaluations not counted{left})")
    if estimate.borrowed:
        left = (f"; {estimate.timed_runs} runs with no comparable record from their label's median training step "
                f"in {estimate.harness_csv} times {estimate.factor:.2f}" if estimate.timed_runs else "")
        left += (f"; {estimate.unmatched} runs have no comparable record and are not counted"
                 if estimate.unmatched else "")
        return (f"estimated time: {hours(estimate.seconds / jobs)} of training at --jobs {jobs} (no run of {name} "
                f"recorded: the time per step of {estimate.recorded} recorded runs of other experiments in "
                f"{estimate.csv} with the same task, parameter count and threads, times the planned steps, "
                f"evaluations not counted{left})")
    return (f"estimated time: {hours(estimate.seconds / jobs)} of training at --jobs {jobs} (from {estimate.recorded} "
            f"recorded runs' training wall time in {estimate.csv}{borrowed_note(estimate)}, evaluations not counted)")


def borrowed_note(estimate: TimeEstimate) -> str:
    """``""``, or what a recorded experiment's estimate says of the runs whose label has no row yet."""
    if not estimate.borrowed_runs:
        return ""
    return (f"; {estimate.borrowed_runs} runs of labels not yet recorded from the time per step of other "
            f"experiments' runs with the same task, parameter count and threads")
