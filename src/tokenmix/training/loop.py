"""Training loop shared by every task and model: AdamW, warm-up + cosine schedule, early stopping,
time-to-target, checkpoint/resume, logs, and optional multi-process data parallelism.

Protocol (Yamada et al. (2022) §3.2 and Chen (2023) §6):

* **Optimiser**: ``optimizer="adamw"`` (decoupled weight decay, Loshchilov & Hutter) or ``"adam"`` (Kingma &
  Ba; ``weight_decay`` must then be 0 -- Adam's coupled L2 penalty is not offered), with ``betas`` and
  ``eps``. AdamW's weight decay acts on parameters with two or more dimensions (weights, embeddings);
  biases and normalisation gains are not decayed.
* **Schedule**: the learning rate at optimiser step ``s`` (0-based) is ``lr * f(s)`` with
  ``f(s) = (s + 1) / warmup_steps`` for ``s < warmup_steps`` (linear warm-up, reaching ``lr`` at the last
  warm-up step) and, after it, ``f(s) = 1`` for ``schedule="constant"`` or, for ``"cosine"``,
  ``f(s) = 0.5 * (1 + cos(pi * (s - warmup_steps) / (total - warmup_steps)))`` (cosine decay to 0 at
  ``total``, the planned number of steps; early stopping does not change it). See :func:`lr_factor`.
* **Presets**: :meth:`TrainConfig.preset <tokenmix.training.config.TrainConfig.preset>` (each paper's settings,
  named, with their citations in :mod:`tokenmix.protocols`).
* **Same batches for every model** (Chen (2023) §6): the batches of epoch ``e`` are
  ``task.batches("train", batch_size, shuffle=True, seed=seed * 1000 + e, drop_last=True)``, which depend
  on the task and the seed only. ``torch.manual_seed(seed)`` is called before anything random in
  :func:`train` (dropout), so the same seed gives bitwise the same history on CPU.
* **Evaluation** every ``eval_every`` steps (default: once per epoch) and after the last step; each one
  appends an :class:`EvalRecord`. **Early stopping** (Yamada et al. (2022): patience 5) stops after
  ``patience`` evaluations in a row without a strict improvement of the validation metric (higher accuracy /
  lower perplexity). **Time to target** (Yamada et al. (2022) §3.2.3): training wall time until the validation
  metric has been at least as good as ``target`` at ``target_k`` evaluations in a row (Yamada et al.: k = 10);
  training goes on.
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

Checkpoints (``out_dir/checkpoint/``, :class:`tokenmix.training.checkpoint.Checkpointer`): ``model.safetensors``
(the current weights) and ``state.pt``, one dict: the config, the optimiser and scheduler states, the RNG states
of torch/python/numpy (every rank's, under DDP) and the fields of :class:`LoopState` (step, history,
early-stopping and time-to-target counters, running training loss, timers). The directory is written to a
temporary sibling and renamed into place. ``resume=True`` continues from it exactly: the resumed run gives
bitwise the history and weights an uninterrupted run gives. A resumed run may change ``max_steps``/``epochs``
(the schedule follows the new total), not ``batch_size`` or ``seed``.

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

Code map: :func:`train` checks its config again (:meth:`TrainConfig.validate`), derives a :class:`RunPlan`
(steps, ranks, device), builds the optimiser and scheduler (:func:`make_scheduler`), starts a :class:`LoopState`
(fresh or from the checkpoint, :func:`_start`) and runs the loop: one :func:`train_step` per batch; at each
evaluation an :class:`EvalRecord` (:func:`_validation_record`) that the :class:`EvalTracker` scores (best,
patience, target) and the :class:`~tokenmix.training.reporting.Reporter` logs; the checkpoint when due
(:func:`_checkpoint_due`, :func:`_checkpoint_state`).
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
import torch.nn as nn

from ..procmem import synchronize
from ..tasks.base import Task
from .batches import count_tokens, remaining_batches, shard
from .checkpoint import Checkpointer, gather_rng_states, restore_rng_states
from .config import EvalRecord, TrainConfig, TrainResult
from .locality import LocalityMeter
from .reporting import Reporter
from .setup import PeakMemory, RunPlan, make_optimizer, plan_run, wrap_ddp

__all__ = ["train", "lr_factor", "make_scheduler", "train_step", "flushed_denormals", "LoopState", "EvalTracker"]

_CHECKPOINT_VERSION = 1


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


# -- loop state and evaluation rules ---------------------------------------------------------------


@dataclass
class LoopState:
    """Everything the training loop changes as it goes. The checkpoint stores its fields (``asdict``: the
    history as dicts) and a resumed run restores them with :meth:`from_checkpoint`."""

    step: int = 0  # optimiser steps taken
    history: list[EvalRecord] = field(default_factory=list)
    best_metric: float | None = None  # the best validation metric so far, reached at best_step / best_epoch
    best_step: int = 0
    best_epoch: float = 0.0
    bad_evals: int = 0  # evaluations in a row without a strict improvement (early stopping)
    target_run: int = 0  # evaluations in a row at least as good as the target (time to target)
    time_to_target: float | None = None
    train_time: float = 0.0  # training wall time in seconds (see "Timing")
    tokens: int = 0
    loss_sum: float = 0.0  # training loss summed over the loss_count steps since the previous evaluation
    loss_count: int = 0
    stopped_early: bool = False
    recent_losses: list[float] = field(default_factory=list)  # the last cost_window per-batch losses (rank 0's)

    def __post_init__(self) -> None:
        self.history = [r if isinstance(r, EvalRecord) else EvalRecord(**r) for r in self.history]

    @classmethod
    def from_checkpoint(cls, state: dict[str, Any]) -> LoopState:
        """The loop state within a checkpoint's ``state.pt`` dict."""
        return cls(**{f.name: state[f.name] for f in fields(cls) if f.name in state})  # older: no recent_losses


