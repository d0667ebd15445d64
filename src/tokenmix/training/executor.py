"""Where the runs of a sweep train: one run in whatever process calls :func:`run_one`, and a sweep's runs as
cluster jobs through submitit (:func:`submit_runs`, ``tokenmix compare --executor submitit``; the ``cluster``
extra).

A run lives in ``<out>/runs/<label>/seed<k>/`` (:func:`run_dir`): its logs, best weights, checkpoint while it
trains and ``result.json`` (written atomically) once it has finished. Before it trains, damaged files there are
moved aside (``<name>.damaged-<timestamp>``, named on stderr): a ``result.json`` that is not a whole result
(:func:`read_result`: the run trains again) and checkpoints that cannot be read
(:func:`~tokenmix.training.checkpoint.set_aside_damaged`: the run resumes from an older intact one or starts
afresh). A full disk anywhere in a run's writes is :class:`~tokenmix.training.files.DiskFull`, naming the file.

**Cluster jobs.** One job per run (:class:`RunJob`, a submitit checkpointable callable), submitted as a Slurm
job array with at most ``slurm_array_parallelism`` tasks at once (other submitit clusters: as many jobs at once,
submitted one by one). A preempted or timed-out job is requeued by submitit and resumes from its run's
checkpoint. Each job trains its run on its node and records its row into the results folder itself (under the
folder's lock, so rows from any node merge); the submitting process waits for the jobs, names the failed ones
with their logs, and writes the leaderboard. submitit's files go to ``<out>/submitit/``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, Callable

import torch

from ..tasks import task_info
from .checkpoint import Checkpointer, set_aside_damaged
from .config import TrainResult
from .build import build_model, make_task
from .warmstart import load_teacher, split_warm_start, teacher_file, transfer_stage
from .experiment import Experiment, RunSpec
from .schema import RUN_SEED
from .files import atomic_write_text, disk_full_guard, move_aside
from .loop import flushed_denormals, train
from .provenance import provenance
from .results import COLUMNS, ResultsDir, git_commit, result_row, run_config

__all__ = ["RESULT_FILE", "run_dir", "run_one", "read_result", "die_with_parent", "RunJob", "RunsFailed",
           "submit_runs", "parse_cluster_options", "DEFAULT_ARRAY_PARALLELISM", "DEFAULT_TIMEOUT_MIN"]

RESULT_FILE = "result.json"
DEFAULT_ARRAY_PARALLELISM = 16  # cluster tasks at once, unless --cluster slurm_array_parallelism=N
DEFAULT_TIMEOUT_MIN = 60  # a job's time limit, unless --cluster timeout_min=N; a timed-out run is requeued
_RESULT_KEYS = {f.name for f in fields(TrainResult)}


def run_dir(out: Path, run: RunSpec) -> Path:
    """The folder of ``run`` in the sweep folder ``out``."""
    return out / "runs" / run.label / f"seed{run.seed}"


def read_result(folder: Path) -> dict[str, Any] | None:
    """The ``result.json`` of the run folder ``folder``; None when there is none, or when it is damaged (not
    JSON, truncated, not a whole result): then it is moved aside, named on stderr, and the run trains again."""
    path = folder / RESULT_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        result = json.loads(text)
        missing = _RESULT_KEYS - set(result) if isinstance(result, dict) else _RESULT_KEYS
        reason = f"no {', '.join(sorted(missing))}" if missing else None
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError
        reason = f"not JSON: {error}"
    if reason is None:
        return result
    move_aside(path, reason, "the run trains again")
    return None


def _train_run(experiment_dict: dict[str, Any], label: str, seed: int, out_dir: str, threads: int,
               report: Callable[[str, int, int, float | None], None] | Any = None
               ) -> tuple[dict[str, Any], Experiment, RunSpec, Any]:
    """:func:`run_one`, also returning the experiment, the run and the task it made. With ``[train]
    flush_denormal`` the process flushes subnormals from before its first operation, so that every intra-op thread
    does (:func:`~tokenmix.training.loop.flushed_denormals`)."""
    experiment = Experiment.from_dict(experiment_dict)
    run = next(r for r in experiment.runs(task_info(experiment.task["name"]).kind)
               if r.label == label and r.seed == seed)
    with flushed_denormals(experiment.train_config(run).flush_denormal):
        return _train_run_flushed(experiment, run, seed, out_dir, threads, report)


def _train_run_flushed(experiment: Experiment, run: RunSpec, seed: int, out_dir: str, threads: int,
                       report: Callable[[str, int, int, float | None], None] | Any
                       ) -> tuple[dict[str, Any], Experiment, RunSpec, Any]:
    torch.set_num_threads(threads)
    task = make_task(experiment, seed)  # [task] seed = "run": this run's data, drawn from its seed
    folder = run_dir(Path(out_dir), run)
    with disk_full_guard(folder):
        set_aside_damaged(folder)
        model = build_model(task, run)
        resume = Checkpointer(str(folder), writes=False).find() is not None
        config = experiment.train_config(run, out_dir=str(folder), resume=resume, progress=False)
        warm = split_warm_start(run.model)[1]
        teacher = None
        if warm.get("init_from") is not None and not resume:  # a resumed run's checkpoint holds them
            teacher = load_teacher(model, teacher_file(warm["init_from"], seed), warm["init_from"].get("skip", ()))
            if warm.get("transfer") is not None:
                transfer_stage(model, task, warm["transfer"], batch_size=config.batch_size, seed=seed)
        last = [0.0]

        def on_step(step: int, total: int, metric: float | None) -> None:
            now = time.monotonic()
            if report is None or (now - last[0] < 0.5 and step < total):
                return
            last[0] = now
            message = (run.key, step, total, metric)
            report.put(message) if hasattr(report, "put") else report(*message)

        result = asdict(train(task, model, config, on_step=on_step))
        result["provenance"] = provenance(threads, config.device)
        if teacher is not None:
            result["provenance"]["teacher_sha256"] = teacher
        atomic_write_text(folder / RESULT_FILE, json.dumps(result))
    for name in ("checkpoint", "checkpoint.old"):  # finished: result.json and best weights stay
        shutil.rmtree(folder / name, ignore_errors=True)
    return result, experiment, run, task


def run_one(experiment_dict: dict[str, Any], label: str, seed: int, out_dir: str, threads: int,
            report: Callable[[str, int, int, float | None], None] | Any = None) -> dict[str, Any]:
    """Train one run (in whatever process calls it) and write its ``result.json``; returns the result.

    ``report`` is a callable or a queue (``put((key, step, total, metric))``), throttled to a few per second."""
    return _train_run(experiment_dict, label, seed, out_dir, threads, report)[0]


def die_with_parent(parent: int) -> None:
    """In a worker process: be killed (SIGKILL) when the process that started it dies, even by SIGKILL, so that no
    run trains on as an orphan racing the re-run (Linux ``PR_SET_PDEATHSIG``; a no-op elsewhere). ``parent``: the
    starter's pid, to catch a starter that died before the signal was set."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(1)


