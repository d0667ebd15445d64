"""The training loop: determinism, shared batch order, exact resume, early stopping, time to target, logs,
schedule, bf16 and data-parallel gradients (tiny recall task, dim 16, depth 1)."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
import textwrap
from dataclasses import asdict, fields

import pytest
import torch

from tokenmix.tasks import create_task
from tokenmix.training.config import EvalRecord, TrainConfig, TrainResult
from tokenmix.training.loop import lr_factor, train

TASK_OPTIONS = dict(preset="quick", seed=0, num_pairs=4, num_keys=8, num_values=2, train_size=256, val_size=64,
                    test_size=64)


def make_task():
    return create_task("recall", **TASK_OPTIONS)


def make_model(task, mixer="softmax", seed=0, dropout=None):
    torch.manual_seed(seed)
    model = task.build_model(mixer, dim=16, depth=1, num_heads=2 if mixer == "softmax" else 1)
    if dropout is not None:
        for m in model.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = dropout
    return model


def metrics(history):
    return [(r.step, r.epoch, r.train_loss, r.val_loss, r.val_metric) for r in history]


def record_batches(task):
    """Wrap ``task.loss`` to record (ids, labels) of every training batch."""
    seen = []
    original = task.loss

    def loss(model, batch):
        seen.append((batch.ids.clone(), batch.labels.clone()))
        return original(model, batch)

    task.loss = loss
    return seen


def test_same_seed_gives_identical_history():
    task = make_task()
    cfg = TrainConfig(epochs=2, batch_size=32, eval_every=3, patience=None)
    a = train(task, make_model(task), cfg)
    b = train(task, make_model(task), cfg)
    assert isinstance(a, TrainResult) and len(a.history) == 6  # 3, 6, 9, 12, 15, 16
    assert metrics(a.history) == metrics(b.history)
    assert a.steps == b.steps == 16 and a.params == b.params > 0
    assert a.metric_name == "accuracy" and 0 <= a.test_metric <= 1
    assert a.tokens_per_s > 0 and a.time_per_epoch_s > 0 and a.peak_mem_mb >= 0
    assert a.best_metric == max(r.val_metric for r in a.history)
    best = next(r for r in a.history if r.val_metric == a.best_metric)
    assert (a.best_step, a.best_epoch) == (best.step, best.epoch)


def test_different_models_see_identical_batches():
    task = make_task()
    seen_a = record_batches(task)
    cfg = TrainConfig(epochs=2, batch_size=32, patience=None)
    train(task, make_model(task, "softmax", seed=1), cfg)
    task2 = make_task()
    seen_b = record_batches(task2)
    train(task2, make_model(task2, "average", seed=2), cfg)
    assert len(seen_a) == len(seen_b) == 16
    for (ia, la), (ib, lb) in zip(seen_a, seen_b):
        assert torch.equal(ia, ib) and torch.equal(la, lb)
    # epoch e's order is task.batches(shuffle=True, seed=seed * 1000 + e, drop_last=True)
    expected = list(task.batches("train", 32, shuffle=True, seed=0, drop_last=True)) + \
        list(task.batches("train", 32, shuffle=True, seed=1, drop_last=True))
    assert all(torch.equal(b.ids, ids) for b, (ids, _) in zip(expected, seen_a))
    assert not torch.equal(seen_a[0][0], seen_a[8][0])  # epochs are reshuffled


def train_interrupted_in_step(step, task, config):
    """Train a fresh model on ``task``, interrupted (KeyboardInterrupt) inside training step ``step``."""
    original, calls = task.loss, [0]

    def crashing_loss(model, batch):
        calls[0] += 1
        if calls[0] == step:
            raise KeyboardInterrupt("simulated interruption")
        return original(model, batch)

    task.loss = crashing_loss
    with pytest.raises(KeyboardInterrupt):
        train(task, make_model(task), config)
    task.loss = original


def test_a_resumed_ddp_rank_other_than_0_does_not_count_rank_0s_running_loss_again(tmp_path):
    # The checkpoint at step 5 falls between the evaluations at 3 and 6: it holds rank 0's running loss of
    # steps 4-5. Under DDP every rank resumes from it and the next evaluation all-reduces the sums, so only
    # rank 0 may keep it.
    from dataclasses import replace

    from tokenmix.training.loop import _start, make_scheduler
    from tokenmix.training.checkpoint import Checkpointer
    from tokenmix.training.setup import make_optimizer, plan_run

    config = TrainConfig(max_steps=16, batch_size=32, eval_every=3, checkpoint_every=5, patience=None,
                         out_dir=str(tmp_path), resume=True)
    task = make_task()
    train_interrupted_in_step(6, task, config)  # the checkpoint is at 5
    resumed = {}
    for rank in (0, 1):
        model = make_model(task)
        plan = replace(plan_run(task, config), rank=rank, world=2)
        optimizer = make_optimizer(model, config)
        with pytest.warns(UserWarning, match="written with world size 1, resumed with 2"):
            loop = _start(config, plan, Checkpointer(str(tmp_path), writes=False), model, optimizer,
                          make_scheduler(optimizer, config, plan.total_steps))
        resumed[rank] = (loop.step, loop.loss_count, loop.loss_sum)
    assert resumed[0][:2] == (5, 2) and resumed[0][2] > 0
    assert resumed[1] == (5, 0, 0.0)


def test_resume_matches_uninterrupted_run(tmp_path):
    # 8 steps per epoch; checkpoints at 5 and 10 (mid-epoch); evaluations at 3, 6, 9, 12, 15, 16.
    # Dropout is on, so the RNG state must be restored too.
    def cfg(out):
        return TrainConfig(max_steps=16, batch_size=32, eval_every=3, checkpoint_every=5, patience=None,
                           warmup_steps=3, out_dir=str(out), resume=True)

    task = make_task()
    full_model = make_model(task)
    full = train(task, full_model, cfg(tmp_path / "full"))

    # Interrupted run: crashes in step 14, after the evaluation at step 12 was logged, the checkpoint is at 10.
    train_interrupted_in_step(14, make_task(), cfg(tmp_path / "resumed"))
    with open(tmp_path / "resumed" / "log.jsonl") as fh:
        assert [json.loads(line)["step"] for line in fh] == [3, 6, 9, 12]
    assert torch.load(tmp_path / "resumed" / "checkpoint" / "state.pt", weights_only=False)["step"] == 10

    task3 = make_task()
    resumed_model = make_model(task3, seed=123)  # a fresh model with other weights: the checkpoint wins
    resumed = train(task3, resumed_model, cfg(tmp_path / "resumed"))

    assert metrics(resumed.history) == metrics(full.history)
    assert (resumed.steps, resumed.best_step, resumed.best_metric, resumed.test_metric) == \
        (full.steps, full.best_step, full.best_metric, full.test_metric)
    for k, v in full_model.state_dict().items():  # best weights, restored at the end
        assert torch.equal(v, resumed_model.state_dict()[k]), k
    from safetensors.torch import load_file
    last_full = load_file(tmp_path / "full" / "checkpoint" / "model.safetensors")
    last_resumed = load_file(tmp_path / "resumed" / "checkpoint" / "model.safetensors")
    assert last_full.keys() == last_resumed.keys()
    assert all(torch.equal(last_full[k], last_resumed[k]) for k in last_full)
    # logs: no duplicated record, same steps as the uninterrupted run
    for run in ("full", "resumed"):
        with open(tmp_path / run / "log.jsonl") as fh:
            assert [json.loads(line)["step"] for line in fh] == [3, 6, 9, 12, 15, 16]
        with open(tmp_path / run / "log.csv") as fh:
            assert [int(row["step"]) for row in csv.DictReader(fh)] == [3, 6, 9, 12, 15, 16]

    # resuming a finished run trains no further
    again = train(make_task(), make_model(task, seed=5), cfg(tmp_path / "resumed"))
    assert metrics(again.history) == metrics(full.history) and again.steps == 16


def test_early_stopping_after_patience_evaluations_without_improvement():
    task = make_task()
    result = train(task, make_model(task), TrainConfig(max_steps=50, batch_size=32, lr=0.0, eval_every=1,
                                                       patience=2))
    assert result.stopped_early
    assert [r.step for r in result.history] == [1, 2, 3]  # the first sets the best, then 2 without improvement
    assert result.steps == 3 and result.best_step == 1
    no_stop = train(task, make_model(task), TrainConfig(max_steps=6, batch_size=32, lr=0.0, eval_every=1,
                                                        patience=None))
    assert not no_stop.stopped_early and no_stop.steps == 6


def test_time_to_target():
    task = make_task()
    base = dict(max_steps=4, batch_size=32, eval_every=1, patience=None)
    unreachable = train(task, make_model(task), TrainConfig(**base, target=1.5))
    assert unreachable.time_to_target_s is None
    first = train(task, make_model(task), TrainConfig(**base, target=0.0, target_k=1))
    assert isinstance(first.time_to_target_s, float)
    assert first.time_to_target_s == first.history[0].wall_s > 0
    third = train(task, make_model(task), TrainConfig(**base, target=0.0, target_k=3))
    assert third.time_to_target_s == third.history[2].wall_s
    too_many = train(task, make_model(task), TrainConfig(**base, target=0.0, target_k=5))
    assert too_many.time_to_target_s is None


def test_logs_are_well_formed(tmp_path):
    task = make_task()
    result = train(task, make_model(task), TrainConfig(max_steps=6, batch_size=32, eval_every=2,
                                                      out_dir=str(tmp_path)))
    names = [f.name for f in fields(EvalRecord)]
    with open(tmp_path / "log.jsonl") as fh:
        records = [json.loads(line) for line in fh]
    assert [list(r) for r in records] == [names] * 3
    assert records == [asdict(r) for r in result.history]
    with open(tmp_path / "log.csv") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == names and len(rows) == 4
    assert [float(v) for v in rows[1]] == pytest.approx([float(v) for v in records[0].values()])
    assert (tmp_path / "best.safetensors").is_file()
    assert (tmp_path / "checkpoint" / "model.safetensors").is_file()
    assert (tmp_path / "checkpoint" / "state.pt").is_file()


def test_warmup_cosine_schedule():
    # warm-up: (s + 1) / warmup; then cosine from 1 to 0 over the remaining steps
    assert lr_factor(0, 4, 14) == pytest.approx(0.25)
    assert lr_factor(3, 4, 14) == pytest.approx(1.0)
    assert lr_factor(4, 4, 14) == pytest.approx(1.0)
    assert lr_factor(9, 4, 14) == pytest.approx(0.5)
    assert lr_factor(14, 4, 14) == pytest.approx(0.0, abs=1e-12)
    assert lr_factor(0, 0, 10) == 1.0
    assert lr_factor(5, 0, 10) == pytest.approx(0.5)
    values = [lr_factor(s, 4, 14) for s in range(4, 15)]
    assert all(a >= b for a, b in zip(values, values[1:]))


def test_schedule_drives_the_optimizer(monkeypatch):
    lrs = []
    original = torch.optim.AdamW.step

    def step(self, *args, **kwargs):
        lrs.append(self.param_groups[0]["lr"])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", step)
    task = make_task()
    train(task, make_model(task), TrainConfig(max_steps=8, batch_size=32, lr=0.01, warmup_steps=2, patience=None))
    assert lrs == pytest.approx([0.01 * lr_factor(s, 2, 8) for s in range(8)])


def test_bf16_autocast_runs():
    task = make_task()
    result = train(task, make_model(task), TrainConfig(max_steps=3, batch_size=32, bf16=True))
    assert len(result.history) == 1
    assert all(math.isfinite(v) for v in (result.history[0].train_loss, result.history[0].val_loss))


def _flushing() -> bool:
    return torch.tensor([1e-45], dtype=torch.float32).item() == 0.0  # the smallest subnormal reads back as 0


@pytest.mark.parametrize("flush", [False, True])
def test_flush_denormal_holds_while_training_and_is_put_back(flush):
    task = make_task()
    seen = []
    original = task.loss

    def loss(model, batch):
        seen.append(_flushing())
        return original(model, batch)

    task.loss = loss
    assert not _flushing()
    train(task, make_model(task), TrainConfig(max_steps=2, batch_size=32, flush_denormal=flush))
    assert seen and set(seen) == {flush}  # every training and evaluation batch
    assert not _flushing()


def test_flush_denormal_is_refused_where_intra_op_threads_would_keep_subnormals():
    task = make_task()
    torch.set_num_threads(2)  # the autouse fixture puts 1 back
    torch.full((1 << 20,), 1.0).mul_(2.0)  # a parallel operation: the intra-op threads start, not flushing
    with pytest.raises(ValueError, match="flush_denormal: PyTorch's intra-op threads"):
        train(task, make_model(task), TrainConfig(max_steps=2, batch_size=32, flush_denormal=True))
    assert not _flushing()  # put back


def test_a_sweep_run_flushes_from_its_start_in_every_thread(tmp_path):
    """A spawned run with two threads: set before its first operation, the setting reaches the intra-op threads."""
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import tokenmix.training.loop as loop
        from tokenmix.training.executor import run_one
        from tokenmix.training.experiment import load_experiment
        seen = []
        real = loop.train_step
        def step(*args, **kwargs):
            seen.append(int(loop._subnormals(1 << 20).mul_(2.0).count_nonzero()))  # split among the threads
            return real(*args, **kwargs)
        loop.train_step = step
        experiment = load_experiment(None, ["task.name='recall'", "model.dim=16", "model.depth=1",
                                            "train.max_steps=2", "train.batch_size=16", "mixers=['softmax']",
                                            "train.flush_denormal=true", "report.plots=[]"])
        run_one(experiment.to_dict(), "softmax", 0, {str(tmp_path / "out")!r}, 2)
        print("NONZERO", sorted(set(seen)))
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "NONZERO [0]" in proc.stdout


def test_tokenmix_train_flushes_with_two_threads():
    """The command sets the flag before its first operation, so train() does not refuse it."""
    proc = subprocess.run([sys.executable, "-m", "tokenmix.cli", "train", "--task", "recall", "--mixer", "softmax",
                           "--dim", "16", "--depth", "1", "--max-steps", "2", "--threads", "2", "--flush-denormal"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_flush_denormal_changes_the_config_hash_only_when_set():
    from tokenmix.training.experiment import Experiment
    from tokenmix.training.results import config_hash, run_config

    def hash_with(**train):
        experiment = Experiment.from_dict({"name": "x", "task": {"name": "listops", "preset": "quick"},
                                           "mixers": ["softmax"], "train": {"max_steps": 2, **train}})
        return config_hash(run_config(experiment, experiment.runs("classification")[0], 1))

    assert hash_with() == hash_with(flush_denormal=False) != hash_with(flush_denormal=True)


@pytest.mark.parametrize("field, value", [
    ("max_steps", 0), ("epochs", -1), ("batch_size", 0), ("lr", -1.0), ("lr", float("nan")),
    ("weight_decay", -0.1), ("warmup_steps", -1), ("grad_clip", 0.0), ("eval_every", 0),
    ("eval_batch_size", 0), ("patience", 0), ("target", float("inf")), ("target_k", 0), ("seed", -1),
    ("device", "nonsense"), ("checkpoint_every", 0), ("bf16", 1), ("flush_denormal", 1), ("progress", "yes"),
])
def test_bad_config_values_raise(field, value):
    task = make_task()
    with pytest.raises(ValueError, match=field):
        train(task, make_model(task), TrainConfig(**{field: value}))


def test_exclusive_and_dependent_options():
    task = make_task()
    with pytest.raises(ValueError, match="max_steps"):
        train(task, make_model(task), TrainConfig(max_steps=2, epochs=1))
    with pytest.raises(ValueError, match="out_dir"):
        train(task, make_model(task), TrainConfig(max_steps=2, resume=True))
    with pytest.raises(ValueError, match="batch_size"):
        train(task, make_model(task), TrainConfig(max_steps=2, batch_size=1000))


DDP_SCRIPT = """
import gc, os, sys, torch, torch.distributed as dist
torch.set_num_threads(1)
sys.path.insert(0, {tests!r})
from test_train import make_task, make_model
from tokenmix.training.config import TrainConfig
from tokenmix.training.loop import train
dist.init_process_group("gloo")
task = make_task()
model = make_model(task, dropout=0.0)
seen = []
original = task.loss
def loss(m, batch):
    seen.append(batch.labels.shape[0])
    return original(m, batch)
