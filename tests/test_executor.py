"""Sweeps as cluster jobs (``tokenmix compare --executor submitit``, tokenmix.training.executor): the same rows as a
local sweep, failed jobs named with their logs, a clear error without the ``cluster`` extra."""

from __future__ import annotations

import json
import sys

import pytest

import tokenmix.training.executor as executor_module
from tokenmix.cli import main
from tokenmix.training.executor import RunJob, RunsFailed, parse_cluster_options
from tokenmix.training.build import make_task
from tokenmix.training.experiment import load_experiment
from tokenmix.training.results import chance_row, read_csv, typed
from tokenmix.training.sweep import compare

TINY = ["task.name='recall'", "model.dim=8", "model.depth=1", "train.max_steps=20", "train.eval_every=10",
        "train.batch_size=16", "seeds=[0, 1]", "mixers=['relation']", "report.plots=[]", "train.threads=1"]
MEASURED = {"wall_s", "time_per_epoch_s", "time_to_target_s", "tokens_per_s", "peak_mem_mb"}


def tiny(*sets: str):
    return load_experiment(None, [*TINY, *sets])


def _rows(path, drop: set[str]) -> list[dict[str, str]]:
    header, rows = read_csv(path)
    return sorted(({k: v for k, v in r.items() if k not in drop} for r in rows),
                  key=lambda r: (r["label"], r["seed"], r.get("step", "")))


def test_a_sweep_through_submitit_records_the_rows_a_local_sweep_does(tmp_path):
    pytest.importorskip("submitit")
    experiment = tiny()
    local = compare(experiment, tmp_path / "local", isolate=False, progress=False, results_dir=tmp_path / "a")
    jobs = compare(experiment, tmp_path / "jobs", progress=False, results_dir=tmp_path / "b", executor="submitit",
                   cluster_options={"cluster": "local", "slurm_array_parallelism": 2})
    assert len(local) == 4
    assert [{k: v for k, v in r.items() if k not in MEASURED} for r in jobs] == \
        [{k: v for k, v in r.items() if k not in MEASURED} for r in local]
    name = experiment.name
    assert _rows(tmp_path / "b" / f"{name}.csv", MEASURED) == _rows(tmp_path / "a" / f"{name}.csv", MEASURED)
    assert _rows(tmp_path / "b" / f"{name}-history.csv", {"wall_s"}) == \
        _rows(tmp_path / "a" / f"{name}-history.csv", {"wall_s"})
    for suffix in ("-configs.json", "-chance.csv"):
        assert (tmp_path / "b" / f"{name}{suffix}").read_text() == (tmp_path / "a" / f"{name}{suffix}").read_text()
    assert _rows(tmp_path / "jobs" / "results.csv", MEASURED) == _rows(tmp_path / "local" / "results.csv", MEASURED)
    assert list((tmp_path / "jobs" / "submitit").glob("*_log.err"))  # submitit's logs, one pair per job
    # a finished sweep submits nothing again
    assert compare(experiment, tmp_path / "jobs", progress=False, results_dir=tmp_path / "b", executor="submitit",
                   cluster_options={"cluster": "local"}) == jobs


def test_a_requeued_job_is_the_same_job(tmp_path):
    pytest.importorskip("submitit")
    job = RunJob(tiny().to_dict(), str(tmp_path), 1, None)
    again = job.checkpoint("relation", 1)  # what submitit requeues on preemption or timeout
    assert again.function is job and again.args == ("relation", 1)


def test_failed_jobs_are_named_with_their_logs(tmp_path):
    pytest.importorskip("submitit")
    experiment = tiny("seeds=[0]")
    (tmp_path / "runs").write_text("a file where the run folders go: every job fails on its node")
    runs = [r for r in experiment.runs("classification") if r.label == "relation"]
    with pytest.raises(RunsFailed) as error:
        executor_module.submit_runs(runs, experiment.to_dict(), tmp_path, 1, options={"cluster": "local"},
                                    progress=False)
    message = str(error.value)
    assert message.startswith("1 of 1 jobs failed") and "relation/seed0: job " in message
    assert "NotADirectoryError" in message and f"log {tmp_path / 'submitit'}" in message


def test_without_submitit_the_error_says_what_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "submitit", None)  # import submitit raises ImportError
    with pytest.raises(SystemExit, match=r"pip install 'tokenmix-lab\[cluster\]'"):
        main(["compare", *[x for s in TINY for x in ("--set", s)], "--out", str(tmp_path / "out"),
              "--executor", "submitit"])
    with pytest.raises(SystemExit, match="need --executor submitit"):
        main(["compare", *[x for s in TINY for x in ("--set", s)], "--out", str(tmp_path / "out"),
              "--cluster", "cluster=local"])


def test_cluster_options_parse_as_toml_values_or_text():
    assert parse_cluster_options(["cluster=local", "timeout_min=60", "slurm_partition=gpu", "mem_gb=7.5",
                                  "slurm_additional_parameters={account = \"x\"}"]) == {
        "cluster": "local", "timeout_min": 60, "slurm_partition": "gpu", "mem_gb": 7.5,
        "slurm_additional_parameters": {"account": "x"}}
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        parse_cluster_options(["slurm_partition"])


def test_a_job_trains_on_its_seeds_data_and_records_seed_zeros_chance(tmp_path):
    """``[task] seed = "run"``: the seed-1 job draws its data from seed 1 (its config says so), while the chance
    file, written once by whichever job finishes first, describes data seed 0's split as a local sweep's does."""
    experiment = tiny("task.seed='run'", "train.max_steps=2", "train.eval_every=1")
    RunJob(experiment.to_dict(), str(tmp_path / "out"), 1, str(tmp_path / "docs"))("relation", 1)
    seed_zero, seed_one = chance_row(make_task(experiment)), chance_row(make_task(experiment, 1))
    assert seed_zero != seed_one  # recall's test splits of seeds 0 and 1 differ in their majority share
    header, rows = read_csv(tmp_path / "docs" / f"{experiment.name}-chance.csv")
    assert [typed(r) for r in rows] == [seed_zero]
    (config,) = json.loads((tmp_path / "docs" / f"{experiment.name}-configs.json").read_text()).values()
    assert config["task"]["seed"] == 1 and config["seed"] == 1
