"""Pre-registration you can check: was each claim's test fixed in git before the first result row it judges?

:func:`registrations` reads the git history of an experiment file (``experiments/<name>.toml``) and of its
results CSV (``docs/reproduction/<name>.csv``; for the harness claims the step-time CSVs beside it,
``<name>-steptime.csv``, ``<name>-scaling.csv`` and ``<name>-inference.csv``) and, per claim, finds

* the commit where the claim's *test* last changed: its kind, labels (``a``, ``b``), measure, factor,
  approx margin, equivalence margin, ``length`` / ``lengths``, ``[report] target``, ``target_k`` and
  ``target_chosen_on`` (claims on ``time_to_target_s``), ``[report] harness_memory`` (claims on memory), and
  the file's ``seeds`` list (``[report] harness_rounds`` for harness claims);
* the first commit that had a row the claim judges: a row of its labels in the CSV as it is now (the working
  tree's), found in earlier commits by label, seed and value (harness: label, round, kind, length and step
  time; only the lengths the claim reads, its ``lengths`` range or its ``length``), so that rows since replaced
  (a rerun at another budget, an earlier task) are not its data, and a migration that rewrites other columns
  does not make a row new;
* every change of the test made once such a row existed, with the seeds (rounds) that were in at the time:
  ``changes`` (the claim added, its parameters) and ``seeds_extended`` (the seeds list, the harness rounds).

A claim is identified by its ``text`` across commits (a text seen for the first time is a claim added then).
A commit where the experiment file is missing or does not parse is skipped (the claims stand as they were).
Uncommitted edits of either file count as a last state, the working tree. A change in the same commit as the
first rows is not "before" them: git cannot show that the test came first. The paths are followed as given
(no renames), and a claim's history before it came into the file (a script, another file) is not seen.

:func:`registration_note` is the one line the report prints beside a claim's verdict.
"""

from __future__ import annotations

import csv
import io
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Sequence

from ..study.claims import HARNESS_MEASURES, MEMORY_MEASURES, harness_kind
from ..study.numbers import ranges
from ..training.schema import HARNESS_ROUNDS

__all__ = ["Registration", "registrations", "registrations_in_git", "looked_in_git", "registration_note",
           "WORKING_TREE"]

WORKING_TREE = "uncommitted"  # fixed_at / first_rows_at of a state that only the working tree holds


@dataclass(frozen=True)
class Registration:
    """Whether one claim's test was fixed in git before the first CSV row it judges."""

    claim_text: str
    fixed_at: str | None  # "<12-hex commit> <date>" where the test last changed; None: not in git
    first_rows_at: str | None  # "<12-hex commit> <date>" of the first CSV state with a row of its labels
    preregistered: bool | None  # True: fixed before the first row; False: changed after; None: unknown
    changes: list[str]  # the test's changes (claim added, its parameters) made once rows existed
    seeds_extended: list[str]  # the seeds list's (harness rounds') changes made once rows existed
    looked: frozenset = frozenset()  # the seeds (rounds) already in when the test or the seeds last changed


@dataclass(frozen=True)
class _State:
    commit: str  # full hash, or WORKING_TREE
    date: str  # YYYY-MM-DD ("" for the working tree)
    doc: dict[str, Any] | None  # the experiment file parsed (None: missing or unparsable)
    rows: dict[str, frozenset[tuple]]  # "runs": (label, seed, value); "harness": (label, round, kind, length, step_s)

    @property
    def where(self) -> str:
        return f"{self.commit[:12]} {self.date}" if self.commit != WORKING_TREE else WORKING_TREE

    @property
    def short(self) -> str:
        return f"on {self.date} ({self.commit[:7]})" if self.commit != WORKING_TREE else \
            "in the working tree (uncommitted)"


def _git(repo: Path, *args: str, data: bytes | None = None) -> bytes | None:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], input=data, capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _blobs(repo: Path, specs: list[str]) -> list[str | None]:
    """``git cat-file --batch`` for every ``<commit>:<path>`` at once (None where it is missing)."""
    if not specs:
        return []
    out = _git(repo, "cat-file", "--batch", data="".join(f"{s}\n" for s in specs).encode())
    if out is None:
        return [None] * len(specs)
    texts: list[str | None] = []
    pos = 0
    for _ in specs:
        end = out.index(b"\n", pos)
        header = out[pos:end]
        pos = end + 1
        if header.endswith((b" missing", b" ambiguous")):
            texts.append(None)
            continue
        _, kind, size = header.split()
        texts.append(out[pos:pos + int(size)].decode("utf-8", "replace") if kind == b"blob" else None)
        pos += int(size) + 1
    return texts


def _parse_toml(text: str | None, cache: dict[str, Any]) -> dict[str, Any] | None:
    if text is None:
        return None
    if text not in cache:
        try:
            cache[text] = tomllib.loads(text)
        except (tomllib.TOMLDecodeError, ValueError):
            cache[text] = None
    return cache[text]