task.loss = loss
train(task, model, TrainConfig(max_steps=1, batch_size=32, grad_clip=None, patience=None))
if dist.get_rank() == 0:
    grads = {{n: p.grad for n, p in model.named_parameters()}}
    torch.save({{"grads": grads, "rows": seen, "world": dist.get_world_size()}}, {out!r})
# Tear down in step: the DDP wrapper train() made is collected while its group lives, and neither rank
# leaves before the other is done (a gloo pair torn down mid-exit aborted a rank once, in CI).
gc.collect()
dist.barrier()
dist.destroy_process_group()
"""


def test_ddp_gradient_equals_single_process_average(tmp_path):
    script = tmp_path / "ddp_step.py"
    out = tmp_path / "grads.pt"
    script.write_text(textwrap.dedent(DDP_SCRIPT.format(tests=os.path.dirname(__file__), out=str(out))))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for _ in range(2):  # once more if a rank dies: gloo has aborted a rank at exit (PyTorch's teardown, not ours)
        out.unlink(missing_ok=True)
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
                               str(script)], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
        if proc.returncode == 0:
            break
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    saved = torch.load(out)
    assert saved["world"] == 2 and saved["rows"] == [16]  # each rank: half of the global batch of 32
    ddp_grads = saved["grads"]

    task = make_task()
    model = make_model(task, dropout=0.0)
    batch = next(task.batches("train", 32, shuffle=True, seed=0, drop_last=True))
    task.loss(model, batch).backward()
    for name, p in model.named_parameters():
        assert torch.allclose(ddp_grads[name], p.grad, atol=1e-6, rtol=1e-6), name


def test_early_stopping_waits_for_a_target_streak_under_way():
    """paper-000 has patience 5 and a target held 10 evaluations in a row: a run that levels off above the
    target (no strict improvement) must still reach its own target, and stop early only after it."""
    from tokenmix.training.loop import EvalTracker, LoopState
    from tokenmix.training.config import EvalRecord

    tracker = EvalTracker(higher_is_better=True, patience=5, target=0.8, target_k=10)
    loop = LoopState()
    values = [0.5, 0.85] + [0.85] * 12
    stopped_at = None
    for i, value in enumerate(values):
        tracker.observe(loop, EvalRecord(step=i, epoch=float(i), wall_s=float(i), train_loss=1.0, val_loss=1.0,
                                         val_metric=value))
        if loop.stopped_early:
            stopped_at = i
            break
    assert loop.time_to_target == 10.0  # the 10th evaluation in a row at >= 0.8 (index 10)
    assert stopped_at == 10  # patience had run out since index 6: it stops once the streak has completed

    below = LoopState()  # no streak under way: patience applies as before
    for i, value in enumerate([0.5] + [0.4] * 5):
        tracker.observe(below, EvalRecord(step=i, epoch=float(i), wall_s=float(i), train_loss=1.0, val_loss=1.0,
                                          val_metric=value))
    assert below.stopped_early and below.time_to_target is None


def test_training_cost_is_the_median_of_the_last_per_batch_losses():
    """Chen (2023) §6's training cost: the median of the per-batch training costs over the last cost_window
    batches. With an evaluation after every step each history record holds one batch's loss, so the result's
    train_cost must be the median of the last cost_window of them."""
    import statistics

    task = make_task()
    result = train(task, make_model(task), TrainConfig(max_steps=7, eval_every=1, cost_window=4, patience=None))
    losses = [r.train_loss for r in result.history]
    assert result.cost_batches == 4
    assert result.train_cost == pytest.approx(statistics.median(losses[-4:]), rel=1e-6)
    with pytest.raises(ValueError, match="cost_window"):
        train(task, make_model(task), TrainConfig(max_steps=2, cost_window=0))
