"""``tokenmix data`` (where each task's data are, fetching what is missing) and planning without data: the
dry run states each task's shape from its options, and the stated shapes are those of the real data."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

import tokenmix.data.austen as austen_data
import tokenmix.data.fashion_mnist as fm
import tokenmix.tasks.austen as austen_task
import tokenmix.tasks.fashion as fashion_task
import tokenmix.tasks.lm as lm_task
import tokenmix.tasks.reviews as reviews_task
from test_fashion_mnist import digests, write_split
from tokenmix.cli import main
from tokenmix.tasks import TaskShape, create_task, list_tasks, planned_task, task_class
from tokenmix.tasks.datacheck import data_status
from tokenmix.training.build import make_task, plan_task
from tokenmix.training.experiment import load_experiment
from tokenmix.training.sweep import compare, dry_run_table, plan

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"


@pytest.fixture
def nothing_reachable(tmp_path, monkeypatch) -> Path:
    """No data anywhere and every fetch failing at once; the (empty) data cache, which is returned."""
    monkeypatch.setenv("TOKENMIX_DATA", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(fm, "DEFAULT_ROOT", tmp_path / "no-system-data")
    monkeypatch.setattr(fm, "APT_GET", "tokenmix-test-no-such-apt-get")
    monkeypatch.setattr(fm, "URL", (tmp_path / "no-such-server").as_uri() + "/")
    monkeypatch.setattr(austen_data, "INSTALLED_ROOTS", ())
    monkeypatch.setattr(austen_data, "APT_GET", "tokenmix-test-no-such-apt-get")
    return tmp_path / "cache"


@pytest.fixture
def served(tmp_path, nothing_reachable, monkeypatch) -> Path:
    """A tiny Fashion-MNIST (16 training, 6 test images) published at a file:// URL with its MD5s."""
    for split, n in (("train", 16), ("test", 6)):
        write_split(tmp_path / "server", split, n=n, gz=True)
    monkeypatch.setattr(fm, "URL", (tmp_path / "server").as_uri() + "/")
    monkeypatch.setattr(fm, "MD5", digests(tmp_path / "server", of_content=False))
    return tmp_path / "server"


