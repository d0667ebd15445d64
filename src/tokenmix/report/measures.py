"""The data of one experiment (``docs/reproduction/<name>*.csv``) and the measures its claims compare.

Files, per experiment ``<name>`` (``scripts/collect_results.py`` writes the first three):

* ``<name>.csv``: ``tokenmix compare``'s ``results.csv``, one row per run (seed);
* ``<name>-history.csv``: every run's evaluations (label, seed, step, epoch, wall_s, train_loss, val_loss,
  val_metric);
* ``<name>-chance.csv``: the test split's rate of the train split's majority class;
* ``<name>-steptime.csv``: the controlled step-time harness (``tokenmix steptime --config
  experiments/<name>.toml``), columns ``experiment, label, kind, length, batch, round, step_s, threads``
  (and ``peak_mb``, ``memory``): kind "experiment" is one training step at the experiment's shapes, kind
  "scaling" the same at the synthetic length ``length`` (these may also be in ``<name>-scaling.csv``, which
  ``tokenmix steptime --lengths`` writes; both files are read), kind "inference" one inference pass at
  ``length`` (``<name>-inference.csv``, from ``tokenmix steptime --scaling --inference``).

Per-seed measures come from the runs; time measures from the harness only (never from training wall time,
which depends on what else the machine ran): ``step_time_s`` and ``time_per_epoch_s`` (steps per epoch x
step time) per round, ``infer_time_s`` per round (one inference pass at one length), ``time_to_target_s`` per
seed (the step at which the target's streak completes x the label's median harness step time; never reached:
``inf``), ``step_memory_mb`` per round (the peak memory of one step at one length), ``time_slope`` /
``memory_slope`` per round (the least-squares slope of log step time / log peak memory against log length over
the "scaling" rows). The memory measures read only rows whose ``memory`` is "round" (measured in a fresh
process every round): memory measured once and copied into every round is one sample, not one per round, so
no test may read it as many.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..study.claims import MEMORY_MEASURES, SLOPES, Claim
from ..study.values import Values
from ..training.csvrecords import ResultsError, checked_table
from ..training.results import COLUMNS, HISTORY_COLUMNS

__all__ = ["Run", "Values", "ExperimentData", "load_data", "read_csv", "ResultsError", "training_cost",
           "last_window_loss", "cost_source", "steps_to_target", "steps_per_epoch", "COST_WINDOWS", "STEPTIME_COMMAND"]

COST_WINDOWS = 3  # the fallback training cost: median of the mean training loss of the last 3 evaluation windows
STEPTIME_COMMAND = "tokenmix steptime --config experiments/{name}.toml"


# What the report reads of each file, checked (training.csvrecords.checked_table): a damaged line, a cell that is
# not a number, a conflicting repeat stops the report with a ResultsError naming the file and the line, rather than a
# traceback or, worse, a verdict on garbage. Numbers in the first dict must be there, in the second where not empty.
_TEXT = {"experiment", "task", "label", "mixer", "metric"}
_RUNS = ({"seed": int}, {c: float for c in [*COLUMNS, "steps_per_epoch", "cost_window"] if c not in _TEXT})
_HISTORY = ({"seed": int, "step": int}, {c: float for c in HISTORY_COLUMNS[3:]})
_CHANCE = ({"test_rate": float}, {"train_rate": float})
_HARNESS = ({"length": int, "round": int}, {"step_s": float, "peak_mb": float, "batch": int, "threads": int})


def read_csv(path: Path, numbers: tuple[dict[str, type], dict[str, type]] = ({}, {}),
             key: tuple[str, ...] | None = None, duplicates: str = "refuse") -> list[dict[str, str]]:
    """The rows of ``path``, checked (:func:`~tokenmix.training.csvrecords.checked_table`): every line against
    the header; ``numbers``: the columns that must hold a number, and those that must where not empty; ``key``:
    what no two rows may share (None: rows may repeat, as harness rows of one round do). A failure raises
    :class:`ResultsError` naming the file and the line."""
    return [row for _, row in checked_table(path, key, None, numbers[0], optional=numbers[1],
                                            duplicates=duplicates)[1]]


def _chance(path: Path) -> float | None:
    """The test split's rate of the train split's majority class: the file's one row (repeated identically at
    most)."""
    if not path.exists():
        return None
    header, rows = checked_table(path, (), None, _CHANCE[0], optional=_CHANCE[1], duplicates="drop")
    if not rows:
        raise ResultsError(f"{path}, line {2 if header else 1}: no row (the file holds "
                           f"{'only its header' if header else 'nothing'}; it must hold one): the file is damaged; "
                           f"restore it (git checkout -- {path}) or delete it, and rerun a run of the experiment with "
                           f"--results to write it again")
    return float(rows[0][1]["test_rate"])


@dataclass
class Run:
    """One run: its results.csv row and its evaluations (oldest first)."""

    label: str
    seed: int
    row: dict[str, str]
    history: list[dict[str, str]] = field(default_factory=list)


def training_cost(run: Run) -> float | None:
    """Chen (2023) Fig. 8's training cost: the results' ``train_cost`` column (median of the per-batch losses
    over the last ``cost_batches`` batches) when the run has it, else the median of the last
    :data:`COST_WINDOWS` evaluation windows' mean training loss."""
    if run.row.get("train_cost", "") != "":
        return float(run.row["train_cost"])
    losses = [float(h["train_loss"]) for h in run.history[-COST_WINDOWS:]]
    return statistics.median(losses) if losses else None


