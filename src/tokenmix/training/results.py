"""Committed results: the small CSVs of an experiment's finished runs, kept in a folder under version control.

``tokenmix compare --results DIR`` (:class:`ResultsDir`) writes, for the experiment ``<name>``, after each
finished run:

* ``DIR/<name>.csv``: one row per run (:data:`COLUMNS`, :func:`result_row`; the sweep's ``results.csv``) plus
  ``config_hash`` (below);
* ``DIR/<name>-history.csv``: every evaluation of every run (:data:`HISTORY_COLUMNS`);
* ``DIR/<name>-chance.csv`` (classification and image tasks), once: the train split's majority class and its
  share of the train and test splits (:data:`CHANCE_COLUMNS`; data seed 0's split under ``[task] seed = "run"``);
* ``DIR/<name>-configs.json``: the resolved run config of every ``config_hash`` in ``<name>.csv``, so that a
  stale row can be told apart from the current config field by field.

``scripts/collect_results.py`` writes the first three from a finished run folder with the same code.

**config_hash** (:func:`run_config`, :func:`config_hash`): the first 12 hex digits of the sha256 of the
canonical JSON (sorted keys, no spaces) of a run's resolved config: ``task`` (the ``[task]`` table, data seed 0
unless set; with ``seed = "run"``, the run's own seed, the seed its data were drawn from), ``model`` (the run's
model settings, None values left out), ``mixer`` (name or layer pattern), ``mixer_options``, ``seed``, and
``train``: the fields of its :class:`~tokenmix.training.config.TrainConfig`
(preset resolved) that change what it learns, each only where it differs from the dataclass default (so a
new field added at a default that keeps the old behaviour keeps every hash). Left out: the output folder,
resume, progress, tensorboard, checkpoint_every, threads, and the report settings (target, target_k, plots,
baseline, metric), which do not change the weights a run learns.

**Twins**: a run of another experiment recorded in the same folder with the same ``config_hash`` is the same
run: the hash covers everything that changes what a run learns, and a rerun under the same config gives the same
row (``--verify``). :meth:`ResultsDir.twins` finds such rows (not those of code that ``--verify`` found stale), so
that ``tokenmix compare`` records them under the new experiment and label instead of training them again.

Rows are replaced per (label, seed); every write goes to a temporary file renamed over the old one
(:func:`write_csv`), so an interrupted write leaves the previous file whole and other rows are kept. A run's row
is written after its evaluations and config (:meth:`ResultsDir._save`): a full disk between two writes leaves the
run unrecorded, never recorded in part; a record torn by an older version (:meth:`ResultsDir.torn`) is repaired
by the next ``tokenmix compare --results`` (:mod:`tokenmix.training.sweep`).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Iterable

from .config import TrainConfig
from .confighash import HASH_COLUMN, config_hash, mechanism_key, plain
from .csvrecords import ResultsError, checked_rows, read_csv, upsert_rows, write_csv
from .files import atomic_write_text
from .gitcommit import git_commit
from .provenance import PROVENANCE_COLUMNS
from .staleness import stale_because, stale_codes

__all__ = ["Twin", "COLUMNS", "HISTORY_COLUMNS", "CHANCE_COLUMNS", "HASH_COLUMN", "ROW_COLUMNS", "REPRODUCED_COLUMNS",
           "REPRODUCED_HISTORY", "VERIFY_COLUMNS", "ResultsDir", "ResultsError", "run_config", "config_hash",
           "mechanism_key", "first_difference", "result_row", "recorded_row", "history_records", "chance_row", "typed",
           "read_csv", "write_csv", "upsert_rows", "git_commit", "reproduction_difference"]

COLUMNS = ["experiment", "task", "label", "mixer", "seed", "params", "metric", "value", "best_val", "best_epoch",
           "steps", "time_per_epoch_s", "time_to_target_s", "wall_s", "tokens_per_s", "peak_mem_mb", "train_cost",
           "cost_batches", "locality"]
HISTORY_COLUMNS = ["label", "seed", "step", "epoch", "wall_s", "train_loss", "val_loss", "val_metric"]
CHANCE_COLUMNS = ["majority_class", "train_rate", "test_rate"]
# the columns a row carries after config_hash: who and what produced it (tokenmix.training.provenance)
ROW_COLUMNS = COLUMNS + [HASH_COLUMN] + PROVENANCE_COLUMNS
# what a rerun must give again for a row to count as reproduced: every column a run's weights determine (not the
# measured times and memory, nor the provenance)
REPRODUCED_COLUMNS = ["params", "metric", "value", "best_val", "best_epoch", "steps", "train_cost", "cost_batches",
                      "locality"]
REPRODUCED_HISTORY = ["step", "epoch", "train_loss", "val_loss", "val_metric"]
# the ledger of `tokenmix compare --verify`: one row per rerun of a recorded row
VERIFY_COLUMNS = ["label", "seed", "config_hash", "row_code", "rerun_code", "rerun_commit", "rerun_clean", "torch",
                  "threads", "cpu", "reproduced", "difference", "date", "cause", "row_numerics", "row_host",
                  "numerics", "host"]
# TrainConfig fields that do not change what a run learns (where it writes, how it shows progress, how often
# it checkpoints: a resumed run is bitwise the uninterrupted one), or that are report settings.
_NOT_HASHED = {"seed", "out_dir", "resume", "progress", "tensorboard", "checkpoint_every", "target", "target_k"}
_TEXT_COLUMNS = {"experiment", "task", "label", "mixer", "metric", HASH_COLUMN, "code", "commit", "clean", "torch",
                 "cpu", "numerics", "host"}


# -- the config hash ---------------------------------------------------------------------------------------
def run_config(experiment: Any, run: Any, threads: int) -> dict[str, Any]:
    """The resolved config of ``run`` (a :class:`~tokenmix.training.experiment.RunSpec` of ``experiment``) trained
    with ``threads`` torch threads, that its ``config_hash`` is computed from (see the module docstring)."""
    config, default = experiment.train_config(run), TrainConfig()
    train = {f.name: getattr(config, f.name) for f in fields(TrainConfig)
             if f.name not in _NOT_HASHED and getattr(config, f.name) != getattr(default, f.name)}
    task = dict(experiment.task)
    task.setdefault("seed", 0)
    if task["seed"] == "run":  # [task] seed = "run" (schema.RUN_SEED): the run's data come from its own seed
        task["seed"] = run.seed
    return plain({"task": task, "model": {k: v for k, v in run.model.items() if v is not None},
                   "mixer": run.mixer, "mixer_options": dict(run.mixer_options), "train": train, "seed": run.seed,
                   "threads": int(threads)})


def first_difference(old: Any, new: Any, path: str = "") -> str | None:
    """The first field (sorted dotted path) where ``old`` and ``new`` differ, as ``"train.lr: 0.003 -> 0.001"``."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(old.keys() | new.keys()):
            where = f"{path}.{key}" if path else key
            if key not in old:
                return f"{where}: (not set) -> {new[key]!r}"
            if key not in new:
                return f"{where}: {old[key]!r} -> (not set)"
            found = first_difference(old[key], new[key], where)
            if found is not None:
                return found
        return None
    return None if old == new else f"{path or 'config'}: {old!r} -> {new!r}"


