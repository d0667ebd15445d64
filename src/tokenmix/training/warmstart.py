"""Runs that start from another experiment's trained weights: converting a trained softmax model.

A label's ``model`` table in an experiment file may hold:

* ``init_from = { experiment = "NAME", label = "LABEL" }``: before training, the run loads the best weights of run
  LABEL of experiment NAME (``runs/NAME/runs/LABEL/seed<k>/best.safetensors``; ``runs = "DIR"`` for another out
  folder than ``runs/NAME``; ``seed = k`` for one teacher for every run, by default the run's own seed, so that each
  seed converts its own teacher). Every weight of the teacher must fit the run's model by name and shape: Q/K/V
  mechanisms share the projections' names, so a linear-attention model takes a softmax model's weights and only
  its mechanism's own parameters (learned feature maps, SE-K) keep their initialisation. Anything else (another
  width, a weight the model does not have) is an error naming the weights. ``skip = ["head", ...]`` leaves the
  weights under those module paths out on both sides (a classifier's head for another number of classes, say):
  the run's own keep their initialisation; a path that names no weight of either is an error.
* ``transfer = { method = "hedgehog" | "lolcats", steps = N, lr = 0.01 }`` (with ``init_from``): before training,
  N steps of attention transfer (:mod:`tokenmix.conversion.transfer`) on the task's training batches train the
  feature maps alone to reproduce each layer's softmax teacher; the training that follows is the fine-tuning.
  A resumed run has them in its checkpoint and skips the transfer.

Neither key reaches the model class; both are part of the run's config (its hash). The teacher file's SHA-256 is
returned for the run's provenance.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from ..mixers.base import Mixer
from ..conversion.transfer import METHOD_LOSS, attention_transfer, feature_map_parameters, only_feature_maps

__all__ = ["WARM_KEYS", "split_warm_start", "check_warm_start", "teacher_file", "load_teacher", "transfer_stage"]

WARM_KEYS = ("init_from", "transfer")
_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "proj")


def split_warm_start(model_options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the model table without the warm-start keys, those keys)."""
    return ({k: v for k, v in model_options.items() if k not in WARM_KEYS},
            {k: v for k, v in model_options.items() if k in WARM_KEYS})


def check_warm_start(label: str, warm: dict[str, Any]) -> None:
    """Raise ``ValueError`` naming the label for a malformed ``init_from`` or ``transfer``."""
    def fail(message: str) -> None:
        raise ValueError(f"label {label!r}: {message}")

    init, transfer = warm.get("init_from"), warm.get("transfer")
    if init is not None:
        if not isinstance(init, dict) or not {"experiment", "label"} <= set(init) or \
                set(init) - {"experiment", "label", "seed", "runs", "skip"}:
            fail(f"init_from must be a table with experiment and label (and optionally seed, runs, skip); "
                 f"got {init!r}")
        skip = init.get("skip", [])
        if not isinstance(skip, list) or not all(isinstance(p, str) and p and not p.endswith(".") for p in skip):
            fail(f"init_from's skip must be a list of module paths such as ['head'], got {skip!r}")
        if not all(isinstance(init[k], str) for k in ("experiment", "label")):
            fail("init_from's experiment and label must be strings")
        if "seed" in init and (isinstance(init["seed"], bool) or not isinstance(init["seed"], int)):
            fail(f"init_from's seed must be an int (omit it for the run's own seed), got {init['seed']!r}")
    if transfer is not None:
        if init is None:
            fail("transfer needs init_from: it teaches the feature maps a trained softmax model's attention")
        if not isinstance(transfer, dict) or set(transfer) - {"method", "steps", "lr"} or "method" not in transfer:
            fail(f"transfer must be a table with method (and optionally steps, lr); got {transfer!r}")
        if transfer["method"] not in METHOD_LOSS:
            fail(f"transfer method must be one of {', '.join(METHOD_LOSS)}, got {transfer['method']!r}")
        steps = transfer.get("steps", 100)
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            fail(f"transfer steps must be a positive int, got {steps!r}")
        lr = transfer.get("lr", 1e-2)
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
            fail(f"transfer lr must be a positive number, got {lr!r}")


