"""What changes an experiment file's settings before it is read: ``--set key=value`` overrides
(:func:`parse_overrides`, :func:`apply_override`) and named budgets (:func:`apply_budget`, ``[budgets.quick]``).
"""

from __future__ import annotations

import copy
import tomllib
from typing import Any

from .schema import TOP_KEYS, fail

__all__ = ["parse_overrides", "apply_override", "apply_budget"]


def parse_overrides(items: list[str]) -> list[tuple[list[str], Any]]:
    """``["train.lr=1e-3", "seeds=[0,1]"]`` -> ``[(["train", "lr"], 0.001), (["seeds"], [0, 1])]``: values are
    TOML values, or plain strings when they are not (``task.name=listops``)."""
    parsed = []
    for item in items:
        key, eq, text = item.partition("=")
        if not eq or not key.strip() or any(not part for part in key.strip().split(".")):
            fail(f"--set expects key=value with a dotted key (e.g. train.lr=1e-3), got {item!r}")
        try:
            value = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            value = text
        parsed.append((key.strip().split("."), value))
    return parsed


def apply_override(data: dict[str, Any], path: list[str], value: Any) -> None:
    """Set ``data[path[0]][path[1]]... = value`` in place, making the tables on the way."""
    node = data
    for part in path[:-1]:
        if part not in node:
            node[part] = {}
        if not isinstance(node[part], dict):
            fail(f"--set {'.'.join(path)}: {part!r} is not a table")
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
        fail("[budgets] must hold named tables, e.g. [budgets.quick]")
    if budget is None:
        return data
    if budget not in budgets:
        fail(f"no budget {budget!r} in the experiment file; budgets: {', '.join(budgets) or 'none'}")
    for key, value in budgets[budget].items():
        if key not in TOP_KEYS - {"name", "budgets"}:
            fail(f"[budgets.{budget}]: unknown key {key!r}")
        if isinstance(value, dict):
            if not isinstance(data.get(key, {}), dict):
                fail(f"[budgets.{budget}]: {key!r} is not a table in the experiment")
            data[key] = {**data.get(key, {}), **value}
        else:
            data[key] = value
    return data