# -- rows --------------------------------------------------------------------------------------------------
def result_row(experiment: Any, run: Any, result: dict[str, Any]) -> dict[str, Any]:
    """The :data:`COLUMNS` row of ``run`` of ``experiment`` from its ``result.json`` dict (a
    :class:`~tokenmix.training.config.TrainResult` as a dict)."""
    value = result["test_metric"] if result["test_metric"] is not None else result["best_metric"]
    history = result["history"]
    return {"experiment": experiment.name, "task": experiment.task["name"], "label": run.label,
            "mixer": run.mixer if isinstance(run.mixer, str) else "+".join(run.mixer), "seed": run.seed,
            "params": result["params"], "metric": result["metric_name"], "value": round(value, 6),
            "best_val": round(result["best_metric"], 6), "best_epoch": round(result["best_epoch"], 3),
            "steps": result["steps"], "time_per_epoch_s": round(result["time_per_epoch_s"], 4),
            "time_to_target_s": "" if result["time_to_target_s"] is None else round(result["time_to_target_s"], 3),
            "wall_s": round(history[-1]["wall_s"], 3) if history else 0.0,
            "tokens_per_s": round(result["tokens_per_s"], 1), "peak_mem_mb": round(result["peak_mem_mb"], 1),
            "train_cost": "" if result.get("train_cost") is None else round(result["train_cost"], 6),
            "cost_batches": result.get("cost_batches", 0),
            "locality": "" if result.get("locality") is None else round(result["locality"], 6),
            **result.get("provenance", {})}


