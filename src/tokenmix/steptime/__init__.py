"""``tokenmix steptime``: controlled timings of one training step per mixer entry of an experiment.

Why: times read off training logs mix in evaluation pauses, data batching, other processes and the order in
which runs happened to train, so they cannot carry a claim such as "A trains 1.4x faster than B". Here each
label's model, optimiser and scheduler are built as training builds them
(:func:`tokenmix.training.build.build_model`, :func:`tokenmix.training.setup.make_optimizer`,
:func:`tokenmix.training.loop.make_scheduler`) and a step is the trainer's own
(:func:`tokenmix.training.loop.train_step`: zero_grad, forward and the task's loss, backward, clipping, optimiser
and scheduler step) on one fixed batch. All labels are timed in one process with fixed threads, in interleaved
rounds (A B C, A B C, ...), so a disturbance hits every label alike, and the spread over rounds shows how much it
mattered. Every time is a :func:`tokenmix.timing.measure`.

It sits above the run layer (:mod:`tokenmix.training`), whose pieces it times, beside :mod:`tokenmix.speed`,
whose peak-memory method it uses.

* :func:`time_training_steps` (kind ``experiment``): the first training batch of the first seed at the
  experiment's batch size; ``length`` is its width in tokens (image tasks: patches).
* :func:`time_scaling` (kind ``scaling``): synthetic inputs of N tokens (uniform ids, full masks, random labels
  or targets), each model built for exactly N (``max_len = N``; image tasks: a square grid of N patches, other
  N skipped), with the peak memory of one step (``peak_mb``) in a fresh process by ``tokenmix speed``'s method:
  once per (label, N), copied into every round (column ``memory`` = "once"), or with ``memory_rounds`` in a
  fresh process of its own every round ("round"), so that a claim on memory has independent samples.
* ``time_scaling(..., inference=True)`` (kind ``inference``): the same synthetic inputs, but one inference pass
  (eval mode, no gradients: the task's logits) instead of a training step; no memory column.
* :func:`slopes`: per label and round, the log-log slope of step time on length; median and 95% interval.

CSV (:func:`write_csv`, :data:`COLUMNS`): ``docs/reproduction/<name>-steptime.csv`` (experiment rows),
``<name>-scaling.csv`` (scaling rows) and ``<name>-inference.csv`` (inference rows), :func:`default_path`.
"""
from __future__ import annotations

import contextlib
import copy
import csv
import io
import math
import multiprocessing
import statistics
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

from ..tasks.base import Task
from ..tasks.batches import ImageBatch, LMBatch, TokenBatch
from ..timing import measure, median_interval
from ..training.batches import remaining_batches
from ..training.config import TrainConfig
from ..training.files import atomic_write_text
from ..training.build import build_model, make_task
from ..training.experiment import Experiment, RunSpec
from ..training.loop import flushed_denormals, make_scheduler, train_step
from ..training.setup import make_optimizer, plan_run

__all__ = ["COLUMNS", "StepCase", "training_cases", "time_training_steps", "time_scaling", "slopes", "Slope",
           "step_summary", "step_table", "scaling_table", "write_csv", "default_path"]

COLUMNS = ["experiment", "label", "kind", "length", "batch", "round", "step_s", "threads", "peak_mb", "memory"]


@dataclass
class StepCase:
    """One label at one length: ``step()`` is one training step (a closure over model, optimiser and batch)."""

    label: str
    step: Callable[[], float]
    length: int
    batch: int
    model: torch.nn.Module
    peak_mb: float | str | list[float | str] = ""  # a list: one fresh measurement per round

    def memory_of_round(self, r: int) -> tuple[float | str, str]:
        """Round ``r``'s (0-based) peak memory and how it was measured: "round", "once" or "" (not at all)."""
        if isinstance(self.peak_mb, list):
            return self.peak_mb[r], "round"
        return self.peak_mb, "once" if self.peak_mb != "" else ""


