"""The folder lock that holds on NFS (tokenmix.training.locks) and the safe-writing helpers
(tokenmix.training.files)."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import socket
import time
from pathlib import Path

import pytest

from tokenmix.training.files import (DiskFull, FolderNotWritable, atomic_write_text, check_writable, disk_full_guard,
                                     move_aside)
from tokenmix.training.locks import FolderLock, LockHeld

SPAWN = multiprocessing.get_context("spawn")


def hold(folder: str, ready, release) -> None:
    with FolderLock(folder, "holding for a test"):
        ready.set()
        release.wait(60)


def increment(folder: str, times: int) -> None:
    counter = Path(folder) / "counter.txt"
    for _ in range(times):
        with FolderLock(folder, "increment", timeout=60):
            value = int(counter.read_text()) if counter.exists() else 0
            time.sleep(0.001)  # widen the read-modify-write window
            counter.write_text(str(value + 1))


def exit_at_once() -> None:
    pass


def write_holder(folder: Path, host: str, pid: int, age: float = 0.0) -> Path:
    path = folder / ".tokenmix.lock"
    path.write_text(json.dumps({"host": host, "pid": pid, "started": "2024-01-01 00:00:00 +0000",
                                "command": "tokenmix compare --config x.toml", "purpose": "tokenmix compare x"}))
    if age:
        os.utime(path, (time.time() - age, time.time() - age))
    return path


def test_a_second_process_is_refused_then_gets_the_lock_once_released(tmp_path):
    ready, release = SPAWN.Event(), SPAWN.Event()
    holder = SPAWN.Process(target=hold, args=(str(tmp_path), ready, release))
    holder.start()
    try:
        assert ready.wait(60)
        with pytest.raises(LockHeld) as error:
            FolderLock(tmp_path, "second").acquire()
        message = str(error.value)
        assert str(tmp_path / ".tokenmix.lock") in message and f"pid {holder.pid}" in message
        assert socket.gethostname() in message and "holding for a test" in message
        release.set()
        with FolderLock(tmp_path, "second", timeout=30) as lock:  # waits for the holder to let go
            assert json.loads(lock.path.read_text())["pid"] == os.getpid()
    finally:
        release.set()
        holder.join(30)
    assert not (tmp_path / ".tokenmix.lock").exists() and list(tmp_path.iterdir()) == []


def test_the_lock_of_a_dead_process_on_this_host_is_taken_over(tmp_path, capsys):
    dead = SPAWN.Process(target=exit_at_once)
    dead.start()
    dead.join()
    write_holder(tmp_path, socket.gethostname(), dead.pid)
    with FolderLock(tmp_path, "after a crash"):
        pass
    err = capsys.readouterr().err
    assert "taking over the stale lock" in err and f"pid {dead.pid}" in err and "not running" in err


def test_a_fresh_lock_of_another_host_is_refused_and_an_old_one_taken_over(tmp_path, capsys):
    path = write_holder(tmp_path, "node-17.cluster", 4242)
    with pytest.raises(LockHeld) as error:
        FolderLock(tmp_path, "mine").acquire()
    message = str(error.value)
    for part in ("node-17.cluster", "pid 4242", "2024-01-01 00:00:00", "tokenmix compare --config x.toml",
                 str(path)):
        assert part in message
    write_holder(tmp_path, "node-17.cluster", 4242, age=1000.0)
    with FolderLock(tmp_path, "mine", stale_after=900.0):
        assert json.loads(path.read_text())["host"] == socket.gethostname()
    assert "not refreshed for" in capsys.readouterr().err


def test_the_holder_keeps_its_lock_fresh(tmp_path):
    with FolderLock(tmp_path, "long", stale_after=0.4) as lock:
        os.utime(lock.path, (time.time() - 100, time.time() - 100))
        time.sleep(0.5)
        assert time.time() - lock.path.stat().st_mtime < 0.4


def test_acquiring_a_lock_this_process_holds_is_refused(tmp_path):
    with FolderLock(tmp_path, "first"):
        with pytest.raises(LockHeld, match="already held by this process"):
            FolderLock(tmp_path, "second", timeout=5).acquire()
    with FolderLock(tmp_path, "again"):  # released: free again
        pass


def test_no_increment_is_lost_under_the_lock(tmp_path):
    workers = [SPAWN.Process(target=increment, args=(str(tmp_path), 25)) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]
    assert (tmp_path / "counter.txt").read_text() == "100"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["counter.txt"]  # no lock or temporary file left


def test_atomic_writes_and_a_full_disk(tmp_path, monkeypatch):
    target = tmp_path / "sub" / "result.json"
    atomic_write_text(target, "{}")
    assert target.read_text() == "{}"

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(DiskFull, match=r"disk full while writing .*result\.json: free space on /.* and rerun the "
                                       r"same command \(finished runs are kept\)"):
        atomic_write_text(target, "{\"new\": 1}")
    assert target.read_text() == "{}" and sorted(p.name for p in target.parent.iterdir()) == ["result.json"]
    with pytest.raises(DiskFull, match="checkpoint"):  # torch's zip writer's short write
        with disk_full_guard(tmp_path / "checkpoint"):
            raise RuntimeError("[enforce fail at inline_container.cc:595] . unexpected pos 58624 vs 58576")
    with pytest.raises(RuntimeError, match="other"):
        with disk_full_guard(tmp_path):
            raise RuntimeError("other")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_named(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(FolderNotWritable, match=f"{folder} is not writable"):
            check_writable(folder)
        with pytest.raises(FolderNotWritable, match="not writable"):
            FolderLock(folder, "x").acquire()
    finally:
        folder.chmod(0o700)
    check_writable(tmp_path / "new" / "deep")
    assert list((tmp_path / "new" / "deep").iterdir()) == []


def test_move_aside(tmp_path, capsys):
    path = tmp_path / "result.json"
    path.write_text("{trunc")
    first = move_aside(path, "not JSON", "the run trains again")
    path.write_text("{trunc")
    second = move_aside(path, "not JSON", "the run trains again")
    assert first.name.startswith("result.json.damaged-") and first != second and not path.exists()
    assert f"{path} is damaged (not JSON): moved aside to {first.name}" in capsys.readouterr().err
