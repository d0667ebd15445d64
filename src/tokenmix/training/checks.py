"""The checks of every :class:`tokenmix.train.TrainConfig` field (one ``ValueError`` naming the field), run by
:func:`tokenmix.train.train` and on experiment files before any training starts."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .config import TrainConfig

__all__ = ["check_config"]

_OPTIMIZERS = ("adamw", "adam")
_SCHEDULES = ("cosine", "constant")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_real(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_config(config: TrainConfig) -> None:
    """Raise ``ValueError`` naming the first field of ``config`` that :func:`tokenmix.train.train` cannot use."""

    def bad(name: str, what: str) -> None:
        raise ValueError(f"TrainConfig.{name} must be {what}, got {getattr(config, name)!r}")

    for name in ("max_steps", "epochs", "eval_every", "checkpoint_every", "patience"):
        v = getattr(config, name)
        if v is not None and (not _is_int(v) or v < 1):
            bad(name, "None or a positive int")
    if config.max_steps is not None and config.epochs is not None:
        raise ValueError(f"TrainConfig.max_steps and TrainConfig.epochs are exclusive; got max_steps="
                         f"{config.max_steps!r} and epochs={config.epochs!r}")
    for name in ("batch_size", "eval_batch_size", "target_k", "cost_window"):
        v = getattr(config, name)
        if not _is_int(v) or v < 1:
            bad(name, "a positive int")
    if not _is_int(config.warmup_steps) or config.warmup_steps < 0:
        bad("warmup_steps", "an int >= 0")
    if not _is_int(config.seed) or config.seed < 0:
        bad("seed", "an int >= 0")
    if not _is_real(config.lr) or config.lr < 0:
        bad("lr", "a finite float >= 0")
    if not _is_real(config.weight_decay) or config.weight_decay < 0:
        bad("weight_decay", "a finite float >= 0")
    if config.optimizer not in _OPTIMIZERS:
        bad("optimizer", f"one of {_OPTIMIZERS}")
    if config.optimizer == "adam" and config.weight_decay != 0:
        raise ValueError(f"TrainConfig.optimizer='adam' takes no weight decay (got weight_decay="
                         f"{config.weight_decay!r}); use optimizer='adamw' for decoupled weight decay")
    if config.schedule not in _SCHEDULES:
        bad("schedule", f"one of {_SCHEDULES}")
    if (not isinstance(config.betas, (tuple, list)) or len(config.betas) != 2
            or not all(_is_real(b) and 0 <= b < 1 for b in config.betas)):
        bad("betas", "a pair of floats in [0, 1)")
    if not _is_real(config.eps) or config.eps <= 0:
        bad("eps", "a finite float > 0")
    if config.grad_clip is not None and (not _is_real(config.grad_clip) or config.grad_clip <= 0):
        bad("grad_clip", "None or a finite float > 0")
    if config.target is not None and not _is_real(config.target):
        bad("target", "None or a finite float")
    for name in ("bf16", "resume", "tensorboard"):
        if not isinstance(getattr(config, name), bool):
            bad(name, "a bool")
    if config.progress is not None and not isinstance(config.progress, bool):
        bad("progress", "None or a bool")
    if config.out_dir is not None and (not isinstance(config.out_dir, (str, os.PathLike)) or not str(config.out_dir)):
        bad("out_dir", "None or a non-empty path")
    if config.resume and config.out_dir is None:
        raise ValueError("TrainConfig.resume=True needs TrainConfig.out_dir (where the checkpoint is)")
    if config.tensorboard and config.out_dir is None:
        raise ValueError("TrainConfig.tensorboard=True needs TrainConfig.out_dir (events go to out_dir/tensorboard)")
    if not isinstance(config.device, (str, torch.device)):
        bad("device", "a device string such as 'cpu' or 'cuda'")
    try:
        device = torch.device(config.device)
    except (RuntimeError, ValueError) as err:
        raise ValueError(f"TrainConfig.device: not a device: {config.device!r} ({err})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"TrainConfig.device={config.device!r}, but CUDA is not available")