def last_window_loss(run: Run) -> float | None:
    """The last evaluation window's mean training loss."""
    return float(run.history[-1]["train_loss"]) if run.history else None


def cost_source(runs: list[Run]) -> str:
    """How :func:`training_cost` measured these runs, for the column title."""
    windows = sorted({r.row.get("cost_batches", "") or r.row.get("cost_window", "") for r in runs
                      if r.row.get("train_cost", "") != ""})
    if len(windows) == 1 and all(r.row.get("train_cost", "") != "" for r in runs):
        return f"median of the last {int(windows[0]):,} batches" if windows[0] else "median of the last batches"
    if windows:
        return f"median of the last batches where logged, else of the last {COST_WINDOWS} windows"
    return f"median of the last {COST_WINDOWS} windows"


def steps_to_target(run: Run, target: float, k: int, higher_is_better: bool) -> int | None:
    """The step at which the validation metric has been at least as good as ``target`` for ``k`` evaluations
    in a row (None: never)."""
    streak = 0
    for h in run.history:
        value = float(h["val_metric"])
        streak = streak + 1 if (value >= target if higher_is_better else value <= target) else 0
        if streak >= k:
            return int(h["step"])
    return None


def steps_per_epoch(run: Run) -> int | None:
    """The run's optimiser steps per epoch (train split // batch size): the results' ``steps_per_epoch``
    column when present, else from its history (epoch = step / steps per epoch)."""
    if run.row.get("steps_per_epoch", "") != "":
        return int(float(run.row["steps_per_epoch"]))
    for h in run.history:
        if float(h["epoch"]) > 0:
            return round(int(h["step"]) / float(h["epoch"]))
    return None


def _measured(row: dict[str, str], column: str) -> bool:
    """Whether a harness row holds a sample of ``column``: a value, and for peak memory one measured in the
    row's own round (``memory`` "round"; otherwise one measurement copied into every round)."""
    return row.get(column, "") != "" and (column != "peak_mb" or row.get("memory") == "round")


def _slope(points: list[tuple[float, float]]) -> float | None:
    points = [(x, y) for x, y in points if x > 0 and y > 0]
    if len({x for x, _ in points}) < 2:
        return None
    x, y = np.log([p[0] for p in points]), np.log([p[1] for p in points])
    return float(np.polyfit(x, y, 1)[0])


