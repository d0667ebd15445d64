"""A lock on a folder that holds on a shared (NFS) file system, where ``fcntl``/``flock`` locks cannot be
trusted (:class:`FolderLock`).

The lock is a file in the folder (``.tokenmix.lock`` by default) holding JSON ``{host, pid, started, command,
purpose}``. It is created atomically: the holder's record is written to a unique temporary file in the folder,
which is hard-linked to the lock's name (``link`` fails when the name exists, atomically even over NFS); a link
whose reply was lost is confirmed by the temporary file's link count being 2. Where the file system has no hard
links, ``O_CREAT | O_EXCL`` is used instead.

A holder is alive while its process is: on this host, its pid runs (and is the same process: its start time
matches); on another host, its lock file is fresh: the holder touches it every ``stale_after / 4`` seconds from
a daemon thread, and a file not touched for ``stale_after`` seconds counts as left by a dead holder. A dead
holder's lock is taken over with a one-line message; breaking it goes through a second lock
(``<name>.break``), so two processes that both find it stale cannot both take it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from .files import DiskFull, FolderNotWritable, is_disk_full

__all__ = ["FolderLock", "LockHeld"]

_HELD: dict[str, int] = {}  # lock path -> pid of the process that holds it, for "already held by this process"
_BREAK_STALE_S = 60.0  # a "<name>.break" file older than this was left by a process that died while breaking


class LockHeld(RuntimeError):
    """The lock is held by another live process (or by this one)."""


def _process_start(pid: int) -> str | None:
    """The start time of ``pid`` in clock ticks since boot (``/proc/<pid>/stat`` field 22), None off Linux."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None


