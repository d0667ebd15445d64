"""Tasks on real and generated data, one module per task, registered on import (see :mod:`.base`)."""

import importlib
import pkgutil

from .base import (
    ImageBatch,
    LMBatch,
    PlannedTask,
    Split,
    Task,
    TaskInfo,
    TaskShape,
    TokenBatch,
    create_task,
    list_tasks,
    pad_sequences,
    planned_task,
    register_task,
    task_class,
    task_info,
)

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["ImageBatch", "LMBatch", "PlannedTask", "Split", "Task", "TaskInfo", "TaskShape", "TokenBatch",
           "create_task", "list_tasks", "pad_sequences", "planned_task", "register_task", "task_class", "task_info"]
