"""Sweeps that outlive a session: ``tokenmix compare --results DIR [--commit]``, ``--status``
(tokenmix.training.results, tokenmix.training.status)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import tokenmix.training.files as files_module
import tokenmix.training.executor as executor_module
import tokenmix.training.sweep as compare_module
from tokenmix.cli import main
from tokenmix.training.build import make_task
from tokenmix.training.experiment import load_experiment
from tokenmix.training.numerics import PINNED
from tokenmix.training.results import (HASH_COLUMN, HISTORY_COLUMNS, ROW_COLUMNS, ResultsDir, config_hash,
                                       git_commit,
                                       read_csv, run_config, upsert_rows, write_csv)
from tokenmix.training.sweep import compare
from tokenmix.tasks import task_info

TINY = ["task.name='recall'", "model.dim=16", "model.depth=1", "train.max_steps=6", "train.eval_every=3",
        "train.batch_size=16", "seeds=[0]", "mixers=['relation']", "report.plots=[]"]


def tiny(*sets: str):
    return load_experiment(None, [*TINY, *sets])


def never(*args, **kwargs):
    pytest.fail("a recorded run was trained again")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """relation and the mlp baseline, seed 0, recorded in docs/ as they finish; the rows on disk at each start."""
    root = tmp_path_factory.mktemp("sweep")
    experiment, docs, seen = tiny(), root / "docs", []
    real = compare_module.run_one

    def recording(*args, **kwargs):
        seen.append([(r["label"], r["seed"]) for r in read_csv(docs / f"{experiment.name}.csv")[1]])
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compare_module, "run_one", recording)
        rows = compare(experiment, root / "out", isolate=False, progress=False, results_dir=docs)
    return root, experiment, docs, rows, seen


def test_each_finished_run_is_recorded_at_once(sweep):
    root, experiment, docs, rows, seen = sweep
    assert seen == [[], [("relation", "0")]]  # the first run's row was written before the second run began
    header, table = read_csv(docs / f"{experiment.name}.csv")
    assert header == ROW_COLUMNS
    kind = task_info("recall").kind
    hashes = {r.label: config_hash(run_config(experiment, r, experiment.threads())) for r in experiment.runs(kind)}
    assert [(r["label"], r["seed"], r[HASH_COLUMN]) for r in table] == [(k, "0", v) for k, v in hashes.items()]
    assert all(len(h) == 12 and int(h, 16) >= 0 for h in hashes.values()) and len(set(hashes.values())) == 2
    header, history = read_csv(docs / f"{experiment.name}-history.csv")
    assert header == HISTORY_COLUMNS and [(h["label"], h["step"]) for h in history] == [
        ("relation", "3"), ("relation", "6"), ("mlp", "3"), ("mlp", "6")]
    assert read_csv(docs / f"{experiment.name}-chance.csv")[0] == ["majority_class", "train_rate", "test_rate"]
    assert set(json.loads((docs / f"{experiment.name}-configs.json").read_text())) == set(hashes.values())
    assert not list(docs.glob(".*"))  # no temporary files left


def test_the_hash_ignores_what_does_not_change_a_run():
    kind = task_info("recall").kind
    base = tiny().runs(kind)[0]
    same = tiny("train.threads=1", "report.target=0.5", "name='other'", "description='x'").runs(kind)[0]
    assert config_hash(run_config(tiny(), base, 1)) == config_hash(
        run_config(tiny("train.threads=1", "report.target=0.5", "name='other'", "description='x'"), same, 1))
    assert config_hash(run_config(tiny(), base, 1)) != config_hash(run_config(tiny(), base, 2))  # threads count
    for change in ("train.lr=0.01", "model.dim=8", "task.seed=1", "train.preset='paper-003'"):
        other = tiny(change)
        changed_hash = config_hash(run_config(other, other.runs(kind)[0], 1))
        assert changed_hash != config_hash(run_config(tiny(), base, 1)), change
    assert config_hash(run_config(tiny("seeds=[1]"), tiny("seeds=[1]").runs(kind)[0], 1)) != \
        config_hash(run_config(tiny(), base, 1))


def _data(task) -> list:
    return [task.splits[name].ids.tolist() for name in ("train", "test")] + [task.splits["test"].labels.tolist()]


def test_task_seed_run_draws_each_runs_data_from_its_seed():
    per_run, fixed = tiny("task.seed='run'", "seeds=[0,1]"), tiny("seeds=[0,1]")
    assert _data(make_task(per_run, 0)) != _data(make_task(per_run, 1))  # other splits, other test labels
    assert _data(make_task(fixed, 0)) == _data(make_task(fixed, 1)) == _data(make_task(per_run, 0))
    assert _data(make_task(per_run)) == _data(make_task(fixed))  # planning and the chance file: seed 0's data


def test_a_run_trains_on_its_own_seeds_data(tmp_path, monkeypatch):
    seen = []

    def stop(experiment, run_seed=None):
        seen.append(make_task(experiment, run_seed).seed)
        raise KeyboardInterrupt  # the data seed is known: no need to train

    monkeypatch.setattr(executor_module, "make_task", stop)
    for sets, seed in ((("task.seed='run'",), 1), (("task.seed='run'",), 0), ((), 1), (("task.seed=3",), 1)):
        with pytest.raises(KeyboardInterrupt):
            executor_module.run_one(tiny("seeds=[0,1]", *sets).to_dict(), "relation", seed, str(tmp_path), 1)
    assert seen == [1, 0, 0, 3]


def test_task_seed_run_is_hashed_as_the_runs_seed():
    kind = task_info("recall").kind
    per_run, fixed = tiny("task.seed='run'", "seeds=[0,1]"), tiny("seeds=[0,1]")
    hashes = {(name, r.seed): config_hash(run_config(e, r, 1))
              for name, e in (("run", per_run), ("fixed", fixed)) for r in e.runs(kind) if r.label == "relation"}
    assert hashes[("run", 1)] != hashes[("fixed", 1)]  # seed 1's run sees seed 1's data, not seed 0's
    assert hashes[("run", 0)] == hashes[("fixed", 0)]  # the same data, the same weights: the same config
    assert run_config(per_run, per_run.runs(kind)[1], 1)["task"]["seed"] == 1


@pytest.mark.parametrize("value", ["-1", "'runs'", "true", "1.5", "[0]"])
def test_task_seed_is_an_int_or_run(value):
    with pytest.raises(ValueError, match=r'\[task\] seed must be an int >= 0 or "run"'):
        tiny(f"task.seed={value}")


def test_a_fresh_clone_with_committed_results_trains_nothing(sweep, tmp_path, monkeypatch):
    root, experiment, docs, rows, _ = sweep
    monkeypatch.setattr(compare_module, "run_one", never)
    again = compare(experiment, tmp_path / "fresh", isolate=False, progress=False, results_dir=docs)
    assert again == rows
    assert not (tmp_path / "fresh" / "runs").exists()
    assert (tmp_path / "fresh" / "report.md").exists()  # the leaderboard is still written from the record


def test_a_changed_config_trains_the_stale_run_again(sweep, tmp_path, monkeypatch, capsys):
    root, experiment, docs, rows, _ = sweep
    copy = tmp_path / "docs"
    shutil.copytree(docs, copy)
    real, trained = compare_module.run_one, []
    monkeypatch.setattr(compare_module, "run_one", lambda *a, **k: (trained.append(a[1:3]), real(*a, **k))[1])
    changed = tiny("mixers=[{label='relation', name='relation', model={dim=8}}]")
    new = compare(changed, tmp_path / "out", isolate=False, progress=False, results_dir=copy)
    assert trained == [("relation", 0)]  # the baseline's config is unchanged: not trained again
    out = capsys.readouterr().out
    assert "stale: relation/seed0" in out and "model.dim: 16 -> 8" in out
    table = read_csv(copy / f"{experiment.name}.csv")[1]
    assert [(r["label"], r["seed"]) for r in table] == [("relation", "0"), ("mlp", "0")]  # replaced in place
    assert table[0]["params"] == str(new[0]["params"]) != str(rows[0]["params"])
    changed_config = run_config(changed, changed.runs("classification")[0], changed.threads())
    assert table[0][HASH_COLUMN] == config_hash(changed_config)
    assert table[1] == read_csv(docs / f"{experiment.name}.csv")[1][1]


def test_rows_without_a_hash_are_stale(sweep, tmp_path):
    root, experiment, docs, _, _ = sweep
    record = ResultsDir(docs, experiment.name)
    row = {**record.rows()[("mlp", 0)], HASH_COLUMN: ""}
    config = run_config(experiment, experiment.runs("classification")[1], experiment.threads())
    assert "no config_hash" in record.stale_reason(row, config)
    assert record.stale_reason(record.rows()[("mlp", 0)], config) is None


def test_rows_are_written_atomically_and_keep_other_rows(tmp_path, monkeypatch):
    path = tmp_path / "x.csv"
    upsert_rows(path, ["label", "seed", "value"], [{"label": "a", "seed": 0, "value": 1},
                                                    {"label": "b", "seed": 0, "value": 2}])
    upsert_rows(path, ["label", "seed", "value", "new"], [{"label": "a", "seed": 0, "value": 3, "new": "y"},
                                                           {"label": "c", "seed": 1, "value": 4}])
    header, rows = read_csv(path)
    assert header == ["label", "seed", "value", "new"]
    assert [(r["label"], r["value"], r["new"]) for r in rows] == [("a", "3", "y"), ("b", "2", ""), ("c", "4", "")]
    before = path.read_bytes()

    def broken(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(files_module.os, "replace", broken)  # results writes through files.atomic_write_text
    with pytest.raises(OSError, match="disk full"):
        upsert_rows(path, ["label", "seed", "value"], [{"label": "b", "seed": 0, "value": 9}])
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["x.csv"]


def test_status_names_done_partial_and_remaining(sweep, tmp_path, capsys):
    root, experiment, docs, _, _ = sweep
    more = tiny("seeds=[0, 1]")
    out = tmp_path / "out"
    # relation seed 1 killed after its checkpoint at step 3
    from tokenmix.training.build import build_model, make_task
    from tokenmix.training.loop import train

    task = make_task(more)
    spec = next(r for r in more.runs(task.info.kind) if r.label == "relation" and r.seed == 1)

    def die(step, total, metric):
        if step == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(task, build_model(task, spec), more.train_config(spec, out_dir=str(out / "runs" / "relation" / "seed1"),
                                                               progress=False), on_step=die)
    sets = [x for s in [*TINY, "seeds=[0, 1]"] for x in ("--set", s)]
    assert main(["compare", *sets, "--out", str(out), "--results", str(docs), "--status"]) == 0
    text = capsys.readouterr().out
    lines = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith(("relation", "mlp"))}
    assert lines["relation"][1:4] == ["1/2", "1", "seed1"] and "3/6" in lines["relation"]
    assert lines["mlp"][1:4] == ["1/2", "1", "-"]
    assert "2/4 done, 2 remaining (1 partial); estimated time left" in text
    assert not (out / "runs" / "mlp").exists()  # nothing trained


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "test@example.com")
    _git(repo, "config", "user.name", "test")
    _git(repo, "config", "commit.gpgsign", "false")
    (repo / "README").write_text("x\n")
    _git(repo, "add", "README")
    _git(repo, "commit", "-q", "-m", "start")
    return repo


def test_commit_records_only_the_result_files(sweep, repo, tmp_path, monkeypatch):
    root, experiment, docs, rows, _ = sweep
    (repo / "staged.txt").write_text("someone else's work\n")
    _git(repo, "add", "staged.txt")
    (repo / "untracked.txt").write_text("not ours\n")
    out = tmp_path / "out"
    shutil.copytree(root / "out", out)  # finished runs, recorded into the repository without training
    monkeypatch.setattr(compare_module, "run_one", never)
    monkeypatch.chdir(tmp_path)  # the sweep runs outside the repository (as from a worktree)
    compare(experiment, out, isolate=False, progress=False, results_dir=repo / "docs", commit=True)
    log = _git(repo, "log", "--format=%s").splitlines()
    assert log == [f"{experiment.name}: mlp seed 0 (accuracy {rows[1]['value']})",
                   f"{experiment.name}: relation seed 0 (accuracy {rows[0]['value']})", "start"]
    names = {f"docs/{experiment.name}{s}" for s in (".csv", "-history.csv", "-configs.json", "-chance.csv")}
    assert set(_git(repo, "show", "--name-only", "--format=", "HEAD~1").split()) == names
    assert set(_git(repo, "show", "--name-only", "--format=", "HEAD").split()) == names - {
        f"docs/{experiment.name}-chance.csv"}
    status = _git(repo, "status", "--porcelain").splitlines()
    assert sorted(status) == ["?? untracked.txt", "A  staged.txt"]  # left as they were
    monkeypatch.setattr(compare_module, "run_one", never)
    compare(experiment, tmp_path / "fresh", isolate=False, progress=False, results_dir=repo / "docs", commit=True)
    assert len(_git(repo, "log", "--format=%s").splitlines()) == 3  # nothing new to commit


def test_a_held_index_lock_is_waited_for_then_warned_about(repo, capsys):
    path = repo / "docs" / "r.csv"
    path.parent.mkdir()
    path.write_text("a\n1\n")
    (repo / ".git" / "index.lock").write_text("")
    assert not git_commit([path], "r", attempts=2, pause=0.01)
    assert "index.lock" in capsys.readouterr().err
    (repo / ".git" / "index.lock").unlink()
    assert git_commit([path], "r", attempts=2, pause=0.01)
    assert _git(repo, "log", "-1", "--format=%s").strip() == "r"
    assert not git_commit([Path("/") / "nonexistent-dir-xyz" / "r.csv"], "r", attempts=1)  # a warning, no raise


def test_commit_needs_results(capsys):
    with pytest.raises(SystemExit, match="--commit needs --results"):
        main(["compare", "--commit", "--dry-run"])


def test_collect_results_writes_the_same_record(sweep, tmp_path):
    import importlib.util

    root, experiment, docs, _, _ = sweep
    spec = importlib.util.spec_from_file_location("collect_results", Path(__file__).parents[1] / "scripts" /
                                                  "collect_results.py")
    collect_results = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(collect_results)
    collect_results.collect(root / "out", tmp_path, chance=False)
    for suffix in (".csv", "-history.csv"):
        assert read_csv(tmp_path / f"{experiment.name}{suffix}") == read_csv(docs / f"{experiment.name}{suffix}")


def test_status_before_any_run_estimates_the_time_from_recorded_runs(tmp_path, monkeypatch, capsys):
    import tokenmix.training.status as status

    monkeypatch.setattr(status, "RECORD_DIR", tmp_path / "record")  # not this checkout's docs/reproduction
    command = ["compare", *[x for s in TINY for x in ("--set", s)], "--out", str(tmp_path / "out"), "--status",
               "--jobs", "2"]
    assert main(command) == 0
    assert "time left unknown (no finished run yet, and no recorded one to go by)" in capsys.readouterr().out
    (tmp_path / "record").mkdir()
    (tmp_path / "record" / "mqar.csv").write_text("label,seed,steps,wall_s\nrelation,0,6,600\nmlp,0,12,480\n")
    assert main(command) == 0
    text = capsys.readouterr().out
    # relation 600 s, mlp half of its 12-step row's 480 s (6 steps planned): 840 s over 2 jobs
    assert ("0/2 done, 2 remaining (0 partial); estimated time left 7 min 0 s at --jobs 2 (from the training wall "
            f"time of 2 recorded runs in {tmp_path / 'record' / 'mqar.csv'})") in text


def test_status_of_a_new_experiment_borrows_from_comparable_records(tmp_path, monkeypatch, capsys):
    """No row of its own: a label's time left is the time per step of other experiments' runs with the same task,
    parameter count and threads, times its planned steps; a label with no such run shows ? and is not counted."""
    import tokenmix.training.status as status
    from tokenmix.training.build import plan_task
    from tokenmix.training.sweep import plan

    monkeypatch.setattr(status, "RECORD_DIR", tmp_path / "record")
    experiment = tiny()
    params = {p.spec.label: p.params for p in plan(experiment, plan_task(experiment))[1]}
    assert params["relation"] != params["mlp"]
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.csv").write_text(
        "task,label,seed,params,steps,wall_s,threads\n"
        f"recall,x,0,{params['relation']},12,1200,{experiment.threads(2)}\n"
        f"recall,x,1,{params['mlp']},12,1200,{experiment.threads(2) + 1}\n")  # other threads: not comparable
    command = ["compare", *[x for s in TINY for x in ("--set", s)], "--out", str(tmp_path / "out"), "--results",
               str(tmp_path / "docs"), "--status", "--jobs", "2"]
    assert main(command) == 0
    text = capsys.readouterr().out
    assert [line.split()[-1] for line in text.splitlines() if line.startswith(("relation ", "mlp "))] == ["s", "?"]
    assert "relation  0/1   1          -        10 min 0 s" in text  # 6 planned steps at 100 s a step
    assert ("estimated time left 5 min 0 s at --jobs 2 (from the time per step of 1 recorded runs of other "
            f"experiments in {tmp_path / 'docs'} with the same task, parameter count and threads; the labels marked "
            "? are not counted)") in text


# -- a run another experiment recorded with the same config is reused ------------------------------------------
TWIN = ("name='twin'", "mixers=[{label='rel', name='relation'}]")  # relation under another label and name


def _twin_docs(sweep, tmp_path) -> Path:
    docs = tmp_path / "docs"
    shutil.copytree(sweep[2], docs)
    return docs


def test_a_run_recorded_by_another_experiment_is_reused_not_trained(sweep, tmp_path, monkeypatch, capsys):
    root, experiment, source, rows, _ = sweep
    docs = _twin_docs(sweep, tmp_path)
    # rows of a pinned sweep, as `tokenmix compare` records them (this test's sweep ran in its own process, whose
    # numerics it recorded); a sweep reuses only rows of the numerics its runs will use
    header, recorded = read_csv(docs / f"{experiment.name}.csv")
    write_csv(docs / f"{experiment.name}.csv", header, [{**r, "numerics": PINNED} for r in recorded])
    monkeypatch.setattr(compare_module, "current_numerics", lambda: PINNED)
    twin = tiny(*TWIN)
    assert main(["compare", *[x for s in (*TINY, *TWIN) for x in ("--set", s)], "--out", str(tmp_path / "out"),
                 "--results", str(docs), "--status"]) == 0
    status = capsys.readouterr().out
    assert f"rel/seed0: {experiment.name} relation seed 0" in status
    assert f"mlp/seed0: {experiment.name} mlp seed 0" in status
    assert "0/2 done, 2 remaining (0 partial); no training left (the remaining runs are recorded by another" in status
    # the dry run counts no time for them and says why
    assert main(["compare", *[x for s in (*TINY, *TWIN) for x in ("--set", s)], "--out", str(tmp_path / "out"),
                 "--results", str(docs), "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert "estimated time: none (every run is recorded already)" in dry
    assert f"2 runs are recorded by {experiment.name} with the same config: reused, not trained again" in dry
    monkeypatch.setattr(compare_module, "run_one", never)
    new = compare(twin, tmp_path / "out", isolate=False, progress=False, results_dir=docs)
    assert f"reused: rel/seed0 is the run recorded as {experiment.name} relation seed 0" in capsys.readouterr().out
    assert [(r["experiment"], r["label"]) for r in new] == [("twin", "rel"), ("twin", "mlp")]
    ours, theirs = read_csv(docs / "twin.csv")[1], read_csv(docs / f"{experiment.name}.csv")[1]
    for mine, other in zip(ours, theirs):  # the same run: every column but its name and label
        assert {k: v for k, v in mine.items() if k not in ("experiment", "label")} == \
               {k: v for k, v in other.items() if k not in ("experiment", "label")}
    history = read_csv(docs / "twin-history.csv")[1]
    assert [h["label"] for h in history] == ["rel", "rel", "mlp", "mlp"]
    assert [{**h, "label": ""} for h in history] == [{**h, "label": ""} for h in read_csv(
        source / f"{experiment.name}-history.csv")[1]]
    assert set(json.loads((docs / "twin-configs.json").read_text())) == {r[HASH_COLUMN] for r in theirs}
    again = compare(twin, tmp_path / "fresh", isolate=False, progress=False, results_dir=docs)
    assert again == new and "reused" not in capsys.readouterr().out  # now its own rows


@pytest.mark.parametrize("why", ["no-reuse", "target", "stale", "stale here", "other config", "other numerics"])
def test_a_run_is_trained_when_its_twin_may_not_stand_for_it(sweep, tmp_path, monkeypatch, why):
    root, experiment, source, rows, _ = sweep
    docs = _twin_docs(sweep, tmp_path)
    sets = {"target": ("report.target=0.5",), "other config": ("train.lr=0.01",)}.get(why, ())
    twin = tiny(*TWIN, *sets)
    if why.startswith("stale"):  # --verify found that the code of the recorded rows gives other results (there or here)
        code = read_csv(source / f"{experiment.name}.csv")[1][0]["code"]
        ResultsDir(docs, experiment.name if why == "stale" else "twin").add_verifications([{
            "label": "relation", "seed": 0, "config_hash": "x", "row_code": code, "rerun_code": "other",
            "rerun_commit": "c", "rerun_clean": "true", "torch": "t", "threads": 1, "cpu": "c", "reproduced": "false",
            "difference": "value", "date": "2026-11-29"}])
    if why == "other numerics":  # the recorded runs computed with the host's own kernels: a pinned sweep's rows
        header, recorded = read_csv(docs / f"{experiment.name}.csv")  # would mix numerics
        assert "" not in {r["numerics"] for r in recorded}
        write_csv(docs / f"{experiment.name}.csv", header, [{**r, "numerics": ""} for r in recorded])
    trained = []

    def first_run(data, label, *args, **kwargs):
        trained.append(label)
        raise KeyboardInterrupt  # it would train: that is all this test needs to know

    monkeypatch.setattr(compare_module, "run_one", first_run)
    with pytest.raises(KeyboardInterrupt):
        compare(twin, tmp_path / "out", isolate=False, progress=False, results_dir=docs, reuse=why != "no-reuse")
    assert trained == ["rel"]
    assert not (docs / "twin.csv").exists()


def test_the_report_names_rows_another_experiment_records_too(sweep, tmp_path, monkeypatch):
    """Both records name the other's run with the same config hash (never their own rows); a row whose hash
    differs is not named."""
    from tokenmix.report.measures import ExperimentData
    from tokenmix.report.notes import shared_note

    experiment, docs = sweep[1], _twin_docs(sweep, tmp_path)
    assert ResultsDir(docs, experiment.name).shared() == []
    monkeypatch.setattr(compare_module, "run_one", never)
    compare(tiny(*TWIN), tmp_path / "out", isolate=False, progress=False, results_dir=docs)
    assert ResultsDir(docs, "twin").shared() == [(("rel", 0), experiment.name, "relation"),
                                                 (("mlp", 0), experiment.name, "mlp")]
    assert sorted(ResultsDir(docs, experiment.name).shared()) == [(("mlp", 0), "twin", "mlp"),
                                                                  (("relation", 0), "twin", "rel")]
    found = ExperimentData("twin", [], None, None, shared=ResultsDir(docs, "twin").shared())
    assert shared_note(found).startswith("**2 recorded rows are runs that another experiment records too**")
    assert shared_note(found).endswith(f"rel seed 0 = `{experiment.name}` relation; mlp seed 0 = "
                                       f"`{experiment.name}` mlp.")
    text = (docs / "twin.csv").read_text()
    mlp_hash = next(r[HASH_COLUMN] for r in read_csv(docs / "twin.csv")[1] if r["label"] == "mlp")
    (docs / "twin.csv").write_text(text.replace(mlp_hash, "0" * len(mlp_hash)))
    assert ResultsDir(docs, "twin").shared() == [(("rel", 0), experiment.name, "relation")]
    assert shared_note(ExperimentData("twin", [], None, None, shared=ResultsDir(docs, "twin").shared())).startswith(
        "**1 recorded row is a run that another experiment records too**")
    # the same config with other results (another code's run) is not the same run
    header, rows = read_csv(docs / "twin.csv")
    changed = [{**r, "value": "0.123456" if r["label"] == "rel" else r["value"]} for r in rows]
    write_csv(docs / "twin.csv", header, changed)
    assert ResultsDir(docs, "twin").shared() == []
    (diverging,) = ResultsDir(docs, "twin").diverging()
    assert diverging[:3] == (("rel", 0), experiment.name, "relation") and diverging[3].startswith("value 0.123456 vs ")
    from tokenmix.report.notes import diverging_note

    note = diverging_note(ExperimentData("twin", [], None, None, diverging=[diverging]))
    assert note.startswith("**1 recorded row has the config of another experiment's run but other results**")
    assert f"rel seed 0 vs `{experiment.name}` relation (value 0.123456 vs " in note


def test_commit_says_a_row_was_reused(sweep, repo, tmp_path, monkeypatch):
    shutil.copytree(sweep[2], repo / "docs")
    _git(repo, "add", "docs")
    _git(repo, "commit", "-q", "-m", "record")
    monkeypatch.setattr(compare_module, "run_one", never)
    compare(tiny(*TWIN), tmp_path / "out", isolate=False, progress=False, results_dir=repo / "docs", commit=True)
    first = _git(repo, "log", "-2", "--format=%s").splitlines()[-1]
    assert first.startswith("twin: rel seed 0 (accuracy ") and first.endswith(
        f"; the run of {sweep[1].name} relation seed 0, same config "
        f"{read_csv(sweep[2] / f'{sweep[1].name}.csv')[1][0][HASH_COLUMN]}: reused, not trained again)")