def _pid_alive(pid: int, start: str | None) -> bool:
    """Whether ``pid`` runs on this host and, where both are known, started at ``start`` (else: a reused pid)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat[stat.rindex(")") + 2:].split()[0] == "Z":  # a zombie: dead, not yet reaped
            return False
    except (OSError, ValueError, IndexError):
        pass
    current = _process_start(pid)
    return start is None or current is None or current == start


def _command() -> str:
    return " ".join(sys.argv) if sys.argv and sys.argv[0] else sys.executable


class FolderLock:
    """A lock on ``folder`` for ``purpose`` (see the module docstring), as a context manager or through
    :meth:`acquire`/:meth:`release`.

    ``timeout``: 0 tries once; a number of seconds retries until then; None waits as long as it takes. A lock
    that cannot be had raises :class:`LockHeld` naming the lock file and its holder. ``stale_after``: seconds
    without a refresh after which a holder on another host counts as dead."""

    def __init__(self, folder: str | Path, purpose: str, *, name: str = ".tokenmix.lock", timeout: float | None = 0.0,
                 stale_after: float = 900.0) -> None:
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout must be None or >= 0, got {timeout!r}")
        if not stale_after > 0:
            raise ValueError(f"stale_after must be > 0, got {stale_after!r}")
        self.folder = Path(folder)
        self.path = self.folder / name
        self.purpose = purpose
        self.timeout = timeout
        self.stale_after = float(stale_after)
        self._record: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- public ------------------------------------------------------------------------------------------
    def acquire(self) -> None:
        """Take the lock (see the class docstring); :class:`LockHeld` when it cannot be had in time."""
        key = os.path.abspath(self.path)
        if _HELD.get(key) == os.getpid():
            raise LockHeld(f"{self.path} is already held by this process (pid {os.getpid()}); a FolderLock is not "
                           f"re-entrant: release it before acquiring it again")
        self.folder.mkdir(parents=True, exist_ok=True)
        record = json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                             "started": time.strftime("%Y-%m-%d %H:%M:%S %z"), "command": _command(),
                             "purpose": self.purpose, "pid_start": _process_start(os.getpid())})
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        told = False
        while True:
            try:
                created = self._create(self.path, record)
            except OSError as error:
                if is_disk_full(error):
                    raise DiskFull(self.path) from error
                raise FolderNotWritable(self.folder, f"cannot create the lock {self.path.name}: "
                                        f"{error.strerror or error}") from None
            if created:
                break
            holder, text, age = self._read()
            if text is None:  # vanished between the two calls: try again at once
                continue
            reason = self._stale_reason(holder, age)
            if reason is not None:
                self._break(text, holder, reason)
                continue
            if deadline is not None and time.monotonic() >= deadline:
                raise LockHeld(self._held_message(holder, age))
            if not told and (deadline is None or deadline - time.monotonic() > 2.0):
                print(f"waiting for {self.path}: {self._describe(holder)}", file=sys.stderr, flush=True)
                told = True
            time.sleep(min(1.0, max(0.05, self.stale_after / 20)))
        self._record = record
        _HELD[key] = os.getpid()
        self._stop.clear()
        self._thread = threading.Thread(target=self._refresh, name=f"refresh {self.path}", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Give the lock up (its file is removed if it is still this holder's; a no-op when not held)."""
        if self._record is None:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        try:
            if self.path.read_text() == self._record:
                self.path.unlink()
            else:
                print(f"warning: {self.path} was taken over by another process while this one held it",
                      file=sys.stderr, flush=True)
        except FileNotFoundError:
            print(f"warning: {self.path} was removed while this process held it", file=sys.stderr, flush=True)
        finally:
            self._record = None
            _HELD.pop(os.path.abspath(self.path), None)

    def __enter__(self) -> FolderLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    # -- the lock file -----------------------------------------------------------------------------------
    @staticmethod
    def _create(path: Path, record: str) -> bool:
        """Create ``path`` holding ``record`` if it does not exist, atomically; whether this call created it."""
        tmp = path.with_name(f"{path.name}.{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        with open(tmp, "w") as f:
            f.write(record)
            f.flush()
            os.fsync(f.fileno())
        try:
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            except OSError as error:
                if error.errno in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                    return FolderLock._create_exclusive(path, record)  # no hard links on this file system
                # over NFS a link that succeeded may still report an error (its reply was lost): the count says
            return os.stat(tmp).st_nlink == 2
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    @staticmethod
    def _create_exclusive(path: Path, record: str) -> bool:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            f.write(record)
            f.flush()
            os.fsync(f.fileno())
        return True

    def _read(self) -> tuple[dict[str, Any] | None, str | None, float]:
        """The holder's record (None when unreadable), the file's text (None when it is gone), its age in s."""
        try:
            text = self.path.read_text()
            age = time.time() - self.path.stat().st_mtime
        except FileNotFoundError:
            return None, None, 0.0
        try:
            holder = json.loads(text)
        except ValueError:
            holder = None
        return (holder if isinstance(holder, dict) else None), text, age

    def _stale_reason(self, holder: dict[str, Any] | None, age: float) -> str | None:
        """Why the holder counts as dead, or None while it counts as alive."""
        if holder is not None and holder.get("host") == socket.gethostname():
            pid = int(holder.get("pid") or 0)
            if pid == os.getpid():
                return None  # this process, through another FolderLock object: held (see _held_message)
            if not _pid_alive(pid, holder.get("pid_start")):
                return f"pid {pid} is not running on this host"
            return None
        if age > self.stale_after:
            return f"not refreshed for {age:.0f} s (> {self.stale_after:.0f} s)"
        return None

    def _break(self, text: str, holder: dict[str, Any] | None, reason: str) -> None:
        """Remove the stale lock file whose content is ``text``, unless another process got there first."""
        breaker = self.path.with_name(self.path.name + ".break")
        record = json.dumps({"host": socket.gethostname(), "pid": os.getpid()})
        if not self._create(breaker, record):
            with contextlib.suppress(FileNotFoundError):
                if time.time() - breaker.stat().st_mtime > _BREAK_STALE_S:
                    breaker.unlink()
            time.sleep(0.05)
            return
        try:
            try:
                current = self.path.read_text()
            except FileNotFoundError:
                return
            if current != text:  # taken over (or refreshed into a new holder) meanwhile: look again
                return
            self.path.unlink()
            print(f"{self.path}: taking over the stale lock of {self._describe(holder)}: {reason}",
                  file=sys.stderr, flush=True)
        finally:
            with contextlib.suppress(FileNotFoundError):
                breaker.unlink()

    def _refresh(self) -> None:
        """Touch the lock file every ``stale_after / 4`` s so that other hosts see its holder alive."""
        warned = False
        while not self._stop.wait(self.stale_after / 4):
            try:
                os.utime(self.path)
            except OSError as error:
                if not warned:
                    print(f"warning: cannot refresh {self.path} ({error}); other hosts may take it over",
                          file=sys.stderr, flush=True)
                    warned = True

    # -- messages ----------------------------------------------------------------------------------------
    @staticmethod
    def _describe(holder: dict[str, Any] | None) -> str:
        if holder is None:
            return "an unknown holder (the lock file is not readable JSON)"
        return (f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('started')} "
                f"(command: {holder.get('command')!r}; {holder.get('purpose')})")

    def _held_message(self, holder: dict[str, Any] | None, age: float) -> str:
        mine = holder is not None and holder.get("host") == socket.gethostname() and \
            int(holder.get("pid") or 0) == os.getpid()
        if mine:
            return (f"{self.path} is already held by this process (pid {os.getpid()}); a FolderLock is not "
                    f"re-entrant: release it before acquiring it again")
        here = holder is not None and holder.get("host") == socket.gethostname()
        gone = ("once that process has ended (or been stopped) the lock is free" if here else
                f"if that process is gone, the lock is taken over once it has not been refreshed for "
                f"{self.stale_after:.0f} s (now {age:.0f} s); delete {self.path} only if you are sure it is gone")
        return f"{self.path} is held by {self._describe(holder)}: wait for it to finish, or stop it; {gone}"
