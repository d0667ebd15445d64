"""Writing the files of a sweep safely: whole or not at all (:func:`atomic_write_text`), into folders checked
writable before anything trains (:func:`check_writable`), with a full disk named as such (:class:`DiskFull`,
:func:`disk_full_guard`) and damaged files moved aside rather than read (:func:`move_aside`)."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import time
from pathlib import Path
from typing import Iterator

__all__ = ["atomic_write_text", "check_writable", "DiskFull", "FolderNotWritable", "disk_full_guard", "is_disk_full",
           "move_aside", "filesystem_of"]


def filesystem_of(path: str | Path) -> str:
    """The mount point of the file system that holds ``path`` (or would hold it: its nearest existing parent)."""
    current = Path(os.path.abspath(path))
    while not current.exists() and current != current.parent:
        current = current.parent
    while not os.path.ismount(current) and current != current.parent:
        current = current.parent
    return str(current)


class DiskFull(RuntimeError):
    """The disk (or the quota) filled up while writing ``path``."""

    def __init__(self, path: str | Path, filesystem: str | None = None) -> None:
        self.path = str(path)
        self.filesystem = filesystem or filesystem_of(path)
        super().__init__(f"disk full while writing {self.path}: free space on {self.filesystem} and rerun the same "
                         f"command (finished runs are kept)")

    def __reduce__(self) -> tuple:  # raised in worker processes: pickled back to the sweep
        return (DiskFull, (self.path, self.filesystem))


class FolderNotWritable(RuntimeError):
    """A folder a sweep must write into cannot be written."""

    def __init__(self, folder: str | Path, reason: str) -> None:
        self.folder, self.reason = str(folder), reason
        super().__init__(f"{folder} is not writable ({reason}); make it writable or choose another folder")

    def __reduce__(self) -> tuple:
        return (FolderNotWritable, (self.folder, self.reason))


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error`` is a write that failed for want of space: ENOSPC or EDQUOT, or torch's zip writer's
    short write (``unexpected pos 58624 vs 58576``), which is what a full disk looks like through ``torch.save``."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(error)
    return isinstance(error, (OSError, RuntimeError)) and ("No space left on device" in text
                                                           or "Disk quota exceeded" in text
                                                           or "unexpected pos" in text)


@contextlib.contextmanager
def disk_full_guard(path: str | Path) -> Iterator[None]:
    """Turn a full disk while writing (under) ``path`` into :class:`DiskFull` naming the file (the error's own
    file name where it has one, else ``path``)."""
    try:
        yield
    except DiskFull:
        raise
    except (OSError, RuntimeError) as error:
        if not is_disk_full(error):
            raise
        where = getattr(error, "filename", None) or path
        raise DiskFull(where) from error


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: a temporary sibling, flushed and fsynced, renamed over
    ``path`` (readers see the old file or the new one, never a part). A full disk raises :class:`DiskFull`."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with disk_full_guard(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "w", newline="") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def check_writable(folder: str | Path) -> None:
    """Create ``folder`` if needed and create and delete a probe file in it; :class:`FolderNotWritable` (or
    :class:`DiskFull`) naming it when that fails."""
    folder = Path(folder)
    probe = folder / f".tokenmix-write-probe-{os.getpid()}"
    try:
        with disk_full_guard(folder):
            folder.mkdir(parents=True, exist_ok=True)
            with open(probe, "w") as f:
                f.write("probe\n")
                f.flush()
                os.fsync(f.fileno())
            probe.unlink()
    except OSError as error:
        with contextlib.suppress(OSError):
            probe.unlink()
        raise FolderNotWritable(folder, error.strerror or str(error)) from None


def move_aside(path: str | Path, reason: str, then: str) -> Path:
    """Rename the damaged file or folder ``path`` to ``<name>.damaged-<timestamp>`` next to it, saying so on
    stderr (``reason``: what is wrong with it; ``then``: what happens instead). Returns the new path."""
    path = Path(path)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.damaged-{stamp}")
    counter = 1
    while target.exists():
        counter += 1
        target = path.with_name(f"{path.name}.damaged-{stamp}-{counter}")
    os.replace(path, target)
    print(f"{path} is damaged ({reason}): moved aside to {target.name}; {then}", file=sys.stderr, flush=True)
    return target
