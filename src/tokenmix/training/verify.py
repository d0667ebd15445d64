"""``tokenmix compare --verify K``: rerun recorded rows and say which reproduce exactly.

A row of a results folder (:mod:`tokenmix.training.results`) records its ``config_hash`` and the ``code`` that
produced it (:mod:`tokenmix.training.provenance`). Most code changes leave what a run computes alone; some do not
(an initialisation, a kernel's summation order), and only a rerun can tell. ``--verify K`` reruns, per label,
``K`` recorded rows whose config is the current one and that were not rerun under this code before, chosen by
seed (:func:`choose`: the code versions of the label's rows in turn, oldest first, each time its smallest seed
not yet chosen, so that ``K`` at least the number of code versions reaches every one), with the current code;
``--verify-per code`` instead reruns ``K`` rows of each code version that no rerun has checked yet, whatever
their labels (:func:`choose_per_code`: the labels in turn, smallest seed first), the fewest reruns that reach
every unchecked code,
and compares the rerun with the row on every column
the weights determine (:data:`~tokenmix.training.results.REPRODUCED_COLUMNS` and the evaluations'
:data:`~tokenmix.training.results.REPRODUCED_HISTORY`, as rounded in the CSVs; times, memory and provenance are
measurements, not results). Each rerun is appended to ``<name>-verify.csv`` as soon as its run finishes (and
committed with ``--commit``), so that a verify stopped part-way keeps what it found.

A rerun runs under the row's own numerics where it can (:mod:`~tokenmix.training.numerics`): pinned for a pinned
row, the host's own kernels for an unpinned one. Each differing rerun names its cause (:func:`cause`), from what
the row and the rerun record: **code** (other code, the same numerics: a pinned level, or unpinned on the same
host), **host** (the same code, other numerics: another host's or another level's kernels), **code or host** (both
changed: a rerun cannot tell them apart; an unpinned row recorded before hosts were is always of an unknown host),
or **neither** (same code, same numerics: not deterministic). Only **code** makes rows of that code stale
(:meth:`~tokenmix.training.results.ResultsDir.stale_because`): every row of that code except those of a label whose
own rerun under the newer code reproduced exactly (a whole run bitwise equal shows the change does not touch that
label's computation). ``tokenmix report`` lists the stale rows and leaves them out of every mean and test,
``tokenmix compare --results`` trains them again, and the differing rerun, a run of the current code with the same
config and numerics, replaces its row at once. The other causes keep the rows.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from functools import partial
from pathlib import Path
from typing import Any

from .experiment import Experiment
from .lrstage import has_lr_stage, recorded_rates
from .numerics import PINNED, same_numerics_key
from .provenance import code_version, git_state
from .results import (COLUMNS, ResultsDir, config_hash, history_records, reproduction_difference, result_row,
                      run_config, typed)
from .sweep import RESULT_FILE, PlannedRun, compare, plan, run_dir

__all__ = ["choose", "choose_per_code", "verify", "verify_plan", "cause"]

CAUSES = ("code", "host", "code or host", "neither")


def cause(row: dict[str, Any], rerun: dict[str, Any]) -> str:
    """Why ``rerun`` (the provenance of a rerun) can differ from the recorded ``row``: "code", "host", "code or
    host" or "neither" (see the module docstring); both carry ``code``, ``numerics``, ``host`` and ``cpu``."""
    same_code = str(row.get("code", "")) == str(rerun.get("code", ""))
    same_numerics = same_numerics_key(row) == same_numerics_key(rerun)
    if same_code:
        return "neither" if same_numerics else "host"
    return "code" if same_numerics else "code or host"


def _in_turn(rows: list[dict[str, str]], key: str, k: int) -> list[dict[str, str]]:
    """Up to ``k`` of ``rows``, grouped by ``row[key]`` (groups in order of first appearance), the groups taken
    in turn, each giving its smallest seed not yet taken."""
    groups: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        groups.setdefault(row.get(key, ""), []).append(row)
    queues = [sorted(group, key=lambda r: int(r["seed"])) for group in groups.values()]
    chosen: list[dict[str, str]] = []
    while len(chosen) < k and any(queues):
        for queue in queues:
            if queue and len(chosen) < k:
                chosen.append(queue.pop(0))
    return chosen


def choose(rows: list[dict[str, str]], k: int) -> list[dict[str, str]]:
    """Up to ``k`` of one label's ``rows`` (in file order): the code versions in order of first appearance,
    taken in turn, each giving its smallest seed not yet taken."""
    return _in_turn(rows, "code", k)


def choose_per_code(rows: list[dict[str, str]], k: int, checked: set[str]) -> list[dict[str, str]]:
    """Up to ``k`` of ``rows`` for each code version not in ``checked``: per code, its labels in turn (the label
    with the smallest seed first), each giving its smallest seed not yet taken."""
    by_code: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        if row.get("code", "") not in checked:
            by_code.setdefault(row.get("code", ""), []).append(row)
    return [row for group in by_code.values()
            for row in _in_turn(sorted(group, key=lambda r: int(r["seed"])), "label", k)]


