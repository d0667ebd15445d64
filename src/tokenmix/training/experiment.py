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
    harness_memory = "once"   # "round": the scaling harness measures peak memory afresh every round (memory claims)

    [[mixers]]                # or: mixers = ["softmax", "linear", "swin:shift=true"]
    label = "softmax-32h"     # unique; names the run folder (default: the entry's name)
    name = "softmax"          # or pattern = ["twins_lsa", "twins_gsa"]
    options = { bias = false }    # mechanism options, every layer
    model = { heads = 32 }        # [model] settings for this entry only

    [paper]                   # optional: the paper this reproduces, for `tokenmix report`
    [[claims]]                # optional: the claims `tokenmix report` judges (tokenmix.study.claims)

:func:`load_experiment` reads a file (or the embedded default), applies a named budget and ``--set key=value``
overrides (:mod:`.overrides`: dotted keys, TOML values: ``train.lr=1e-3``, ``model.dim=64``, ``seeds=[0,1,2]``),
and checks every key and value (:mod:`.schema` the tables, :mod:`.entries` the mixers): an unknown key, a wrong
type, or a mixer that cannot run the task raises ``ValueError`` naming it. :mod:`.build` makes what a file
describes: its task (with ``[task] seed = "run"``, the task of one run: its data drawn from the run's seed, so
that the seeds' spread covers the data too) and each run's model; :func:`tokenmix.training.sweep.plan` builds
every model once (parameter counts, model options checked by the model itself), so that all of this fails
before any training starts. :mod:`.tomlfile` writes a config back as TOML.
"""

from __future__ import annotations

import copy
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..protocols import MODEL_PROTOCOLS
from ..registry import mixer_info
from ..study.claims import check_labels, parse_claims, parse_paper
from .config import TrainConfig
from .entries import MixerEntry, is_label, parse_entry
from .overrides import apply_budget, apply_override, parse_overrides
from .schema import (BASELINE, DEFAULT_PLOTS, HARNESS_ROUNDS, NOT_RUN_KEYS, RUN_SEED, TOP_KEYS, check_keys,
                     check_report, fail, nones, resolve_train, table)

__all__ = ["Experiment", "RunSpec", "load_experiment", "skip_reason", "DEFAULT_EXPERIMENT"]

# The main job: which mechanism keeps recall (multi-query associative recall, generated: nothing to download);
# softmax attention solves it, and DeltaNet with its short convolution in a fixed state; the point-wise "mlp"
# baseline stays at chance. experiments/mqar.toml is this, as a file.
DEFAULT_EXPERIMENT: dict[str, Any] = {
    "name": "mqar",
    "description": "Which mechanism keeps recall: six mechanisms on multi-query associative recall (64 tokens, 8 "
                   "pairs).",
    "seeds": [0],
    "task": {"name": "mqar", "preset": "quick"},
    "model": {"protocol": "default", "dim": 64, "depth": 2, "heads": 1},
    "train": {"preset": "quick", "max_steps": 800, "batch_size": 64, "lr": 3e-3, "eval_every": 200,
              "patience": None},
    "report": {"plots": ["metric_vs_state", "metric_vs_time"], "baseline": True},
    "mixers": ["softmax", "linear", "cosformer", "relation",
               {"label": "deltanet-conv4", "name": "deltanet", "options": {"conv_size": 4}}, "mlp"],
}


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
        check_keys(data, TOP_KEYS, "top level")
        seeds = data.get("seeds", [0])
        if (not isinstance(seeds, list) or not seeds or len(set(seeds)) != len(seeds)
                or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)):
            fail(f"seeds must be a non-empty list of distinct ints >= 0, got {seeds!r}")
        task = nones(table(data, "task"))
        if not isinstance(task.get("name"), str):
            fail("[task] needs a string 'name' (e.g. name = \"listops\")")
        data_seed = task.get("seed", 0)
        if data_seed != RUN_SEED and (not isinstance(data_seed, int) or isinstance(data_seed, bool) or data_seed < 0):
            fail(f"[task] seed must be an int >= 0 or \"{RUN_SEED}\" (each run's data from its own seed), "
                  f"got {data_seed!r}")
        model = {"protocol": "default", "dim": 32, "depth": 2, **nones(table(data, "model"))}
        train = resolve_train(nones(table(data, "train")))
        report = {"plots": list(DEFAULT_PLOTS), "baseline": True, "target_k": 1, "harness_rounds": HARNESS_ROUNDS,
                  **nones(table(data, "report"))}
        check_report(report)
        mixers = data.get("mixers")
        if not isinstance(mixers, list) or not mixers:
            fail("'mixers' must be a non-empty list of mixer names or [[mixers]] tables")
        entries = [parse_entry(item, i) for i, item in enumerate(mixers)]
        for entry in entries:
            if entry.train:
                _check_entry_train(entry, train)
        labels = [e.label for e in entries]
        duplicated = sorted({x for x in labels if labels.count(x) > 1})
        if duplicated:
            fail(f"mixer labels must be unique; repeated: {duplicated} (give each entry its own 'label')")
        name = data.get("name", "experiment")
        if not is_label(name):
            fail(f"name must be a simple word (letters, digits, _ . + = -), got {name!r}")
        description = data.get("description", "")
        if not isinstance(description, str):
            fail(f"description must be a string, got {description!r}")
        claims, paper = data.get("claims", []), data.get("paper", {})
        try:
            parse_claims(claims)
            parse_paper(paper)
        except ValueError as error:
            fail(str(error))
        return cls(name, description, list(seeds), task, model, train, report, entries, list(claims), dict(paper))

    def to_dict(self) -> dict[str, Any]:
        entries = [entry.to_dict() for entry in self.mixers]
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
                    fail(f"mixer {name!r} (entry {entry.label!r}) {reason}; choose the mixers for this task "
                         f"(--mixers, or mixers = [...] in the file; --mixers all: every one that can run it)")

    def runs(self, task_kind: str) -> list[RunSpec]:
        """Every entry x seed, in file order (seed-major within an entry)."""
        self.check_mixers(task_kind)
        train = {k: v for k, v in self.train.items() if k not in NOT_RUN_KEYS}
        train.update(target=self.report.get("target"), target_k=self.report.get("target_k", 1))
        runs = []
        for entry in self.entries_with_baseline(task_kind):
            model = {**self.model, **entry.model}
            for seed in self.seeds:
                runs.append(RunSpec(entry.label, seed, entry.mixer, dict(entry.options), model,
                                    {**train, **entry.train}))
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


def _check_entry_train(entry: MixerEntry, train: dict[str, Any]) -> None:
    """An entry's ``train`` over the file's ``[train]``, checked as :meth:`TrainConfig.preset` checks a run's."""
    if "lr" in entry.train and train.get("lr_grid") is not None:
        fail(f"mixer entry {entry.label!r} sets train.lr, but [train] lr_grid chooses every entry's rate")
    merged = {**{k: v for k, v in train.items() if k not in NOT_RUN_KEYS}, **entry.train}
    try:
        TrainConfig.preset(train.get("preset", "quick"), **merged)
    except (ValueError, TypeError) as error:
        fail(f"mixer entry {entry.label!r}: train: {error}")


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
            fail(f"no experiment file {str(path)!r}")
        except tomllib.TOMLDecodeError as error:
            fail(f"{path} is not valid TOML: {error}")
    written = data
    data = apply_budget(data, budget)
    for key, value in parse_overrides(overrides or []):
        apply_override(data, key, value)
    experiment = Experiment.from_dict(data)
    if written.get("claims"):
        # the claims name the labels of the file as written: a budget or --set may leave some runs out
        where = "the embedded default" if path is None else str(path)
        _refuse_retired(experiment.task, where)  # the task that runs, after any --set
        _check_claim_labels(Experiment.from_dict(written) if budget or overrides else experiment, where)
    return experiment


def _refuse_retired(table: dict[str, Any], where: str) -> None:
    """Claims on a retired task (``register_task(..., retired=why)``) or on a retired setting of one
    (:meth:`~tokenmix.tasks.base.Task.retired_setting`) are refused when the file loads."""
    from ..tasks import claims_refused

    task = table["name"]
    refused = claims_refused(task, {k: v for k, v in table.items() if k != "name"})
    if refused and refused[0] == "task":
        fail(f"{where}: task {task!r} is retired {refused[1]} No claim may be judged on it: drop the claims (a pilot "
             f"without claims still runs) or use another task")
    if refused:
        fail(f"{where}: this setting of task {task!r} is retired: {refused[1]} No claim may be judged on it: drop the "
             f"claims (a pilot without claims still runs) or choose another setting")


def _check_claim_labels(experiment: Experiment, where: str) -> None:
    """Every label the claims of ``experiment`` name is one of its runs' (:func:`~tokenmix.study.claims.check_labels`),
    so that a mistyped label is refused when the file is loaded (``compare``, its ``--dry-run`` and ``--status``,
    ``report``), not found only by the report after the sweep."""
    from ..tasks import task_info

    labels = [e.label for e in experiment.entries_with_baseline(task_info(experiment.task["name"]).kind)]
    try:
        check_labels(parse_claims(experiment.claims), labels)
    except ValueError as error:
        fail(f"{where}: {error}")