# -- cluster jobs ------------------------------------------------------------------------------------------
class RunJob:
    """One run of a sweep as a submitit job: trains it (resuming from its checkpoint), writes its ``result.json``
    and records its row in ``results_dir``. A checkpointable callable: submitit calls :meth:`checkpoint` on
    preemption or timeout and requeues what it returns (submitit's ``Checkpointable`` protocol, duck-typed so
    that importing tokenmix does not need submitit)."""

    def __init__(self, experiment_dict: dict[str, Any], out_dir: str, threads: int,
                 results_dir: str | None) -> None:
        self.experiment_dict = experiment_dict
        self.out_dir = out_dir
        self.threads = threads
        self.results_dir = results_dir

    def __call__(self, label: str, seed: int) -> dict[str, Any]:
        experiment = Experiment.from_dict(self.experiment_dict)
        folder = Path(self.out_dir) / "runs" / label / f"seed{seed}"
        result = read_result(folder)  # a requeued job whose run had finished records it without training again
        if result is None:
            result, experiment, run, task = _train_run(self.experiment_dict, label, seed, self.out_dir, self.threads)
        elif self.results_dir is not None:
            task = make_task(experiment, seed)
            run = next(r for r in experiment.runs(task.info.kind) if r.label == label and r.seed == seed)
        if self.results_dir is not None:
            record = ResultsDir(self.results_dir, experiment.name)
            if experiment.task.get("seed") == RUN_SEED and seed != 0 and not record.chance.exists():
                task = make_task(experiment)  # the chance file describes seed 0's split (as a local sweep's)
            with disk_full_guard(self.results_dir):
                record.save_run(result_row(experiment, run, result), COLUMNS, result["history"],
                                run_config(experiment, run, self.threads), task)
        return result

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """The same job again (submitit requeues it); the run resumes from the checkpoint in its folder."""
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(self, *args, **kwargs)


class RunsFailed(RuntimeError):
    """Cluster jobs of a sweep failed; the message names each with its error and log."""


def parse_cluster_options(pairs: list[str]) -> dict[str, Any]:
    """``--cluster KEY=VALUE`` pairs as submitit parameters, values read as TOML where they parse (60, 2.5, true,
    "x") and as text otherwise (``slurm_partition=gpu``)."""
    import tomllib

    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--cluster {pair!r}: expected KEY=VALUE, e.g. slurm_partition=gpu or timeout_min=60")
        try:
            options[key] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            options[key] = value.strip()
    return options


def _submitit() -> Any:
    try:
        import submitit
    except ImportError:
        raise ValueError("--executor submitit needs submitit: pip install 'tokenmix-lab[cluster]'") from None
    return submitit