def at_recorded_rates(experiment: Experiment, results_dir: str | Path) -> Experiment:
    """An experiment with ``lr_grid`` as its recorded rows were run: each entry at the rate its learning-rate stage,
    recorded in ``results_dir``, chose (:func:`~tokenmix.training.lrstage.recorded_rates`); others unchanged."""
    from ..tasks import task_info

    info = task_info(experiment.task["name"])
    final = recorded_rates(experiment, info.kind, results_dir, info.higher_is_better)
    if has_lr_stage(final):
        raise ValueError(f"--verify {experiment.name}: its learning-rate stage is not complete in {results_dir} "
                         f"({experiment.name}-lr.csv): no rate is chosen yet, so no row of it can be rerun")
    return final


def verify_plan(experiment: Experiment, results_dir: str | Path, k: int, jobs: int = 1, per: str = "label"
                ) -> tuple[list[dict[str, str]], list[str]]:
    """The rows ``--verify k`` reruns (their config current, not yet rerun under this code; ``per="code"``: of the
    code versions no rerun has checked), and a line per row it cannot (config changed)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"--verify takes a positive number of rows per label, got {k!r}")
    if per not in ("label", "code"):
        raise ValueError(f"--verify-per must be 'label' or 'code', got {per!r}")
    record = ResultsDir(results_dir, experiment.name)
    if not record.csv.exists():
        raise ValueError(f"--verify: {record.csv} does not exist: nothing recorded to verify")
    experiment = at_recorded_rates(experiment, results_dir)
    task, planned = plan(experiment, _plan_task(experiment))
    threads = experiment.threads(jobs)
    current = {(p.spec.label, p.spec.seed): config_hash(run_config(experiment, p.spec, threads)) for p in planned}
    rows, skipped = record.rows(), []
    done = {(v["label"], int(v["seed"]), v["row_code"]) for v in record.verifications()
            if v["rerun_code"] == code_version()}
    chosen: list[dict[str, str]] = []
    checked = {v["row_code"] for v in record.verifications()}
    every_usable: list[dict[str, str]] = []
    for label in dict.fromkeys(p.spec.label for p in planned):
        usable = []
        for (row_label, seed), row in rows.items():
            if row_label != label:
                continue
            if current.get((label, seed)) != row.get("config_hash"):
                skipped.append(f"{label} seed {seed}: its config is not the file's now (compare --results trains "
                               f"it again); not verified")
            elif (label, seed, row.get("code", "")) not in done:  # not rerun under this code yet
                usable.append(row)
        every_usable += usable
        chosen += choose(usable, k) if per == "label" else []
    if per == "code":
        chosen = choose_per_code(every_usable, k, checked)
    return chosen, skipped


def _plan_task(experiment: Experiment) -> Any:
    from .build import plan_task

    return plan_task(experiment)


def _only(experiment: Experiment, labels: list[str], seed: int) -> Experiment:
    """``experiment`` restricted to the entries ``labels`` and the one ``seed`` (same run configs)."""
    data = experiment.to_dict()
    baseline = [label for label in labels if label not in {e["label"] for e in data["mixers"]}]
    data["mixers"] = [e for e in data["mixers"] if e["label"] in labels] + [{"label": b, "name": b}
                                                                             for b in baseline]
    data["report"] = {**data["report"], "baseline": False}
    data["seeds"] = [seed]
    data.pop("claims", None)
    data.pop("paper", None)
    return Experiment.from_dict(data)


def verify(experiment: Experiment, results_dir: str | Path, k: int, out_dir: str | Path, *, jobs: int = 1,
           progress: bool | None = None, commit: bool = False, dry_run: bool = False,
           per: str = "label") -> list[dict[str, Any]]:
    """Rerun ``k`` recorded rows per label (``per="code"``: per unchecked code version) into ``out_dir`` and
    compare (see the module docstring); returns the ledger records it added (nothing with ``dry_run``, which
    prints the chosen rows and their recorded time)."""
    experiment = at_recorded_rates(experiment, results_dir)
    chosen, skipped = verify_plan(experiment, results_dir, k, jobs, per)
    for line in skipped:
        print(line, flush=True)
    hours = sum(float(r.get("wall_s") or 0.0) for r in chosen) / 3600 / jobs
    print(f"verify {experiment.name}: {len(chosen)} rows to rerun ({hours:.1f} h at --jobs {jobs} by their "
          f"recorded wall time): " + ", ".join(f"{r['label']} seed {r['seed']} (code {r.get('code') or '?'})"
                                               for r in chosen), flush=True)
    if dry_run or not chosen:
        return []
    record = ResultsDir(results_dir, experiment.name, commit=commit)
    histories = record.histories()
    code, (commit_id, clean) = code_version(), git_state()
    threads = experiment.threads(jobs)
    by_seed: dict[tuple[int, bool], list[str]] = {}
    for row in chosen:  # a pinned row is rerun pinned, an unpinned one with the host's own numerics
        by_seed.setdefault((int(row["seed"]), row.get("numerics") == PINNED), []).append(row["label"])
    added: list[dict[str, Any]] = []

    def compare_rerun(task: Any, p: PlannedRun, result: dict[str, Any]) -> None:
        """Compare one rerun with its row and write it to the ledger (and commit it) at once, as its run finishes:
        a verify stopped part-way loses none it has finished."""
        if any((r["label"], r["seed"]) == (p.spec.label, p.spec.seed) for r in added):
            return
        added.append(_compared(record, experiment, p, result, histories, threads, (code, commit_id, clean)))
        if added[-1]["cause"] == "code":
            # a run of the current code with the row's config: it replaces the stale row at once
            record.save_run(result_row(experiment, p.spec, result), COLUMNS, result["history"],
                            run_config(experiment, p.spec, threads), task)
        record.add_verifications(added[-1:])

    for (seed, pinned), labels in by_seed.items():
        part = _only(experiment, labels, seed)
        tag = hashlib.sha256(json.dumps(sorted(labels)).encode()).hexdigest()[:6]
        out = Path(out_dir) / code / f"seed{seed}-{tag}" / ("pinned" if pinned else "host")
        task, planned = plan(part, _plan_task(part))
        compare(part, out, jobs=jobs, progress=progress, pin=pinned, on_finished=partial(compare_rerun, task))
        for p in planned:  # runs that had finished before this call (a verify resumed): compared now
            compare_rerun(task, p, json.loads((run_dir(out, p.spec) / RESULT_FILE).read_text()))
    print(verify_table(added), flush=True)
    return added


def _compared(record: ResultsDir, experiment: Experiment, p: PlannedRun, result: dict[str, Any],
              histories: dict[tuple[str, int], list[dict[str, Any]]], threads: int,
              here: tuple[str, str, str]) -> dict[str, Any]:
    """The ledger line (:data:`~tokenmix.training.results.VERIFY_COLUMNS`) of the rerun ``result`` of ``p`` against
    its recorded row; ``here``: this checkout's (code, commit, clean), where the result does not say."""
    code, commit_id, clean = here
    label, seed = p.spec.label, p.spec.seed
    rerun = result_row(experiment, p.spec, result)
    old = rows_of(record, label, seed)
    difference = reproduction_difference(old, histories.get((label, seed), []), rerun,
                                         history_records(label, seed, result["history"]))
    prov = result.get("provenance", {})
    recorded = {k: str(old.get(k, "")) for k in ("code", "numerics", "host", "cpu")}
    why = "" if difference is None else cause(recorded, {"code": prov.get("code", code), **prov})
    return {"label": label, "seed": seed, "config_hash": old.get("config_hash", ""),
            "row_code": old.get("code", ""), "rerun_code": prov.get("code", code),
            "rerun_commit": prov.get("commit", commit_id), "rerun_clean": prov.get("clean", clean),
            "torch": prov.get("torch", ""), "threads": prov.get("threads", threads),
            "cpu": prov.get("cpu", ""), "reproduced": "true" if difference is None else "false",
            "difference": difference or "", "cause": why,
            "row_numerics": old.get("numerics", ""), "row_host": old.get("host", ""),
            "numerics": prov.get("numerics", ""), "host": prov.get("host", ""),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")}


def rows_of(record: ResultsDir, label: str, seed: int) -> dict[str, Any]:
    return typed(record.rows()[(label, seed)])


def verify_table(records: list[dict[str, Any]]) -> str:
    """One line per rerun: reproduced exactly, or the first difference and what it means."""
    lines = []
    for r in records:
        why = r.get("cause") or ("neither" if r["row_code"] == r["rerun_code"] else "code")
        if r["reproduced"] == "true":
            what = "reproduced exactly"
        elif why == "neither":
            what = f"DIFFERS under the same code and numerics (not deterministic): {r['difference']}"
        elif why == "host":
            what = (f"DIFFERS under the same code on other numerics (the host: {r.get('row_numerics') or 'unpinned'} "
                    f"-> {r.get('numerics') or '?'}): {r['difference']}; rows kept")
        elif why == "code or host":
            what = (f"DIFFERS under other code and other numerics or an unrecorded host (cannot tell which): "
                    f"{r['difference']}; rows kept")
        else:
            what = (f"DIFFERS under other code, same numerics: {r['difference']}; rows of code "
                    f"{r['row_code'] or '(unknown)'} are stale, except those of labels whose own rerun under code "
                    f"{r['rerun_code']} reproduced (this rerun replaced its row; compare --results trains the "
                    f"others again)")
        lines.append(f"  {r['label']} seed {r['seed']} (code {r['row_code'] or '?'} -> {r['rerun_code']}): {what}")
    same = sum(r["reproduced"] == "true" for r in records)
    return "\n".join([f"verified {len(records)} rows: {same} reproduced exactly, {len(records) - same} differ"]
                     + lines)