def teacher_file(init_from: dict[str, Any], seed: int) -> Path:
    """The best-weights file the run of ``seed`` starts from (see the module docstring); raises
    ``FileNotFoundError`` saying which experiment to run when it is not there."""
    runs = Path(init_from.get("runs", f"runs/{init_from['experiment']}"))
    teacher_seed = init_from.get("seed", seed)
    path = runs / "runs" / init_from["label"] / f"seed{teacher_seed}" / "best.safetensors"
    if not path.exists():
        raise FileNotFoundError(
            f"init_from: {path} does not exist: run the teacher first (tokenmix compare --config "
            f"experiments/{init_from['experiment']}.toml, label {init_from['label']!r}, seed {teacher_seed}; "
            f"runs = '...' in init_from for another out folder)")
    return path


def _mechanism_only(model: nn.Module, missing: list[str]) -> list[str]:
    """The names in ``missing`` that are not a mechanism's own parameters (those may keep their initialisation)."""
    owners = {name: module for name, module in model.named_modules()}
    wrong = []
    for key in missing:
        parts = key.split(".")
        inside_mixer = any(isinstance(owners.get(".".join(parts[:i])), Mixer) for i in range(1, len(parts)))
        if not inside_mixer or any(p in _PROJECTIONS for p in parts):
            wrong.append(key)
    return wrong


def _under(name: str, paths: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in paths)


def load_teacher(model: nn.Module, path: Path, skip: tuple[str, ...] | list[str] = ()) -> str:
    """Load the teacher's weights into ``model`` (see the module docstring), leaving out those under the module
    paths ``skip`` on both sides; return the file's SHA-256."""
    from safetensors.torch import load_file

    skip = tuple(skip)
    state = load_file(str(path))
    own = model.state_dict()
    unused = [p for p in skip if not any(_under(k, (p,)) for k in (*state, *own))]
    if unused:
        raise ValueError(f"init_from: skip {unused} names no weight of {path} or of the model")
    state = {k: v for k, v in state.items() if not _under(k, skip)}
    own = {k: v for k, v in own.items() if not _under(k, skip)}
    shapes = [f"{k} {tuple(v.shape)} vs {tuple(own[k].shape)}" for k, v in state.items()
              if k in own and own[k].shape != v.shape]
    unexpected = [k for k in state if k not in own]
    missing = _mechanism_only(model, [k for k in own if k not in state])
    if shapes or unexpected or missing:
        problems = "; ".join(part for part in (
            f"shapes differ: {', '.join(shapes[:4])}" if shapes else "",
            f"weights the model lacks: {', '.join(unexpected[:4])}" if unexpected else "",
            f"weights the teacher lacks outside a mechanism: {', '.join(missing[:4])}" if missing else "") if part)
        raise ValueError(f"init_from: {path} does not fit the model: {problems}")
    model.load_state_dict(state, strict=False)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def transfer_stage(model: nn.Module, task: Any, transfer: dict[str, Any], *, batch_size: int, seed: int,
                   progress: bool = False) -> list[float]:
    """Train only the feature maps of ``model`` to reproduce each layer's softmax teacher on the task's training
    batches (``transfer``: method, steps, lr); returns the loss of each step."""
    if not feature_map_parameters(model):
        raise ValueError("transfer: the model's mechanisms have no learned feature map to train (linear with "
                         "feature_map = 'hedgehog' or 't2r')")
    steps, losses, epoch = int(transfer.get("steps", 100)), [], 0
    model.train()
    with only_feature_maps(model) as maps, tqdm(total=steps, desc="attention transfer", disable=not progress) as bar:
        optimizer = torch.optim.AdamW(maps, lr=float(transfer.get("lr", 1e-2)), weight_decay=0.0)
        while len(losses) < steps:
            for batch in task.batches("train", batch_size, shuffle=True, seed=seed * 1000 + 500 + epoch,
                                      drop_last=True):
                with attention_transfer(model, METHOD_LOSS[transfer["method"]]) as teacher:
                    task.logits(model, batch)
                loss = torch.stack(teacher.losses).mean()
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
                bar.update(1)
                if len(losses) == steps:
                    break
            epoch += 1
    return losses
