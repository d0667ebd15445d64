"""Writing a config as TOML (``tomli_w``), the format :func:`tokenmix.training.experiment.load_experiment`
reads back: TOML has no null, so None is written as ``"none"``; a non-finite float is refused."""

from __future__ import annotations

import math
from typing import Any

import tomli_w

from .schema import fail

__all__ = ["to_toml"]


def to_toml(data: dict[str, Any]) -> str:
    """TOML text of a config dict (written by ``tomli_w``). TOML has no null: None is written as ``"none"``,
    which :func:`~tokenmix.training.experiment.load_experiment` reads back as None; a non-finite float is
    refused."""
    return tomli_w.dumps(_toml_ready(data))


def _toml_ready(value: Any) -> Any:
    if value is None:
        return "none"
    if isinstance(value, float) and not math.isfinite(value):
        fail(f"cannot write the non-finite value {value} to TOML")
    if isinstance(value, dict):
        return {key: _toml_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_toml_ready(item) for item in value]
    return value
