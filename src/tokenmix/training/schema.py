"""The tables of an experiment file and the checks of their keys and values (:mod:`.experiment` reads the file).

Every check raises ``ValueError("experiment: ...")`` naming the table, the key and the value it refused:
:func:`check_keys` (an unknown key, with the known ones), :func:`resolve_train` (``[train]``: its preset, its
threads, and every field through :meth:`TrainConfig.preset`), :func:`check_report` (``[report]``: targets,
plots, the step-time harness's rounds and lengths). TOML has no null: the string ``"none"`` stands for None
(:func:`nones`).
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

from ..protocols import TRAIN_PRESETS
from ..validate import is_positive_int
from .config import TrainConfig

__all__ = ["TOP_KEYS", "MODEL_KEYS", "REPORT_KEYS", "RUN_SEED", "BASELINE", "PLOTS", "DEFAULT_PLOTS", "NOT_RUN_KEYS",
           "ENTRY_TRAIN_KEYS", "HARNESS_ROUNDS", "fail", "check_keys", "table", "nones", "resolve_train",
           "check_report"]

RUN_SEED = "run"  # [task] seed = "run": each run's data from the run's own seed (results.run_config hashes it so)
BASELINE = "mlp"  # the point-wise, no-context mechanism of Yamada et al. (2022) §3.2.1
PLOTS = ("metric_vs_time", "metric_vs_epoch_time", "metric_vs_state")
DEFAULT_PLOTS = PLOTS[:2]  # what a file that names no plots gets (metric_vs_state: causal LMs, e.g. MQAR)
HARNESS_ROUNDS = 10  # rounds of the step-time harness when the file does not set [report] harness_rounds
TOP_KEYS = {"name", "description", "seeds", "task", "model", "train", "report", "mixers", "budgets", "claims",
            "paper"}
MODEL_KEYS = {"protocol", "dim", "depth", "heads", "init_std"}  # everything else goes to the model class
REPORT_KEYS = {"metric", "target", "target_k", "plots", "baseline", "harness_rounds", "target_chosen_on",
               "targets_beside", "harness_lengths", "harness_only", "harness_memory"}
# TrainConfig fields an experiment sets; seed/out_dir/resume/progress belong to each run, not to the file.
_RUN_FIELDS = {"seed", "out_dir", "resume", "progress", "target", "target_k"}
# [train] keys that are not a run's TrainConfig: the preset, threads, and the learning-rate stage (lr_grid: the
# rates each entry is first trained at, on the seeds lr_seeds; the best validation metric picks each entry's rate
# for its seeds: tokenmix.training.lrstage)
NOT_RUN_KEYS = ("preset", "threads", "lr_grid", "lr_seeds")
ENTRY_TRAIN_KEYS = {f.name for f in fields(TrainConfig)} - _RUN_FIELDS  # what a [[mixers]] entry's train sets
_TRAIN_KEYS = ENTRY_TRAIN_KEYS | set(NOT_RUN_KEYS)


def fail(message: str) -> None:
    """Refuse an experiment file: ``ValueError("experiment: <message>")``."""
    raise ValueError(f"experiment: {message}")


def check_keys(table: dict[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        fail(f"unknown key(s) {unknown} in {where}; known: {', '.join(sorted(known))}")


def table(data: dict[str, Any], key: str) -> dict[str, Any]:
    """A copy of the table ``[key]`` of ``data`` (empty when absent)."""
    value = data.get(key, {})
    if not isinstance(value, dict):
        fail(f"[{key}] must be a table, got {type(value).__name__}")
    return dict(value)


def nones(table: dict[str, Any]) -> dict[str, Any]:
    """TOML has no null: the string ``"none"`` stands for None (``patience = "none"`` turns early stopping off)."""
    return {k: None if isinstance(v, str) and v.lower() == "none" else v for k, v in table.items()}


def resolve_train(train: dict[str, Any]) -> dict[str, Any]:
    """``[train]`` checked and completed: its preset (default quick), a step budget replacing the preset's
    epochs (and the other way round); every field checked by :meth:`TrainConfig.preset`."""
    check_keys(train, _TRAIN_KEYS, "[train]")
    preset = train.setdefault("preset", "quick")
    if preset not in TRAIN_PRESETS:
        fail(f"[train] preset {preset!r} is unknown; presets: {', '.join(TRAIN_PRESETS)}")
    threads = train.get("threads")
    if threads is not None and not is_positive_int(threads):
        fail(f"[train] threads must be a positive int, got {threads!r}")
    if "betas" in train and isinstance(train["betas"], list):
        train["betas"] = tuple(train["betas"])
    _check_lr_stage(train)
    if train.get("max_steps") is not None and "epochs" not in train:
        train["epochs"] = None  # a step budget replaces a preset's epochs
    if train.get("epochs") is not None and "max_steps" not in train:
        train["max_steps"] = None
    config = {k: v for k, v in train.items() if k not in NOT_RUN_KEYS}
    try:
        TrainConfig.preset(preset, **config)  # checks itself
    except (ValueError, TypeError) as error:
        fail(f"[train] {error}")
    return train


def _check_lr_stage(train: dict[str, Any]) -> None:
    grid, seeds = train.get("lr_grid"), train.get("lr_seeds")
    if grid is None:
        if seeds is not None:
            fail("[train] lr_seeds needs lr_grid (the rates the first stage tries)")
        return
    if (not isinstance(grid, list) or len(grid) < 2 or len(set(grid)) != len(grid)
            or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0
                       for x in grid)):
        fail(f"[train] lr_grid must be a list of at least two distinct positive learning rates, got {grid!r}")
    if "lr" in train:
        fail("[train] sets both lr and lr_grid: with lr_grid every entry's rate is chosen on validation")
    if seeds is not None and (not isinstance(seeds, list) or not seeds or len(set(seeds)) != len(seeds)
                              or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in seeds)):
        fail(f"[train] lr_seeds must be a non-empty list of distinct ints >= 0, got {seeds!r}")


def check_report(report: dict[str, Any]) -> None:
    """``[report]``'s values (its keys: :data:`REPORT_KEYS`)."""
    check_keys(report, REPORT_KEYS, "[report]")
    target = report.get("target")
    if target is not None and (isinstance(target, bool) or not isinstance(target, (int, float))
                               or not math.isfinite(target)):
        fail(f"[report] target must be a number, got {target!r}")
    chosen = report.get("target_chosen_on", [])
    if not isinstance(chosen, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in chosen):
        fail(f"[report] target_chosen_on must be a list of seeds, got {chosen!r}")
    beside = report.get("targets_beside", [])
    if not isinstance(beside, list) or any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in beside):
        fail(f"[report] targets_beside must be a list of numbers, got {beside!r}")
    k = report.get("target_k")
    if not is_positive_int(k):
        fail(f"[report] target_k must be a positive int, got {k!r}")
    plots = report.get("plots")
    if not isinstance(plots, list) or any(p not in PLOTS for p in plots):
        fail(f"[report] plots must be a list drawn from {list(PLOTS)}, got {plots!r}")
    if not isinstance(report.get("baseline"), bool):
        fail(f"[report] baseline must be true or false, got {report.get('baseline')!r}")
    if not is_positive_int(report.get("harness_rounds")):
        fail(f"[report] harness_rounds must be a positive int, got {report.get('harness_rounds')!r}")
    if report.get("harness_memory", "once") not in ("once", "round"):
        fail(f"[report] harness_memory must be \"once\" or \"round\", got {report.get('harness_memory')!r}")
    if not isinstance(report.get("harness_only", False), bool):
        fail(f"[report] harness_only must be true or false, got {report.get('harness_only')!r}")
    lengths = report.get("harness_lengths")
    if lengths is not None and (not isinstance(lengths, list) or len(lengths) < 2
                                or not all(is_positive_int(n) for n in lengths) or lengths != sorted(set(lengths))):
        fail(f"[report] harness_lengths must be a list of two or more ascending positive ints, got {lengths!r}")
    if "metric" in report and not isinstance(report["metric"], str):
        fail(f"[report] metric must be a string, got {report['metric']!r}")
