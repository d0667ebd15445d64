"""Experiment files: one TOML file describes a whole comparison, so that anyone can read, edit, run and cite it.

::

    name = "listops"
    description = "..."
    seeds = [0, 1]

    [task]                    # the task and its options (tokenmix.tasks.create_task)
    name = "listops"
    preset = "quick"
    seed = 0                  # the data's seed (split, sample, generated data); "run": each run's own seed

    [model]                   # protocol, sizes and model-class options (Task.build_model)
    protocol = "default"      # default | paper-000 | paper-003 | paper-004 (tokenmix.protocols)
    dim = 32
    depth = 2
    heads = 2                 # goes to the mixers with heads only (MixerInfo.heads)
    # init_std = 0.01, ffn_dim = 128, dropout = 0.1, pooling = "mean", patch_size = 4, inner_dim = 64, ...

    [train]                   # a training preset and TrainConfig fields on top of it
    preset = "quick"          # quick | paper-000 | paper-003 | paper-004 (tokenmix.protocols)
    max_steps = 1500
    threads = 1               # torch threads per run (default: the cores shared out between --jobs)

    [report]
    target = 0.5              # time to target: reached at target_k evaluations in a row
    target_k = 1
    target_chosen_on = [0]    # seeds whose runs chose the target (a pilot): the time-to-target claims leave them out
    targets_beside = [0.8]    # the time-to-target claims are also judged at these targets, printed beside
    plots = ["metric_vs_time", "metric_vs_epoch_time"]
    baseline = true           # add the no-context "mlp" run when no entry is it
    harness_rounds = 10       # rounds of `tokenmix steptime` (the samples of every time claim)
    harness_lengths = [1024, 4096]  # `tokenmix steptime --scaling`: the lengths the scaling claims read
    harness_only = false      # true: no training runs, every claim judged on `tokenmix steptime` (compare refuses)

    [[mixers]]                # or: mixers = ["softmax", "linear", "swin:shift=true"]
    label = "softmax-32h"     # unique; names the run folder (default: the entry's name)
    name = "softmax"          # or pattern = ["twins_lsa", "twins_gsa"]
    options = { bias = false }    # mechanism options, every layer
    model = { heads = 32 }        # [model] settings for this entry only

    [paper]                   # optional: the paper this reproduces, for `tokenmix report`
    [[claims]]                # optional: the claims `tokenmix report` judges (tokenmix.study.claims)

:func:`load_experiment` reads a file (or the embedded default), applies ``--set key=value`` overrides
(dotted keys, TOML values: ``train.lr=1e-3``, ``model.dim=64``, ``seeds=[0,1,2]``), and checks every key
and value: an unknown key, a wrong type, or a mixer that cannot run the task raises ``ValueError`` naming
it. :func:`tokenmix.training.sweep.plan` builds every model once (:func:`build_model`: parameter counts, model
options checked by the model itself), so that all of this fails before any training starts. :func:`make_task`
builds the experiment's task (with ``[task] seed = "run"``, the task of one run: its data drawn from the run's
seed, so that the seeds' spread covers the data too).
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import tomllib

import tomli_w
import torch

from ..models.patterns import parse_layer_mixer, pattern_names
from ..protocols import MODEL_PROTOCOLS, TRAIN_PRESETS
from ..registry import mixer_info
from ..tasks import Task, create_task, planned_task
from ..validate import is_positive_int
from ..study.claims import parse_claims, parse_paper
from .config import TrainConfig

__all__ = ["Experiment", "MixerEntry", "RunSpec", "load_experiment", "apply_budget", "parse_overrides", "to_toml",
           "make_task", "plan_task", "planned_steps_per_epoch", "build_model", "skip_reason", "DEFAULT_EXPERIMENT",
           "BASELINE", "PLOTS", "HARNESS_ROUNDS", "RUN_SEED"]

RUN_SEED = "run"  # [task] seed = "run": each run's data from the run's own seed (results.run_config hashes it so)
BASELINE = "mlp"  # the point-wise, no-context mechanism of Yamada et al. (2022) §3.2.1
PLOTS = ("metric_vs_time", "metric_vs_epoch_time")
_TOP = {"name", "description", "seeds", "task", "model", "train", "report", "mixers", "budgets", "claims", "paper"}
_MODEL_KEYS = {"protocol", "dim", "depth", "heads", "init_std"}  # everything else goes to the model class
_REPORT_KEYS = {"metric", "target", "target_k", "plots", "baseline", "harness_rounds", "target_chosen_on",
                "targets_beside", "harness_lengths", "harness_only"}
HARNESS_ROUNDS = 10  # rounds of the step-time harness when the file does not set [report] harness_rounds
_ENTRY_KEYS = {"label", "name", "pattern", "options", "model"}
# TrainConfig fields an experiment sets; seed/out_dir/resume/progress belong to each run, not to the file.
_RUN_FIELDS = {"seed", "out_dir", "resume", "progress", "target", "target_k"}
_TRAIN_KEYS = ({f.name for f in fields(TrainConfig)} - _RUN_FIELDS) | {"preset", "threads"}
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+=-]*$")

# The main job: generated data only (nothing to download), a task where context matters, so the pointwise
# "mlp" baseline should trail the mechanisms that mix tokens. experiments/listops.toml is this, as a file.
DEFAULT_EXPERIMENT: dict[str, Any] = {
    "name": "listops",
    "description": "Six mechanisms on generated ListOps (LRA rules, short quick preset), 2 seeds.",
    "seeds": [0, 1],
    "task": {"name": "listops", "preset": "quick"},
    "model": {"protocol": "default", "dim": 32, "depth": 2, "heads": 2},
    "train": {"preset": "quick", "max_steps": 1500, "batch_size": 32, "lr": 3e-3, "eval_every": 250,
              "patience": None},
    "report": {"plots": list(PLOTS), "baseline": True},
    "mixers": ["mlp", "softmax", "linear", "relation", "average", "cosformer"],
}


def _fail(message: str) -> None:
    raise ValueError(f"experiment: {message}")


@dataclass(frozen=True)
class MixerEntry:
    """One compared configuration: a label, the layer pattern, its options, and its [model] overrides."""

    label: str
    pattern: tuple[str, ...]
    options: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)

    @property
    def mixer(self) -> str | list[str]:
        return self.pattern[0] if len(self.pattern) == 1 else list(self.pattern)

    @property
    def names(self) -> list[str]:
        return pattern_names(list(self.pattern), f"mixer {self.label!r}")


@dataclass(frozen=True)
class RunSpec:
    """One training run of an experiment: a mixer entry and a seed, with everything resolved."""

    label: str
    seed: int
    mixer: Any
    mixer_options: dict[str, Any]
    model: dict[str, Any]
    train: dict[str, Any]

    @property
    def key(self) -> str:
        return f"{self.label}/seed{self.seed}"


@dataclass
class Experiment:
    """A resolved experiment (see the module docstring); :meth:`to_dict` is what ``config.toml`` holds."""

    name: str
    description: str
    seeds: list[int]
    task: dict[str, Any]
    model: dict[str, Any]
    train: dict[str, Any]
    report: dict[str, Any]
    mixers: list[MixerEntry]
    claims: list[dict[str, Any]] = field(default_factory=list)  # [[claims]], as written (tokenmix.report)
    paper: dict[str, Any] = field(default_factory=dict)  # [paper], as written

    # -- construction --------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Experiment":
        data = apply_budget(data, None)  # a copy, without [budgets]: load_experiment applies a named one
        _check_keys(data, _TOP, "top level")
        seeds = data.get("seeds", [0])
        if (not isinstance(seeds, list) or not seeds or len(set(seeds)) != len(seeds)
                or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)):
            _fail(f"seeds must be a non-empty list of distinct ints >= 0, got {seeds!r}")
        task = _nones(_table(data, "task"))
        if not isinstance(task.get("name"), str):
            _fail("[task] needs a string 'name' (e.g. name = \"listops\")")
        data_seed = task.get("seed", 0)
        if data_seed != RUN_SEED and (not isinstance(data_seed, int) or isinstance(data_seed, bool) or data_seed < 0):
            _fail(f"[task] seed must be an int >= 0 or \"{RUN_SEED}\" (each run's data from its own seed), "
                  f"got {data_seed!r}")
        model = {"protocol": "default", "dim": 32, "depth": 2, **_nones(_table(data, "model"))}
        train = _resolve_train(_nones(_table(data, "train")))
        report = {"plots": list(PLOTS), "baseline": True, "target_k": 1, "harness_rounds": HARNESS_ROUNDS,
                  **_nones(_table(data, "report"))}
        _check_keys(report, _REPORT_KEYS, "[report]")
        _check_report(report)
        mixers = data.get("mixers")
        if not isinstance(mixers, list) or not mixers:
            _fail("'mixers' must be a non-empty list of mixer names or [[mixers]] tables")
        entries = [_entry(item, i) for i, item in enumerate(mixers)]
        labels = [e.label for e in entries]
        duplicated = sorted({x for x in labels if labels.count(x) > 1})
        if duplicated:
            _fail(f"mixer labels must be unique; repeated: {duplicated} (give each entry its own 'label')")
        name = data.get("name", "experiment")
        if not isinstance(name, str) or not _LABEL.match(name):
            _fail(f"name must be a simple word (letters, digits, _ . + = -), got {name!r}")
        description = data.get("description", "")
        if not isinstance(description, str):
            _fail(f"description must be a string, got {description!r}")
        claims, paper = data.get("claims", []), data.get("paper", {})
        try:
            parse_claims(claims)
            parse_paper(paper)
        except ValueError as error:
            _fail(str(error))
        return cls(name, description, list(seeds), task, model, train, report, entries, list(claims), dict(paper))

    def to_dict(self) -> dict[str, Any]:
        entries = []
        for e in self.mixers:
            entry: dict[str, Any] = {"label": e.label}
            entry.update({"name": e.pattern[0]} if len(e.pattern) == 1 else {"pattern": list(e.pattern)})
            if e.options:
                entry["options"] = dict(e.options)
            if e.model:
                entry["model"] = dict(e.model)
            entries.append(entry)
        extra = {"paper": dict(self.paper)} if self.paper else {}
        if self.claims:
            extra["claims"] = [dict(c) for c in self.claims]
        return {"name": self.name, "description": self.description, "seeds": list(self.seeds),
                "task": dict(self.task), "model": dict(self.model), "train": dict(self.train),
                "report": dict(self.report), "mixers": entries, **extra}

    # -- what runs ---------------------------------------------------------------------------------------
    def entries_with_baseline(self, task_kind: str) -> list[MixerEntry]:
        """The entries, plus the ``mlp`` baseline when ``report.baseline`` asks for it, no entry is it
        already, and it fits the model protocol (its ``baseline`` in :data:`tokenmix.protocols.MODEL_PROTOCOLS`:
        the Contextualizer's own network has no place for it)."""
        entries = list(self.mixers)
        wants = self.report.get("baseline", True)
        fits = MODEL_PROTOCOLS.get(self.model["protocol"] or "default", {}).get("baseline", True)
        if wants and all(e.names != [BASELINE] for e in entries) and fits:
            entries.append(MixerEntry(BASELINE, (BASELINE,)))
        return entries

    def check_mixers(self, task_kind: str) -> None:
        """Every entry's mixers can run a task of ``task_kind`` (ValueError naming the entry and mixer)."""
        for entry in self.mixers:
            for name in entry.names:
                reason = skip_reason(name, task_kind)
                if reason is not None:
                    _fail(f"mixer {name!r} (entry {entry.label!r}) {reason}")

    def runs(self, task_kind: str) -> list[RunSpec]:
        """Every entry x seed, in file order (seed-major within an entry)."""
        self.check_mixers(task_kind)
        train = {k: v for k, v in self.train.items() if k not in ("preset", "threads")}
        train.update(target=self.report.get("target"), target_k=self.report.get("target_k", 1))
        runs = []
        for entry in self.entries_with_baseline(task_kind):
            model = {**self.model, **entry.model}
            for seed in self.seeds:
                runs.append(RunSpec(entry.label, seed, entry.mixer, dict(entry.options), model, dict(train)))
        return runs

    def threads(self, jobs: int = 1) -> int:
        """The torch threads of each run: ``[train] threads``, else the cores shared out between ``jobs`` runs
        at once. Part of every run's config_hash (its floating-point results depend on it)."""
        import os

        return int(self.train.get("threads") or max(1, (os.cpu_count() or 1) // jobs))

    def train_config(self, run: RunSpec, **run_fields: Any) -> TrainConfig:
        """The TrainConfig of ``run``: the preset, the file's fields, the run's seed and ``run_fields``."""
        return TrainConfig.preset(self.train.get("preset", "quick"), **{**run.train, "seed": run.seed,
                                                                        **run_fields})


def skip_reason(mixer: str, task_kind: str) -> str | None:
    """Why ``mixer`` cannot run a task of ``task_kind`` (None when it can)."""
    info = mixer_info(mixer)
    if task_kind == "language_model" and not info.causal:
        return "cannot run causally, which language modelling needs"
    if task_kind != "language_model" and not info.bidirectional:
        return "is causal only; this task needs a bidirectional mixer"
    if info.spatial and task_kind != "image":
        return "is spatial (needs a 2-D grid); this task is a 1-D sequence"
    return None


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
    """The model of ``run`` (seeded by ``run.seed``), through :meth:`Task.build_model`."""
    model = dict(run.model)
    core = {k: model.pop(k, None) for k in ("protocol", "dim", "depth", "heads", "init_std")}
    torch.manual_seed(run.seed)
    return task.build_model(run.mixer, dim=core["dim"], depth=core["depth"], num_heads=core["heads"],
                            mixer_options=run.mixer_options or None, protocol=core["protocol"] or "default",
                            init_std=core["init_std"], model_options=model or None)


# -- parsing helpers ---------------------------------------------------------------------------------------
def _check_keys(table: dict[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        _fail(f"unknown key(s) {unknown} in {where}; known: {', '.join(sorted(known))}")


def _table(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        _fail(f"[{key}] must be a table, got {type(value).__name__}")
    return dict(value)


def _nones(table: dict[str, Any]) -> dict[str, Any]:
    """TOML has no null: the string ``"none"`` stands for None (``patience = "none"`` turns early stopping off)."""
    return {k: None if isinstance(v, str) and v.lower() == "none" else v for k, v in table.items()}


def _resolve_train(train: dict[str, Any]) -> dict[str, Any]:
    _check_keys(train, _TRAIN_KEYS, "[train]")
    preset = train.setdefault("preset", "quick")
    if preset not in TRAIN_PRESETS:
        _fail(f"[train] preset {preset!r} is unknown; presets: {', '.join(TRAIN_PRESETS)}")
    threads = train.get("threads")
    if threads is not None and not is_positive_int(threads):
        _fail(f"[train] threads must be a positive int, got {threads!r}")
    if "betas" in train and isinstance(train["betas"], list):
        train["betas"] = tuple(train["betas"])
    if train.get("max_steps") is not None and "epochs" not in train:
        train["epochs"] = None  # a step budget replaces a preset's epochs
    if train.get("epochs") is not None and "max_steps" not in train:
        train["max_steps"] = None
    config = {k: v for k, v in train.items() if k not in ("preset", "threads")}
    try:
        TrainConfig.preset(preset, **config)  # checks itself
    except (ValueError, TypeError) as error:
        _fail(f"[train] {error}")
    return train


def _check_report(report: dict[str, Any]) -> None:
    target = report.get("target")
    if target is not None and (isinstance(target, bool) or not isinstance(target, (int, float))
                               or not math.isfinite(target)):
        _fail(f"[report] target must be a number, got {target!r}")
    chosen = report.get("target_chosen_on", [])
    if not isinstance(chosen, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in chosen):
        _fail(f"[report] target_chosen_on must be a list of seeds, got {chosen!r}")
    beside = report.get("targets_beside", [])
    if not isinstance(beside, list) or any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in beside):
        _fail(f"[report] targets_beside must be a list of numbers, got {beside!r}")
    k = report.get("target_k")
    if not is_positive_int(k):
        _fail(f"[report] target_k must be a positive int, got {k!r}")
    plots = report.get("plots")
    if not isinstance(plots, list) or any(p not in PLOTS for p in plots):
        _fail(f"[report] plots must be a list drawn from {list(PLOTS)}, got {plots!r}")
    if not isinstance(report.get("baseline"), bool):
        _fail(f"[report] baseline must be true or false, got {report.get('baseline')!r}")
    if not is_positive_int(report.get("harness_rounds")):
        _fail(f"[report] harness_rounds must be a positive int, got {report.get('harness_rounds')!r}")
    if not isinstance(report.get("harness_only", False), bool):
        _fail(f"[report] harness_only must be true or false, got {report.get('harness_only')!r}")
    lengths = report.get("harness_lengths")
    if lengths is not None and (not isinstance(lengths, list) or len(lengths) < 2
                                or not all(is_positive_int(n) for n in lengths) or lengths != sorted(set(lengths))):
        _fail(f"[report] harness_lengths must be a list of two or more ascending positive ints, got {lengths!r}")
    if "metric" in report and not isinstance(report["metric"], str):
        _fail(f"[report] metric must be a string, got {report['metric']!r}")


def _entry(item: Any, index: int) -> MixerEntry:
    where = f"mixers[{index}]"
    if isinstance(item, str):
        layer = parse_layer_mixer(item, f"experiment: {where}")
        return MixerEntry(item if _LABEL.match(item) else layer.name, (layer.name,), dict(layer.options))
    if not isinstance(item, dict):
        _fail(f"{where} must be a mixer name or a table, got {type(item).__name__}")
    _check_keys(item, _ENTRY_KEYS, where)
    if ("name" in item) == ("pattern" in item):
        _fail(f"{where} needs exactly one of 'name' (one mechanism) or 'pattern' (a list per layer)")
    pattern = [item["name"]] if "name" in item else item["pattern"]
    if not isinstance(pattern, list) or not pattern or not all(isinstance(p, (str, dict)) for p in pattern):
        _fail(f"{where}.pattern must be a non-empty list of mixer entries, got {pattern!r}")
    layers = [parse_layer_mixer(p, f"experiment: {where}") for p in pattern]
    label = item.get("label", "-".join(layer.name for layer in layers))
    if not isinstance(label, str) or not _LABEL.match(label):
        _fail(f"{where}.label must be a simple word (letters, digits, _ . + = -), got {label!r}")
    options, model = item.get("options", {}), item.get("model", {})
    for key, value in (("options", options), ("model", model)):
        if not isinstance(value, dict):
            _fail(f"{where}.{key} must be a table, got {type(value).__name__}")
    if len(layers) == 1:  # one mechanism: its inline options join the entry's (the entry's win)
        return MixerEntry(label, (layers[0].name,), {**dict(layers[0].options), **options}, dict(model))
    return MixerEntry(label, tuple(layer.label for layer in layers), dict(options), dict(model))


# -- files and overrides ---------------------------------------------------------------------------------
def parse_overrides(items: list[str]) -> list[tuple[list[str], Any]]:
    """``["train.lr=1e-3", "seeds=[0,1]"]`` -> ``[(["train", "lr"], 0.001), (["seeds"], [0, 1])]``: values are
    TOML values, or plain strings when they are not (``task.name=listops``)."""
    parsed = []
    for item in items:
        key, eq, text = item.partition("=")
        if not eq or not key.strip() or any(not part for part in key.strip().split(".")):
            _fail(f"--set expects key=value with a dotted key (e.g. train.lr=1e-3), got {item!r}")
        try:
            value = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            value = text
        parsed.append((key.strip().split("."), value))
    return parsed


def _apply(data: dict[str, Any], path: list[str], value: Any) -> None:
    node = data
    for part in path[:-1]:
        if part not in node:
            node[part] = {}
        if not isinstance(node[part], dict):
            _fail(f"--set {'.'.join(path)}: {part!r} is not a table")
        node = node[part]
    node[path[-1]] = value


def apply_budget(data: dict[str, Any], budget: str | None) -> dict[str, Any]:
    """``data`` without its ``[budgets]`` tables, and with the named one's settings merged in (None: the file's
    own, full budget). A budget table holds top-level keys (``seeds``) and tables (``train``, ``task``) whose
    keys replace the file's: ``[budgets.quick]`` keeps a short budget for smoke runs beside the budget the
    verdicts come from."""
    data = copy.deepcopy(data)
    budgets = data.pop("budgets", {})
    if not isinstance(budgets, dict) or not all(isinstance(v, dict) for v in budgets.values()):
        _fail("[budgets] must hold named tables, e.g. [budgets.quick]")
    if budget is None:
        return data
    if budget not in budgets:
        _fail(f"no budget {budget!r} in the experiment file; budgets: {', '.join(budgets) or 'none'}")
    for key, value in budgets[budget].items():
        if key not in _TOP - {"name", "budgets"}:
            _fail(f"[budgets.{budget}]: unknown key {key!r}")
        if isinstance(value, dict):
            if not isinstance(data.get(key, {}), dict):
                _fail(f"[budgets.{budget}]: {key!r} is not a table in the experiment")
            data[key] = {**data.get(key, {}), **value}
        else:
            data[key] = value
    return data


def load_experiment(path: str | Path | None = None, overrides: list[str] | None = None,
                    budget: str | None = None) -> Experiment:
    """The experiment in the TOML file ``path`` (None: :data:`DEFAULT_EXPERIMENT`) at its full budget or the
    named ``budget`` (:func:`apply_budget`), with ``--set`` overrides on top."""
    if path is None:
        data = copy.deepcopy(DEFAULT_EXPERIMENT)
    else:
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except FileNotFoundError:
            _fail(f"no experiment file {str(path)!r}")
        except tomllib.TOMLDecodeError as error:
            _fail(f"{path} is not valid TOML: {error}")
    data = apply_budget(data, budget)
    for key, value in parse_overrides(overrides or []):
        _apply(data, key, value)
    return Experiment.from_dict(data)


def to_toml(data: dict[str, Any]) -> str:
    """TOML text of a config dict (written by ``tomli_w``). TOML has no null: None is written as ``"none"``,
    which :func:`load_experiment` reads back as None; a non-finite float is refused."""
    return tomli_w.dumps(_toml_ready(data))


def _toml_ready(value: Any) -> Any:
    if value is None:
        return "none"
    if isinstance(value, float) and not math.isfinite(value):
        _fail(f"cannot write the non-finite value {value} to TOML")
    if isinstance(value, dict):
        return {key: _toml_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_toml_ready(item) for item in value]
    return value
