"""``tokenmix compare``: plan, run and resume an experiment (:mod:`tokenmix.training.experiment`), and write an
honest leaderboard (:mod:`tokenmix.training.leaderboard`).

Every mixer entry x seed is trained by :func:`tokenmix.training.loop.train` on the same task (same data, same batches
in the same order for a given seed; with ``[task] seed = "run"``, each seed's data drawn from that seed), each in a
fresh process (so its peak memory is its own), ``jobs`` at a
time. Before anything trains, every run's model is built once: unknown keys, wrong values and mixers that
cannot run the task fail then. Outputs in ``out_dir``:

* ``config.toml``: the resolved experiment; the same command (or ``--config out_dir/config.toml``) re-runs it;
* ``runs/<label>/seed<k>/``: each run's logs and best weights, and ``result.json`` once it has finished. A run
  with a ``result.json`` is not trained again; one with a checkpoint resumes from it, so a killed sweep
  continues where it stopped when the same command is run again. More seeds (or another name, description or
  report) in the same folder extend the sweep: only the new runs train;
* ``results.csv``: one row per run; ``report.md``: the leaderboard, mean ± sd over seeds;
* ``metric_vs_time.png`` and ``metric_vs_epoch_time.png`` (with the ``plot`` extra; skipped with a note
  otherwise).

With ``results_dir`` (``--results DIR``, :mod:`tokenmix.training.results`) each finished run's row, evaluations and
config are also recorded in ``DIR/<name>*.csv`` as soon as it finishes (and committed with ``commit``), and a
run recorded there with the same ``config_hash`` is not trained again, even with no ``runs/`` folder; a
recorded run whose config changed is named as stale and trained again. With ``reuse`` (the default), a run that
another experiment recorded in ``DIR`` with the same ``config_hash`` (:meth:`~.results.ResultsDir.twins`) is
recorded under this experiment and label instead of being trained again, where the experiment sets no target
(the time to it is not in the row of the other). ``--status`` (what is done and left,
without training) is :mod:`tokenmix.training.status`.

One sweep at a time per out folder: a sweep holds the folder's lock (``.tokenmix.lock``,
:mod:`tokenmix.training.locks`) while it trains, and its worker processes die with it, even by ``kill -9``. One
sweep at a time per experiment and results folder, whatever their out folders: with ``results_dir`` it also
holds ``DIR/.tokenmix-sweep-<name>.lock`` (:func:`record_lock`). A row recorded without its evaluations or config
by an older version is repaired first (:func:`_repair`). A
damaged ``result.json`` or checkpoint is moved aside and its run trained again; the out and results folders are
checked writable before anything trains; a full disk is named (:mod:`tokenmix.training.files`). With
``executor="submitit"`` the runs train as cluster jobs instead (:mod:`tokenmix.training.executor`).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any, Callable

from ..tabulate import text_table
from ..tasks import Task, task_info
from ..validate import is_positive_int
from .executor import RESULT_FILE, read_result, run_dir, run_one, submit_runs
from .build import build_model, make_task, plan_task
from .experiment import Experiment
from .tomlfile import to_toml
from .warmstart import split_warm_start, teacher_file
from .files import atomic_write_text, check_writable, disk_full_guard
from .leaderboard import write_report
from .lrstage import LR_STAGE_DIR, choose_rates, has_lr_stage, lr_stage, with_rates, write_choice
from .numerics import PINNED
from .numerics import numerics as current_numerics
from .locks import FolderLock
from .pool import PlannedRun, Progress, interrupt_on_sigterm, pinned_numerics, run_pool
from .power import attainable_lines
from .results import COLUMNS, ResultsDir, Twin, config_hash, recorded_row, result_row, run_config

__all__ = ["compare", "plan", "recorded_twins", "record_lock", "PlannedRun", "run_one", "run_dir", "check_out_dir",
           "dry_run_table", "pinned_numerics", "RESULT_FILE", "CONFIG_FILE"]

CONFIG_FILE = "config.toml"


def plan(experiment: Experiment, task: Task | None = None) -> tuple[Task, list[PlannedRun]]:
    """Every run, with its model built once (so a bad option fails here) and its planned steps. ``task``:
    the experiment's task (default: :func:`make_task`, its data loaded), or a planned one (:func:`plan_task`)."""
    task = task or make_task(experiment)
    train_size = task.split_sizes()["train"]
    metric = experiment.report.get("metric")
    if metric is not None and metric != task.info.metric:
        raise ValueError(f"experiment: [report] metric {metric!r}, but task {task.info.name!r} reports "
                         f"{task.info.metric!r}")
    planned = []
    for run in experiment.runs(task.info.kind):
        try:
            model = build_model(task, run)
        except (ValueError, TypeError) as error:
            raise ValueError(f"experiment: mixer entry {run.label!r}: {error}") from None
        config = experiment.train_config(run)
        total = config.max_steps
        if train_size is not None:  # None: a planned task whose size only the data can tell (max_steps given)
            steps_per_epoch = train_size // config.batch_size
            if steps_per_epoch == 0:
                raise ValueError(f"experiment: batch_size {config.batch_size} exceeds the {train_size} "
                                 f"training examples")
            total = total if total is not None else (config.epochs or 1) * steps_per_epoch
        elif total is None:
            raise ValueError(f"experiment: run {run.key!r} counts epochs, but the size of task "
                             f"{task.info.name!r}'s training split is not known without its data")
        planned.append(PlannedRun(run, sum(p.numel() for p in model.parameters()), total))
    return task, planned