def _measured(value: str | None) -> str:
    """A measured number as written, up to its format (a migration that rewrites the columns keeps it)."""
    try:
        return repr(float(value))
    except (TypeError, ValueError):
        return (value or "").strip()


def _parse_rows(text: str | None, key: str, cache: dict[tuple[str, str], frozenset]) -> frozenset:
    """The rows of a results CSV (key "seed"): (label, seed, value); of a harness CSV (key "round"): (label,
    round, kind, length, step_s). A row is the same row in another commit when these are the same."""
    if text is None:
        return frozenset()
    if (text, key) not in cache:
        rows = set()
        try:
            reader = csv.reader(io.StringIO(text))
            head = next(reader, [])
            columns = ("label", key, "kind", "length", "step_s") if key == "round" else ("label", key, "value")
            at = [head.index(c) if c in head else None for c in columns]
            for line in reader:
                got = [line[i] if i is not None and i < len(line) else "" for i in at]
                if not got[0]:
                    continue
                try:
                    got[1] = int(float(got[1])) if got[1] else -1
                except ValueError:
                    got[1] = -1
                if key == "round":
                    got[2] = got[2] or "experiment"
                got[-1] = _measured(got[-1])
                rows.add(tuple(got))
        except csv.Error:
            pass
        cache[(text, key)] = frozenset(rows)
    return cache[(text, key)]


def _states(repo: Path, experiment_file: str, results_csv: str, harness_csvs: Sequence[str]) -> list[_State] | None:
    prefix_out = _git(repo, "rev-parse", "--show-prefix")
    if prefix_out is None:
        return None
    prefix = prefix_out.decode().strip()
    paths = [experiment_file, results_csv, *harness_csvs]
    log = _git(repo, "log", "--format=%H%x09%ad", "--date=short", "--reverse", "--", *paths)
    commits = [tuple(line.split("\t", 1)) for line in (log or b"").decode().splitlines() if "\t" in line]
    full = [str(PurePosixPath(prefix) / p) if prefix else p for p in paths]
    texts = _blobs(repo, [f"{c}:{p}" for c, _ in commits for p in full])
    per_commit = [texts[i * len(paths):(i + 1) * len(paths)] for i in range(len(commits))]
    disk = []
    for p in paths:
        try:
            disk.append((repo / p).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            disk.append(None)
    versions = [(c, d, t) for (c, d), t in zip(commits, per_commit)]
    if not versions or disk != versions[-1][2]:
        versions.append((WORKING_TREE, "", disk))
    tomls: dict[str, Any] = {}
    tables: dict[tuple[str, str], frozenset] = {}
    states = []
    for commit, date, (exp, runs, *harness) in versions:
        harness_rows = frozenset().union(*(_parse_rows(t, "round", tables) for t in harness))
        states.append(_State(commit, date, _parse_toml(exp, tomls),
                             {"runs": _parse_rows(runs, "seed", tables), "harness": harness_rows}))
    return states


def _claims(doc: dict[str, Any] | None) -> dict[str, dict[str, Any]] | None:
    """The file's claims by text (None: the file is missing, does not parse, or its claims are not tables)."""
    if doc is None:
        return None
    items = doc.get("claims", [])
    if not isinstance(items, list):
        return None
    found: dict[str, dict[str, Any]] = {}
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("text"), str):
            found.setdefault(item["text"], item)
    return found


def _number(x: Any) -> Any:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else x