def _runs(experiment: Experiment, task: Task, labels: Iterable[str] | None) -> list[RunSpec]:
    """The experiment's entries (baseline included) at its first seed, in file order or in ``labels``' order."""
    runs = {r.label: r for r in experiment.runs(task.info.kind) if r.seed == experiment.seeds[0]}
    chosen = list(labels) if labels else list(runs)
    unknown = [label for label in chosen if label not in runs]
    if unknown:
        raise ValueError(f"steptime: unknown label(s) {unknown}; the experiment has {', '.join(runs)}")
    return [runs[label] for label in chosen]


def _step(task: Task, model: torch.nn.Module, config: TrainConfig, batch: Any,
          total_steps: int) -> Callable[[], float]:
    """The trainer's step on ``batch`` with a fresh optimiser and scheduler, as :func:`tokenmix.training.loop.train`
    sets them up (device, train mode, bf16 autocast and flushed subnormals when the config asks)."""
    device = torch.device(config.device)
    model.to(device).train()
    optimizer = make_optimizer(model, config)
    scheduler = make_scheduler(optimizer, config, total_steps)
    ctx = torch.autocast(device.type, dtype=torch.bfloat16) if config.bf16 else contextlib.nullcontext()

    def step() -> float:
        with flushed_denormals(config.flush_denormal):
            return train_step(task, model, batch, optimizer, scheduler, ctx, config.grad_clip)

    return step