# Keys a finished run does not depend on: changing them (more seeds, another report) keeps the sweep's runs.
_RUN_INDEPENDENT_KEYS = ("name", "description", "seeds", "report", "claims", "paper")


def check_out_dir(out: Path, experiment: Experiment) -> None:
    """``out`` is empty, or holds this experiment up to its seeds, name, description and report (then the
    sweep resumes: runs of new seeds are trained, runs of seeds no longer listed stay on disk, unreported)."""
    config = out / CONFIG_FILE
    if not config.exists():
        return
    import tomllib

    with open(config, "rb") as f:
        existing = Experiment.from_dict(tomllib.load(f)).to_dict()
    new = experiment.to_dict()
    differing = sorted(k for k in existing.keys() | new.keys() if existing.get(k) != new.get(k))
    run_keys = [k for k in differing if k not in _RUN_INDEPENDENT_KEYS]
    if run_keys:
        raise ValueError(f"experiment: {out} holds the results of a different experiment ({config} differs from "
                         f"this one in {', '.join(run_keys)}); choose another --out, or delete that folder to "
                         f"start over")
    if differing:
        print(f"{out}: resuming; changed: {', '.join(differing)} (finished runs do not depend on these)", flush=True)


def compare(experiment: Experiment, out_dir: str | Path, *, jobs: int = 1, isolate: bool = True,
            dry_run: bool = False, progress: bool | None = None, results_dir: str | Path | None = None,
            commit: bool = False, executor: str = "local", cluster_options: dict[str, Any] | None = None,
            left_out: dict[str, frozenset] | None = None, reuse: bool = True, pin: bool = True,
            repin: bool = False, on_finished: Callable[[PlannedRun, dict[str, Any]], None] | None = None
            ) -> list[dict[str, Any]]:
    """Run ``experiment`` into ``out_dir`` (see the module docstring) and return the result rows.

    ``jobs`` runs train at once, each in its own process with ``[train] threads`` torch threads (default:
    the cores shared out between the jobs). ``isolate=False`` trains one run after the other in this process
    (for tests and debugging; ``peak_mem_mb`` then includes memory earlier runs left to the allocator, and the
    runs compute with this process's numerics). ``pin``: the spawned runs' numerics are pinned
    (:mod:`~tokenmix.training.numerics`; ``False``: the host's own, as ``--verify`` reruns an unpinned row).
    ``repin`` (with ``results_dir``): a recorded row not computed with pinned numerics trains again and is
    replaced (rows of other experiments are not reused then).
    ``dry_run`` plans (builds every model, prints the runs) and trains nothing; it loads no data where the task
    can state its shape without (:func:`~tokenmix.training.build.plan_task`). ``results_dir``/``commit``/``reuse``:
    see the module docstring. ``executor="submitit"`` trains the runs as cluster jobs with the submitit
    parameters ``cluster_options`` (:func:`~tokenmix.training.executor.submit_runs`; ``jobs`` and ``isolate``
    then do not apply). ``left_out``: per claim,
    the seeds (rounds) it is not judged on (:func:`~.power.judged_on`), which the dry run's p counts without.
    ``on_finished(run, result)`` is called in this process as each run it trains finishes (after it is recorded;
    with submitit, once every job is in).

    While it trains, the sweep holds the lock of ``out_dir`` (:class:`~tokenmix.training.locks.FolderLock`), and
    with ``results_dir`` that of this experiment's record there (:func:`record_lock`): a second sweep into the
    same out folder, or of the same experiment into the same results folder, is refused with
    :class:`~tokenmix.training.locks.LockHeld` naming this one, and takes the lock over once this one is dead.
    ``out_dir`` and ``results_dir`` are checked writable before anything trains
    (:class:`~tokenmix.training.files.FolderNotWritable`); a full disk stops the sweep with
    :class:`~tokenmix.training.files.DiskFull` naming the file (finished runs are kept)."""
    if not is_positive_int(jobs):
        raise ValueError(f"jobs must be a positive int, got {jobs!r}")
    if experiment.report.get("harness_only") and not dry_run:
        raise ValueError(f"{experiment.name} trains nothing ([report] harness_only = true): its claims are judged on "
                         f"the step-time harness, `tokenmix steptime --config <file> --scaling`")
    if executor not in ("local", "submitit"):
        raise ValueError(f"executor must be 'local' or 'submitit', got {executor!r}")
    if cluster_options and executor != "submitit":
        raise ValueError("cluster options (--cluster) need --executor submitit")
    out = Path(out_dir)
    if has_lr_stage(experiment):
        return _two_stages(experiment, out, dry_run=dry_run, left_out=left_out, jobs=jobs, isolate=isolate,
                           progress=progress, results_dir=results_dir, commit=commit, executor=executor,
                           cluster_options=cluster_options, reuse=reuse, pin=pin, repin=repin,
                           on_finished=on_finished)
    if dry_run:  # as the task states itself where it can: no data loaded (or fetched)
        print(dry_run_table(experiment, *plan(experiment, plan_task(experiment)), jobs=jobs, results_dir=results_dir,
                            left_out=left_out))
        return []
    task, planned = plan(experiment)
    for folder in (out, results_dir):
        if folder is not None:
            check_writable(folder)
    with FolderLock(out, f"tokenmix compare {experiment.name}", timeout=0), \
            _record_lock(results_dir, experiment.name, out), disk_full_guard(out):
        return _compare_locked(experiment, out, task, planned, jobs=jobs, isolate=isolate, progress=progress,
                               results_dir=results_dir, commit=commit, executor=executor,
                               cluster_options=cluster_options, reuse=reuse and not repin, pin=pin, repin=repin,
                               on_finished=on_finished)