def _test(item: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    """The claim's test parameters (everything but its wording), seeds / rounds apart."""
    report = doc.get("report") if isinstance(doc.get("report"), dict) else {}
    measure = item.get("measure")
    lengths = item.get("lengths")
    test = {"kind": item.get("kind"), "a": item.get("a"), "b": _number(item.get("b")), "measure": measure,
            "factor": _number(item.get("factor", 1.0)), "margin": _number(item.get("margin")),
            "equivalence": _number(item.get("equivalence")), "length": item.get("length"),
            "lengths": tuple(lengths) if isinstance(lengths, list) else lengths}
    if measure == "time_to_target_s":
        test["target"] = _number(report.get("target"))
        test["target_k"] = report.get("target_k", 1)
        chosen = report.get("target_chosen_on")
        test["target_chosen_on"] = tuple(chosen) if isinstance(chosen, list) else chosen
    if measure in MEMORY_MEASURES:  # once or every round: what a memory sample is
        test["harness_memory"] = report.get("harness_memory", "once")
    return test


def _harness(item: dict[str, Any]) -> bool:
    return item.get("measure") in HARNESS_MEASURES


def _samples(item: dict[str, Any], doc: dict[str, Any]) -> Any:
    """The file's seeds list (harness claims: its harness rounds)."""
    if _harness(item):
        report = doc.get("report") if isinstance(doc.get("report"), dict) else {}
        return report.get("harness_rounds", HARNESS_ROUNDS)
    seeds = doc.get("seeds")
    return tuple(seeds) if isinstance(seeds, list) else seeds


def _labels(item: dict[str, Any]) -> set[str]:
    labels = {item.get("a")}
    b = item.get("b")
    if isinstance(b, str) and b != "chance":
        labels.add(b)
    return {label for label in labels if isinstance(label, str)}


def _rows(item: dict[str, Any], state: _State) -> set[tuple]:
    """The rows of the claim's labels in this state (harness claims: of the harness kind it reads)."""
    labels = _labels(item)
    if not _harness(item):
        return {row for row in state.rows["runs"] if row[0] in labels}
    kind = harness_kind(str(item.get("measure")), item.get("length") is not None)
    return {row for row in state.rows["harness"] if row[0] in labels and row[2] == kind and _in_lengths(item, row)}


def _in_lengths(item: dict[str, Any], row: tuple) -> bool:
    """Whether a harness row's length is one the claim reads: within its ``lengths`` [lo, hi], at its integer
    ``length``; any length otherwise (``length = "largest"`` depends on the data, no range to test)."""
    try:
        n = int(float(row[3]))
    except (TypeError, ValueError):
        return True
    lengths, length = item.get("lengths"), item.get("length")
    if isinstance(lengths, list) and len(lengths) == 2 and all(isinstance(x, int) for x in lengths):
        return lengths[0] <= n <= lengths[1]
    if isinstance(length, int) and not isinstance(length, bool):
        return n == length
    return True


def _ranges(numbers: Any) -> str:
    """The integers among ``numbers`` as runs (:func:`tokenmix.study.numbers.ranges`), "none" when there are none."""
    return ranges(sorted(n for n in numbers if isinstance(n, int))) or "none"


def _pct(x: float) -> str:
    return f"±{x * 100:g} %"


def _value(key: str, v: Any) -> str:
    if key in ("margin", "equivalence"):
        return _pct(v)
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, tuple):
        return "[" + ", ".join(map(str, v)) + "]"
    return str(v)


_NAMES = {"kind": "kind", "a": "label a", "b": "b", "measure": "measure", "factor": "factor",
          "margin": "approx margin", "equivalence": "equivalence margin", "length": "length",
          "lengths": "lengths", "target": "[report] target", "target_k": "[report] target_k",
          "target_chosen_on": "[report] target_chosen_on"}


def _diff(old: dict[str, Any], new: dict[str, Any]) -> str:
    parts = []
    for key, name in _NAMES.items():
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        if before is None:
            parts.append(f"{name} {_value(key, after)} added")
        elif after is None:
            parts.append(f"{name} {_value(key, before)} removed")
        else:
            parts.append(f"{name} {_value(key, before)} → {_value(key, after)}")
    return "; ".join(parts)


def _samples_diff(old: Any, new: Any, harness: bool) -> str:
    if harness:
        return f"harness rounds {old} → {new}"
    if isinstance(old, tuple) and isinstance(new, tuple):
        if len(old) != len(new):
            return f"seeds {len(old)} → {len(new)}"
        return f"seeds [{_ranges(old)}] → [{_ranges(new)}]"
    return f"seeds {old!r} → {new!r}"


def _added(test: dict[str, Any]) -> str:
    """The test a claim came with, where it is more than the default: "(equivalence margin ±2 %)"."""
    defaults = {"factor": 1.0}
    parts = [f"{_NAMES[key]} {_value(key, test[key])}" for key in ("factor", "margin", "equivalence", "target",
                                                                  "target_k")
             if test.get(key) is not None and test.get(key) != defaults.get(key)]
    return f" (with {', '.join(parts)})" if parts else ""