def history_records(label: str, seed: int, history: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """A run's evaluations as ``-history.csv`` rows (the step as is, the rest rounded to 6 digits)."""
    rows: list[dict[str, Any]] = []
    for record in history:
        row: dict[str, Any] = {"label": label, "seed": int(seed)}
        row.update({k: record[k] if k == "step" else round(float(record[k]), 6) for k in HISTORY_COLUMNS[2:]})
        rows.append(row)
    return rows


def chance_row(task: Any) -> dict[str, Any] | None:
    """The train split's majority class and its share of the train and test splits (None for language
    modelling, masked or not): the accuracy of a model that learned only the class prior. With ``[task] seed = "run"``
    (each run's data from its own seed) the sweep passes data seed 0's task: the file then describes seed 0's split."""
    if task.info.kind in ("language_model", "masked_lm"):
        return None
    train = Counter(task.splits["train"].labels.tolist())
    test = task.splits["test"].labels.tolist()
    majority, count = train.most_common(1)[0]
    return {"majority_class": majority, "train_rate": round(count / sum(train.values()), 6),
            "test_rate": round(test.count(majority) / len(test), 6)}


def typed(row: dict[str, Any]) -> dict[str, Any]:
    """A CSV row with its numeric cells as int or float (text columns and empty cells as they are)."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if key in _TEXT_COLUMNS or not isinstance(value, str) or value == "":
            out[key] = value
            continue
        try:
            out[key] = int(value)
        except ValueError:
            try:
                out[key] = float(value)
            except ValueError:
                out[key] = value
    return out


def recorded_row(row: dict[str, str]) -> dict[str, Any]:
    """A recorded CSV row as a results row: :data:`COLUMNS` and the provenance, numbers parsed (:func:`typed`)."""
    parsed = typed(row)
    return {c: parsed.get(c, "") for c in COLUMNS + PROVENANCE_COLUMNS}


def reproduction_difference(recorded: dict[str, Any], history: list[dict[str, Any]], rerun: dict[str, Any],
                            rerun_history: list[dict[str, Any]]) -> str | None:
    """None when a rerun's row and evaluations (as :func:`result_row` / :func:`history_records` write them) equal
    the recorded ones on :data:`REPRODUCED_COLUMNS` / :data:`REPRODUCED_HISTORY`; else the first difference, as
    ``"value 0.348 -> 0.37"``. A cell the recorded row left empty (a column added after it was written, such as
    ``train_cost``) is not compared."""
    def cell(value: Any) -> Any:
        return typed({"x": value})["x"] if isinstance(value, str) else value

    for column in REPRODUCED_COLUMNS:
        old, new = cell(recorded.get(column, "")), cell(rerun.get(column, ""))
        if old != new and old != "":  # a column the row was written without (added later) is not a difference
            return f"{column} {old} -> {new}"
    if len(history) != len(rerun_history):
        return f"{len(history)} -> {len(rerun_history)} evaluations"
    for old, new in zip(history, rerun_history):
        for column in REPRODUCED_HISTORY:
            if cell(old.get(column, "")) != cell(new.get(column, "")) and old.get(column, "") != "":
                return f"{column} at step {old.get('step')}: {old.get(column)} -> {new.get(column)}"
    return None


# -- a results folder ------------------------------------------------------------------------------------
def _provenance_pair(here: dict[str, str], there: dict[str, str]) -> str:
    """"code a vs b; numerics unpinned vs x86-avx2-cnr": what produced two rows, the numerics where they differ."""
    text = f"code {here.get('code') or '?'} vs {there.get('code') or '?'}"
    numerics = [row.get("numerics") or "unpinned" for row in (here, there)]
    return text + (f"; numerics {numerics[0]} vs {numerics[1]}" if numerics[0] != numerics[1] else "")


@dataclass(frozen=True)
class Twin:
    """A recorded run of ``experiment`` (as ``label``, ``seed``) with a given config_hash: its row and
    evaluations (:meth:`ResultsDir.twins`)."""

    experiment: str
    label: str
    seed: int
    row: dict[str, str]
    history: list[dict[str, Any]]

    def as_run_of(self, experiment: str, label: str) -> dict[str, Any]:
        """Its row (:data:`COLUMNS` and provenance) recorded as ``label`` of ``experiment``. The time to target
        is left empty: the target is a report setting outside the hash, so it is reused only for experiments
        without one."""
        return {**recorded_row(self.row), "experiment": experiment, "label": label, "time_to_target_s": ""}


class ResultsDir:
    """The committed results of the experiment ``name`` in ``directory`` (see the module docstring)."""

    def __init__(self, directory: str | Path, name: str, *, commit: bool = False) -> None:
        self.directory = Path(directory)
        self.name = name
        self.commit = commit
        self.csv = self.directory / f"{name}.csv"
        self.history = self.directory / f"{name}-history.csv"
        self.chance = self.directory / f"{name}-chance.csv"
        self.configs = self.directory / f"{name}-configs.json"
        self.verify = self.directory / f"{name}-verify.csv"

    def lock(self) -> Any:
        """The results folder's lock (one writer at a time, from any process or host): every read-modify-write
        of these files holds it."""
        from .locks import FolderLock

        return FolderLock(self.directory, f"record results of {self.name}", name=".tokenmix-results.lock",
                          timeout=300.0)

    # -- code that gives different results -----------------------------------------------------------------
    def verifications(self) -> list[dict[str, str]]:
        """The ledger of ``tokenmix compare --verify`` (:data:`VERIFY_COLUMNS`), oldest first."""
        return [r for _, r in checked_rows(self.verify, ("label", "seed", "row_code", "rerun_code", "date"),
                                            VERIFY_COLUMNS, {"seed": int})]

    def stale_codes(self) -> dict[str, str]:
        """code -> why rows of that code can be stale (:func:`~tokenmix.training.staleness.stale_codes`)."""
        return stale_codes(self)

    def stale_because(self, code: str, label: str | None = None) -> str | None:
        """Why the rows of ``label`` recorded under ``code`` are stale, or None when they are not
        (:func:`~tokenmix.training.staleness.stale_because`: per mechanism, from every ledger of the folder)."""
        return stale_because(self, code, label)

    def provenance_summary(self) -> list[dict[str, Any]]:
        """Per code version of the recorded rows, in order of first appearance: its rows, commits, torch
        versions, threads and CPUs, and what ``--verify`` found (reruns that reproduced it, and under which code;
        reruns that did not; ``cleared``: the labels whose rows stand although the code is stale,
        :meth:`stale_because`)."""
        groups: dict[str, dict[str, Any]] = {}
        for row in self.rows().values():
            code = row.get("code", "")
            g = groups.setdefault(code, {"code": code, "rows": 0, "labels": set(), "commits": set(),
                                         "torch": set(), "threads": set(), "cpu": set(), "reproduced": [],
                                         "differs": []})
            g["rows"] += 1
            g["labels"].add(row["label"])
            for column, name in (("commit", "commits"), ("torch", "torch"), ("threads", "threads"), ("cpu", "cpu")):
                if row.get(column):
                    g[name].add(row[column])
        for v in self.verifications():
            if v["row_code"] in groups:
                groups[v["row_code"]]["reproduced" if v["reproduced"] == "true" else "differs"].append(v)
        stale = self.stale_codes()
        for code, g in groups.items():
            g["cleared"] = sorted(label for label in g["labels"]
                                  if code in stale and self.stale_because(code, label) is None)
        return list(groups.values())

    def rows(self) -> dict[tuple[str, int], dict[str, str]]:
        """The recorded rows by (label, seed), checked (:func:`_checked_rows`: a malformed, duplicated or
        conflicting row raises :class:`ResultsError` naming the file and lines)."""
        rows = checked_rows(self.csv, ("label", "seed"), REPRODUCED_COLUMNS + [HASH_COLUMN],
                             {"seed": int, "value": float})
        return {(r["label"], int(r["seed"])): r for _, r in rows}

    def histories(self) -> dict[tuple[str, int], list[dict[str, Any]]]:
        """The recorded evaluations by (label, seed), numbers parsed and checked like :meth:`rows`."""
        out: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for _, row in checked_rows(self.history, ("label", "seed", "step"), HISTORY_COLUMNS, {"seed": int,
                                                                                                  "step": int}):
            out.setdefault((row["label"], int(row["seed"])), []).append(typed(row))
        return out

    def known_configs(self) -> dict[str, Any]:
        """config_hash -> the resolved config it was computed from (``-configs.json``; empty when it is not
        there); a file that is not a JSON object raises :class:`ResultsError` naming it."""
        if not self.configs.exists():
            return {}
        try:
            configs = json.loads(self.configs.read_text())
        except ValueError as error:
            configs = error
        if not isinstance(configs, dict):
            raise ResultsError(f"{self.configs}: not a JSON object of configs ({configs}): the file is damaged; "
                               f"restore it (git checkout -- {self.configs})")
        return configs

    def stale_reason(self, row: dict[str, str], config: dict[str, Any]) -> str | None:
        """None when ``row`` was made with ``config``; else why not (its first differing field when the
        recorded config is known, else "config changed")."""
        recorded = row.get(HASH_COLUMN) or ""
        current = config_hash(config)
        if recorded == current:
            return self.stale_because(row.get("code", ""), row.get("label"))
        if not recorded:
            return "the row has no config_hash (written before hashes were recorded)"
        old = self.known_configs().get(recorded)
        difference = first_difference(old, config) if old is not None else None
        return f"config changed ({recorded} -> {current})" + (f": {difference}" if difference else "")

    def records(self) -> list[ResultsDir]:
        """Every experiment's record in this folder (its own included), by file name."""
        return [ResultsDir(self.directory, configs.name[:-len("-configs.json")])
                for configs in sorted(self.directory.glob("*-configs.json"))]

    def twins(self, digests: Iterable[str] | dict[str, str], numerics: str | None = None) -> dict[str, Twin]:
        """Per config_hash of ``digests``: a recorded run with that hash in any experiment's record in this
        folder (the first by file name; this experiment's own rows included), unless --verify found its rows
        stale there (:meth:`stale_because`, by its label there) or here (by its label here: ``digests`` as a dict
        config_hash -> label; the code-wide rule when only hashes are given), or its evaluations are missing
        (:meth:`torn`), or (``numerics`` given) it was computed with other numerics: a pinned sweep reuses pinned
        rows only, so that its rows stay of one numerics. A record that cannot be read is named and skipped."""
        labels_here = dict(digests) if isinstance(digests, dict) else dict.fromkeys(digests)
        wanted, found = set(labels_here), {}
        for other in self.records():
            if not wanted - found.keys():
                break
            try:
                rows, left = other.rows(), wanted - found.keys()
                matches = [(key, row) for key, row in rows.items() if row.get(HASH_COLUMN) in left
                           and (numerics is None or row.get("numerics") == numerics)
                           and other.stale_because(row.get("code", ""), key[0]) is None
                           and self.stale_because(row.get("code", ""), labels_here[row[HASH_COLUMN]]) is None]
                histories = other.histories() if matches else {}
                matches = [(key, row) for key, row in matches if key in histories]  # a torn row stands for no run
            except ResultsError as error:
                print(f"warning: {error}; its runs are not reused", file=sys.stderr, flush=True)
                continue
            for (label, seed), row in matches:
                found.setdefault(row[HASH_COLUMN], Twin(other.name, label, seed, row, histories.get((label, seed), [])))
        return found

    def shared(self) -> list[tuple[tuple[str, int], str, str]]:
        """This record's rows that another experiment's record in this folder holds too, under the same
        config_hash and with the same results (:data:`REPRODUCED_COLUMNS`): one run recorded by both (reused
        through :meth:`twins`, or trained again under the same config and code). Each as ((label, seed) here, the
        other experiment, its label there); the seed is part of the config, so it is the same there. Other
        records by file name."""
        return [(key, other, label) for key, other, label, difference in self._same_config() if not difference]

    def diverging(self) -> list[tuple[tuple[str, int], str, str, str]]:
        """This record's rows whose config another experiment's record in this folder holds with other results:
        not one run (another code's or other numerics', or a run that is not deterministic). Each as
        :meth:`shared`'s, with the first differing column, both rows' code and, where they differ, numerics
        (``"value 0.11 vs 0.007 (code a vs b)"``)."""
        return [entry for entry in self._same_config() if entry[3]]

    def _same_config(self) -> list[tuple[tuple[str, int], str, str, str]]:
        """(key here, other experiment, its label there, "" or how the results differ) for each row of another
        record in this folder with the config_hash of one of this record's rows."""
        mine: dict[str, list[tuple[tuple[str, int], dict[str, str]]]] = {}
        for key, row in self.rows().items():
            if row.get(HASH_COLUMN):
                mine.setdefault(row[HASH_COLUMN], []).append((key, row))
        out = []
        for other in self.records():
            if other.name == self.name or not other.csv.exists():
                continue
            for (label, _), row in other.rows().items():
                for key, here in mine.get(row.get(HASH_COLUMN, ""), []):
                    # a column one file has and the other does not (added later) is no difference
                    differ = [c for c in REPRODUCED_COLUMNS if (here.get(c) or "") != (row.get(c) or "")]
                    difference = (f"{differ[0]} {here.get(differ[0])} vs {row.get(differ[0])} "
                                  f"({_provenance_pair(here, row)})") if differ else ""
                    out.append((key, other.name, label, difference))
        return out

    def save_run(self, row: dict[str, Any], columns: list[str], history: list[dict[str, Any]],
                 config: dict[str, Any], task: Any = None, note: str = "") -> list[Path]:
        """Record one finished run: its row (with its config_hash), its evaluations, its config, and the chance
        file when ``task`` is given, is not language modelling, and the file is not there yet; commit them when
        asked (``note`` added to the message). Returns the paths written."""
        with self.lock():
            written = self._save(row, columns, history, config, task)
        if self.commit:
            git_commit(written, f"{self.name}: {row['label']} seed {row['seed']} ({row['metric']} {row['value']}"
                       + (f"; {note}" if note else "") + ")")
        return written

    def _save(self, row: dict[str, Any], columns: list[str], history: list[dict[str, Any]],
              config: dict[str, Any], task: Any) -> list[Path]:
        """:meth:`save_run` under the lock. The row is the commit point, written last: a row it replaces is
        taken out first, then the evaluations, the config and the chance file are written, each whole
        (:func:`write_csv`), then the row goes in where the old one was. A full disk or a kill part-way thus
        leaves the run unrecorded (it trains again, or is recorded from its ``result.json``), with at most
        evaluations and a config that no row reads and its next save replaces; never a row without its
        evaluations or config (:meth:`torn`), which every later sweep would take as recorded, nor an old row
        beside a new run's evaluations. A config no row uses any more is pruned after the row is in."""
        digest = config_hash(config)
        rows = self.rows()  # refuses to add to a damaged file
        key = (str(row["label"]), int(row["seed"]))
        place = self._remove([key]).get(key) if key in rows else None
        upsert_rows(self.history, HISTORY_COLUMNS, history_records(row["label"], row["seed"], history))
        before = {r.get(HASH_COLUMN) for r in rows.values()} | {digest}
        self._write_configs(before, {digest: config})
        written = [self.csv, self.history, self.configs]
        if task is not None and not self.chance.exists():
            chance = chance_row(task)
            if chance is not None:
                write_csv(self.chance, CHANCE_COLUMNS, [chance])
                written.append(self.chance)
        columns = list(columns) + [HASH_COLUMN] + [c for c in PROVENANCE_COLUMNS if c not in columns]
        self._insert(columns, {**row, HASH_COLUMN: digest}, place)  # the commit point
        after = {r.get(HASH_COLUMN) for k, r in rows.items() if k != key} | {digest}
        if after != before:  # the replaced row's config, which no other row uses
            self._write_configs(after)
        return written

    def _remove(self, keys: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Take the rows of ``keys`` (label, seed) out of ``<name>.csv``; returns where each was (its index)."""
        wanted = {(str(label), str(seed)): (str(label), int(seed)) for label, seed in keys}
        header, rows = read_csv(self.csv)
        places = {wanted[k]: i for i, r in enumerate(rows) if (k := (r.get("label"), r.get("seed"))) in wanted}
        if places:
            write_csv(self.csv, header, [r for i, r in enumerate(rows) if i not in places.values()])
        return places

    def _insert(self, columns: list[str], row: dict[str, Any], place: int | None) -> None:
        """Put ``row`` into ``<name>.csv`` at index ``place`` (None: at the end). The header is ``columns``
        followed by any other column the file had."""
        header, rows = read_csv(self.csv)
        rows.insert(len(rows) if place is None else place, row)
        write_csv(self.csv, list(columns) + [c for c in header if c not in columns], rows)

    def _write_configs(self, used: set[Any], new: dict[str, Any] | None = None) -> None:
        """The known configs of the hashes in ``used``, with ``new`` added."""
        configs = {h: c for h, c in self.known_configs().items() if h in used}
        configs.update(new or {})
        atomic_write_text(self.configs, json.dumps(configs, indent=1, sort_keys=True) + "\n")

    def torn(self) -> dict[tuple[str, int], str]:
        """The rows recorded without the rest of their record, (label, seed) -> what is missing: their
        evaluations in ``-history.csv`` (every run has at least one, at its last step) or the config of their
        config_hash in ``-configs.json``. :meth:`_save` writes the row last, so only an older tokenmix stopped
        by a full disk part-way, or files restored or edited apart, leave one; ``tokenmix compare`` repairs
        them before it reads the record."""
        rows = self.rows()
        if not rows:
            return {}
        histories, known = self.histories(), self.known_configs()
        out = {}
        for key, row in rows.items():
            missing = [] if key in histories else [f"its evaluations in {self.history.name}"]
            digest = row.get(HASH_COLUMN)
            if digest and digest not in known:
                missing.append(f"its config {digest} in {self.configs.name}")
            if missing:
                out[key] = " and ".join(missing)
        return out

    def drop_rows(self, keys: Iterable[tuple[str, int]]) -> None:
        """Delete the rows of ``keys`` (label, seed) from ``<name>.csv``, under the lock; the other rows are kept
        as they are."""
        with self.lock():
            self._remove(keys)

    def add_verifications(self, records: list[dict[str, Any]]) -> Path:
        """Append ``records`` (:data:`VERIFY_COLUMNS`) to the ledger, under the lock, and commit it when asked;
        returns its path."""
        with self.lock():
            header, old = read_csv(self.verify)
            write_csv(self.verify, VERIFY_COLUMNS, old + records)
        if self.commit and records:
            what = ", ".join(f"{r['label']} seed {r['seed']} "
                             f"{'reproduced' if r['reproduced'] == 'true' else 'differs'}" for r in records)
            git_commit([self.verify], f"{self.name} --verify: {what}")
        return self.verify
