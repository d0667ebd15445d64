"""What an experiment file builds: its task (:func:`make_task`; :func:`plan_task` without loading data where the
task can tell its shape) and the model of each run (:func:`build_model`)."""

from __future__ import annotations

from typing import Any

import torch

from ..tasks import Task, create_task, planned_task
from .experiment import Experiment, RunSpec
from .schema import MODEL_KEYS, RUN_SEED
from .warmstart import check_warm_start, split_warm_start

__all__ = ["make_task", "plan_task", "planned_steps_per_epoch", "build_model"]


def _task_options(experiment: Experiment, run_seed: int | None = None) -> dict[str, Any]:
    """``[task]`` without its name, with its data seed: 0 unless set; ``run_seed`` (None: 0) where it is "run"."""
    options = {k: v for k, v in experiment.task.items() if k != "name"}
    options.setdefault("seed", 0)
    if options["seed"] == RUN_SEED:
        options["seed"] = 0 if run_seed is None else run_seed
    return options


def make_task(experiment: Experiment, run_seed: int | None = None) -> Task:
    """The experiment's task (``[task]``: its name and options; data seed 0 unless the file sets one). With
    ``[task] seed = "run"``, the task of the run of seed ``run_seed``: its data drawn from that seed (None: seed
    0's, as planning and the chance file use)."""
    return create_task(experiment.task["name"], **_task_options(experiment, run_seed))


def plan_task(experiment: Experiment) -> Task:
    """The experiment's task for planning (parameters and steps, ``--dry-run``): as its options state it, loading
    no data (:func:`tokenmix.tasks.planned_task`), where it can; otherwise :func:`make_task`, its data loaded:
    where only the data can tell its shape, or its training split's size when a run counts steps in epochs."""
    task = planned_task(experiment.task["name"], **_task_options(experiment))
    if task is None:
        return make_task(experiment)
    if task.split_sizes()["train"] is None and any(experiment.train_config(run).max_steps is None
                                                   for run in experiment.runs(task.info.kind)):
        return make_task(experiment)
    return task


def planned_steps_per_epoch(experiment: Experiment) -> dict[str, int] | None:
    """Per label, the optimiser steps per epoch a run will take (train split // batch size, as
    :func:`tokenmix.training.setup.plan_run` counts them), from the sizes the task states without its data;
    None where only the data can tell the training split's size."""
    task = planned_task(experiment.task["name"], **_task_options(experiment))
    n_train = None if task is None else task.split_sizes()["train"]
    if n_train is None:
        return None
    return {run.label: n_train // experiment.train_config(run).batch_size for run in experiment.runs(task.info.kind)}


def build_model(task: Task, run: RunSpec) -> torch.nn.Module:
    """The model of ``run`` (seeded by ``run.seed``), through :meth:`Task.build_model`; a label's ``init_from`` and
    ``transfer`` (checked here) are the executor's (:mod:`tokenmix.training.warmstart`), not the model's."""
    model, warm = split_warm_start(dict(run.model))
    check_warm_start(run.label, warm)
    core = {k: model.pop(k, None) for k in MODEL_KEYS}
    torch.manual_seed(run.seed)
    return task.build_model(run.mixer, dim=core["dim"], depth=core["depth"], num_heads=core["heads"],
                            mixer_options=run.mixer_options or None, protocol=core["protocol"] or "default",
                            init_std=core["init_std"], model_options=model or None)
