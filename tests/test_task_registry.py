"""The task registry itself: names, errors, and the batch plumbing every task shares."""

from __future__ import annotations

import pytest
import torch

from tokenmix import tasks
from tokenmix.tasks import LMBatch, TokenBatch, create_task, list_tasks, task_info
from tokenmix.tasks.batches import to_device


def test_every_issue_task_is_registered():
    for name in ["listops", "reviews", "austen", "fashion", "fashion_pixels", "lm", "recall", "glue", "imdb"]:
        assert name in list_tasks()
    assert list_tasks() == sorted(list_tasks())


def test_unknown_names_and_options_are_errors():
    with pytest.raises(ValueError, match="listops"):
        create_task("no-such-task")
    with pytest.raises(ValueError, match="no_such_option"):
        create_task("recall", no_such_option=1)
    assert task_info("lm").kind == "language_model" and task_info("lm").metric == "perplexity"


def test_batches_are_deterministic_and_cover_the_split_once():
    task = create_task("recall", seed=3)
    first = [b.labels for b in task.batches("val", 64, shuffle=True, seed=7)]
    again = [b.labels for b in task.batches("val", 64, shuffle=True, seed=7)]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert sum(len(b) for b in first) == len(task.splits["val"])
    other = next(iter(task.batches("val", 64, shuffle=True, seed=8))).labels
    assert not torch.equal(first[0], other)


def test_to_device_keeps_the_batch_type_and_is_a_no_op_in_place():
    batch = TokenBatch(torch.ones(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.bool), torch.zeros(2))
    assert to_device(batch, torch.device("cpu")) is batch
    lm = LMBatch(torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 4, dtype=torch.long))
    assert isinstance(to_device(lm, torch.device("cpu")), LMBatch)


def test_public_names():
    assert {"Task", "create_task", "list_tasks", "register_task"} <= set(tasks.__all__)


def test_every_task_says_what_its_seed_draws():
    """The report's "data per run" line reads it: whether a per-run seed varies the test set or only part of it."""
    for name in tasks.list_tasks():
        draws = tasks.task_info(name).seed_draws
        assert draws.strip(), name
    assert "test included" in tasks.task_info("listops").seed_draws
    assert "the same for every seed" in tasks.task_info("reviews").seed_draws
    assert tasks.task_info("fashion").seed_draws.startswith("nothing")
    with pytest.raises(ValueError, match="task 'x': seed_draws must say what the task's seed draws"):
        tasks.register_task("x", description="d", kind="classification", metric="accuracy", source="s",
                            seed_draws=" ")
