"""Tasks on real and generated data, one module per task, registered on import (see :mod:`.base`, :mod:`.registry`)."""

import importlib
import pkgutil

from .base import PlannedTask, Task, TaskInfo, TaskShape
from .batches import ImageBatch, LMBatch, Split, TokenBatch, pad_sequences
from .registry import claims_refused, create_task, list_tasks, planned_task, register_task, task_class, task_info

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in ("base", "batches", "registry"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["ImageBatch", "LMBatch", "PlannedTask", "Split", "Task", "TaskInfo", "TaskShape", "TokenBatch",
           "claims_refused", "create_task", "list_tasks", "pad_sequences", "planned_task", "register_task",
           "task_class", "task_info"]