def _lines(text: str) -> dict[str, list[str]]:
    """Output lines by task name (a task may print two: the fetch, then where its data are)."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        out.setdefault(name, []).append(rest.strip())
    return out


# -- tokenmix data -------------------------------------------------------------------------------------------
def test_reports_each_task_and_fetches_what_is_missing(served, nothing_reachable, monkeypatch, capsys):
    calls = []
    real_download = fm.download
    monkeypatch.setattr(fm, "download", lambda url, *a, **k: calls.append(url) or real_download(url, *a, **k))
    with pytest.raises(SystemExit, match="the data of 1 task"):  # Austen cannot be fetched here
        main(["data", "fashion", "fashion_pixels", "austen", "listops", "imdb"])
    lines = _lines(capsys.readouterr().out)
    fetched = nothing_reachable / "fetched" / "fashion-mnist"
    assert lines["fashion"] == ["missing: fetching Fashion-MNIST ...", f"fetched    {fetched}"]
    assert lines["fashion_pixels"] == [f"found      {fetched}"]  # the same data set: fetched once
    assert sorted(calls) == sorted(fm.URL + name for name in fm.MD5)
    assert lines["austen"][0].startswith("missing: fetching Jane Austen's novels")
    assert lines["austen"][1].startswith("missing") and "apt-get install r-cran-janeaustenr" in lines["austen"][1]
    assert lines["listops"] == ["generated  generated: no data"]
    assert lines["imdb"][0].startswith("external   fetched by the Hugging Face datasets library on first use")
    main(["data", "fashion"])  # now there, and a zero exit
    assert _lines(capsys.readouterr().out)["fashion"] == [f"found      {fetched}"]


def test_no_fetch_only_reports(served, nothing_reachable, capsys):
    with pytest.raises(SystemExit, match="the data of 2 task"):
        main(["data", "--no-fetch", "fashion", "austen", "recall"])
    lines = _lines(capsys.readouterr().out)
    assert lines["fashion"] == ["missing    not fetched now; fetched on first use, or by `tokenmix data` without "
                                "--no-fetch"]
    assert lines["austen"][0].startswith("missing") and lines["recall"] == ["generated  generated: no data"]
    assert not (nothing_reachable / "fetched").exists()


def test_every_task_has_a_line_and_unknown_names_fail_first(nothing_reachable, capsys):
    statuses = list(data_status(fetch=False))
    assert [s.task for s in statuses] == list_tasks()
    states = {s.task: s.state for s in statuses}
    assert states["listops"] == states["recall"] == "generated" and states["glue"] == states["imdb"] == "external"
    assert states["fashion"] == states["austen"] == "missing"
    assert all(task_class(name).data_source is not None for name in list_tasks() if states[name] != "generated")
    with pytest.raises(SystemExit, match="unknown task 'nosuch'"):
        main(["data", "fashion", "nosuch"])
    assert capsys.readouterr().out == ""  # nothing reported (or fetched) before the bad name is found


# -- the dry run needs no data ---------------------------------------------------------------------------------
@pytest.fixture
def loaders_fail(nothing_reachable, monkeypatch) -> None:
    """Loading any data file fails loudly, whatever the route."""
    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("a data file was loaded")

    for module, name in ((fashion_task, "load_fashion_mnist"), (austen_task, "load_austen"), (lm_task, "load_austen"),
                         (reviews_task, "load_reviews"), (fm, "fetch_fashion_mnist")):
        monkeypatch.setattr(module, name, fail)


def test_the_fashion_dry_run_prints_the_plan_of_the_data_without_any(tmp_path, capsys, monkeypatch):
    path = EXPERIMENTS / "001-kerformer-fashion.toml"
    experiment = load_experiment(path)
    write_split(tmp_path / "fm", "train", n=40, gz=True)  # 36 training images: one batch of the preset
    write_split(tmp_path / "fm", "test", n=4, gz=True)
    # The plan with data (28 x 28 images; max_steps fixes the steps): parameters do not depend on the image count.
    with_data = dry_run_table(experiment, *plan(experiment, create_task("fashion", root=tmp_path / "fm",
                                                                        val_size=4, seed=0)))
    monkeypatch.setattr(fm, "DEFAULT_ROOT", tmp_path / "no-system-data")
    monkeypatch.setenv("TOKENMIX_DATA", str(tmp_path / "empty"))
    for module, name in ((fashion_task, "load_fashion_mnist"), (fm, "fetch_fashion_mnist")):
        monkeypatch.setattr(module, name, lambda *a, **k: pytest.fail("a data file was loaded"))
    monkeypatch.setattr(fm, "APT_GET", "tokenmix-test-no-such-apt-get")
    main(["compare", "--config", str(path), "--dry-run"])
    assert capsys.readouterr().out.strip() == with_data.strip()
    assert "55,000" not in with_data and plan_task(experiment).split_sizes() == {"train": 55_000, "val": 5_000,
                                                                                 "test": 10_000}


@pytest.mark.parametrize("name", ["000-time-to-accuracy", "002-vision-fashion", "003-contextualizer-reviews",
                                  "004-extractors-lm", "001-kerformer-listops"])
def test_every_dry_run_plans_without_data(name, loaders_fail, capsys):
    main(["compare", "--config", str(EXPERIMENTS / f"{name}.toml"), "--dry-run"])
    head, _, table = capsys.readouterr().out.partition("\n\n")
    runs = int(re.fullmatch(rf"experiment '{name}': task \w+ \(.*\), (\d+) runs", head).group(1))
    rows = table.split("\n\n")[0].splitlines()[2:]  # below the header and its rule
    assert runs == len(rows) > 0
    assert all(int(row.split()[-2].replace(",", "")) > 0 and int(row.split()[-1]) > 0 for row in rows)  # params, steps


def test_planning_loads_the_data_only_where_they_alone_can_tell(loaders_fail):
    lm = load_experiment(EXPERIMENTS / "004-extractors-lm.toml")  # every window: a size only the text can tell
    assert plan_task(lm).split_sizes() == {"train": None, "val": None, "test": None}  # max_steps: not needed
    with pytest.raises(AssertionError, match="a data file was loaded"):  # counted in epochs: the data are needed
        plan_task(load_experiment(EXPERIMENTS / "004-extractors-lm.toml", ["train.max_steps='none'",
                                                                           "train.epochs=1"]))
    assert planned_task("reviews", seed=1) is None  # another carve: only the data know its vocabulary
    assert planned_task("austen", source="/some/texts") is None and planned_task("lm", vocab_size=9_000) is None
    with pytest.raises(ValueError, match="no option"):
        planned_task("fashion", no_such=1)
    with pytest.raises(ValueError, match="unit must be"):
        planned_task("austen", unit="chars")
    planned = planned_task("recall")
    with pytest.raises(ValueError, match="planned without its data"):
        next(planned.batches("train", 4))


def test_a_real_run_fetches_first(tmp_path, served, nothing_reachable):
    sets = ["task.name='fashion'", "task.train_size=8", "task.val_size=4", "task.test_size=4", "model.dim=8",
            "model.depth=1", "model.heads=1", "train.max_steps=2", "train.eval_every=1", "train.batch_size=4",
            "seeds=[0]", "mixers=['softmax']"]
    experiment = load_experiment(None, sets)
    assert compare(experiment, tmp_path / "dry", dry_run=True, progress=False) == []
    assert not (nothing_reachable / "fetched").exists()  # the dry run fetched nothing
    rows = compare(experiment, tmp_path / "out", isolate=False, progress=False)
    assert sorted(p.name for p in (nothing_reachable / "fetched" / "fashion-mnist").iterdir()) == sorted(fm.MD5)
    assert [r["label"] for r in rows] == ["softmax", "mlp"] and all(r["steps"] == 2 for r in rows)


# -- the stated shapes are the real data's ---------------------------------------------------------------------
def _task_tables() -> list[tuple[str, str | None]]:
    """(experiment file, budget) of each distinct [task] table of the experiment files and their budgets, the
    data seed aside: it draws other examples of the same shape (two ListOps files at LRA's lengths differ only
    in it, and each takes half a minute to generate)."""
    tables = {}
    for path in sorted(EXPERIMENTS.glob("*.toml")):
        for budget in [None, *tomllib.loads(path.read_text()).get("budgets", {})]:
            task = load_experiment(path, budget=budget).task
            tables.setdefault(repr(sorted((k, v) for k, v in task.items() if k != "seed")), (path.name, budget))
    return list(tables.values())


def _available(name: str) -> bool:
    source = task_class(name).data_source
    return source is None or (source.locate is not None and source.locate() is not None)


def _shape_cases() -> list:
    """:func:`_task_tables`, Pathfinder's marked slow: its dashed grey-level pictures take 14-49 ms each to
    draw, minutes for a pilot's 12,000 (the generator's own tests check its shapes on a few)."""
    cases = []
    for file, budget in _task_tables():
        slow = load_experiment(EXPERIMENTS / file, budget=budget).task["name"] == "pathfinder"
        cases.append(pytest.param(file, budget, marks=[pytest.mark.slow] if slow else []))
    return cases


@pytest.mark.parametrize(("file", "budget"), _shape_cases(), ids=lambda v: str(v))
def test_the_stated_shapes_are_those_of_the_data(file, budget, monkeypatch):
    """Where the data are installed: the shape each experiment's task states without them (and so its dry run's
    parameters and steps) is the shape of the task built from them; the tasks' facts about their data hold."""
    experiment = load_experiment(EXPERIMENTS / file, budget=budget)
    if not _available(experiment.task["name"]):
        pytest.skip(f"the data of {experiment.task['name']!r} are not installed")
    monkeypatch.setattr(fm, "fetch_fashion_mnist", lambda *a, **k: pytest.fail("would fetch Fashion-MNIST"))
    stated, real = TaskShape.of(plan_task(experiment)), TaskShape.of(make_task(experiment))
    known = {split: size for split, size in stated.sizes.items() if size is not None}
    assert known == {split: real.sizes[split] for split in known}
    assert {**stated.__dict__, "sizes": None} == {**real.__dict__, "sizes": None}
