"""The checkpoint of a training run and the best weights, under ``out_dir`` (:class:`Checkpointer`), and the RNG
states a checkpoint carries.

``out_dir/checkpoint/`` holds ``model.safetensors`` (``safetensors.torch.save_model``, which handles tied
weights) and ``state.pt`` (one dict, built by :func:`tokenmix.training.loop.train`). It is written whole into a
temporary sibling that is then renamed into place, so an interruption leaves the previous checkpoint readable
(as ``checkpoint.old`` when it falls between the two renames). ``out_dir/best.safetensors`` holds the
best-validation weights. Both are written through disk-full guards (:class:`~tokenmix.training.files.DiskFull`
names the file instead of torch's ``unexpected pos`` error), and :func:`set_aside_damaged` moves damaged
checkpoint folders and best weights (truncated, unreadable) aside before a run resumes.
"""

from __future__ import annotations

import os
import random
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn

from .files import disk_full_guard, move_aside

__all__ = ["Checkpointer", "gather_rng_states", "restore_rng_states", "damaged_reason", "set_aside_damaged"]

CHECKPOINT_DIR = "checkpoint"
MODEL_FILE = "model.safetensors"
STATE_FILE = "state.pt"
BEST_FILE = "best.safetensors"

# Multiplies the step in the seed of a resume that cannot restore every rank's RNG state: resumes at different steps
# get different seeds, and seeds far from the small ``seed + rank`` of fresh runs.
RESEED_STEP_STRIDE = 7919  # a prime


class Checkpointer:
    """Finds, reads and writes ``out_dir``'s checkpoint and best weights; only the rank given ``writes`` writes."""

    def __init__(self, out_dir: str, writes: bool) -> None:
        self.path = os.path.join(out_dir, CHECKPOINT_DIR)
        self.best_path = os.path.join(out_dir, BEST_FILE)
        self.writes = writes
        if writes:
            os.makedirs(out_dir, exist_ok=True)

    def find(self) -> str | None:
        """The complete checkpoint directory to resume from, or None."""
        for candidate in (self.path, self.path + ".old"):  # .old: interrupted between the two renames of save()
            if all(os.path.isfile(os.path.join(candidate, name)) for name in (STATE_FILE, MODEL_FILE)):
                return candidate
        return None

    @staticmethod
    def read_state(directory: str) -> dict[str, Any]:
        """The ``state.pt`` dict of the checkpoint in ``directory``."""
        return torch.load(os.path.join(directory, STATE_FILE), map_location="cpu", weights_only=False)

    @staticmethod
    def read_weights(directory: str, model: nn.Module, device: torch.device) -> None:
        """Load the weights of the checkpoint in ``directory`` into ``model``."""
        _load_weights(model, os.path.join(directory, MODEL_FILE), device)

    def save(self, model: nn.Module, state: dict[str, Any]) -> None:
        """Replace the checkpoint with ``model``'s weights and ``state``."""
        if not self.writes:
            return
        from safetensors.torch import save_model

        tmp = f"{self.path}.tmp-{os.getpid()}"
        old = f"{self.path}.old"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            with disk_full_guard(tmp):
                os.makedirs(tmp)
                save_model(model, os.path.join(tmp, MODEL_FILE))
                torch.save(state, os.path.join(tmp, STATE_FILE))
                for name in (MODEL_FILE, STATE_FILE):
                    _fsync(os.path.join(tmp, name))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # a partial checkpoint would only take up the space needed
            raise
        shutil.rmtree(old, ignore_errors=True)
        if os.path.exists(self.path):
            os.replace(self.path, old)
        os.replace(tmp, self.path)
        shutil.rmtree(old, ignore_errors=True)

    def save_best(self, model: nn.Module) -> None:
        """Replace ``best.safetensors`` with ``model``'s weights."""
        if not self.writes:
            return
        from safetensors.torch import save_model

        tmp = f"{self.best_path}.tmp-{os.getpid()}"
        try:
            with disk_full_guard(self.best_path):
                save_model(model, tmp)
                _fsync(tmp)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        os.replace(tmp, self.best_path)

    def read_best(self, model: nn.Module, device: torch.device) -> bool:
        """Load ``best.safetensors`` into ``model``; False (and ``model`` unchanged) when there is none."""
        if not os.path.isfile(self.best_path):
            return False
        _load_weights(model, self.best_path, device)
        return True


