"""What a training run is asked to do: :class:`TrainConfig`, which checks itself when it is made, and what it
gives back (:class:`EvalRecord` per evaluation, :class:`TrainResult`); :func:`tokenmix.training.loop.train`
runs it.

**Presets** (:meth:`TrainConfig.preset`): the named settings of :data:`tokenmix.protocols.TRAIN_PRESETS`,
each paper's with its citations there; ``"quick"`` is the dataclass defaults with lr 3e-3 (for short CPU runs).

**Checks** (:meth:`TrainConfig.validate`, run on construction and again by ``train``): every field, one
``ValueError`` naming the first field the loop cannot use.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields
from typing import Any

import torch

from ..protocols import TRAIN_PRESETS

__all__ = ["TrainConfig", "EvalRecord", "TrainResult"]

_OPTIMIZERS = ("adamw", "adam")
_SCHEDULES = ("cosine", "constant")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_real(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclass
class TrainConfig:
    max_steps: int | None = None  # exactly one of max_steps / epochs (if both None: epochs=1)
    epochs: int | None = None
    batch_size: int = 32
    lr: float = 1e-3
    optimizer: str = "adamw"  # "adamw" | "adam"
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.01
    schedule: str = "cosine"  # after the warm-up: "cosine" decay to 0, or "constant"
    warmup_steps: int = 0  # linear warm-up
    grad_clip: float | None = 1.0
    eval_every: int | None = None  # steps between evaluations; None = once per epoch
    eval_batch_size: int = 64
    patience: int | None = 5  # early stopping: evaluations without improvement (Yamada et al.: 5); None = off
    target: float | None = None  # time-to-target threshold on the val metric
    target_k: int = 1  # ... reached k evaluations in a row (Yamada et al.: 10)
    cost_window: int = 2000  # training cost: median per-batch loss over the last cost_window batches (Chen 2023 §6)
    locality_window: int | None = None  # after training: the test split's attention mass within this many positions
    bf16: bool = False  # torch.autocast(device_type, dtype=torch.bfloat16)
    flush_denormal: bool = False  # subnormal floats flushed to zero on the CPU while training (see loop.train)
    seed: int = 0
    device: str = "cpu"
    out_dir: str | None = None  # checkpoints + logs written here when set
    resume: bool = False  # continue from out_dir/checkpoint if present
    checkpoint_every: int | None = None  # steps; None = at every evaluation
    progress: bool | None = None  # tqdm bar; None = only when stderr is a TTY
    tensorboard: bool = False  # optional; torch.utils.tensorboard imported lazily

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "TrainConfig":
        """The named preset of :data:`~tokenmix.protocols.TRAIN_PRESETS` with ``overrides`` on top (unknown names
        raise)."""
        if name not in TRAIN_PRESETS:
            raise ValueError(f"unknown training preset {name!r}; presets: {', '.join(TRAIN_PRESETS)}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"TrainConfig has no field(s) {unknown}")
        return cls(**{**TRAIN_PRESETS[name], **overrides})

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first field that :func:`tokenmix.training.loop.train` cannot use."""
        self._check_counts()
        self._check_optimizer()
        self._check_switches()

    def _bad(self, name: str, what: str) -> None:
        raise ValueError(f"TrainConfig.{name} must be {what}, got {getattr(self, name)!r}")

    def _check_counts(self) -> None:
        for name in ("max_steps", "epochs", "eval_every", "checkpoint_every", "patience"):
            v = getattr(self, name)
            if v is not None and (not _is_int(v) or v < 1):
                self._bad(name, "None or a positive int")
        if self.max_steps is not None and self.epochs is not None:
            raise ValueError(f"TrainConfig.max_steps and TrainConfig.epochs are exclusive; got max_steps="
                             f"{self.max_steps!r} and epochs={self.epochs!r}")
        for name in ("batch_size", "eval_batch_size", "target_k", "cost_window"):
            v = getattr(self, name)
            if not _is_int(v) or v < 1:
                self._bad(name, "a positive int")
        if self.target is not None and self.patience is not None and self.patience < self.target_k:
            raise ValueError(f"TrainConfig.patience ({self.patience}) < TrainConfig.target_k ({self.target_k}): early "
                             f"stopping could end a run before the target's streak of {self.target_k} evaluations "
                             f"completes; set patience >= target_k, or None")
        if self.locality_window is not None and (not _is_int(self.locality_window) or self.locality_window < 0):
            self._bad("locality_window", "None or an int >= 0")
        if not _is_int(self.warmup_steps) or self.warmup_steps < 0:
            self._bad("warmup_steps", "an int >= 0")
        if not _is_int(self.seed) or self.seed < 0:
            self._bad("seed", "an int >= 0")

    def _check_optimizer(self) -> None:
        if not _is_real(self.lr) or self.lr < 0:
            self._bad("lr", "a finite float >= 0")
        if not _is_real(self.weight_decay) or self.weight_decay < 0:
            self._bad("weight_decay", "a finite float >= 0")
        if self.optimizer not in _OPTIMIZERS:
            self._bad("optimizer", f"one of {_OPTIMIZERS}")
        if self.optimizer == "adam" and self.weight_decay != 0:
            raise ValueError(f"TrainConfig.optimizer='adam' takes no weight decay (got weight_decay="
                             f"{self.weight_decay!r}); use optimizer='adamw' for decoupled weight decay")
        if self.schedule not in _SCHEDULES:
            self._bad("schedule", f"one of {_SCHEDULES}")
        if (not isinstance(self.betas, (tuple, list)) or len(self.betas) != 2
                or not all(_is_real(b) and 0 <= b < 1 for b in self.betas)):
            self._bad("betas", "a pair of floats in [0, 1)")
        if not _is_real(self.eps) or self.eps <= 0:
            self._bad("eps", "a finite float > 0")
        if self.grad_clip is not None and (not _is_real(self.grad_clip) or self.grad_clip <= 0):
            self._bad("grad_clip", "None or a finite float > 0")
        if self.target is not None and not _is_real(self.target):
            self._bad("target", "None or a finite float")

    def _check_switches(self) -> None:
        for name in ("bf16", "flush_denormal", "resume", "tensorboard"):
            if not isinstance(getattr(self, name), bool):
                self._bad(name, "a bool")
        if self.progress is not None and not isinstance(self.progress, bool):
            self._bad("progress", "None or a bool")
        if self.out_dir is not None and (not isinstance(self.out_dir, (str, os.PathLike)) or not str(self.out_dir)):
            self._bad("out_dir", "None or a non-empty path")
        if self.resume and self.out_dir is None:
            raise ValueError("TrainConfig.resume=True needs TrainConfig.out_dir (where the checkpoint is)")
        if self.tensorboard and self.out_dir is None:
            raise ValueError("TrainConfig.tensorboard=True needs TrainConfig.out_dir (events go to "
                             "out_dir/tensorboard)")
        if not isinstance(self.device, (str, torch.device)):
            self._bad("device", "a device string such as 'cpu' or 'cuda'")
        try:
            device = torch.device(self.device)
        except (RuntimeError, ValueError) as err:
            raise ValueError(f"TrainConfig.device: not a device: {self.device!r} ({err})") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"TrainConfig.device={self.device!r}, but CUDA is not available")


@dataclass
class EvalRecord:
    step: int
    epoch: float
    wall_s: float  # training wall time (excluding evaluation) up to this evaluation
    train_loss: float  # mean training loss over the steps since the previous evaluation
    val_loss: float
    val_metric: float


@dataclass
class TrainResult:
    metric_name: str
    best_metric: float
    best_step: int
    best_epoch: float
    test_metric: float | None
    time_per_epoch_s: float
    time_to_target_s: float | None
    tokens_per_s: float
    peak_mem_mb: float
    steps: int
    params: int
    history: list[EvalRecord] = field(default_factory=list)
    stopped_early: bool = False
    train_cost: float | None = None  # median of the per-batch training losses over the last cost_batches batches
    cost_batches: int = 0
    # attention mass within locality_window positions on the test split (training.locality)
    locality: float | None = None
