"""Training loop shared by every task and model: AdamW, warm-up + cosine schedule, early stopping,
time-to-target, checkpoint/resume, logs, and optional multi-process data parallelism.

Protocol (papers 000 §3.2-3.3 and 004 §6):

* **Optimiser**: ``optimizer="adamw"`` (decoupled weight decay, Loshchilov & Hutter) or ``"adam"`` (Kingma &
  Ba; ``weight_decay`` must then be 0 -- Adam's coupled L2 penalty is not offered), with ``betas`` and
  ``eps``. AdamW's weight decay acts on parameters with two or more dimensions (weights, embeddings);
  biases and normalisation gains are not decayed.
* **Schedule**: the learning rate at optimiser step ``s`` (0-based) is ``lr * f(s)`` with
  ``f(s) = (s + 1) / warmup_steps`` for ``s < warmup_steps`` (linear warm-up, reaching ``lr`` at the last
  warm-up step) and, after it, ``f(s) = 1`` for ``schedule="constant"`` or, for ``"cosine"``,
  ``f(s) = 0.5 * (1 + cos(pi * (s - warmup_steps) / (total - warmup_steps)))`` (cosine decay to 0 at
  ``total``, the planned number of steps; early stopping does not change it). See :func:`lr_factor`.
* **Presets** (:data:`TRAIN_PRESETS`, :meth:`TrainConfig.preset`): ``"quick"`` is the dataclass defaults with
  lr 3e-3 (AdamW, weight decay 0.01, cosine, clipping 1.0, batch 32; for short CPU runs); ``"paper-004"``
  is Chen (2023) Table 1 (AdamW lr 1e-3, betas (0.9, 0.999), constant lr, batch 64; no clipping or
  warm-up is mentioned, so none; weight decay is not given, so PyTorch's AdamW default 0.01);
  ``"paper-000"`` is Yamada et al. (2022) §3.2.1-3.3 (Adam with its default settings, batch 256, early
  stopping with patience 5, time to 0.8 accuracy reached at 10 evaluations in a row); ``"paper-003"`` is
  Maupomé & Meurs (2021) §3.2 (Adam, batch 64, 10 epochs; lr not given, so Adam's default 1e-3).
* **Same batches for every model** (004 §6): the batches of epoch ``e`` are
  ``task.batches("train", batch_size, shuffle=True, seed=seed * 1000 + e, drop_last=True)``, which depend
  on the task and the seed only. ``torch.manual_seed(seed)`` is called before anything random in
  :func:`train` (dropout), so the same seed gives bitwise the same history on CPU.
* **Evaluation** every ``eval_every`` steps (default: once per epoch) and after the last step; each one
  appends an :class:`EvalRecord`. **Early stopping** (000: patience 5) stops after ``patience``
  evaluations in a row without a strict improvement of the validation metric (higher accuracy / lower
  perplexity). **Time to target** (000 §3.3): training wall time until the validation metric has been at
  least as good as ``target`` at ``target_k`` evaluations in a row (000: k = 10); training goes on.
* **Timing**: ``wall_s``, ``time_per_epoch_s``, ``time_to_target_s`` and ``tokens_per_s`` count training
  wall time only (forward, backward, optimiser step, data batching), not evaluation, checkpointing or
  logging; on CUDA the device is synchronised before each reading.
* **Tokens**: real tokens per global batch — ``mask.sum()`` for classification, ``ids.numel()`` for
  language modelling, images × patches for image tasks (images when the model has no ``grid``).
* **Memory** (``peak_mem_mb``): the peak memory of the training loop above what the process held when it
  started, in MiB. CUDA: ``torch.cuda.max_memory_allocated`` (reset at the start). CPU: the process's peak
  resident set size (``VmHWM``, reset through ``/proc/self/clear_refs`` at the start of the loop) minus its
  resident size at that moment (:class:`tokenmix.procmem.PeakRSS`; without ``/proc``, ``ru_maxrss`` growth).
  Memory the allocator kept from earlier work in the same process is reused without showing up, so
  ``tokenmix compare`` trains each run in a fresh process.
* **Progress callback**: ``train(..., on_step=f)`` calls ``f(step, total_steps, last_val_metric)`` after every
  optimiser step (``last_val_metric`` is None before the first evaluation); ``tokenmix compare`` uses it for
  its sweep-wide progress line.
* **Best weights**: kept in memory and, with ``out_dir``, in ``out_dir/best.safetensors``; they are
  restored into the model at the end, before the test evaluation, so ``model`` leaves :func:`train`
  holding the best-validation weights.

Checkpoints (``out_dir/checkpoint/``): ``model.safetensors`` (the current weights,
``safetensors.torch.save_model``, which handles tied weights) and ``state.pt`` (optimiser, scheduler, RNG
states of torch/python/numpy (every rank's, under DDP), step and epoch counters, the position within the
epoch, the history, the early-stopping and time-to-target counters, the running training loss, the timers).
The directory is written to a temporary sibling and renamed into place. ``resume=True`` continues from it
exactly: the resumed run gives bitwise the history and weights an uninterrupted run gives. A resumed run
may change ``max_steps``/``epochs`` (the schedule follows the new total), not ``batch_size`` or ``seed``.

Logs (``out_dir/log.jsonl``, ``out_dir/log.csv``): one record per evaluation with the :class:`EvalRecord`
fields; on resume they are rewritten from the checkpoint's history, then appended to, so a record is never
duplicated.

Data parallel: when ``torch.distributed.is_initialized()`` (``torchrun``; gloo on CPU, nccl on CUDA) the
model is wrapped in ``DistributedDataParallel``. ``batch_size`` stays the **global** batch (it must be a
multiple of the world size): every rank draws the same global batch and keeps the rows ``rank::world``,
so each rank's mean loss is over ``batch_size / world`` rows and DDP's gradient average equals the
single-process gradient of the mean loss over the whole global batch — the same batches, steps and
schedule as a single-process run with the same config. Rank ``r`` seeds torch with ``seed + r`` (distinct
dropout masks; rank 0 matches a single process). Rank 0 evaluates, writes logs and checkpoints, and
broadcasts the metrics so every rank makes the same stopping decisions; the other ranks need ``out_dir``
on a shared file system only to resume.
"""

