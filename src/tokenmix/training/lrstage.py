"""The learning-rate stage of an experiment whose ``[train]`` sets ``lr_grid`` (Arora et al. (2023), Zoology, tune
every model's learning rate per setting; so does the recall experiment here).

``tokenmix compare`` then runs in two stages. First the experiment ``<name>-lr``: every entry (the ``mlp`` baseline
included) at every rate of ``lr_grid``, on the seeds ``lr_seeds`` (default: the file's first seed), each as its own
label ``<label>.lr<rate>``, into ``<out>/lr-stage``, recorded like any experiment. Then each entry's rate is the one
whose runs reach the best **validation** metric (their mean ``best_val`` over ``lr_seeds``; the first of the grid on a
tie): the test split never chooses. Finally the experiment itself runs with each entry at its chosen rate, on its
``seeds``; a seed the first stage already trained at that rate is the same run (the same ``config_hash``) and is
reused, not trained again. The choice is written beside the leaderboard, ``lr-choice.csv``.
"""

from __future__ import annotations

import copy
import csv
from pathlib import Path
from typing import Any

from .entries import MixerEntry
from .experiment import Experiment

__all__ = ["LR_STAGE_DIR", "has_lr_stage", "stage_label", "lr_stage", "choose_rates", "with_rates", "write_choice",
           "recorded_rates"]


LR_STAGE_DIR = "lr-stage"  # the first stage's out folder, inside the experiment's


def has_lr_stage(experiment: Experiment) -> bool:
    """Whether the experiment chooses each entry's rate first (``[train] lr_grid``)."""
    return experiment.train.get("lr_grid") is not None


def stage_label(label: str, lr: float) -> str:
    """The first stage's label of entry ``label`` at rate ``lr``."""
    return f"{label}.lr{lr:g}"


def _entries(experiment: Experiment, task_kind: str) -> list[MixerEntry]:
    return experiment.entries_with_baseline(task_kind)


def lr_stage(experiment: Experiment, task_kind: str) -> Experiment:
    """The first stage, ``<name>-lr``: every entry x rate, on ``lr_seeds``; no claims, no paper, no baseline
    added (the baseline is an entry here)."""
    train = {k: v for k, v in experiment.train.items() if k not in ("lr_grid", "lr_seeds")}
    entries = [MixerEntry(stage_label(e.label, lr), e.pattern, dict(e.options), dict(e.model),
                          {**e.train, "lr": lr})
               for e in _entries(experiment, task_kind) for lr in experiment.train["lr_grid"]]
    report = {**experiment.report, "baseline": False}
    return Experiment(f"{experiment.name}-lr", f"{experiment.name}: the learning-rate stage (rates chosen on "
                      f"validation)", list(experiment.train.get("lr_seeds") or experiment.seeds[:1]),
                      copy.deepcopy(experiment.task), dict(experiment.model), train, report, entries)


def choose_rates(experiment: Experiment, task_kind: str, rows: list[dict[str, Any]],
                 higher_is_better: bool) -> dict[str, float]:
    """Per entry label, the rate of ``lr_grid`` whose first-stage ``rows`` have the best mean ``best_val`` (the
    first of the grid on a tie). A rate without rows for every ``lr_seeds`` seed raises."""
    seeds = experiment.train.get("lr_seeds") or experiment.seeds[:1]
    chosen = {}
    for entry in _entries(experiment, task_kind):
        best, best_lr = None, None
        for lr in experiment.train["lr_grid"]:
            label = stage_label(entry.label, lr)
            values = [float(r["best_val"]) for r in rows if r["label"] == label and int(r["seed"]) in seeds]
            if len(values) != len(seeds):
                raise ValueError(f"{experiment.name}: the learning-rate stage has {len(values)} of {len(seeds)} "
                                 f"runs of {label!r}; run it to the end first")
            mean = sum(values) / len(values)
            if best is None or (mean > best if higher_is_better else mean < best):
                best, best_lr = mean, lr
        chosen[entry.label] = best_lr
    return chosen


def with_rates(experiment: Experiment, task_kind: str, chosen: dict[str, float]) -> Experiment:
    """The experiment with each entry (the baseline made an entry) at its chosen rate and no stage of its own
    (``lr_choice.csv`` records the grid)."""
    out = copy.deepcopy(experiment)
    out.train = {k: v for k, v in experiment.train.items() if k not in ("lr_grid", "lr_seeds")}
    out.mixers = [MixerEntry(e.label, e.pattern, dict(e.options), dict(e.model), {**e.train, "lr": chosen[e.label]})
                  for e in _entries(experiment, task_kind)]
    out.report = {**experiment.report, "baseline": False}
    return out


def write_choice(path: Path, experiment: Experiment, task_kind: str, rows: list[dict[str, Any]],
                 chosen: dict[str, float]) -> Path:
    """``lr-choice.csv``: per entry and rate, the first stage's mean best validation metric, and the rate chosen."""
    seeds = experiment.train.get("lr_seeds") or experiment.seeds[:1]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["label", "lr", "mean_best_val", "seeds", "chosen"])
        for entry in _entries(experiment, task_kind):
            for lr in experiment.train["lr_grid"]:
                values = [float(r["best_val"]) for r in rows
                          if r["label"] == stage_label(entry.label, lr) and int(r["seed"]) in seeds]
                writer.writerow([entry.label, f"{lr:g}", f"{sum(values) / len(values):.6f}",
                                 " ".join(map(str, seeds)), int(chosen[entry.label] == lr)])
    return path


def recorded_rates(experiment: Experiment, task_kind: str, results_dir: str | Path,
                   higher_is_better: bool) -> Experiment:
    """The experiment as ``tokenmix compare --results results_dir`` runs its second stage: each entry at the rate
    that the first stage's rows recorded there (``<name>-lr.csv``) choose, stale rows left out
    (:meth:`~tokenmix.training.results.ResultsDir.stale_because`). Unchanged without ``lr_grid``, and while that
    stage is not complete in ``results_dir`` (no rate is chosen yet, so no second-stage row can be of it)."""
    from .results import ResultsDir

    if not has_lr_stage(experiment):
        return experiment
    record = ResultsDir(results_dir, f"{experiment.name}-lr")
    # a row --verify found stale chooses nothing: the stage is not complete until it is trained again
    rows = [r for r in record.rows().values() if record.stale_because(r.get("code", ""), r["label"]) is None]
    try:
        chosen = choose_rates(experiment, task_kind, rows, higher_is_better)
    except ValueError:
        return experiment
    return with_rates(experiment, task_kind, chosen)
