"""Runs trained in worker processes (:func:`tokenmix.training.sweep.compare`'s local executor): a planned run,
the sweep's one-line progress, the pool of fresh spawned processes (``jobs`` at a time, one run each, dying with
the sweep), and the pinned numerics they start with (:mod:`.numerics`)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import sys
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from multiprocessing.managers import SyncManager
from typing import Any, Callable, Iterator

from .executor import die_with_parent, run_one
from .experiment import RunSpec
from .numerics import PINNED_ENV

__all__ = ["PlannedRun", "Progress", "interrupt_on_sigterm", "run_pool", "pinned_numerics"]


@dataclass(frozen=True)
class PlannedRun:
    """A run with what planning learned about it: its parameter count and its planned optimiser steps."""

    spec: RunSpec
    params: int
    total_steps: int


class Progress:
    """One line for the whole sweep: runs done, the runs under way (step, latest validation metric), ETA."""

    def __init__(self, planned: list[PlannedRun], done: set[str], enabled: bool | None) -> None:
        # on a terminal the line redraws in place; in a log (not a TTY) tqdm writes it every 30 s
        from tqdm import tqdm

        self.total = {p.spec.key: p.total_steps for p in planned}
        self.steps = {key: (self.total[key] if key in done else 0) for key in self.total}
        self.metric: dict[str, float | None] = {}
        self.active: list[str] = []
        self.finished = len(done)
        self.index = {p.spec.key: i for i, p in enumerate(planned, 1)}
        tty = sys.stderr.isatty()
        self.bar = tqdm(total=sum(self.total.values()), initial=sum(self.steps.values()), unit="step",
                        disable=enabled is False, mininterval=0.5 if tty else 30.0,
                        dynamic_ncols=True, file=sys.stderr)

    def start(self, key: str) -> None:
        self.active.append(key)
        self._describe()

    def update(self, key: str, step: int, total: int, metric: float | None) -> None:
        self.total[key] = total
        self.bar.update(max(0, step - self.steps[key]))
        self.steps[key] = max(self.steps[key], step)
        if metric is not None:
            self.metric[key] = metric
        self._describe()

    def finish(self, key: str, steps: int) -> None:
        self.bar.update(max(0, self.total[key] - self.steps[key]))  # early stopping ends a run before its plan
        self.steps[key] = self.total[key]
        self.active.remove(key)
        self.finished += 1
        self._describe()

    def _describe(self) -> None:
        parts = []
        for key in self.active:
            metric = self.metric.get(key)
            parts.append(f"#{self.index[key]} {key} {self.steps[key]}/{self.total[key]}"
                         + (f" val {metric:.4g}" if metric is not None else ""))
        self.bar.set_description(f"runs {self.finished}/{len(self.total)} done | " + "; ".join(parts), refresh=False)

    def close(self) -> None:
        self.bar.close()




@contextlib.contextmanager
def interrupt_on_sigterm() -> Iterator[None]:
    """While the block runs, ``kill`` (SIGTERM) stops a sweep like Ctrl-C does, so that its runs are stopped with
    it (main thread only); the handler the caller had is restored afterwards, so calling a sweep from a program
    leaves that program's own SIGTERM handling as it was."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_pool(todo: list[PlannedRun], data: dict[str, Any], out: str, threads: int, jobs: int, bar: Progress,
              results: dict[str, dict[str, Any]], finished: Callable[[PlannedRun, dict[str, Any]], None],
              pin: bool = True) -> None:
    """Train ``todo`` in fresh spawned processes, ``jobs`` at a time (one run per process), each with its
    numerics pinned (:mod:`~tokenmix.training.numerics`: set in the environment before it imports torch)."""
    with pinned_numerics() if pin else contextlib.nullcontext():
        _run_pool_pinned(todo, data, out, threads, jobs, bar, results, finished)


@contextlib.contextmanager
def pinned_numerics() -> Iterator[None]:
    """This process's environment with :data:`~tokenmix.training.numerics.PINNED_ENV` set while the block
    runs, so that every process it starts (spawned runs, cluster jobs) inherits it; restored afterwards. This
    process's own torch keeps what it started with."""
    saved = {name: os.environ.get(name) for name in PINNED_ENV}
    os.environ.update(PINNED_ENV)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _run_pool_pinned(todo: list[PlannedRun], data: dict[str, Any], out: str, threads: int, jobs: int,
                     bar: Progress, results: dict[str, dict[str, Any]],
                     finished: Callable[[PlannedRun, dict[str, Any]], None]) -> None:
    context = multiprocessing.get_context("spawn")
    manager = SyncManager(ctx=context)
    manager.start(die_with_parent, (os.getpid(),))  # workers and the manager die with this process, even by kill -9
    with manager, ProcessPoolExecutor(max_workers=jobs, mp_context=context, max_tasks_per_child=1,
                                      initializer=die_with_parent, initargs=(os.getpid(),)) as pool:
        messages = manager.Queue()
        pending: dict[Future, PlannedRun] = {}
        waiting = list(todo)
        try:
            _schedule(pool, waiting, pending, messages, data, out, threads, jobs, bar, results, finished)
        except BaseException:
            # interrupted (Ctrl-C, SIGTERM, a failed run): stop the runs under way too, rather than leave them
            # training as orphans that a re-run would race; their checkpoints let the re-run resume them
            for process in list(getattr(pool, "_processes", {}).values()):
                process.terminate()
            pool.shutdown(wait=True, cancel_futures=True)  # wait=False races the pool's own thread (a TypeError)
            raise


def _schedule(pool: ProcessPoolExecutor, waiting: list[PlannedRun], pending: dict[Future, PlannedRun],
              messages: Any, data: dict[str, Any], out: str, threads: int, jobs: int, bar: Progress,
              results: dict[str, dict[str, Any]], finished: Callable[[PlannedRun, dict[str, Any]], None]) -> None:
    """Keep ``jobs`` runs under way until every run has finished, relaying progress messages to ``bar``."""
    while waiting or pending:
        while waiting and len(pending) < jobs:
            p = waiting.pop(0)
            pending[pool.submit(run_one, data, p.spec.label, p.spec.seed, out, threads, messages)] = p
            bar.start(p.spec.key)
        done, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
        _drain(messages, bar)
        for future in done:
            p = pending.pop(future)
            results[p.spec.key] = future.result()  # a failed run raises here, naming its error
            bar.finish(p.spec.key, results[p.spec.key]["steps"])
            print(f"finished {p.spec.key}: {results[p.spec.key]['metric_name']} "
                  f"{results[p.spec.key]['test_metric']}", file=sys.stderr, flush=True)
            finished(p, results[p.spec.key])


def _drain(messages: Any, bar: Progress) -> None:
    while True:
        try:
            key, step, total, metric = messages.get_nowait()
        except queue.Empty:
            return
        if key in bar.active:
            bar.update(key, step, total, metric)