@dataclass
class ExperimentData:
    """What the data folder holds for one experiment, and the values of each measure per label."""

    name: str
    runs: list[Run] | None
    chance: float | None
    harness: list[dict[str, str]] | None
    target: float | None = None
    target_k: int = 1
    higher_is_better: bool = True
    planned_steps: dict[str, int] | None = None  # per label, steps per epoch as the experiment file plans them
    excluded: list[tuple[Run, str]] = field(default_factory=list)  # rows not pooled, each with why
    provenance: list[dict] = field(default_factory=list)  # per code version (ResultsDir.provenance_summary)
    shared: list[tuple[tuple[str, int], str, str]] = field(default_factory=list)  # ResultsDir.shared
    diverging: list[tuple[tuple[str, int], str, str, str]] = field(default_factory=list)  # ResultsDir.diverging

    def labels(self) -> list[str]:
        return list(dict.fromkeys(r.label for r in self.runs or []))

    def runs_of(self, label: str) -> list[Run]:
        return [r for r in self.runs or [] if r.label == label]

    def seeds_in(self, label: str, planned: list[int]) -> int:
        """How many of the ``planned`` seeds have a finished run of ``label``."""
        return len(set(planned) & {r.seed for r in self.runs_of(label)})

    def epoch_steps(self, label: str) -> int | None:
        """The label's optimiser steps per epoch: from its runs, else as the experiment file plans them."""
        found = next((s for s in (steps_per_epoch(r) for r in self.runs_of(label)) if s), None)
        return found if found is not None else (self.planned_steps or {}).get(label)

    # -- per seed ---------------------------------------------------------------------------------------
    def seed_values(self, label: str, get) -> Values:
        got = [(r.seed, get(r)) for r in self.runs_of(label)]
        got = [(s, v) for s, v in got if v is not None]
        return Values("seed", tuple(s for s, _ in got), tuple(v for _, v in got))

    # -- harness ----------------------------------------------------------------------------------------
    def step_times(self, label: str, kind: str = "experiment", length: int | None = None,
                   column: str = "step_s") -> dict[int, float]:
        """Round -> the label's harness value (the median where a round has several rows); for ``peak_mb``, only
        the rows that measured memory in their own round."""
        by_round: dict[int, list[float]] = {}
        for row in self.harness or []:
            if row["label"] != label or row["kind"] != kind or not _measured(row, column):
                continue
            if length is not None and int(row["length"]) != length:
                continue
            by_round.setdefault(int(row["round"]), []).append(float(row[column]))
        return {r: statistics.median(v) for r, v in sorted(by_round.items())}

    def scaling_lengths(self, label: str, kind: str = "scaling") -> set[int]:
        return {int(r["length"]) for r in self.harness or [] if r["label"] == label and r["kind"] == kind}

    def slopes(self, label: str, column: str, lengths: tuple[int, int] | None) -> dict[int, float]:
        rounds: dict[int, list[tuple[float, float]]] = {}
        for row in self.harness or []:
            if row["label"] != label or row["kind"] != "scaling" or not _measured(row, column):
                continue
            n = int(row["length"])
            if lengths is None or lengths[0] <= n <= lengths[1]:
                rounds.setdefault(int(row["round"]), []).append((n, float(row[column])))
        got = {r: _slope(points) for r, points in sorted(rounds.items())}
        return {r: s for r, s in got.items() if s is not None}

    # -- a claim's samples ------------------------------------------------------------------------------
    def values(self, label: str, claim: Claim) -> tuple[Values | None, str]:
        """``label``'s values of ``claim.measure`` (None and why when there are none)."""
        measure = claim.measure
        if claim.harness or measure == "time_to_target_s":
            kind = claim.harness_kind
            if not any(r["kind"] == kind for r in self.harness or []):
                return None, self.harness_missing(claim, kind)
        if claim.harness:
            per_round = self._harness_values(label, claim)
            if not per_round:
                return None, self._no_harness_rows(label, claim, kind)
            return Values("round", tuple(per_round), tuple(per_round.values())), ""
        if self.runs is None:
            return None, f"no `{self.name}.csv`"
        if not self.runs_of(label):
            return None, f"no data for {label}"
        if measure == "time_to_target_s":
            if self.target is None:
                return None, "the experiment sets no [report] target"
            step_times = list(self.step_times(label).values())
            if not step_times:
                return None, f"no harness rows for {label}"
            step = statistics.median(step_times)
            got = self.seed_values(label, lambda r: self._time_to_target(r, step))
        elif measure == "train_cost":
            got = self.seed_values(label, training_cost)
        else:
            got = self.seed_values(label, lambda r: float(r.row[measure]) if r.row.get(measure, "") != "" else None)
        return (got, "") if len(got) else (None, f"no {measure} for {label}")

    def harness_missing(self, claim: Claim, kind: str) -> str:
        """Why a harness measure is missing, with the command that measures it."""
        command = STEPTIME_COMMAND.format(name=self.name)
        if kind == "experiment":
            return f"no `{self.name}-steptime.csv`: run `{command}`"
        if kind == "inference":
            return f"no `{self.name}-inference.csv`: run `{command} --scaling --inference`"
        if claim.lengths:
            lengths, n = [], claim.lengths[0]
            while n <= claim.lengths[1]:
                lengths.append(n)
                n *= 2
            command += f" --lengths {','.join(map(str, lengths))}"
            return f"no `{self.name}-scaling.csv`: run `{command}`"
        return f"no `{self.name}-scaling.csv`: run `{command} --lengths N1,N2,...` (square patch counts for a grid)"

    def _no_harness_rows(self, label: str, claim: Claim, kind: str) -> str:
        """Why ``label`` has no values of a harness claim although the harness CSV exists."""
        if claim.measure in MEMORY_MEASURES and not any(
                r.get("memory") == "round" and r["label"] == label for r in self.harness or []):
            return (f"no peak memory of {label} measured every round (memory measured once per (label, N) and "
                    f"copied into every round is one sample, not a sample per round): set [report] harness_memory "
                    f"= \"round\" and run `{STEPTIME_COMMAND.format(name=self.name)} --scaling`")
        if kind == "scaling" and claim.lengths and self.scaling_lengths(label):
            low, high = claim.lengths
            inside = sorted(n for n in self.scaling_lengths(label) if low <= n <= high)
            if len(inside) < 2:
                measured = sorted(self.scaling_lengths(label))
                ladder, n = [], min(measured[0], low)
                while n <= high:
                    ladder.append(n)
                    n *= 2
                command = STEPTIME_COMMAND.format(name=self.name) + f" --lengths {','.join(map(str, ladder))}"
                return (f"{label} measured at N = {', '.join(f'{n:,}' for n in measured)} only, not at two lengths "
                        f"in {low:,}-{high:,}: run `{command}` (it replaces `{self.name}-scaling.csv`: every length "
                        "in one run, the rounds paired)")
        return f"no harness rows for {label}"

    def _time_to_target(self, run: Run, step_s: float) -> float | None:
        if not run.history:
            return None
        step = steps_to_target(run, self.target, self.target_k, self.higher_is_better)
        return math.inf if step is None else step * step_s

    def _harness_values(self, label: str, claim: Claim) -> dict[int, float]:
        measure, kind = claim.measure, claim.harness_kind
        column = "peak_mb" if measure in MEMORY_MEASURES else "step_s"
        if measure in SLOPES:
            return self.slopes(label, column, claim.lengths)
        length = None if kind == "experiment" else self.resolve_length(claim, kind)
        per_round = self.step_times(label, kind, length, column=column)
        if measure != "time_per_epoch_s":
            return per_round
        spe = self.epoch_steps(label)
        return {r: spe * t for r, t in per_round.items()} if spe else {}

    def resolve_length(self, claim: Claim, kind: str = "scaling") -> int | None:
        """The synthetic length of a claim read at one length (``step_time_s``, ``step_memory_mb``,
        ``infer_time_s``): its ``length``, or the largest both labels have in rows of ``kind``."""
        if claim.length != "largest":
            return claim.length
        common = self.scaling_lengths(claim.a, kind)
        if claim.b_label is not None:
            common &= self.scaling_lengths(claim.b_label, kind)
        return max(common) if common else None