def _two_stages(experiment: Experiment, out: Path, *, dry_run: bool, left_out: dict[str, frozenset] | None,
                **common: Any) -> list[dict[str, Any]]:
    """An experiment with ``[train] lr_grid`` (:mod:`.lrstage`): its learning-rate stage into ``out/lr-stage``,
    the rates chosen on validation, then the experiment at them into ``out``."""
    info = task_info(experiment.task["name"])
    stage = lr_stage(experiment, info.kind)
    if dry_run:
        compare(stage, out / LR_STAGE_DIR, dry_run=True, **common)
        first = experiment.train["lr_grid"][0]
        final = with_rates(experiment, info.kind, dict.fromkeys(
            [e.label for e in experiment.entries_with_baseline(info.kind)], first))
        reused = [s for s in final.seeds if s in stage.seeds]
        print(f"\nthen, each entry at the rate its learning-rate stage chooses on validation (planned here at "
              f"{first:g}); seed(s) {', '.join(map(str, reused)) or 'none'} at that rate are the stage's own runs, "
              f"reused with --results (the estimate below still counts them):\n")
        return compare(final, out, dry_run=True, left_out=left_out, **common)
    rows = compare(stage, out / LR_STAGE_DIR, **common)
    chosen = choose_rates(experiment, info.kind, rows, info.higher_is_better)
    out.mkdir(parents=True, exist_ok=True)
    print("rates chosen on validation: " + ", ".join(f"{label} {lr:g}" for label, lr in chosen.items()), flush=True)
    write_choice(out / "lr-choice.csv", experiment, info.kind, rows, chosen)
    return compare(with_rates(experiment, info.kind, chosen), out, left_out=left_out, **common)


