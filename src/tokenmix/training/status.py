"""``tokenmix compare --status``: what a sweep has done and what it has left, without training anything."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from .checkpoint import Checkpointer
from .experiment import Experiment, plan_task
from .results import ResultsDir, run_config
from .sweep import CONFIG_FILE, RESULT_FILE, check_out_dir, plan, run_dir

__all__ = ["sweep_status"]


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours} h {rest // 60} min" if hours else f"{rest // 60} min {rest % 60} s"


def sweep_status(experiment: Experiment, out_dir: str | Path, results_dir: str | Path | None = None,
                 jobs: int = 1) -> str:
    """Per label: runs done (a row in ``results_dir`` with the run's config_hash, or ``result.json`` in
    ``out_dir``), partial (a checkpoint: its step / total) and remaining; the estimated time left (mean training
    wall time of the finished runs of the label, else of all finished runs, times the remaining runs (a partial
    one by its remaining fraction), over ``jobs``); the stale rows. Trains nothing."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a positive int, got {jobs!r}")
    out = Path(out_dir)
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
    recorded = record.rows() if record is not None else {}
    state: dict[str, tuple[str, float | None, float]] = {}  # key -> (done | partial | todo, wall_s, left fraction)
    stale, partial_text = [], {}
    for p in planned:
        spec, folder = p.spec, run_dir(out, p.spec)
        row = recorded.get((spec.label, spec.seed))
        reason = record.stale_reason(row, run_config(experiment, spec)) if row is not None else "absent"
        if row is not None and reason is None:
            state[spec.key] = ("done", float(row["wall_s"] or 0.0), 0.0)
            continue
        if row is not None:
            stale.append(f"  {spec.label} seed {spec.seed}: {reason}")
        if use_out and (folder / RESULT_FILE).exists():
            history = json.loads((folder / RESULT_FILE).read_text())["history"]
            state[spec.key] = ("done", history[-1]["wall_s"] if history else 0.0, 0.0)
            continue
        found = Checkpointer(str(folder), writes=False).find() if use_out else None
        if found is not None:
            step = int(Checkpointer.read_state(found).get("step", 0))
            partial_text[spec.key] = f"seed{spec.seed} {step}/{p.total_steps}"
            state[spec.key] = ("partial", None, max(0.0, 1.0 - step / max(1, p.total_steps)))
        else:
            state[spec.key] = ("todo", None, 1.0)
    walls = [w for s, w, _ in state.values() if s == "done" and w is not None]
    header = ["label", "done", "remaining", "partial", "time left"]
    table, total_left = [], 0.0
    for label in dict.fromkeys(p.spec.label for p in planned):
        keys = [p.spec.key for p in planned if p.spec.label == label]
        done = [k for k in keys if state[k][0] == "done"]
        mine = [state[k][1] for k in done if state[k][1] is not None]
        mean = sum(mine) / len(mine) if mine else (sum(walls) / len(walls) if walls else None)
        left = sum(state[k][2] for k in keys)
        seconds = (mean or 0.0) * left
        total_left += seconds
        table.append([label, f"{len(done)}/{len(keys)}", str(len(keys) - len(done)),
                      ", ".join(partial_text[k] for k in keys if k in partial_text) or "-",
                      "-" if left == 0 else ("?" if mean is None else _duration(seconds))])
    widths = [max(len(r[i]) for r in [header] + table) for i in range(len(header))]
    lines = [f"experiment {experiment.name!r}: task {task.info.name}, {len(planned)} runs; out {out}"
             + (f"; results {record.csv}" if record is not None else "")
             + (f" ({CONFIG_FILE} there: another experiment)" if not use_out else ""), ""]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header] + table]
    lines.insert(3, "-" * len(lines[2]))
    finished = sum(1 for s, _, _ in state.values() if s == "done")
    partial = sum(1 for s, _, _ in state.values() if s == "partial")
    if finished == len(planned):
        eta = "nothing left"
    elif not walls:
        eta = "time left unknown (no finished run yet)"
    else:
        eta = (f"estimated time left {_duration(total_left / jobs)} at --jobs {jobs} (from the training wall "
               f"time of the finished runs)")
    lines += ["", f"{finished}/{len(planned)} done, {len(planned) - finished} remaining ({partial} partial); {eta}"]
    if stale:
        lines += ["", "stale rows (train again, their rows will be replaced):"] + stale
    if notes:
        lines += [""] + notes
    return "\n".join(lines)
