"""``tokenmix compare --status``: what a sweep has done and what it has left, without training anything."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..tabulate import text_table
from .build import plan_task
from .checkpoint import Checkpointer, damaged_reason
from .estimate import RECORD_DIR, TimeEstimate, borrowed_note, estimate_time
from .experiment import Experiment
from .lrstage import LR_STAGE_DIR, has_lr_stage, lr_stage, recorded_rates
from .results import ResultsDir, run_config
from .sweep import CONFIG_FILE, RESULT_FILE, check_out_dir, plan, recorded_twins, run_dir

__all__ = ["sweep_status"]


def _finished_history(path: Path) -> list[dict] | None:
    """The history in the ``result.json`` at ``path``; None when the file is damaged (not JSON, not a result)."""
    try:
        history = json.loads(path.read_text())["history"]
        return history if isinstance(history, list) and all("wall_s" in h for h in history) else None
    except (ValueError, KeyError, TypeError):
        return None


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours} h {rest // 60} min" if hours else f"{rest // 60} min {rest % 60} s"


def _record_source(estimate: TimeEstimate) -> str:
    if estimate.borrowed:
        return (f"the time per step of {estimate.recorded} recorded runs of other experiments in {estimate.csv} with "
                f"the same task, parameter count and threads")
    return f"the training wall time of {estimate.recorded} recorded runs in {estimate.csv}{borrowed_note(estimate)}"


def sweep_status(experiment: Experiment, out_dir: str | Path, results_dir: str | Path | None = None,
                 jobs: int = 1) -> str:
    """Per label: runs done (a row in ``results_dir`` with the run's config_hash, or ``result.json`` in
    ``out_dir``), partial (a checkpoint: its step / total) and remaining; the estimated time left (mean training
    wall time of the finished runs of the label, else the recorded runs' in ``results_dir`` or docs/reproduction,
    or comparable runs' of other experiments (:func:`~tokenmix.training.estimate.estimate_time`), else of all
    finished runs, times the remaining runs (a partial one by its remaining fraction), over ``jobs``); the stale
    rows. An experiment with a learning-rate stage (``[train] lr_grid``) is told in its two stages
    (:func:`_two_stages`). Trains nothing."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a positive int, got {jobs!r}")
    out = Path(out_dir)
    if has_lr_stage(experiment):
        return _two_stages(experiment, out, results_dir, jobs)
    task, planned = plan(experiment, plan_task(experiment))  # no data loaded where the task can say its sizes
    notes: list[str] = []
    use_out = True
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            check_out_dir(out, experiment)
    except ValueError as error:
        use_out = False
        notes.append(f"{out}: not counted: {error}")
    record = ResultsDir(results_dir, experiment.name) if results_dir is not None else None
    runs = _run_states(experiment, planned, out, record, use_out, jobs, notes)
    open_runs = [p for p in planned if runs.state[p.spec.key][0] != "done"]
    reusable = ({key: f"{twin.experiment} {twin.label} seed {twin.seed}" for key, (_, twin) in
                 recorded_twins(record, experiment, open_runs, experiment.threads(jobs)).items()}
                if record is not None and open_runs else {})
    for key in reusable:
        runs.state[key] = ("todo", None, 0.0)  # compare records it without training: no time left
    recorded_time = estimate_time(experiment.name, [p.spec for p in planned], [results_dir, RECORD_DIR],
                                  steps={p.spec.key: p.total_steps for p in planned},
                                  params={p.spec.key: p.params for p in planned}, task=task.info.name,
                                  threads=experiment.threads(jobs))
    header = ["label", "done", "remaining", "partial", "time left"]
    table, total_left, from_record = _label_table(planned, runs, recorded_time)
    lines = [f"experiment {experiment.name!r}: task {task.info.name}, {len(planned)} runs; out {out}"
             + (f"; results {record.csv}" if record is not None else "")
             + (f" ({CONFIG_FILE} there: another experiment)" if not use_out else ""), ""]
    lines += text_table(header, table).split("\n")
    finished = sum(1 for s, _, _ in runs.state.values() if s == "done")
    partial = sum(1 for s, _, _ in runs.state.values() if s == "partial")
    eta = _eta(runs, len(planned), table, total_left, jobs, recorded_time if from_record else None)
    lines += ["", f"{finished}/{len(planned)} done, {len(planned) - finished} remaining ({partial} partial); {eta}"]
    if runs.stale:
        lines += ["", "stale rows (train again, their rows will be replaced):"] + runs.stale
    if reusable:
        lines += ["", "recorded by another experiment with the same config (compare records them without training "
                      "them, unless --no-reuse; not in the time left):"] + [f"  {k}: {v}" for k, v in reusable.items()]
    if notes:
        lines += [""] + notes
    return "\n".join(lines)


def _two_stages(experiment: Experiment, out: Path, results_dir: str | Path | None, jobs: int) -> str:
    """The status of an experiment with a learning-rate stage: once that stage is complete in ``results_dir``, the
    seeds at the rates its rows choose (as ``compare --results`` runs them, not at ``[train] lr``); before, the
    stage itself (``<name>-lr``, in ``out/lr-stage``) and how many runs follow it."""
    from ..tasks import task_info

    info = task_info(experiment.task["name"])
    final = experiment if results_dir is None else \
        recorded_rates(experiment, info.kind, results_dir, info.higher_is_better)
    if not has_lr_stage(final):
        rates = ", ".join(f"{e.label} {e.train['lr']:g}" for e in final.mixers)
        return (f"learning-rate stage: complete in {Path(results_dir) / f'{experiment.name}-lr.csv'}; the seeds at "
                f"the rates it chose on validation ({rates})\n\n" + sweep_status(final, out, results_dir, jobs))
    stage = lr_stage(experiment, info.kind)
    runs = len(experiment.entries_with_baseline(info.kind)) * len(experiment.seeds)
    where = "" if results_dir is None else f" (none is chosen before the stage is complete in {results_dir})"
    return (sweep_status(stage, out / LR_STAGE_DIR, results_dir, jobs)
            + f"\n\nthen the seeds at the rates the stage chooses on validation{where}: {runs} runs, not counted "
              f"above (the stage's own runs at the chosen rates among them, reused)")