def record_lock(results_dir: str | Path, name: str, out: str | Path) -> FolderLock:
    """The lock a sweep of experiment ``name`` into ``out`` holds on its record in ``results_dir`` while it runs
    (``.tokenmix-sweep-<name>.lock`` there), whatever its out folder: two sweeps of one experiment into one
    results folder would train the same runs twice and race to record them. Its holder names the out folder, so
    that a second sweep, refused at once, says which sweep has it. Not the results folder's own lock
    (:meth:`~.results.ResultsDir.lock`), which every single write takes for a moment."""
    return FolderLock(results_dir, f"tokenmix compare {name} into {Path(out).resolve()}",
                      name=f".tokenmix-sweep-{name}.lock", timeout=0)


def _record_lock(results_dir: str | Path | None, name: str, out: Path) -> Any:
    return contextlib.nullcontext() if results_dir is None else record_lock(results_dir, name, out)


def _compare_locked(experiment: Experiment, out: Path, task: Task, planned: list[PlannedRun], *, jobs: int,
                    isolate: bool, progress: bool | None, results_dir: str | Path | None, commit: bool,
                    executor: str, cluster_options: dict[str, Any] | None, reuse: bool = True,
                    pin: bool = True, repin: bool = False,
                    on_finished: Callable[[PlannedRun, dict[str, Any]], None] | None = None
                    ) -> list[dict[str, Any]]:
    """:func:`compare` once the out folder is locked."""
    check_out_dir(out, experiment)
    atomic_write_text(out / CONFIG_FILE, to_toml(experiment.to_dict()))
    if executor == "submitit":
        threads = int(experiment.train.get("threads") or (cluster_options or {}).get("cpus_per_task") or 1)
    else:
        threads = experiment.threads(jobs)
    results: dict[str, dict[str, Any]] = {}
    for p in planned:
        result = read_result(run_dir(out, p.spec))  # a damaged one is moved aside: the run trains again
        if result is not None:
            results[p.spec.key] = result
    record = ResultsDir(results_dir, experiment.name, commit=commit) if results_dir is not None else None
    if record is not None:
        _repair(record, experiment, task, planned, results, threads, out)
    recorded = _recorded(record, experiment, task, planned, results, threads, repin) if record is not None else {}
    if record is not None and reuse:
        recorded.update(_reused(record, experiment, task, [p for p in planned if p.spec.key not in results
                                                           and p.spec.key not in recorded], threads,
                                   # the numerics its runs will compute with: spawned, pinned; in this process, its own
                                   PINNED if pin and (isolate or executor == "submitit") else current_numerics()))
    todo = [p for p in planned if p.spec.key not in results and p.spec.key not in recorded]
    for p in todo:  # a missing teacher stops the sweep here, before any run trains, saying which to run first
        init_from = split_warm_start(p.spec.model)[1].get("init_from")
        if init_from is not None and not (out / "runs" / p.spec.label / f"seed{p.spec.seed}").is_dir():
            teacher_file(init_from, p.spec.seed)
    if results or recorded:
        print(f"{len(results) + len(recorded)} of {len(planned)} runs already finished in {out}"
              + (f" or {record.csv}" if record is not None else "") + f"; training the other {len(todo)}",
              flush=True)

    def finished(p: PlannedRun, result: dict[str, Any]) -> None:
        if record is not None:
            with disk_full_guard(record.directory):
                record.save_run(result_row(experiment, p.spec, result), COLUMNS, result["history"],
                                run_config(experiment, p.spec, threads), task)
        if on_finished is not None:
            on_finished(p, result)

    data = experiment.to_dict()
    with interrupt_on_sigterm():
        if executor == "submitit":
            with pinned_numerics() if pin else contextlib.nullcontext():  # the jobs' environment is the submitter's
                results.update(submit_runs([p.spec for p in todo], data, out, threads, options=cluster_options,
                                           results_dir=results_dir, commit=commit, progress=progress))
            for p in todo:  # the jobs record their own rows; they are all in when submit_runs returns
                if on_finished is not None and p.spec.key in results:
                    on_finished(p, results[p.spec.key])
            todo = []
        bar = Progress(planned, set(results) | set(recorded), progress if todo else False)
        try:
            if isolate:
                run_pool(todo, data, str(out), threads, jobs, bar, results, finished, pin)
            else:
                for p in todo:
                    bar.start(p.spec.key)
                    results[p.spec.key] = run_one(data, p.spec.label, p.spec.seed, str(out), threads, bar.update)
                    bar.finish(p.spec.key, results[p.spec.key]["steps"])
                    finished(p, results[p.spec.key])
        finally:
            bar.close()
    rows = [recorded[p.spec.key][0] if p.spec.key in recorded
            else result_row(experiment, p.spec, results[p.spec.key]) for p in planned]
    histories = {(p.spec.label, p.spec.seed): recorded[p.spec.key][1] if p.spec.key in recorded
                 else results[p.spec.key]["history"] for p in planned}
    write_report(rows, histories, experiment, out, task)
    return rows


