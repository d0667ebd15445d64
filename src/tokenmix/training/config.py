"""What a training run is asked to do: :class:`TrainConfig` and its named presets, and what it gives back
(:class:`EvalRecord` per evaluation, :class:`TrainResult`); :func:`tokenmix.train.train` runs it.

**Presets** (:data:`TRAIN_PRESETS`, :meth:`TrainConfig.preset`): ``"quick"`` is the dataclass defaults with
lr 3e-3 (AdamW, weight decay 0.01, cosine, clipping 1.0, batch 32; for short CPU runs); ``"paper-004"``
is Chen (2023) Table 1 (AdamW lr 1e-3, betas (0.9, 0.999), constant lr, batch 64; no clipping or
warm-up is mentioned, so none; weight decay is not given, so PyTorch's AdamW default 0.01);
``"paper-000"`` is Yamada et al. (2022) §3.2.1-3.3 (Adam with its default settings, batch 256, early
stopping with patience 5, time to 0.8 accuracy reached at 10 evaluations in a row); ``"paper-003"`` is
Maupomé & Meurs (2021) §3.2 (Adam, batch 64, 10 epochs; lr not given, so Adam's default 1e-3).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from .checks import check_config

__all__ = ["TrainConfig", "TRAIN_PRESETS", "EvalRecord", "TrainResult", "validate_config"]


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
    bf16: bool = False  # torch.autocast(device_type, dtype=torch.bfloat16)
    seed: int = 0
    device: str = "cpu"
    out_dir: str | None = None  # checkpoints + logs written here when set
    resume: bool = False  # continue from out_dir/checkpoint if present
    checkpoint_every: int | None = None  # steps; None = at every evaluation
    progress: bool | None = None  # tqdm bar; None = only when stderr is a TTY
    tensorboard: bool = False  # optional; torch.utils.tensorboard imported lazily

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "TrainConfig":
        """The named preset of :data:`TRAIN_PRESETS` with ``overrides`` on top (unknown names raise)."""
        if name not in TRAIN_PRESETS:
            raise ValueError(f"unknown training preset {name!r}; presets: {', '.join(TRAIN_PRESETS)}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"TrainConfig has no field(s) {unknown}")
        return cls(**{**TRAIN_PRESETS[name], **overrides})


# Each paper's training settings, named (see the module docstring); "quick" is the defaults with lr 3e-3.
TRAIN_PRESETS: dict[str, dict[str, Any]] = {
    "quick": {"lr": 3e-3},
    "paper-004": {"optimizer": "adamw", "lr": 1e-3, "betas": (0.9, 0.999), "weight_decay": 0.01,
                  "schedule": "constant", "warmup_steps": 0, "grad_clip": None, "batch_size": 64},
    "paper-000": {"optimizer": "adam", "lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0,
                  "schedule": "constant", "warmup_steps": 0, "grad_clip": None, "batch_size": 256,
                  "patience": 5, "target": 0.8, "target_k": 10},
    "paper-003": {"optimizer": "adam", "lr": 1e-3, "weight_decay": 0.0, "schedule": "constant",
                  "warmup_steps": 0, "grad_clip": None, "batch_size": 64, "epochs": 10},
}


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


def validate_config(config: TrainConfig) -> None:
    """Raise on a ``config`` that :func:`tokenmix.train.train` cannot use (experiment files are checked with it
    before any run)."""
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    check_config(config)