@dataclass
class _RunStates:
    """Per run key: (done | partial | todo, its training wall time, the fraction left); stale rows; partial runs'
    "seed<s> <step>/<total>"."""

    state: dict[str, tuple[str, float | None, float]] = field(default_factory=dict)
    stale: list[str] = field(default_factory=list)
    partial_text: dict[str, str] = field(default_factory=dict)

    @property
    def walls(self) -> list[float]:
        """The training wall times of the finished runs."""
        return [w for s, w, _ in self.state.values() if s == "done" and w is not None]


def _run_states(experiment: Experiment, planned: list, out: Path, record: ResultsDir | None, use_out: bool,
                jobs: int, notes: list[str]) -> _RunStates:
    """Where each planned run stands: a current row in the record, a finished or damaged result in ``out``, a
    checkpoint, or nothing (damaged files noted in ``notes``)."""
    recorded = record.rows() if record is not None else {}
    runs = _RunStates()
    for p in planned:
        spec, folder = p.spec, run_dir(out, p.spec)
        row = recorded.get((spec.label, spec.seed))
        reason = ("absent" if row is None
                  else record.stale_reason(row, run_config(experiment, spec, experiment.threads(jobs))))
        if row is not None and reason is None:
            runs.state[spec.key] = ("done", float(row["wall_s"] or 0.0), 0.0)
            continue
        if row is not None:
            runs.stale.append(f"  {spec.label} seed {spec.seed}: {reason}")
        if use_out and (folder / RESULT_FILE).exists():
            history = _finished_history(folder / RESULT_FILE)
            if history is not None:
                runs.state[spec.key] = ("done", history[-1]["wall_s"] if history else 0.0, 0.0)
                continue
            notes.append(f"{folder / RESULT_FILE}: damaged; the sweep will move it aside and train the run again")
        found = Checkpointer(str(folder), writes=False).find() if use_out else None
        damage = damaged_reason(found) if found is not None else None
        if damage is not None:
            notes.append(f"{found}: damaged ({damage}); the sweep will move it aside")
            found = None
        if found is not None:
            step = int(Checkpointer.read_state(found).get("step", 0))
            runs.partial_text[spec.key] = f"seed{spec.seed} {step}/{p.total_steps}"
            runs.state[spec.key] = ("partial", None, max(0.0, 1.0 - step / max(1, p.total_steps)))
        else:
            runs.state[spec.key] = ("todo", None, 1.0)
    return runs


def _label_table(planned: list, runs: _RunStates, recorded_time: TimeEstimate | None
                 ) -> tuple[list[list[str]], float, bool]:
    """One row per label (done, remaining, partial, time left), the total seconds left, and whether some label's
    time left came from the recorded runs."""
    walls = runs.walls
    from_record = False
    table, total_left = [], 0.0
    for label in dict.fromkeys(p.spec.label for p in planned):
        keys = [p.spec.key for p in planned if p.spec.label == label]
        done = [k for k in keys if runs.state[k][0] == "done"]
        mine = [runs.state[k][1] for k in done if runs.state[k][1] is not None]
        mean = sum(mine) / len(mine) if mine else (sum(walls) / len(walls) if walls else None)
        left = sum(runs.state[k][2] for k in keys)
        seconds = (mean or 0.0) * left
        timed = recorded_time is not None and all(k in recorded_time.per_run for k in keys if runs.state[k][2] > 0)
        if not mine and timed and left > 0:
            seconds = sum(recorded_time.per_run.get(k, 0.0) * runs.state[k][2] for k in keys)
            mean, from_record = 0.0, True
        total_left += seconds
        table.append([label, f"{len(done)}/{len(keys)}", str(len(keys) - len(done)),
                      ", ".join(runs.partial_text[k] for k in keys if k in runs.partial_text) or "-",
                      "-" if left == 0 else ("?" if mean is None else _duration(seconds))])
    return table, total_left, from_record


def _eta(runs: _RunStates, planned: int, table: list[list[str]], total_left: float, jobs: int,
         recorded_time: TimeEstimate | None) -> str:
    """The time left in words (``recorded_time``: given where some label was timed from the recorded runs)."""
    finished = sum(1 for s, _, _ in runs.state.values() if s == "done")
    if finished == planned:
        return "nothing left"
    if not any(left > 0 for _, _, left in runs.state.values()):
        return "no training left (the remaining runs are recorded by another experiment)"
    if not runs.walls and recorded_time is None:  # no label could be timed
        return "time left unknown (no finished run yet, and no recorded one to go by)"
    sources = (["the training wall time of the finished runs"] if runs.walls else []) + (
        [_record_source(recorded_time)] if recorded_time is not None else [])
    unknown = sum(1 for row in table if row[-1] == "?")
    return (f"estimated time left {_duration(total_left / jobs)} at --jobs {jobs} (from {' and '.join(sources)}"
            + ("; the labels marked ? are not counted" if unknown else "") + ")")