def _recorded(record: ResultsDir, experiment: Experiment, task: Task, planned: list[PlannedRun],
              results: dict[str, dict[str, Any]], threads: int, repin: bool = False
              ) -> dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]:
    """The runs ``record`` holds with their current config_hash and ``results`` lacks: key -> (row, history).
    Names the stale ones (they train again); records the runs finished in the out folder that it lacks."""
    rows, histories, found = record.rows(), record.histories(), {}
    for p in planned:
        row, config = rows.get((p.spec.label, p.spec.seed)), run_config(experiment, p.spec, threads)
        reason = record.stale_reason(row, config) if row is not None else None
        if row is not None and reason is None and repin and row.get("numerics") != PINNED:
            reason = f"computed with {row.get('numerics') or 'unrecorded'} numerics, not {PINNED} (--repin)"
        if row is not None and reason is not None:
            print(f"stale: {p.spec.key} in {record.csv}: {reason}; "
                  + ("recording its finished run from the out folder" if p.spec.key in results
                     else "it trains again and its row will be replaced"), flush=True)
        if p.spec.key in results:
            if row is None or reason is not None:  # finished before --results was given, or stale there
                record.save_run(result_row(experiment, p.spec, results[p.spec.key]), COLUMNS,
                                results[p.spec.key]["history"], config, task)
        elif row is not None and reason is None:
            found[p.spec.key] = (recorded_row(row),
                                 histories.get((p.spec.label, p.spec.seed), []))
    return found


def _repair(record: ResultsDir, experiment: Experiment, task: Task, planned: list[PlannedRun],
            results: dict[str, dict[str, Any]], threads: int, out: Path) -> None:
    """Repair the torn rows of ``record`` (:meth:`~.results.ResultsDir.torn`: a row without its evaluations or
    its config, which an older tokenmix left when the disk filled between its writes) before they are read, each
    said on stderr. A run finished in the out folder is recorded again, whole, from its ``result.json``. A
    planned run without one has its row dropped, so that it trains again and is recorded whole: keeping the row
    would keep a run whose evaluations (what its time to target and plateau are read from) no command could
    write any more, while the run is deterministic and gives the same row again. A row this sweep does not plan
    (another label or seed) is kept and named: nothing here could record it again."""
    torn = record.torn()
    planned_by = {(p.spec.label, p.spec.seed): p for p in planned}
    dropped = []
    for (label, seed), missing in torn.items():
        what = f"{record.csv}: {label} seed {seed} was recorded without {missing}"
        p = planned_by.get((label, seed))
        if p is None:
            print(f"warning: {what}; it is not a run of this sweep, so it is left as it is", file=sys.stderr,
                  flush=True)
        elif p.spec.key in results:
            print(f"{what}: recording it again from {run_dir(out, p.spec) / RESULT_FILE}", file=sys.stderr,
                  flush=True)
            record.save_run(result_row(experiment, p.spec, results[p.spec.key]), COLUMNS,
                            results[p.spec.key]["history"], run_config(experiment, p.spec, threads), task)
        else:
            print(f"{what}: dropping the row; the run trains again", file=sys.stderr, flush=True)
            dropped.append((label, seed))
    if dropped:
        record.drop_rows(dropped)


def recorded_twins(record: ResultsDir, experiment: Experiment, planned: list[PlannedRun], threads: int,
                   numerics: str | None = PINNED) -> dict[str, tuple[dict[str, Any], Twin]]:
    """key -> (its config, the run recorded in ``record``'s folder with the same config_hash and computed with
    ``numerics``, those the planned runs will use: :meth:`~.results.ResultsDir.twins`) for the runs of
    ``planned`` that have one. Runs of an experiment with a target are left out (their time to it is not in the
    other's row)."""
    configs = {p.spec.key: run_config(experiment, p.spec, threads) for p in planned
               if experiment.train_config(p.spec).target is None}
    digests = {key: config_hash(config) for key, config in configs.items()}
    labels = {p.spec.key: p.spec.label for p in planned}
    twins = record.twins({digest: labels[key] for key, digest in digests.items()}, numerics) if digests else {}
    return {key: (configs[key], twins[digest]) for key, digest in digests.items() if digest in twins}