def load_data(data: Path, name: str, *, target: float | None = None, target_k: int = 1,
              higher_is_better: bool = True, planned_steps: dict[str, int] | None = None,
              exclude: dict[tuple[str, int], str] | None = None) -> ExperimentData:
    """Everything ``data`` holds for experiment ``name`` (each file may be missing); ``planned_steps``: per label,
    the steps per epoch the experiment file plans (for time per epoch before any run has finished); ``exclude``:
    (label, seed) -> why that row is not pooled (kept apart in ``excluded``, in no mean and no test)."""
    runs = None
    if (data / f"{name}.csv").exists():
        histories: dict[tuple[str, int], list[dict[str, str]]] = {}
        if (data / f"{name}-history.csv").exists():
            for row in read_csv(data / f"{name}-history.csv", _HISTORY, ("label", "seed", "step"), "drop"):
                histories.setdefault((row["label"], int(row["seed"])), []).append(row)
        runs, excluded = [], []
        for row in read_csv(data / f"{name}.csv", _RUNS, ("label", "seed")):
            key = (row["label"], int(row["seed"]))
            run = Run(key[0], key[1], row, sorted(histories.get(key, []), key=lambda h: int(h["step"])))
            if exclude and key in exclude:
                excluded.append((run, exclude[key]))
            else:
                runs.append(run)
    chance = _chance(data / f"{name}-chance.csv")
    harness = None
    for suffix in ("steptime", "scaling", "inference"):
        path = data / f"{name}-{suffix}.csv"
        if path.exists():
            harness = (harness or []) + [r for r in read_csv(path, _HARNESS)
                                          if r.get("experiment", name) in (name, "")]
    found = ExperimentData(name, runs, chance, harness, target, target_k, higher_is_better, planned_steps)
    if runs is not None:
        found.excluded = excluded
    return found