def _last_error_line(error: BaseException) -> str:
    """The last line of the traceback in a submitit ``FailedJobError`` (between its dashed rules), or of
    ``error``."""
    parts = str(error).split("-" * 22)
    text = parts[1] if len(parts) > 2 else str(error)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else repr(error)


def submit_runs(runs: list[RunSpec], experiment_dict: dict[str, Any], out: Path, threads: int, *,
                options: dict[str, Any] | None = None, results_dir: str | Path | None = None, commit: bool = False,
                progress: bool | None = None) -> dict[str, dict[str, Any]]:
    """Train ``runs`` as submitit jobs (see the module docstring) and return their results by run key.

    ``options``: submitit parameters (``cluster``: slurm, local or debug, default: what submitit detects;
    ``slurm_array_parallelism``: tasks at once, default :data:`DEFAULT_ARRAY_PARALLELISM`; ``timeout_min``
    default :data:`DEFAULT_TIMEOUT_MIN`; ``cpus_per_task`` default ``threads``; any other AutoExecutor
    parameter such as ``slurm_partition`` or ``mem_gb``). ``results_dir``: each job records its row there;
    ``commit``: the submitter commits the rows as jobs finish. Failed jobs raise :class:`RunsFailed` once every
    job has ended; an interrupted submitter cancels the jobs it started."""
    submitit = _submitit()
    options = dict(options or {})
    cluster = options.pop("cluster", None)
    cap = options.pop("slurm_array_parallelism", DEFAULT_ARRAY_PARALLELISM)
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise ValueError(f"--cluster slurm_array_parallelism must be a positive int, got {cap!r}")
    name = experiment_dict.get("name", "sweep")
    options.setdefault("timeout_min", DEFAULT_TIMEOUT_MIN)
    options.setdefault("cpus_per_task", threads)
    options.setdefault("name", f"tokenmix-{name}")
    try:
        executor = submitit.AutoExecutor(folder=out / "submitit", cluster=cluster)
        executor.update_parameters(**options)
        if executor.cluster == "slurm":
            executor.update_parameters(slurm_array_parallelism=cap)
    except (NameError, AssertionError, ValueError, TypeError, RuntimeError) as error:  # submitit's own checks
        raise ValueError(f"--cluster: {error}") from None
    job = RunJob(experiment_dict, str(out), threads, None if results_dir is None else str(results_dir))
    record = ResultsDir(results_dir, name) if results_dir is not None else None
    from tqdm import tqdm

    bar = tqdm(total=len(runs), unit="run", desc=f"{executor.cluster} jobs", disable=progress is False,
               file=sys.stderr, dynamic_ncols=True)
    pending: dict[Any, RunSpec] = {}
    waiting = list(runs)
    results: dict[str, dict[str, Any]] = {}
    failed: list[str] = []
    poll = 0.5 if executor.cluster in ("local", "debug") else 10.0
    try:
        if executor.cluster == "slurm":  # one job array; Slurm keeps at most ``cap`` of its tasks running
            jobs = executor.map_array(job, [r.label for r in waiting], [r.seed for r in waiting])
            pending.update(zip(jobs, waiting))
            waiting = []
            print(f"submitted {len(jobs)} runs as Slurm job array {jobs[0].job_id.split('_')[0]} "
                  f"(at most {cap} at once); logs in {out / 'submitit'}", file=sys.stderr, flush=True)
        while waiting or pending:
            while waiting and len(pending) < cap:  # other clusters: a window of ``cap`` jobs
                run = waiting.pop(0)
                pending[executor.submit(job, run.label, run.seed)] = run
            for submitted in [j for j in pending if j.done()]:
                run = pending.pop(submitted)
                bar.update(1)
                error = submitted.exception()
                if error is not None:
                    failed.append(f"  {run.key}: job {submitted.job_id}: {_last_error_line(error)}; "
                                  f"log {submitted.paths.stderr}")
                    continue
                results[run.key] = submitted.result()
                print(f"finished {run.key}: {results[run.key]['metric_name']} {results[run.key]['test_metric']}",
                      file=sys.stderr, flush=True)
                if commit and record is not None:
                    row = result_row(Experiment.from_dict(experiment_dict), run, results[run.key])
                    git_commit([p for p in (record.csv, record.history, record.configs, record.chance) if p.exists()],
                               f"{name}: {run.label} seed {run.seed} ({row['metric']} {row['value']})")
            if pending:
                time.sleep(poll)
    except BaseException:
        for submitted in pending:
            submitted.cancel(check=False)
        if pending:
            print(f"cancelled {len(pending)} unfinished jobs; the same command resumes them", file=sys.stderr,
                  flush=True)
        raise
    finally:
        bar.close()
    if failed:
        raise RunsFailed(f"{len(failed)} of {len(runs)} jobs failed (the others are recorded; the same command "
                         f"trains the failed ones again):\n" + "\n".join(failed))
    return results