def _reused(record: ResultsDir, experiment: Experiment, task: Task, planned: list[PlannedRun], threads: int,
            numerics: str) -> dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]:
    """The runs of ``planned`` that a run recorded by another experiment with ``numerics`` stands for
    (:func:`recorded_twins`), each recorded under its own label: key -> (row, history)."""
    found, labels = {}, {p.spec.key: p.spec.label for p in planned}
    for key, (config, twin) in recorded_twins(record, experiment, planned, threads, numerics).items():
        label = labels[key]
        digest, source = config_hash(config), f"{twin.experiment} {twin.label} seed {twin.seed}"
        row = twin.as_run_of(experiment.name, label)
        history = [{**h, "label": label} for h in twin.history]
        record.save_run(row, COLUMNS, history, config, task,
                        note=f"the run of {source}, same config {digest}: reused, not trained again")
        print(f"reused: {key} is the run recorded as {source} (same config {digest}); recorded, not "
              f"trained again", flush=True)
        found[key] = (row, history)
    return found



def _reusable(experiment: Experiment, planned: list[PlannedRun], folder: Path, jobs: int) -> dict[str, str]:
    """key -> the other experiment whose recorded run in ``folder`` a planned run is (same config_hash): compare
    records it without training it."""
    if not folder.is_dir():
        return {}
    twins = recorded_twins(ResultsDir(folder, experiment.name), experiment, planned, experiment.threads(jobs))
    return {key: twin.experiment for key, (_, twin) in twins.items() if twin.experiment != experiment.name}


def dry_run_table(experiment: Experiment, task: Task, planned: list[PlannedRun], *, jobs: int = 1,
                  results_dir: str | Path | None = None,
                  left_out: dict[str, frozenset] | None = None) -> str:
    """The resolved runs: label x seed, mixers, model settings, parameters, planned steps; then the expected
    training time at ``jobs`` from the runs recorded in ``results_dir`` or docs/reproduction, where there are;
    then each claim's smallest attainable p (without the seeds ``left_out`` of each:
    :func:`~.power.attainable_lines`)."""
    from .estimate import RECORD_DIR, estimate_line, estimate_time

    head = [f"experiment {experiment.name!r}: task {task.info.name} ({task.info.kind}, metric "
            f"{task.info.metric}), {len(planned)} runs", ""]
    rows = []
    for p in planned:
        mixer = p.spec.mixer if isinstance(p.spec.mixer, str) else " / ".join(p.spec.mixer)
        if p.spec.mixer_options:
            mixer += " " + ",".join(f"{k}={v}" for k, v in p.spec.mixer_options.items())
        model = ", ".join(f"{k}={v}" for k, v in p.spec.model.items() if v is not None)
        rows.append([p.spec.label, str(p.spec.seed), mixer, model, f"{p.params:,}", str(p.total_steps)])
    lines = text_table(["label", "seed", "mixer(s)", "model", "params", "steps"], rows).split("\n")
    folders = [results_dir, RECORD_DIR]
    reused = _reusable(experiment, planned, Path(results_dir) if results_dir is not None else RECORD_DIR, jobs)
    to_train = [p for p in planned if p.spec.key not in reused]
    estimate = estimate_time(experiment.name, [p.spec for p in to_train], folders,
                             steps={p.spec.key: p.total_steps for p in to_train},
                             params={p.spec.key: p.params for p in to_train}, task=task.info.name,
                             threads=experiment.threads(jobs)) if to_train else None
    lines += ["", estimate_line(estimate, jobs, experiment.name, folders) if to_train else
              "estimated time: none (every run is recorded already)"]
    if reused:
        sources = sorted(set(reused.values()))
        runs = f"{len(reused)} runs are" if len(reused) != 1 else "1 run is"
        lines.append(f"{runs} recorded by {', '.join(sources)} with the same config: reused, not trained again (not "
                     f"counted above)")
    claims = attainable_lines(experiment, left_out=left_out)  # per claim: the smallest Holm-adjusted p it can reach
    return "\n".join(head + lines + ([""] + claims if claims else []))
