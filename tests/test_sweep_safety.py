"""Sweeps whose results can be trusted (``tokenmix compare``): one sweep per out folder (its lock), runs that die
with the sweep, damaged files moved aside, folders checked writable and a full disk named before or instead of a
traceback."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tokenmix.training.files as files_module
import tokenmix.training.sweep as compare_module
from tokenmix.cli import main
from tokenmix.training.build import build_model, make_task
from tokenmix.training.experiment import load_experiment
from tokenmix.training.files import DiskFull, FolderNotWritable
from tokenmix.training.locks import LockHeld
from tokenmix.training.loop import train
from tokenmix.training.results import ResultsDir, read_csv, write_csv
from tokenmix.training.sweep import compare, record_lock, run_one

TINY = ["task.name='recall'", "model.dim=16", "model.depth=1", "train.max_steps=6", "train.eval_every=3",
        "train.batch_size=16", "seeds=[0]", "mixers=['relation']", "report.plots=[]", "train.threads=1"]


def tiny(*sets: str):
    return load_experiment(None, [*TINY, *sets])


def never(*args, **kwargs):
    pytest.fail("trained although the sweep should have stopped first")


class Stop(Exception):
    pass


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            tree.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(int(entry.name))
    return tree


def _descendants(pid: int) -> list[int]:
    tree, found, todo = _children(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal and /proc: Linux only")
def test_one_sweep_per_folder_and_its_runs_die_with_it(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    long = [*TINY, "train.max_steps=1000000", "train.eval_every=1000000"]
    command = [sys.executable, "-m", "tokenmix.cli", "compare", "--out", str(out), "--jobs", "1",
               *[x for s in long for x in ("--set", s)]]
    sweep = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while not (out / "runs" / "relation" / "seed0").exists():  # the worker has started training
            assert sweep.poll() is None and time.monotonic() < deadline, "the sweep did not start its run"
            time.sleep(0.5)
        workers = _descendants(sweep.pid)
        assert len(workers) >= 2  # the run's worker and the progress manager (and spawn's resource tracker)
        with pytest.raises(LockHeld) as error:
            compare(load_experiment(None, long), out, isolate=False, progress=False)
        assert f"pid {sweep.pid}" in str(error.value) and "tokenmix compare" in str(error.value)
        sweep.send_signal(signal.SIGKILL)
        sweep.wait(30)
        deadline = time.monotonic() + 20
        while any(_alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [p for p in workers if _alive(p)], "workers outlived the killed sweep"
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    capsys.readouterr()

    def stop(*args, **kwargs):
        raise Stop

    monkeypatch.setattr(compare_module, "run_one", stop)
    with pytest.raises(Stop):  # the rerun took the dead sweep's lock over and went on to train
        compare(load_experiment(None, long), out, isolate=False, progress=False)
    err = capsys.readouterr().err
    assert "taking over the stale lock" in err and f"pid {sweep.pid}" in err
    assert not (out / ".tokenmix.lock").exists()  # released on the way out


def test_damaged_results_and_checkpoints_are_moved_aside_and_trained_again(tmp_path, capsys):
    experiment, out = tiny(), tmp_path / "out"
    rows = compare(experiment, out, isolate=False, progress=False)
    # relation: a truncated result.json; mlp: killed at step 4 (checkpoint of step 3), then its checkpoint
    # truncated while the one before it (checkpoint.old) stayed whole
    relation, mlp = out / "runs" / "relation" / "seed0", out / "runs" / "mlp" / "seed0"
    text = (relation / "result.json").read_text()
    (relation / "result.json").write_text(text[:len(text) // 2])
    (mlp / "result.json").unlink()
    task = make_task(experiment)
    spec = next(r for r in experiment.runs(task.info.kind) if r.label == "mlp")

    def die(step, total, metric):
        if step == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(task, build_model(task, spec), experiment.train_config(spec, out_dir=str(mlp), progress=False),
              on_step=die)
    shutil.copytree(mlp / "checkpoint", mlp / "checkpoint.old")
    model = mlp / "checkpoint" / "model.safetensors"
    model.write_bytes(model.read_bytes()[:-100])
    assert main(["compare", *[x for s in TINY for x in ("--set", s)], "--out", str(out), "--status"]) == 0
    status = capsys.readouterr().out
    assert "damaged" in status and "0/1" in status  # --status reads them without crashing
    again = compare(experiment, out, isolate=False, progress=False)
    err = capsys.readouterr().err
    assert f"{relation / 'result.json'} is damaged (not JSON" in err and "the run trains again" in err
    assert f"{mlp / 'checkpoint'} is damaged (model.safetensors" in err and "resumes from the older" in err
    assert len(list(relation.glob("result.json.damaged-*"))) == 1
    assert len(list(mlp.glob("checkpoint.damaged-*"))) == 1 and not (mlp / "checkpoint.old").exists()
    assert [(r["label"], r["value"], r["best_val"]) for r in again] == \
        [(r["label"], r["value"], r["best_val"]) for r in rows]  # bitwise the undamaged sweep
    assert [h["step"] for h in json.loads((mlp / "result.json").read_text())["history"]] == [3, 6]  # resumed


def test_damaged_best_weights_restart_the_run(tmp_path, capsys):
    experiment, out = tiny(), tmp_path / "out"
    task = make_task(experiment)
    spec = experiment.runs(task.info.kind)[0]
    folder = out / "runs" / spec.label / "seed0"

    def die(step, total, metric):
        if step == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(task, build_model(task, spec), experiment.train_config(spec, out_dir=str(folder), progress=False),
              on_step=die)
    (folder / "best.safetensors").write_bytes(b"\x00" * 10)
    rows = compare(experiment, out, isolate=False, progress=False)
    err = capsys.readouterr().err
    assert "best.safetensors is damaged" in err and "its best weights are damaged" in err
    assert [(r["label"], r["steps"]) for r in rows] == [("relation", 6), ("mlp", 6)]


def test_folders_are_checked_writable_before_anything_trains(tmp_path, monkeypatch):
    monkeypatch.setattr(compare_module, "run_one", never)
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(FolderNotWritable, match=f"{tmp_path / 'file' / 'results'} is not writable"):
        compare(tiny(), tmp_path / "out", isolate=False, progress=False, results_dir=tmp_path / "file" / "results")
    if os.geteuid() != 0:  # root writes into read-only folders
        (tmp_path / "ro").mkdir(mode=0o500)
        with pytest.raises(FolderNotWritable, match=f"{tmp_path / 'ro'} is not writable"):
            compare(tiny(), tmp_path / "ro", isolate=False, progress=False)


def test_a_full_disk_is_named_not_a_traceback(tmp_path, monkeypatch, capsys):
    import torch

    real_save = torch.save

    def short_write(obj, path, *args, **kwargs):
        if str(path).endswith("state.pt"):
            raise RuntimeError("[enforce fail at inline_container.cc:595] . unexpected pos 58624 vs 58576")
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", short_write)
    with pytest.raises(DiskFull, match=r"disk full while writing .*checkpoint.*: free space on /.* and rerun the "
                                       r"same command \(finished runs are kept\)"):
        compare(tiny(), tmp_path / "out", isolate=False, progress=False)
    assert not list((tmp_path / "out" / "runs" / "relation" / "seed0").glob("checkpoint*"))  # no partial one
    monkeypatch.setattr(torch, "save", real_save)

    def no_space(self, row, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(self.csv))

    monkeypatch.setattr(ResultsDir, "save_run", no_space)
    docs = tmp_path / "docs"
    with pytest.raises(DiskFull, match=f"disk full while writing {docs}"):
        compare(tiny(), tmp_path / "out", isolate=False, progress=False, results_dir=docs)
    assert (tmp_path / "out" / "runs" / "relation" / "seed0" / "result.json").exists()  # the finished run is kept

    def full(*args, **kwargs):
        raise DiskFull(tmp_path / "out" / "runs" / "x" / "result.json")

    monkeypatch.setattr(compare_module, "compare", full)
    with pytest.raises(SystemExit, match="tokenmix compare: disk full while writing"):
        main(["compare", *[x for s in TINY for x in ("--set", s)], "--out", str(tmp_path / "cli")])


# -- a record is whole or not there: the row is written last, a torn one is repaired ---------------------------
def _full_disk_on(patch: pytest.MonkeyPatch, name: str) -> None:
    """A disk that fills up when the file ``name`` is written (its rename into place fails with ENOSPC)."""
    real = os.replace

    def replace(src, dst, *args, **kwargs):
        if Path(dst).name == name:
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        return real(src, dst, *args, **kwargs)

    patch.setattr(files_module.os, "replace", replace)


def _whole(record: ResultsDir) -> bool:
    return not record.torn() and set(record.rows()) == {("relation", 0), ("mlp", 0)}


@pytest.mark.parametrize("fails", ["-history.csv", "-configs.json", ".csv"])
def test_a_full_disk_while_recording_leaves_no_torn_record(tmp_path, fails):
    experiment, out, docs = tiny(), tmp_path / "out", tmp_path / "docs"
    record = ResultsDir(docs, experiment.name)
    with pytest.MonkeyPatch.context() as patch:
        _full_disk_on(patch, experiment.name + fails)
        with pytest.raises(DiskFull):
            compare(experiment, out, isolate=False, progress=False, results_dir=docs)
    assert record.rows() == {} and record.torn() == {}  # the first run is not recorded at all, not in part
    compare(experiment, out, isolate=False, progress=False, results_dir=docs)  # the same command again
    assert _whole(record) and set(record.histories()) == {("relation", 0), ("mlp", 0)}
    assert set(record.known_configs()) == {r["config_hash"] for r in record.rows().values()}


def test_a_torn_record_is_recorded_again_or_its_run_trained_again(tmp_path, monkeypatch, capsys):
    experiment, out, docs = tiny(), tmp_path / "out", tmp_path / "docs"
    compare(experiment, out, isolate=False, progress=False, results_dir=docs)
    record = ResultsDir(docs, experiment.name)
    rows = record.rows()

    def tear() -> None:  # as an older version left it: relation's row without its evaluations, mlp's without its config
        header, history = read_csv(record.history)
        write_csv(record.history, header, [h for h in history if h["label"] != "relation"])
        configs = record.known_configs()
        del configs[rows[("mlp", 0)]["config_hash"]]
        record.configs.write_text(json.dumps(configs))

    tear()
    assert record.torn() == {("relation", 0): f"its evaluations in {record.history.name}",
                             ("mlp", 0): f"its config {rows[('mlp', 0)]['config_hash']} in {record.configs.name}"}
    monkeypatch.setattr(compare_module, "run_one", never)
    capsys.readouterr()
    compare(experiment, out, isolate=False, progress=False, results_dir=docs)  # both finished in out: recorded again
    err = capsys.readouterr().err
    assert f"{record.csv}: relation seed 0 was recorded without its evaluations" in err
    assert err.count("recording it again from") == 2 and _whole(record)
    assert [k for k in record.rows()] == [("relation", 0), ("mlp", 0)]  # in place
    tear()
    trained = []
    monkeypatch.setattr(compare_module, "run_one", lambda *a, **k: (trained.append(a[1:3]), run_one(*a, **k))[1])
    compare(experiment, tmp_path / "fresh", isolate=False, progress=False, results_dir=docs)  # no result.json
    err = capsys.readouterr().err
    assert err.count("dropping the row; the run trains again") == 2
    assert sorted(trained) == [("mlp", 0), ("relation", 0)] and _whole(record)


# -- one sweep per experiment and results folder ------------------------------------------------------------------
def hold_record_lock(results: str, name: str, out: str, ready, release) -> None:
    with record_lock(results, name, out):
        ready.set()
        release.wait(60)


def test_one_sweep_per_experiment_and_results_folder_whatever_its_out(tmp_path, monkeypatch):
    experiment, docs = tiny(), tmp_path / "docs"
    context = multiprocessing.get_context("spawn")
    ready, release = context.Event(), context.Event()
    other = context.Process(target=hold_record_lock, args=(str(docs), experiment.name, str(tmp_path / "one"),
                                                           ready, release))
    other.start()
    try:
        assert ready.wait(60)
        monkeypatch.setattr(compare_module, "run_one", never)
        with pytest.raises(LockHeld) as error:
            compare(experiment, tmp_path / "two", isolate=False, progress=False, results_dir=docs)
        message = str(error.value)
        assert f".tokenmix-sweep-{experiment.name}.lock is held by pid {other.pid}" in message
        assert f"tokenmix compare {experiment.name} into {(tmp_path / 'one').resolve()}" in message
        compare(experiment, tmp_path / "three", progress=False, results_dir=docs, dry_run=True)  # takes no lock
    finally:
        release.set()
        other.join(30)
    monkeypatch.setattr(compare_module, "run_one", run_one)
    compare(experiment, tmp_path / "two", isolate=False, progress=False, results_dir=docs)  # free again
    assert not list(docs.glob(".tokenmix*"))  # released on the way out


def test_a_sweep_stops_on_sigterm_and_gives_the_callers_handler_back(tmp_path, monkeypatch):
    caller = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: caller.append(signum))
    try:
        def killed(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGTERM)  # during a run, SIGTERM stops the sweep as Ctrl-C does
            pytest.fail("SIGTERM did not interrupt the run")

        monkeypatch.setattr(compare_module, "run_one", killed)
        with pytest.raises(KeyboardInterrupt, match="signal 15"):
            compare(tiny(), tmp_path / "out", isolate=False, progress=False)
        assert caller == []
        monkeypatch.undo()
        compare(tiny(), tmp_path / "again", isolate=False, progress=False)
        os.kill(os.getpid(), signal.SIGTERM)  # after the sweep, interrupted or not, the caller's handler again
        assert caller == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)