def _registration(text: str, states: list[_State], parsed: list[dict[str, dict[str, Any]] | None]) -> Registration:
    first_item = next(p[text] for p in parsed if p is not None and text in p)
    final_item = next((p[text] for p in reversed(parsed) if p is not None and text in p), first_item)
    final = _rows(final_item, states[-1])  # the rows the claim judges now; the same rows earlier count
    item_now = first_item
    last_test: dict[str, Any] | None = None
    last_samples: Any = None
    fixed: _State | None = None
    first_rows: _State | None = None
    changes: list[str] = []
    extended: list[str] = []
    prior: set[int] = set()  # the seeds (rounds) of the judged rows in the state before
    looked: set[int] = set()
    for i, state in enumerate(states):
        claims = parsed[i]
        present = claims is not None and text in claims
        if present:
            item_now = claims[text]
        judged = {row[1] for row in state.rows["harness" if _harness(final_item) else "runs"] & final}
        seen_before = first_rows is not None
        if judged and first_rows is None:
            first_rows = state
        before, prior = prior, judged
        if not present:
            continue  # not yet in the file, or the file is missing / does not parse: the claim stands as it was
        noun = "rounds" if _harness(item_now) else "seeds"
        if before:
            when = f"after {noun} {_ranges(before)} were in"
        elif seen_before:
            when = f"after the first rows ({first_rows.short.removeprefix('on ')})"
        else:
            when = f"in the same commit as the first rows ({noun} {_ranges(judged)})"
        late = bool(judged or seen_before)
        test, samples = _test(item_now, state.doc), _samples(item_now, state.doc)
        if last_test is None:
            fixed = state
            if late:
                changes.append(f"claim first in the file{_added(test)} {state.short} {when}")
                looked = set(before)
        else:
            if test != last_test:
                fixed = state
                if late:
                    changes.append(f"{_diff(last_test, test)} {state.short} {when}")
                    looked = set(before)
            if samples != last_samples:
                fixed = state
                if late:
                    extended.append(f"{_samples_diff(last_samples, samples, _harness(item_now))} {state.short} {when}")
                    looked = set(before)
        last_test, last_samples = test, samples
    rows_at = first_rows.where if first_rows else None
    late_changes = bool(changes or extended)
    assert fixed is not None  # the claim is in the file in some state, and its first one fixes it
    if fixed.commit == WORKING_TREE:
        committed = any(p is not None and text in p for s, p in zip(states, parsed) if s.commit != WORKING_TREE)
        return Registration(text, WORKING_TREE if committed else None, rows_at, False if late_changes else None,
                            changes, extended, frozenset(looked))
    return Registration(text, fixed.where, rows_at, not late_changes, changes, extended, frozenset(looked))


def registrations(repo: Path, experiment_file: str, results_csv: str,
                  harness_csvs: Sequence[str] | None = None) -> dict[str, Registration]:
    """Per claim text of ``experiment_file`` (as the working tree has it), whether its test was fixed in git
    before the first row of ``results_csv`` it judges. Paths are relative to ``repo`` (or absolute, under it);
    ``harness_csvs`` (the rows of the harness claims) default to ``<results_csv stem>-steptime.csv``,
    ``-scaling.csv`` and ``-inference.csv`` beside it. Outside a git checkout: ``{}``."""
    repo = Path(repo)
    experiment_file, results_csv = (str(Path(p).relative_to(repo.resolve())) if Path(p).is_absolute() else str(p)
                                    for p in (experiment_file, results_csv))
    if harness_csvs is None:
        stem = PurePosixPath(results_csv)
        harness_csvs = [str(stem.with_name(f"{stem.stem}-{kind}.csv"))
                        for kind in ("steptime", "scaling", "inference")]
    states = _states(repo, experiment_file, results_csv, harness_csvs)
    if states is None:
        return {}
    parsed = [_claims(s.doc) for s in states]
    current = next((p for p in reversed(parsed) if p is not None), None) or {}
    return {text: _registration(text, states, parsed) for text in current}


def registrations_in_git(experiment_file: Path | str, results_csv: Path | str) -> dict[str, Registration]:
    """:func:`registrations` for an experiment file and its results CSV wherever they are: the checkout is the
    one that holds the results; ``{}`` outside a git checkout or when the two are not under the same one."""
    results_csv = Path(results_csv).resolve()
    top = _git(results_csv.parent if results_csv.parent.exists() else Path.cwd(), "rev-parse", "--show-toplevel")
    if top is None:
        return {}
    try:
        return registrations(Path(top.decode().strip()), str(Path(experiment_file).resolve()), str(results_csv))
    except ValueError:  # not under that checkout
        return {}


def looked_in_git(found: dict[str, Registration]) -> dict[str, frozenset]:
    """Per claim that was not pre-registered, the seeds (harness rounds) already recorded when its test or the
    seeds list last changed: its verdict leaves them out."""
    return {text: r.looked for text, r in found.items() if r.preregistered is False and r.looked}


def _at(where: str) -> str:
    """'<commit> <date>' as 'DATE commit7'."""
    if where == WORKING_TREE:
        return "in the working tree (uncommitted)"
    commit, date = where.split(" ", 1)
    return f"{date} {commit[:7]}"


def registration_note(r: Registration) -> str:
    """One line for the claim's row in the report."""
    if r.preregistered is None:
        if r.fixed_at is None:
            return "pre-registration unknown (the claim is not in git)"
        return "not pre-registered yet (the test has uncommitted changes; no rows judged)"
    if r.preregistered:
        rows = "before the first row" if r.first_rows_at else "no rows yet"
        return f"pre-registered (test fixed {_at(r.fixed_at)}, {rows})"
    return "**not pre-registered**: " + "; ".join(r.changes + r.seeds_extended)