def _fsync(path: str) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _safetensors_damage(path: str) -> str | None:
    """Why the safetensors file ``path`` cannot be read (its header is checked against its length), or None."""
    from safetensors import safe_open

    try:
        with safe_open(path, "pt") as f:
            f.keys()
    except Exception as error:  # safetensors raises its own SafetensorError, among others
        return f"{os.path.basename(path)}: {error}"
    return None


def damaged_reason(directory: str) -> str | None:
    """Why the checkpoint folder ``directory`` cannot be resumed from (a file missing, truncated or unreadable),
    or None when it is intact."""
    for name in (MODEL_FILE, STATE_FILE):
        if not os.path.isfile(os.path.join(directory, name)):
            return f"{name} is missing"
    reason = _safetensors_damage(os.path.join(directory, MODEL_FILE))
    if reason is not None:
        return reason
    try:
        state = Checkpointer.read_state(directory)
    except Exception as error:  # torch.load of a truncated zip raises RuntimeError, of garbage UnpicklingError
        return f"{STATE_FILE}: {type(error).__name__}: {error}"
    if not isinstance(state, dict) or "step" not in state or "config" not in state:
        return f"{STATE_FILE} holds no checkpoint state"
    return None


def set_aside_damaged(out_dir: str | Path) -> list[Path]:
    """Move the damaged checkpoints of the run in ``out_dir`` aside (``<name>.damaged-<timestamp>``, each named on
    stderr), so that it resumes from an intact one (``checkpoint.old``) or starts afresh. Damaged best weights
    set aside every checkpoint too: a run resumed without its best weights would test its last ones. Returns
    the new paths."""
    folder = str(out_dir)
    moved: list[Path] = []
    best = os.path.join(folder, BEST_FILE)
    best_damage = _safetensors_damage(best) if os.path.isfile(best) else None
    if best_damage is not None:
        moved.append(move_aside(best, best_damage, "the run trains again from the start"))
    for name in (CHECKPOINT_DIR, CHECKPOINT_DIR + ".old"):
        directory = os.path.join(folder, name)
        if not os.path.isdir(directory):
            continue
        reason = damaged_reason(directory) if best_damage is None else "its best weights are damaged"
        if reason is None:
            continue
        intact = [o for o in (CHECKPOINT_DIR + ".old",) if o != name and os.path.isdir(os.path.join(folder, o))
                  and best_damage is None and damaged_reason(os.path.join(folder, o)) is None]
        then = ("the run resumes from the older " + intact[0]) if intact else "the run trains again from the start"
        moved.append(move_aside(directory, reason, then))
    return moved


def _load_weights(model: nn.Module, path: str, device: torch.device) -> None:
    from safetensors.torch import load_model

    load_model(model, path, strict=True, device=str(device))


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np

        state["numpy"] = np.random.get_state()
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])


def gather_rng_states(distributed: bool, world: int) -> list[dict[str, Any]]:
    """The torch/python/numpy(/cuda) RNG states of every rank, in rank order (a collective under DDP)."""
    state = _rng_state()
    if not distributed:
        return [state]
    states: list[Any] = [None] * world
    dist.all_gather_object(states, state)
    return states


def restore_rng_states(states: list[dict[str, Any]], rank: int, world: int, seed: int, step: int) -> None:
    """Restore this rank's RNG states from a checkpoint's :func:`gather_rng_states`.

    Saved under another world size, rank 0's states are restored and torch is reseeded from ``seed`` (the
    run's seed + rank) and ``step``, with a warning: the run goes on but no longer matches an uninterrupted one."""
    if len(states) == world:
        _set_rng_state(states[rank])
        return
    warnings.warn(f"checkpoint written with world size {len(states)}, resumed with {world}: "
                  "RNG states cannot be restored per rank; the run will not match an uninterrupted one")
    _set_rng_state(states[0])
    torch.manual_seed(seed + RESEED_STEP_STRIDE * step)
