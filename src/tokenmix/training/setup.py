"""What :func:`tokenmix.training.loop.train` fixes before its first step: the :class:`RunPlan` (device, ranks, step
counts), the optimiser, the ``DistributedDataParallel`` wrapper and the peak-memory meter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
import torch.nn as nn

from ..procmem import PeakRSS
from ..tasks.base import Task

if TYPE_CHECKING:
    from .config import TrainConfig

__all__ = ["RunPlan", "plan_run", "make_optimizer", "wrap_ddp", "PeakMemory"]


@dataclass(frozen=True)
class RunPlan:
    """Where a run goes and how many steps it takes."""

    device: torch.device
    distributed: bool  # a torch.distributed process group is initialised
    rank: int
    world: int
    steps_per_epoch: int
    total_steps: int  # the schedule's total; early stopping may end the run before it
    eval_every: int

    @property
    def is_main(self) -> bool:
        """Rank 0: it evaluates and writes the files."""
        return self.rank == 0


def plan_run(task: Task, config: TrainConfig) -> RunPlan:
    """The plan of training on ``task`` with ``config`` in this process (and process group, if any)."""
    distributed = dist.is_available() and dist.is_initialized()
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    device = torch.device(config.device)
    if device.type == "cuda" and device.index is None and distributed:
        device = torch.device("cuda", torch.cuda.current_device())
    if config.batch_size % world:
        raise ValueError(f"TrainConfig.batch_size ({config.batch_size}) is the global batch and must be a "
                         f"multiple of the world size ({world})")
    n_train = len(task.splits["train"])
    steps_per_epoch = n_train // config.batch_size
    if steps_per_epoch < 1:
        raise ValueError(f"TrainConfig.batch_size ({config.batch_size}) is larger than the training split "
                         f"({n_train} examples): no full batch")
    epochs = config.epochs if config.epochs is not None else 1
    total_steps = config.max_steps if config.max_steps is not None else epochs * steps_per_epoch
    eval_every = config.eval_every if config.eval_every is not None else steps_per_epoch
    return RunPlan(device, distributed, rank, world, steps_per_epoch, total_steps, eval_every)


def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """AdamW or Adam over ``model``'s trainable parameters; weight decay on those with two or more dimensions."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    groups = [g for g in ({"params": decay, "weight_decay": config.weight_decay},
                          {"params": no_decay, "weight_decay": 0.0}) if g["params"]]
    if not groups:
        raise ValueError("the model has no trainable parameters")
    optimizer_class = torch.optim.AdamW if config.optimizer == "adamw" else torch.optim.Adam
    return optimizer_class(groups, lr=config.lr, betas=tuple(config.betas), eps=config.eps,
                           **({"fused": True} if fused_supported(decay + no_decay) else {}))


def fused_supported(params: list[torch.Tensor]) -> bool:
    """Whether torch's fused Adam/AdamW kernel takes ``params``. It is the one used where it can be: besides being
    faster, its square root is the vector unit's correctly rounded one, while the unfused step's ``sqrt`` goes to
    oneMKL's vector maths, whose last bit depends on the processor even with its numerics pinned (found by
    comparing runs on an emulated AVX2-only host: the forward and backward passes agreed bitwise, the optimiser
    step did not)."""
    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    devices = {p.device.type for p in params}
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return False  # DDP runs keep the unfused step: with it, a rank aborted at exit under load (twice)
    return (all(p.is_floating_point() for p in params) and devices <= {"cpu", "cuda"}
            and ("cpu" not in devices or (major, minor) >= (2, 4)))


def wrap_ddp(model: nn.Module, plan: RunPlan) -> nn.Module:
    """``model`` in ``DistributedDataParallel`` under a process group, else ``model`` itself."""
    if not plan.distributed:
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(model, device_ids=[plan.device.index] if plan.device.type == "cuda" else None,
               find_unused_parameters=True)


class PeakMemory:
    """Peak memory from construction on, above what the process held then, in MiB: CUDA's max allocated, or the
    process's peak resident set size (:class:`tokenmix.procmem.PeakRSS`)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        self.cpu = PeakRSS()
        self.cpu.start()

    def mb(self) -> float:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) / 2**20
        return self.cpu.peak_mb()