from __future__ import annotations

import csv
import json
import math
import os
import random
import resource
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from itertools import islice
from typing import Any, Callable

import torch
import torch.nn as nn

from .procmem import PeakRSS
from .tasks.base import ImageBatch, LMBatch, Task, TokenBatch

__all__ = ["TrainConfig", "EvalRecord", "TrainResult", "train", "lr_factor"]

CHECKPOINT_DIR = "checkpoint"
MODEL_FILE = "model.safetensors"
STATE_FILE = "state.pt"
BEST_FILE = "best.safetensors"
LOG_JSONL = "log.jsonl"
LOG_CSV = "log.csv"


_OPTIMIZERS = ("adamw", "adam")
_SCHEDULES = ("cosine", "constant")


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
    patience: int | None = 5  # early stopping: evaluations without improvement (000: 5); None = off
    target: float | None = None  # time-to-target threshold on the val metric
    target_k: int = 1  # ... reached k evaluations in a row (000: 10)
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


# -- validation ------------------------------------------------------------------------------------


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_real(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _validate(config: TrainConfig) -> None:
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")

    def bad(name: str, what: str) -> None:
        raise ValueError(f"TrainConfig.{name} must be {what}, got {getattr(config, name)!r}")

    for name in ("max_steps", "epochs", "eval_every", "checkpoint_every", "patience"):
        v = getattr(config, name)
        if v is not None and (not _is_int(v) or v < 1):
            bad(name, "None or a positive int")
    if config.max_steps is not None and config.epochs is not None:
        raise ValueError(f"TrainConfig.max_steps and TrainConfig.epochs are exclusive; got max_steps="
                         f"{config.max_steps!r} and epochs={config.epochs!r}")
    for name in ("batch_size", "eval_batch_size", "target_k"):
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


# -- schedule --------------------------------------------------------------------------------------


def lr_factor(step: int, warmup_steps: int, total_steps: int, schedule: str = "cosine") -> float:
    """Multiplier of ``lr`` for optimiser step ``step`` (0-based): linear warm-up ``(step + 1) / warmup``,
    then 1 (``schedule="constant"``) or cosine decay from 1 to 0 over the steps from ``warmup_steps`` to
    ``total_steps`` (``"cosine"``)."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    decay = total_steps - warmup_steps
    if decay <= 0:
        return 1.0
    progress = min(1.0, (step - warmup_steps) / decay)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


# -- helpers ---------------------------------------------------------------------------------------


def _count_tokens(batch: Any, model: nn.Module) -> int:
    if isinstance(batch, TokenBatch):
        return int(batch.mask.sum())
    if isinstance(batch, LMBatch):
        return batch.ids.numel()
    if isinstance(batch, ImageBatch):
        grid = getattr(model, "grid", None)
        per_image = int(grid[0]) * int(grid[1]) if grid is not None else 1
        return batch.images.shape[0] * per_image
    raise TypeError(f"unknown batch type {type(batch).__name__}")


def _shard(batch: Any, rank: int, world: int) -> Any:
    """Rows ``rank::world`` of every tensor of the batch."""
    if world == 1:
        return batch
    return type(batch)(**{f.name: getattr(batch, f.name)[rank::world] for f in fields(batch)})


def _better(a: float, b: float, higher: bool) -> bool:
    return a > b if higher else a < b


def _reached(value: float, target: float, higher: bool) -> bool:
    return value >= target if higher else value <= target


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


def _ru_maxrss_kb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 1024 if sys.platform == "darwin" else float(rss)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _save_weights(model: nn.Module, path: str) -> None:
    from safetensors.torch import save_model

    tmp = f"{path}.tmp-{os.getpid()}"
    save_model(model, tmp)
    os.replace(tmp, path)


def _load_weights(model: nn.Module, path: str, device: torch.device) -> None:
    from safetensors.torch import load_model

    load_model(model, path, strict=True, device=str(device))


def _write_logs(out_dir: str, history: list[EvalRecord]) -> None:
    """Rewrite both logs from ``history`` (atomically, file by file)."""
    names = [f.name for f in fields(EvalRecord)]
    for fname, writer in ((LOG_JSONL, "jsonl"), (LOG_CSV, "csv")):
        path = os.path.join(out_dir, fname)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "w", newline="") as fh:
            if writer == "jsonl":
                for rec in history:
                    fh.write(json.dumps(asdict(rec)) + "\n")
            else:
                w = csv.writer(fh)
                w.writerow(names)
                for rec in history:
                    w.writerow([getattr(rec, n) for n in names])
        os.replace(tmp, path)


def _append_log(out_dir: str, rec: EvalRecord) -> None:
    names = [f.name for f in fields(EvalRecord)]
    with open(os.path.join(out_dir, LOG_JSONL), "a") as fh:
        fh.write(json.dumps(asdict(rec)) + "\n")
    csv_path = os.path.join(out_dir, LOG_CSV)
    new = not os.path.exists(csv_path) or os.path.getsize(csv_path) == 0
    with open(csv_path, "a", newline="") as fh:
        w = csv.writer(fh)
        if new:
            w.writerow(names)
        w.writerow([getattr(rec, n) for n in names])


def _find_checkpoint(out_dir: str) -> str | None:
    path = os.path.join(out_dir, CHECKPOINT_DIR)
    for candidate in (path, path + ".old"):  # .old: a crash between the two renames of _save_checkpoint
        if os.path.isfile(os.path.join(candidate, STATE_FILE)) and os.path.isfile(os.path.join(candidate, MODEL_FILE)):
            return candidate
    return None


def _save_checkpoint(out_dir: str, model: nn.Module, state: dict[str, Any]) -> None:
    from safetensors.torch import save_model

    final = os.path.join(out_dir, CHECKPOINT_DIR)
    tmp = f"{final}.tmp-{os.getpid()}"
    old = f"{final}.old"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    save_model(model, os.path.join(tmp, MODEL_FILE))
    torch.save(state, os.path.join(tmp, STATE_FILE))
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(final):
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def _make_progress(config: TrainConfig, total: int, initial: int, enabled_rank: bool) -> Any:
    enabled = config.progress if config.progress is not None else sys.stderr.isatty()
    if not (enabled and enabled_rank):
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True)


def _make_writer(config: TrainConfig) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as err:
        raise ImportError("TrainConfig.tensorboard=True needs the 'tensorboard' package "
                          f"(pip install tensorboard): {err}") from err
    return SummaryWriter(os.path.join(str(config.out_dir), "tensorboard"))


# -- training --------------------------------------------------------------------------------------


def train(task: Task, model: nn.Module, config: TrainConfig, *,
          on_step: Callable[[int, int, float | None], None] | None = None) -> TrainResult:
    """Train ``model`` on ``task`` with ``config``; see the module docstring for the protocol.

    ``on_step(step, total_steps, last_val_metric)`` is called after every optimiser step, when given.
    On return ``model`` holds the best-validation weights (on ``config.device``)."""
    _validate(config)
    import torch.distributed as dist

    distributed = dist.is_available() and dist.is_initialized()
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    is_main = rank == 0
    device = torch.device(config.device)
    if device.type == "cuda" and device.index is None and distributed:
        device = torch.device("cuda", torch.cuda.current_device())
    if config.batch_size % world:
        raise ValueError(f"TrainConfig.batch_size ({config.batch_size}) is the global batch and must be a "
                         f"multiple of the world size ({world})")

    metric = task.info.metric
    higher = task.info.higher_is_better
    n_train = len(task.splits["train"])
    steps_per_epoch = n_train // config.batch_size
    if steps_per_epoch < 1:
        raise ValueError(f"TrainConfig.batch_size ({config.batch_size}) is larger than the training split "
                         f"({n_train} examples): no full batch")
    epochs = config.epochs if config.max_steps is None and config.epochs is not None else None
    if config.max_steps is None and epochs is None:
        epochs = 1
    total_steps = config.max_steps if config.max_steps is not None else epochs * steps_per_epoch
    eval_every = config.eval_every if config.eval_every is not None else steps_per_epoch

    torch.manual_seed(config.seed + rank)
    model.to(device)
    model.train()
    params = sum(p.numel() for p in model.parameters())

    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    groups = [g for g in ({"params": decay, "weight_decay": config.weight_decay},
                          {"params": no_decay, "weight_decay": 0.0}) if g["params"]]
    if not groups:
        raise ValueError("the model has no trainable parameters")
    optimizer_class = torch.optim.AdamW if config.optimizer == "adamw" else torch.optim.Adam
    optimizer = optimizer_class(groups, lr=config.lr, betas=tuple(config.betas), eps=config.eps)
    schedule: Callable[[int], float] = lambda s: lr_factor(s, config.warmup_steps, total_steps,  # noqa: E731
                                                           config.schedule)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)

    # Loop state (everything here goes into the checkpoint).
    step = 0
    history: list[EvalRecord] = []
    best_metric: float | None = None
    best_step, best_epoch = 0, 0.0
    bad_evals = 0
    target_run = 0
    time_to_target: float | None = None
    train_time = 0.0
    tokens = 0
    loss_sum, loss_count = 0.0, 0
    stopped_early = False
    best_state: dict[str, torch.Tensor] | None = None  # in memory; None after a resume until improved
    best_from_file = False  # resumed: the best weights so far are in out_dir/best.safetensors

    out_dir = str(config.out_dir) if config.out_dir is not None else None
    if out_dir is not None and is_main:
        os.makedirs(out_dir, exist_ok=True)

    ckpt = _find_checkpoint(out_dir) if (config.resume and out_dir is not None) else None
    if ckpt is not None:
        state = torch.load(os.path.join(ckpt, STATE_FILE), map_location="cpu", weights_only=False)
        for name in ("batch_size", "seed"):
            if state["config"][name] != getattr(config, name):
                raise ValueError(f"TrainConfig.{name}={getattr(config, name)!r} differs from the checkpoint's "
                                 f"{state['config'][name]!r} in {ckpt}; a resumed run must keep it")
        _load_weights(model, os.path.join(ckpt, MODEL_FILE), device)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        step = state["step"]
        # The schedule follows this run's total (which may extend the checkpoint's): set the next lr from it.
        for group, base in zip(optimizer.param_groups, scheduler.base_lrs):
            group["lr"] = base * schedule(step)
        history = [EvalRecord(**r) for r in state["history"]]
        best_metric, best_step, best_epoch = state["best_metric"], state["best_step"], state["best_epoch"]
        bad_evals, target_run, time_to_target = state["bad_evals"], state["target_run"], state["time_to_target"]
        train_time, tokens = state["train_time"], state["tokens"]
        loss_sum, loss_count = state["loss_sum"], state["loss_count"]
        stopped_early = state["stopped_early"]
        rngs = state["rng"]
        if len(rngs) == world:
            _set_rng_state(rngs[rank])
        else:
            import warnings

            warnings.warn(f"checkpoint written with world size {len(rngs)}, resumed with {world}: "
                          "RNG states cannot be restored per rank; the run will not match an uninterrupted one")
            _set_rng_state(rngs[0])
            torch.manual_seed(config.seed + rank + 7919 * step)
        best_path = os.path.join(out_dir, BEST_FILE)
        best_from_file = best_metric is not None and os.path.isfile(best_path)
        if is_main:
            _write_logs(out_dir, history)  # drop records written after the checkpoint
    elif out_dir is not None and is_main:
        _write_logs(out_dir, [])

    train_model: nn.Module = model
    if distributed:
        from torch.nn.parallel import DistributedDataParallel as DDP

        train_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
                          find_unused_parameters=True)

    writer = _make_writer(config) if (config.tensorboard and is_main) else None
    bar = _make_progress(config, total_steps, step, is_main)
    autocast = (lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16)) if config.bf16 else None

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    cpu_peak = PeakRSS(_ru_maxrss_kb)
    cpu_peak.start()

    def best_state_from_model() -> dict[str, torch.Tensor]:
        return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}

    def evaluate(split: str) -> dict[str, float]:
        result = [None]
        if is_main:
            if autocast is not None:
                with autocast():
                    result[0] = task.evaluate(model, split, config.eval_batch_size)
            else:
                result[0] = task.evaluate(model, split, config.eval_batch_size)
        if distributed:
            dist.broadcast_object_list(result, src=0)
        return result[0]

    def state_dict() -> dict[str, Any]:
        rng = _rng_state()
        rngs = [rng]
        if distributed:
            rngs = [None] * world
            dist.all_gather_object(rngs, rng)
        return {
            "version": 1,
            "config": asdict(config),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "rng": rngs,
            "step": step,
            "epoch": step // steps_per_epoch,
            "position_in_epoch": step % steps_per_epoch,
            "steps_per_epoch": steps_per_epoch,
            "total_steps": total_steps,
            "history": [asdict(r) for r in history],
            "best_metric": best_metric,
            "best_step": best_step,
            "best_epoch": best_epoch,
            "bad_evals": bad_evals,
            "target_run": target_run,
            "time_to_target": time_to_target,
            "train_time": train_time,
            "tokens": tokens,
            "loss_sum": loss_sum,
            "loss_count": loss_count,
            "stopped_early": stopped_early,
        }

    def checkpoint() -> None:
        st = state_dict()  # collective under DDP: every rank takes part
        if out_dir is not None and is_main:
            _save_checkpoint(out_dir, model, st)

    last_checkpoint_step = step
    try:
        seg_start = time.perf_counter()
        while step < total_steps and not stopped_early:
            epoch = step // steps_per_epoch
            position = step % steps_per_epoch
            batches = task.batches("train", config.batch_size, shuffle=True, seed=config.seed * 1000 + epoch,
                                   drop_last=True)
            for batch in islice(batches, position, None):
                tokens += _count_tokens(batch, model)
                local = _shard(batch, rank, world)
                optimizer.zero_grad(set_to_none=True)
                if autocast is not None:
                    with autocast():
                        loss = task.loss(train_model, local)
                else:
                    loss = task.loss(train_model, local)
                loss.backward()
                if config.grad_clip is not None:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
                optimizer.step()
                scheduler.step()
                step += 1
                loss_sum += float(loss.detach())
                loss_count += 1
                if bar is not None:
                    bar.update(1)
                if on_step is not None:
                    on_step(step, total_steps, history[-1].val_metric if history else None)

                do_eval = step % eval_every == 0 or step == total_steps
                do_ckpt = out_dir is not None and (
                    (config.checkpoint_every is None and do_eval)
                    or (config.checkpoint_every is not None and step % config.checkpoint_every == 0))
                if do_eval or do_ckpt:
                    _sync(device)
                    train_time += time.perf_counter() - seg_start
                if do_eval:
                    train_loss = loss_sum / max(loss_count, 1)
                    if distributed:
                        t = torch.tensor([loss_sum, float(loss_count)], dtype=torch.float64,
                                         device=device if device.type == "cuda" else "cpu")
                        dist.all_reduce(t)
                        train_loss = float(t[0] / t[1].clamp_min(1))
                    loss_sum, loss_count = 0.0, 0
                    metrics = evaluate("val")
                    value = float(metrics[metric])
                    rec = EvalRecord(step=step, epoch=step / steps_per_epoch, wall_s=train_time,
                                     train_loss=train_loss, val_loss=float(metrics["loss"]), val_metric=value)
                    history.append(rec)
                    if best_metric is None or _better(value, best_metric, higher):
                        best_metric, best_step, best_epoch = value, step, rec.epoch
                        bad_evals = 0
                        best_state = best_state_from_model()
                        if out_dir is not None and is_main:
                            _save_weights(model, os.path.join(out_dir, BEST_FILE))
                    else:
                        bad_evals += 1
                    if config.target is not None and time_to_target is None:
                        target_run = target_run + 1 if _reached(value, config.target, higher) else 0
                        if target_run >= config.target_k:
                            time_to_target = train_time
                    if config.patience is not None and bad_evals >= config.patience:
                        stopped_early = True
                    if out_dir is not None and is_main:
                        _append_log(out_dir, rec)
                    if writer is not None:
                        for key in ("train_loss", "val_loss", "val_metric"):
                            writer.add_scalar(key if key != "val_metric" else f"val_{metric}", getattr(rec, key), step)
                        writer.flush()
                    if bar is not None:
                        bar.set_postfix(val_loss=f"{rec.val_loss:.4f}", **{metric: f"{value:.4f}"})
                if do_ckpt or (out_dir is not None and (stopped_early or step == total_steps)):
                    checkpoint()
                    last_checkpoint_step = step
                if do_eval or do_ckpt:
                    seg_start = time.perf_counter()
                if stopped_early or step >= total_steps:
                    break
        if out_dir is not None and last_checkpoint_step != step:
            checkpoint()
    finally:
        if bar is not None:
            bar.close()
        if writer is not None:
            writer.close()

    if device.type == "cuda":
        peak_mem = torch.cuda.max_memory_allocated(device) / 2**20
    else:
        peak_mem = cpu_peak.peak_mb()

    # Restore the best-validation weights, then test them.
    if best_state is not None:
        model.load_state_dict(best_state)
    elif best_from_file:
        _load_weights(model, os.path.join(out_dir, BEST_FILE), device)
    test_metric = None
    if "test" in task.splits and len(task.splits["test"]) > 0:
        test_metric = float(evaluate("test")[metric])
    if distributed:
        dist.barrier()

    epochs_done = step / steps_per_epoch
    return TrainResult(
        metric_name=metric,
        best_metric=float(best_metric) if best_metric is not None else float("nan"),
        best_step=best_step,
        best_epoch=best_epoch,
        test_metric=test_metric,
        time_per_epoch_s=train_time / epochs_done if epochs_done > 0 else float("nan"),
        time_to_target_s=time_to_target,
        tokens_per_s=tokens / train_time if train_time > 0 else float("nan"),
        peak_mem_mb=peak_mem,
        steps=step,
        params=params,
        history=history,
        stopped_early=stopped_early,
    )
