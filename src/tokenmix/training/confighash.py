"""The hashes that name a run's config: :func:`config_hash` (the run, ``config_hash`` in every row) and
:func:`mechanism_key` (the run but for its seeds and learning rate: what ``--verify``'s evidence is about)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["HASH_COLUMN", "config_hash", "mechanism_key", "plain"]

HASH_COLUMN = "config_hash"  # the column of every result row and verify ledger line that holds it


def plain(value: Any) -> Any:
    """Tuples as lists (as JSON writes them), so that a config read back from JSON compares equal."""
    return json.loads(json.dumps(value))


def config_hash(config: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of ``config`` (sorted keys, no spaces), first 12 hex digits."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def mechanism_key(config: dict[str, Any]) -> str:
    """:func:`config_hash` of a run's config without its seeds (``seed``, ``task.seed``) and learning rate
    (``train.lr``): what picks the numbers a run starts from and steps by, not the code that computes them. Runs
    with one key compute with the same code paths, so a code change that moves one of them moves them all."""
    config = plain(config)
    config.pop("seed", None)
    for section, field_name in (("task", "seed"), ("train", "lr")):
        if isinstance(config.get(section), dict):
            config[section].pop(field_name, None)
    return config_hash(config)