@dataclass(frozen=True)
class EvalTracker:
    """The rules applied at each evaluation: the best metric, early stopping after ``patience`` evaluations
    without a strict improvement (deferred while a target streak is under way), time to ``target`` once it is
    held ``target_k`` evaluations in a row."""

    higher_is_better: bool
    patience: int | None
    target: float | None
    target_k: int

    def observe(self, loop: LoopState, rec: EvalRecord) -> bool:
        """Update ``loop``'s best, early-stopping and time-to-target fields for ``rec``; True on a new best."""
        value = rec.val_metric
        improved = loop.best_metric is None or self._better(value, loop.best_metric)
        if improved:
            loop.best_metric, loop.best_step, loop.best_epoch = value, rec.step, rec.epoch
            loop.bad_evals = 0
        else:
            loop.bad_evals += 1
        if self.target is not None and loop.time_to_target is None:
            loop.target_run = loop.target_run + 1 if self._reached(value, self.target) else 0
            if loop.target_run >= self.target_k:
                loop.time_to_target = rec.wall_s
        # A target streak under way is never cut short by early stopping: with patience 5 and a target held
        # 10 evaluations in a row (Yamada et al. 2022), a run that levels off above the target would otherwise
        # stop before it could reach its own target.
        streak_open = self.target is not None and loop.time_to_target is None and loop.target_run > 0
        if self.patience is not None and loop.bad_evals >= self.patience and not streak_open:
            loop.stopped_early = True
        return improved

    def _better(self, a: float, b: float) -> bool:
        return a > b if self.higher_is_better else a < b

    def _reached(self, value: float, target: float) -> bool:
        return value >= target if self.higher_is_better else value <= target


# -- set-up and resume --------------------------------------------------------------------------------