def _interleaved(name: str, kind: str, cases: list[StepCase], *, rounds: int, threads: int, min_run_time: float,
                 rotate: bool, budget: float | None) -> list[dict[str, Any]]:
    """Warm every case up once, then ``rounds`` rounds, each timing every case once in turn (the start moved
    one case on per round with ``rotate``). With ``budget`` (seconds), no round starts that would likely end
    past it; the first always runs."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds!r}")
    rows: list[dict[str, Any]] = []
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for case in cases:
            case.step()
        start = time.monotonic()
        for r in range(rounds):
            elapsed = time.monotonic() - start
            if budget is not None and r > 0 and elapsed + elapsed / r > budget:
                warnings.warn(f"steptime: stopped after {r} of {rounds} rounds (budget {budget:g} s)")
                break
            shift = r % len(cases) if rotate else 0
            for case in cases[shift:] + cases[:shift]:
                timing = measure(case.step, min_run_time=min_run_time, threads=threads)
                peak, how = case.memory_of_round(r)
                rows.append({"experiment": name, "label": case.label, "kind": kind, "length": case.length,
                             "batch": case.batch, "round": r + 1, "step_s": float(f"{timing.median:.6g}"),
                             "threads": threads, "peak_mb": peak, "memory": how})
    finally:
        torch.set_num_threads(before)
    return rows


def training_cases(experiment: Experiment, task: Task | None = None,
                   labels: Iterable[str] | None = None) -> list[StepCase]:
    """Per label, its model, optimiser and scheduler as training builds them and the step on the first
    training batch of the experiment's first seed (``task``: the experiment's task, when already built)."""
    task = task or make_task(experiment)
    cases = []
    for run in _runs(experiment, task, labels):
        config = experiment.train_config(run)
        plan = plan_run(task, config)
        batch = next(remaining_batches(task, config.batch_size, config.seed, plan.steps_per_epoch, 0))
        model = build_model(task, run)
        torch.manual_seed(config.seed)
        step = _step(task, model, config, batch, plan.total_steps)
        grid = getattr(model, "grid", None)  # image tasks: the patches of the grid
        length = int(batch.ids.shape[1]) if isinstance(batch, (TokenBatch, LMBatch)) else int(grid[0] * grid[1])
        cases.append(StepCase(run.label, step, length, config.batch_size, model))
    return cases


def time_training_steps(experiment: Experiment, *, rounds: int = 10, threads: int = 1, min_run_time: float = 0.2,
                        labels: Iterable[str] | None = None, budget: float | None = None, task: Task | None = None,
                        rotate: bool = False) -> list[dict[str, Any]]:
    """One row per (label, round): the median seconds of one training step of :func:`training_cases`.
    ``budget``: a cap in seconds on the rounds (not one of an experiment file's named budgets)."""
    return _interleaved(experiment.name, "experiment", training_cases(experiment, task, labels), rounds=rounds,
                        threads=threads, min_run_time=min_run_time, rotate=rotate, budget=budget)


# -- scaling ----------------------------------------------------------------------------------------------------
def _shell(task: Task, length: int, patch: tuple[int, int]) -> Task:
    """A data-less copy of ``task`` whose models take ``length`` tokens (image tasks: a square grid of
    ``length`` patches): what :meth:`Task.build_model` reads, without the splits (cheap to send to a process)."""
    shell = object.__new__(type(task))
    keys = ("num_classes", "vocab_size", "pad_id", "model_defaults")
    shell.__dict__.update({k: copy.deepcopy(v) for k, v in vars(task).items() if k in keys}, splits={})
    if task.info.kind == "image":
        side = math.isqrt(length)
        shell.image_shape = (task.image_shape[0], side * patch[0], side * patch[1])
    else:
        shell.max_len = length
    return shell


def _synthetic(shell: Task, length: int, batch: int, seed: int) -> Any:
    g, kind = torch.Generator().manual_seed(seed), shell.info.kind
    if kind == "image":
        images = torch.randn(batch, *shell.image_shape, generator=g)
        return ImageBatch(images, torch.randint(0, shell.num_classes, (batch,), generator=g))
    ids = torch.randint(0, shell.vocab_size, (batch, length), generator=g)
    if kind == "language_model":
        return LMBatch(ids, torch.randint(0, shell.vocab_size, (batch, length), generator=g))
    mask = torch.ones(batch, length, dtype=torch.bool)
    if kind == "masked_lm":  # every position predicted: the most a step can cost
        return TokenBatch(ids, mask, torch.randint(0, shell.vocab_size, (batch, length), generator=g))
    return TokenBatch(ids, mask, torch.randint(0, shell.num_classes, (batch,), generator=g))


def _scaling_case(shell: Task, run: RunSpec, config: TrainConfig, total_steps: int, length: int,
                  batch: int) -> StepCase:
    try:
        model = build_model(shell, run)
    except (ValueError, TypeError) as error:
        raise ValueError(f"steptime: {run.label!r} at length {length}: {error}") from None
    step = _step(shell, model, config, _synthetic(shell, length, batch, config.seed), total_steps)
    return StepCase(run.label, step, length, batch, model)


def _inference_case(shell: Task, run: RunSpec, length: int, batch: int, seed: int) -> StepCase:
    """One inference pass of ``run``'s model on synthetic input: eval mode, no gradients, the task's logits."""
    try:
        model = build_model(shell, run)
    except (ValueError, TypeError) as error:
        raise ValueError(f"steptime: {run.label!r} at length {length}: {error}") from None
    model.eval()
    inputs = _synthetic(shell, length, batch, seed)

    def infer() -> float:
        with torch.inference_mode():
            shell.logits(model, inputs)
        return 0.0
    return StepCase(run.label, infer, length, batch, model)


def _peak_child(shell: Task, run: RunSpec, config: TrainConfig, total_steps: int, length: int, batch: int,
                threads: int, warm: Task, warm_length: int) -> float:
    """In a fresh process: one step of a small model first (the process's one-time costs), then the peak
    memory of the first step at ``length`` (optimiser state included), by ``tokenmix speed``'s method."""
    from ..speed.measure import cpu_peak_mb, cuda_peak_mb

    torch.set_num_threads(threads)
    _scaling_case(warm, run, config, total_steps, warm_length, batch).step()
    step = _scaling_case(shell, run, config, total_steps, length, batch).step
    device = torch.device(config.device)
    return (cuda_peak_mb(step, device) if device.type == "cuda" else cpu_peak_mb(step, True))[0]


def _peak_mb(*args: Any) -> float | str:
    """:func:`_peak_child` in a fresh spawned process; "" (with a warning) when it fails or is killed."""
    try:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            return round(pool.submit(_peak_child, *args).result(), 1)
    except Exception as error:  # an OOM kill breaks the pool: the column stays empty, the timings go on
        warnings.warn(f"steptime: no peak memory for {args[1].label!r} at length {args[4]}: {error!r}")
        return ""


def time_scaling(experiment: Experiment, lengths: Iterable[int], *, rounds: int = 10, threads: int = 1,
                 min_run_time: float = 0.2, labels: Iterable[str] | None = None, batch: int = 1,
                 memory: bool = True, memory_rounds: bool = False, inference: bool = False,
                 budget: float | None = None, task: Task | None = None, rotate: bool = False) -> list[dict[str, Any]]:
    """One row per (label, length, round): seconds of one training step on synthetic inputs of ``length``
    tokens (``batch`` of them), each round timing every (length, label) once; ``peak_mb`` per (label,
    length) with ``memory``, measured anew for every round with ``memory_rounds`` (all before the timings, in
    rounds over the cases, as the timings are). With ``inference``: one inference pass instead of a training
    step (rows of kind "inference"), no memory (pass ``memory=False``). Image tasks take square numbers of
    patches only (others are skipped, warned)."""
    if memory_rounds and not memory:
        raise ValueError("steptime: memory_rounds measures memory; it cannot go with memory=False")
    if inference and memory:
        raise ValueError("steptime: the inference pass records no memory (the memory method times a training "
                         "step): pass memory=False")
    task = task or make_task(experiment)
    lengths = sorted(set(int(n) for n in lengths))
    if task.info.kind == "image":
        skipped = [n for n in lengths if math.isqrt(n) ** 2 != n]
        if skipped:
            warnings.warn(f"steptime: an image task needs a square number of patches; skipped lengths {skipped}")
        lengths = [n for n in lengths if n not in skipped]
    if not lengths or lengths[0] < 1:
        raise ValueError(f"steptime: no usable lengths (positive ints; image tasks: squares), got {lengths}")
    cases, peak_args = [], []
    for run in _runs(experiment, task, labels):
        config = experiment.train_config(run)
        total = plan_run(task, config).total_steps
        patch = run.model.get("patch_size", task.model_defaults.get("patch_size", 4))
        patch = tuple(patch) if isinstance(patch, (list, tuple)) else (patch, patch)
        for n in lengths:
            if inference:
                cases.append(_inference_case(_shell(task, n, patch), run, n, batch, config.seed))
                continue
            cases.append(_scaling_case(_shell(task, n, patch), run, config, total, n, batch))
            peak_args.append((_shell(task, n, patch), run, config, total, n, batch, threads,
                              _shell(task, lengths[0], patch), lengths[0]))
    if memory_rounds:
        for case in cases:
            case.peak_mb = []
        for _ in range(rounds):
            for case, args in zip(cases, peak_args):
                case.peak_mb.append(_peak_mb(*args))
    elif memory:
        for case, args in zip(cases, peak_args):
            case.peak_mb = _peak_mb(*args)
    order = sorted(cases, key=lambda c: c.length)  # stable: length-major, labels in order within a length
    return _interleaved(experiment.name, "inference" if inference else "scaling", order, rounds=rounds,
                        threads=threads, min_run_time=min_run_time, rotate=rotate, budget=budget)


# -- summaries --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Slope:
    """A label's log-log slope of step time against length: per round, their median and 95% interval."""

    label: str
    median: float
    low: float
    high: float
    per_round: tuple[float, ...]


def slopes(rows: Iterable[dict[str, Any]]) -> dict[str, Slope]:
    """Per label (first-appearance order), the least-squares slope of log(step_s) on log(length) within each
    round (rounds with fewer than two lengths are left out), and their :func:`median_interval`."""
    points: dict[str, dict[Any, list[tuple[float, float]]]] = {}
    for row in rows:
        by_round = points.setdefault(str(row["label"]), {})
        by_round.setdefault(row["round"], []).append((math.log(float(row["length"])), math.log(float(row["step_s"]))))
    result = {}
    for label, by_round in points.items():
        per_round = []
        for pts in by_round.values():
            mx = statistics.fmean(x for x, _ in pts)
            my = statistics.fmean(y for _, y in pts)
            sxx = sum((x - mx) ** 2 for x, _ in pts)
            if sxx > 0:
                per_round.append(sum((x - mx) * (y - my) for x, y in pts) / sxx)
        if per_round:
            result[label] = Slope(label, *median_interval(per_round), tuple(per_round))
    return result


def step_summary(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (label, length), first-appearance order: the median step time over rounds with its interval, and
    the peak memory (its median over rounds when it was measured every round)."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((str(row["label"]), int(row["length"])), []).append(row)
    out = []
    for (label, length), group in groups.items():
        median, low, high = median_interval(float(r["step_s"]) for r in group)
        peaks = [float(r["peak_mb"]) for r in group if r.get("peak_mb", "") != ""]
        per_round = group[0].get("memory") == "round" and peaks
        peak = round(statistics.median(peaks), 1) if per_round else group[0].get("peak_mb", "")
        out.append({"label": label, "length": length, "batch": int(group[0]["batch"]), "rounds": len(group),
                    "median_s": median, "low_s": low, "high_s": high, "peak_mb": peak})
    return out


def step_table(rows: Iterable[dict[str, Any]], train_size: int) -> tuple[list[str], list[list[str]]]:
    """The headers and rows ``tokenmix steptime`` prints for experiment rows: per label its median step time,
    95% interval, ratio to the first label, and the epoch time over ``train_size`` examples it implies."""
    summary = step_summary(rows)
    first = summary[0]["median_s"]
    body = []
    for s in summary:
        steps = train_size // s["batch"]
        body.append([s["label"], str(s["length"]), str(s["batch"]), f"{s['median_s'] * 1e3:.2f}",
                     f"[{s['low_s'] * 1e3:.2f}, {s['high_s'] * 1e3:.2f}]", f"{s['median_s'] / first:.2f}",
                     str(steps), f"{steps * s['median_s']:.2f}"])
    return ["label", "length", "batch", "step ms", "95% interval", f"x {summary[0]['label']}", "steps/epoch",
            "s/epoch"], body


def scaling_table(rows: Iterable[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The headers and rows ``tokenmix steptime --lengths`` prints: per label its median step time (and peak
    memory) at each length, and its log-log slope with the 95% interval (:func:`slopes`)."""
    rows = list(rows)
    summary, fitted = step_summary(rows), slopes(rows)
    lengths = sorted({s["length"] for s in summary})
    table = {(s["label"], s["length"]): s for s in summary}
    body = []
    for label in dict.fromkeys(s["label"] for s in summary):
        cells = [f"{table[label, n]['median_s'] * 1e3:.2f}" + (f" / {table[label, n]['peak_mb']}"
                 if table[label, n]["peak_mb"] != "" else "") for n in lengths]
        fit = fitted.get(label)
        body.append([label, *cells, f"{fit.median:.2f} [{fit.low:.2f}, {fit.high:.2f}]" if fit else "-"])
    return ["label", *(f"N={n} ms / MiB" for n in lengths), "slope [95%]"], body


def default_path(experiment: Experiment, kind: str) -> Path:
    """``docs/reproduction/<name>-steptime.csv`` (kind ``experiment``), ``<name>-scaling.csv`` (``scaling``) or
    ``<name>-inference.csv`` (``inference``)."""
    suffix = {"experiment": "steptime", "scaling": "scaling", "inference": "inference"}[kind]
    return Path("docs/reproduction") / f"{experiment.name}-{suffix}.csv"


def write_csv(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """``rows`` into ``path`` (parents created, replaced whole if it exists: written to a temporary name and
    renamed), columns :data:`COLUMNS`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=COLUMNS, lineterminator="\r\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, text.getvalue())
    return path
