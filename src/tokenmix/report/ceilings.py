"""Each task's shortcut ceiling: the best cheap baseline `tokenmix data audit` found on held-out data
(``<data>/task-audit.csv``), shown beside the mechanisms so that "a mechanism learns the task" is read against
what no mechanism is needed for, not only against the majority class."""

from __future__ import annotations

from pathlib import Path

from tokenmix.training.csvrecords import checked_table

from .tables import table

__all__ = ["AUDIT_FILE", "ceilings", "ceiling_line", "ceilings_section", "ceiling_for", "below_ceiling",
           "not_above_ceiling"]

AUDIT_FILE = "task-audit.csv"
_NUMBERS = {"accuracy": float, "low": float, "high": float, "n": int}


def ceilings(data: Path) -> dict[tuple[str, str], dict[str, str]]:
    """(task, options) -> the audit row of its best shortcut (kind "shortcut"), read checked; empty when the
    data folder holds no audit."""
    _, rows = checked_table(Path(data) / AUDIT_FILE, key=("task", "options", "baseline"), numeric=_NUMBERS)
    best: dict[tuple[str, str], dict[str, str]] = {}
    for _, row in rows:
        key = (row["task"], row["options"])
        if row.get("kind") == "shortcut" and (key not in best or float(row["accuracy"]) > float(best[key]["accuracy"])):
            best[key] = row
    return best


def _text(row: dict[str, str]) -> str:
    return (f"{float(row['accuracy']):.3f} [{float(row['low']):.3f}, {float(row['high']):.3f}] ({row['baseline']}, "
            f"n = {row['n']})")


def ceiling_line(data: Path, task: str) -> list[str]:
    """The ceiling of ``task`` at each audited setting, one sentence ([] when it was not audited)."""
    found = {options: row for (name, options), row in ceilings(data).items() if name == task}
    if not found:
        return []
    parts = "; ".join(f"{options}: {_text(row)}" for options, row in sorted(found.items()))
    return [f"Shortcut ceiling of the task (`tokenmix data audit {task}`, the best cheap baseline on held-out "
            f"data, accuracy [95 % interval]): {parts}. A mechanism at or below it (or inside its interval) has not "
            f"shown that it needs to mix tokens to do what it does here.", ""]


def ceilings_section(data: Path) -> list[str]:
    """The table of every audited task's ceiling."""
    found = ceilings(data)
    if not found:
        return []
    rows = [[f"`{task}`", options, row["baseline"], f"{float(row['accuracy']):.3f}",
             f"[{float(row['low']):.3f}, {float(row['high']):.3f}]", row["n"], _claims(task, options)]
            for (task, options), row in sorted(found.items())]
    return ["## Shortcut ceilings", "", "What a cheap classifier gets on each generated or stand-in task without "
            "any token mixing (fitted on one generator seed, scored on a held-out one; `tokenmix data audit`; "
            f"every baseline in `{AUDIT_FILE}`). A claim that a mechanism learns a task means something only "
            "above its ceiling; where the ceiling leaves no room, the task or the setting is retired: it trains, "
            "but an experiment file with claims on it is refused.", "",
            *table(["task", "setting", "best shortcut", "accuracy", "95 % interval", "n", "claims"], rows), ""]


def _claims(task: str, setting: str) -> str:
    """Whether claims may be judged on ``task`` at an audited ``setting`` ("key=value ..."; "default": none)."""
    from tokenmix.tasks import claims_refused, list_tasks

    if task not in list_tasks():
        return "—"
    options = {} if setting == "default" else dict(p.split("=", 1) for p in setting.split())
    refused = claims_refused(task, {k: int(v) if v.isdigit() else v for k, v in options.items()})
    return f"refused: {refused[0]} retired" if refused else "allowed"


def ceiling_for(data: Path, task: dict) -> dict[str, str] | None:
    """The audit row of the best shortcut at the setting an experiment's ``[task]`` table runs (the audited setting
    whose every ``key=value`` the table holds, the most specific first; "default" only for a table without
    options), or None when that setting was not audited."""
    options = {k: str(v) for k, v in task.items() if k not in ("name", "seed")}
    best, matched = None, -1
    for (name, setting), row in ceilings(data).items():
        if name != task.get("name"):
            continue
        pairs = [] if setting == "default" else [p.split("=", 1) for p in setting.split()]
        if setting == "default" and options:
            continue
        if all(options.get(k) == v for k, v in pairs) and len(pairs) > matched:
            best, matched = row, len(pairs)
    return best


def not_above_ceiling(mean: float, row: dict[str, str]) -> bool:
    """Whether a mean accuracy fails to clear the ceiling: at or below the top of its 95 % interval (the ceiling
    is itself measured on a finite held-out set, so a mean inside its interval is not above it)."""
    return mean <= float(row["high"])


def below_ceiling(label: str, mean: float, row: dict[str, str]) -> str:
    """A caveat: the label's mean accuracy does not clear what the task's best cheap baseline gets."""
    return (f"{label} ({mean:.3f}) not above the task's shortcut ceiling {float(row['accuracy']):.3f} "
            f"[{float(row['low']):.3f}, {float(row['high']):.3f}] ({row['baseline']}): not evidence that it learnt "
            f"more than that shortcut")
