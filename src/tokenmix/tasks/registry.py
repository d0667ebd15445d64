"""The task registry: :func:`register_task` (a class decorator), and tasks built or planned by name."""

from __future__ import annotations

import inspect
from typing import Any, Callable, TypeVar

from .base import KINDS, PlannedTask, Task, TaskInfo

__all__ = ["register_task", "list_tasks", "task_class", "task_info", "claims_refused", "create_task", "planned_task"]

_TASKS: dict[str, type[Task]] = {}
T = TypeVar("T", bound=type)


def register_task(name: str, *, description: str, kind: str, metric: str, source: str,
                  seed_draws: str, retired: str | None = None) -> Callable[[T], T]:
    """Class decorator registering a :class:`Task` subclass; its options are its ``__init__`` keywords.
    ``seed_draws``: what the ``seed`` option draws, a clause that says whether the test set varies with it
    (e.g. "every example of every split (generated from it)", "nothing: the splits are the dataset's").
    ``retired``: why no claim may be judged on the task any more (it still trains, for pilots and users);
    experiment files with claims on it are refused when they load."""
    if kind not in KINDS:
        raise ValueError(f"task {name!r}: unknown kind {kind!r}")
    if not isinstance(seed_draws, str) or not seed_draws.strip():
        raise ValueError(f"task {name!r}: seed_draws must say what the task's seed draws")
    if retired is not None and (not isinstance(retired, str) or not retired.strip()):
        raise ValueError(f"task {name!r}: retired must say why (a sentence), or be None")

    def decorate(cls: T) -> T:
        if name in _TASKS:
            raise ValueError(f"a task named {name!r} is already registered")
        params = inspect.signature(cls.__init__).parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            raise TypeError(f"task {name!r}: **kwargs would swallow unknown options; list them explicitly")
        options = tuple(p for p in params if p != "self")
        if not hasattr(cls, "data_source"):
            raise TypeError(f"task {name!r}: set data_source (a tokenmix.data.source.DataSource, or None when the "
                            f"task generates its examples)")
        if cls.stated_shape is not None:
            stated = list(inspect.signature(cls.stated_shape).parameters.values())
            if stated != [p for p in params.values() if p.name != "self"]:
                raise TypeError(f"task {name!r}: stated_shape must take exactly the constructor's options")
        cls.info = TaskInfo(name, description, kind, metric, source, options, seed_draws, retired)
        _TASKS[name] = cls
        return cls

    return decorate


def list_tasks() -> list[str]:
    """Sorted names of the registered tasks."""
    return sorted(_TASKS)


def task_class(name: str) -> type[Task]:
    """The registered class of task ``name``."""
    if name not in _TASKS:
        raise ValueError(f"unknown task {name!r}; available: {', '.join(list_tasks())}")
    return _TASKS[name]


def task_info(name: str) -> TaskInfo:
    """What the registered task ``name`` is (:class:`TaskInfo`)."""
    return task_class(name).info


def claims_refused(name: str, options: dict[str, Any]) -> tuple[str, str] | None:
    """Why no claim may be judged on task ``name`` run with ``options``: ``("task", why)`` where the whole task is
    retired (``register_task(..., retired=why)``), ``("setting", why)`` where only this setting is
    (:meth:`~tokenmix.tasks.base.Task.retired_setting`), ``None`` where claims may be judged."""
    why = task_info(name).retired
    if why:
        return "task", why
    why = task_class(name).retired_setting(options)
    return ("setting", why) if why else None


def _checked_class(name: str, options: dict[str, Any]) -> type[Task]:
    cls = task_class(name)
    unknown = sorted(set(options) - set(cls.info.options))
    if unknown:
        raise ValueError(f"task {name!r} has no option(s) {unknown}; its options are: {', '.join(cls.info.options)}")
    return cls


def create_task(name: str, /, **options: Any) -> Task:
    """Build the task ``name`` (loading or generating its data); unknown options raise ``ValueError``."""
    return _checked_class(name, options)(**options)


def planned_task(name: str, /, **options: Any) -> PlannedTask | None:
    """The task ``name`` as its options state it, loading no data (:class:`PlannedTask`), or ``None`` where only
    its data can tell its shape (then :func:`create_task` it). Options are checked as by :func:`create_task`."""
    cls = _checked_class(name, options)
    shape = None if cls.stated_shape is None else cls.stated_shape(**options)
    return None if shape is None else PlannedTask(cls, shape)