def make_scheduler(optimizer: torch.optim.Optimizer, config: TrainConfig,
                   total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """The ``LambdaLR`` of ``config``'s schedule (:func:`lr_factor`) over ``total_steps``."""
    def factor(step: int) -> float:  # a function, not a callable object: LambdaLR then keeps it out of its state
        return lr_factor(step, config.warmup_steps, total_steps, config.schedule)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _start(config: TrainConfig, plan: RunPlan, ckpt: Checkpointer | None, model: nn.Module,
           optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LambdaLR) -> LoopState:
    """A fresh loop state or, with ``resume`` and a checkpoint, the checkpoint's, with the weights, optimiser,
    scheduler and RNG states restored from it too."""
    directory = ckpt.find() if ckpt is not None and config.resume else None
    if directory is None:
        return LoopState()
    state = ckpt.read_state(directory)
    for name in ("batch_size", "seed"):
        if state["config"][name] != getattr(config, name):
            raise ValueError(f"TrainConfig.{name}={getattr(config, name)!r} differs from the checkpoint's "
                             f"{state['config'][name]!r} in {directory}; a resumed run must keep it")
    ckpt.read_weights(directory, model, plan.device)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    loop = LoopState.from_checkpoint(state)
    if plan.rank != 0:  # the checkpoint holds rank 0's running loss; the others' restart (none counted twice)
        loop.loss_sum, loop.loss_count = 0.0, 0
    # The schedule follows this run's total (which may extend the checkpoint's): set the next lr from it.
    for group, base, factor in zip(optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas):
        group["lr"] = base * factor(loop.step)
    restore_rng_states(state["rng"], plan.rank, plan.world, config.seed + plan.rank, loop.step)
    return loop


# -- steps and evaluations -------------------------------------------------------------------------


def train_step(task: Task, model: nn.Module, batch: Any, optimizer: torch.optim.Optimizer,
               scheduler: torch.optim.lr_scheduler.LambdaLR, ctx: contextlib.AbstractContextManager[Any],
               grad_clip: float | None) -> float:
    """One optimiser step on ``batch``: forward under ``ctx`` (autocast, or nothing), backward, gradient
    clipping, optimiser and scheduler step. Returns the loss."""
    optimizer.zero_grad(set_to_none=True)
    with ctx:
        loss = task.loss(model, batch)
    loss.backward()
    if grad_clip is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    scheduler.step()
    return float(loss.detach())


def _evaluate(task: Task, model: nn.Module, split: str, batch_size: int, plan: RunPlan,
              ctx: contextlib.AbstractContextManager[Any]) -> dict[str, float]:
    """``task.evaluate`` on rank 0, broadcast to every rank so that all take the same decisions."""
    result: list[Any] = [None]
    if plan.is_main:
        with ctx:
            result[0] = task.evaluate(model, split, batch_size)
    if plan.distributed:
        dist.broadcast_object_list(result, src=0)
    return result[0]


def _mean_train_loss(loop: LoopState, plan: RunPlan) -> float:
    """The mean training loss over the steps (and ranks) since the previous evaluation; resets the sums."""
    train_loss = loop.loss_sum / max(loop.loss_count, 1)
    if plan.distributed:
        t = torch.tensor([loop.loss_sum, float(loop.loss_count)], dtype=torch.float64,
                         device=plan.device if plan.device.type == "cuda" else "cpu")
        dist.all_reduce(t)
        train_loss = float(t[0] / t[1].clamp_min(1))
    loop.loss_sum, loop.loss_count = 0.0, 0
    return train_loss


def _validation_record(task: Task, model: nn.Module, config: TrainConfig, plan: RunPlan, loop: LoopState,
                       ctx: contextlib.AbstractContextManager[Any]) -> EvalRecord:
    train_loss = _mean_train_loss(loop, plan)
    metrics = _evaluate(task, model, "val", config.eval_batch_size, plan, ctx)
    return EvalRecord(step=loop.step, epoch=loop.step / plan.steps_per_epoch, wall_s=loop.train_time,
                      train_loss=train_loss, val_loss=float(metrics["loss"]),
                      val_metric=float(metrics[task.info.metric]))


def _checkpoint_due(config: TrainConfig, plan: RunPlan, loop: LoopState, evaluated: bool) -> bool:
    """Whether the checkpoint is written now: at every evaluation (``checkpoint_every=None``) or every
    ``checkpoint_every`` steps, and at the end of the run."""
    if config.checkpoint_every is None:
        return evaluated
    return loop.step % config.checkpoint_every == 0 or loop.stopped_early or loop.step >= plan.total_steps


def _checkpoint_state(config: TrainConfig, plan: RunPlan, optimizer: torch.optim.Optimizer,
                      scheduler: torch.optim.lr_scheduler.LambdaLR, loop: LoopState) -> dict[str, Any]:
    """The checkpoint's ``state.pt`` dict. A collective under DDP: every rank's RNG state is gathered."""
    return {
        "version": _CHECKPOINT_VERSION,
        "config": asdict(config),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": gather_rng_states(plan.distributed, plan.world),
        # for readers only (a resume derives them from the step)
        "epoch": loop.step // plan.steps_per_epoch,
        "position_in_epoch": loop.step % plan.steps_per_epoch,
        "steps_per_epoch": plan.steps_per_epoch,
        "total_steps": plan.total_steps,
        **asdict(loop),
    }


def _cpu_copy(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


# -- training --------------------------------------------------------------------------------------


def train(task: Task, model: nn.Module, config: TrainConfig, *,
          on_step: Callable[[int, int, float | None], None] | None = None) -> TrainResult:
    """Train ``model`` on ``task`` with ``config``; see the module docstring for the protocol.

    ``on_step(step, total_steps, last_val_metric)`` is called after every optimiser step, when given.
    On return ``model`` holds the best-validation weights (on ``config.device``)."""
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    config.validate()  # again: a field may have been changed since construction
    with flushed_denormals(config.flush_denormal):
        return _train(task, model, config, on_step)


@contextlib.contextmanager
def flushed_denormals(flush: bool) -> Iterator[None]:
    """With ``flush``, subnormal floats are flushed to zero (``torch.set_flush_denormal``: FTZ and DAZ on x86)
    inside, and the setting is put back after. x86 CPUs compute with subnormals in microcode, tens of times slower:
    Performer's random features, softmax's small probabilities and Mamba-2's decays become subnormal once
    activations grow, and a training step slows 2-10x (``benchmarks/denormals.py``). Flushing changes any result a
    subnormal reaches, so it is a config field (in the config hash), off by default.

    The setting is per thread, and PyTorch's intra-op threads keep the one they started with: a process that has
    already run a parallel operation would flush in some threads and not in others, so that is refused (a
    ``ValueError``); ``tokenmix compare``'s runs set it when their process starts."""
    if not flush:
        yield
        return
    before = _flushing()
    torch.set_flush_denormal(True)
    if not _every_thread_flushes():
        torch.set_flush_denormal(before)
        raise ValueError("TrainConfig.flush_denormal: PyTorch's intra-op threads were started before it was set and "
                         "keep subnormals, so some of a step's arithmetic would flush them and some not; call "
                         "torch.set_flush_denormal(True) before the first parallel operation of the process, or "
                         "train with torch.set_num_threads(1)")
    try:
        yield
    finally:
        torch.set_flush_denormal(before)


def _flushing() -> bool:
    """Whether this thread flushes subnormals now (PyTorch has no getter): the smallest subnormal float32 made
    from a double reads back as 0 when it does."""
    return torch.tensor([1e-45], dtype=torch.float32).item() == 0.0


def _every_thread_flushes() -> bool:
    """Whether a multiplication large enough to be shared out among the intra-op threads flushes everywhere."""
    if torch.get_num_threads() == 1:
        return True
    return int(_subnormals(1 << 20).mul_(2.0).count_nonzero()) == 0


def _subnormals(n: int) -> torch.Tensor:
    """``n`` copies of the smallest subnormal float32, made from its bits (a conversion would flush it already)."""
    return torch.ones(n, dtype=torch.int32).view(torch.float32)


def _train(task: Task, model: nn.Module, config: TrainConfig,
           on_step: Callable[[int, int, float | None], None] | None) -> TrainResult:
    plan = plan_run(task, config)
    torch.manual_seed(config.seed + plan.rank)
    model.to(plan.device)
    model.train()
    optimizer = make_optimizer(model, config)
    scheduler = make_scheduler(optimizer, config, plan.total_steps)
    ckpt = Checkpointer(str(config.out_dir), writes=plan.is_main) if config.out_dir is not None else None
    loop = _start(config, plan, ckpt, model, optimizer, scheduler)
    train_model = wrap_ddp(model, plan)
    tracker = EvalTracker(task.info.higher_is_better, config.patience, config.target, config.target_k)
    ctx = torch.autocast(plan.device.type, dtype=torch.bfloat16) if config.bf16 else contextlib.nullcontext()
    reporter = Reporter(config, enabled=plan.is_main, metric=task.info.metric, total_steps=plan.total_steps,
                        step=loop.step, history=loop.history, record_type=EvalRecord)
    memory = PeakMemory(plan.device)
    best_weights: dict[str, torch.Tensor] | None = None  # None after a resume until it improves: on disk then
    try:
        clock = time.perf_counter()
        while loop.step < plan.total_steps and not loop.stopped_early:
            for batch in remaining_batches(task, config.batch_size, config.seed, plan.steps_per_epoch, loop.step):
                loop.tokens += count_tokens(batch, model)
                loss = train_step(task, train_model, shard(batch, plan.rank, plan.world), optimizer, scheduler,
                                  ctx, config.grad_clip)
                loop.loss_sum += loss
                loop.loss_count += 1
                loop.recent_losses.append(loss)
                if len(loop.recent_losses) > config.cost_window:
                    del loop.recent_losses[0]
                loop.step += 1
                reporter.stepped()
                if on_step is not None:
                    on_step(loop.step, plan.total_steps, loop.history[-1].val_metric if loop.history else None)
                evaluate_now = loop.step % plan.eval_every == 0 or loop.step == plan.total_steps
                if not (evaluate_now or (ckpt is not None and _checkpoint_due(config, plan, loop, evaluate_now))):
                    continue
                synchronize(plan.device)  # the training clock stops: evaluation and checkpoints are not timed
                loop.train_time += time.perf_counter() - clock
                if evaluate_now:
                    rec = _validation_record(task, model, config, plan, loop, ctx)
                    loop.history.append(rec)
                    if tracker.observe(loop, rec):
                        best_weights = _cpu_copy(model)
                        if ckpt is not None:
                            ckpt.save_best(model)
                    reporter.evaluated(rec)
                if ckpt is not None and _checkpoint_due(config, plan, loop, evaluate_now):
                    ckpt.save(model, _checkpoint_state(config, plan, optimizer, scheduler, loop))
                if loop.stopped_early or loop.step >= plan.total_steps:
                    break
                clock = time.perf_counter()
    finally:
        reporter.close()
    peak_mem_mb = memory.mb()

    # The best-validation weights back into the model, then the test evaluation.
    if best_weights is not None:
        model.load_state_dict(best_weights)
    elif ckpt is not None and loop.best_metric is not None:
        ckpt.read_best(model, plan.device)
    test_metric, locality = None, None
    if "test" in task.splits and len(task.splits["test"]) > 0:
        # the locality (when asked) is measured in the same pass as the test metric: hooks on the attention layers
        meter = LocalityMeter(model, config.locality_window if config.locality_window is not None else 0)
        with meter if config.locality_window is not None else contextlib.nullcontext():
            test_metric = float(_evaluate(task, model, "test", config.eval_batch_size, plan, ctx)[task.info.metric])
        locality = meter.value if config.locality_window is not None else None
    if plan.distributed:
        dist.barrier()
    result = _result(task, model, plan, loop, test_metric, peak_mem_mb)
    result.locality = locality
    return result


def _result(task: Task, model: nn.Module, plan: RunPlan, loop: LoopState, test_metric: float | None,
            peak_mem_mb: float) -> TrainResult:
    epochs_done = loop.step / plan.steps_per_epoch
    return TrainResult(
        metric_name=task.info.metric,
        best_metric=float(loop.best_metric) if loop.best_metric is not None else float("nan"),
        best_step=loop.best_step,
        best_epoch=loop.best_epoch,
        test_metric=test_metric,
        time_per_epoch_s=loop.train_time / epochs_done if epochs_done > 0 else float("nan"),
        time_to_target_s=loop.time_to_target,
        tokens_per_s=loop.tokens / loop.train_time if loop.train_time > 0 else float("nan"),
        peak_mem_mb=peak_mem_mb,
        steps=loop.step,
        params=sum(p.numel() for p in model.parameters()),
        history=loop.history,
        stopped_early=loop.stopped_early,
        train_cost=statistics.median(loop.recent_losses) if loop.recent_losses else None,
        cost_batches=len(loop.recent_losses),
    )
