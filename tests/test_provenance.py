"""Rows you can trust: provenance on every row, checked results files, ``compare --verify`` and rows the report
will not pool (tokenmix.training.provenance, results, verify; tokenmix.report.document.not_pooled)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import tokenmix.training.sweep as sweep_module
from tokenmix.training.experiment import load_experiment
from tokenmix.training.provenance import PROVENANCE_COLUMNS, code_version, code_version_at, provenance
from tokenmix.training.results import ResultsDir, ResultsError, config_hash, read_csv, run_config, write_csv
from tokenmix.training.sweep import compare
from tokenmix.training.verify import choose, verify, verify_plan

TINY = ["task.name='recall'", "model.dim=16", "model.depth=1", "train.max_steps=6", "train.eval_every=3",
        "train.batch_size=16", "seeds=[0, 1]", "mixers=['relation']", "report.plots=[]", "train.threads=1"]


def tiny(*sets: str):
    return load_experiment(None, [*TINY, *sets])


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """relation and the mlp baseline, seeds 0 and 1, recorded in docs/."""
    root = tmp_path_factory.mktemp("prov")
    experiment = tiny()
    compare(experiment, root / "out", isolate=False, progress=False, results_dir=root / "docs")
    return root, experiment


def copy_docs(recorded, tmp_path: Path) -> Path:
    root, _ = recorded
    shutil.copytree(root / "docs", tmp_path / "docs")
    return tmp_path / "docs"


# -- provenance ------------------------------------------------------------------------------------------------
def test_every_recorded_row_says_what_produced_it(recorded):
    root, experiment = recorded
    header, rows = read_csv(root / "docs" / f"{experiment.name}.csv")
    assert header[-len(PROVENANCE_COLUMNS):] == PROVENANCE_COLUMNS
    import torch

    for row in rows:
        assert row["code"] == code_version() and len(row["code"]) == 12
        assert row["threads"] == "1" and row["torch"] == torch.__version__ and row["cpu"]
    assert read_csv(root / "out" / "results.csv")[0][-len(PROVENANCE_COLUMNS):] == PROVENANCE_COLUMNS


def test_threads_identify_a_run():
    experiment = tiny()
    run = experiment.runs("classification")[0]
    assert config_hash(run_config(experiment, run, 1)) != config_hash(run_config(experiment, run, 2))
    assert tiny().threads(jobs=2) == 1  # fixed by the file, whatever --jobs is
    free = load_experiment(None, [t for t in TINY if "threads" not in t])
    import os

    assert free.threads(jobs=1) == max(1, os.cpu_count() or 1) and free.threads(jobs=64) == 1


def test_code_version_of_a_commit_is_that_of_its_files(tmp_path):
    package = tmp_path / "src" / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "a.py").write_text("x = 1\n")
    (package / "sub" / "b.py").write_text("y = 2\n")
    (package / "data.txt").write_text("not code\n")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "one"], check=True)
    assert code_version_at(tmp_path, "HEAD", "src/pkg") == code_version(package)
    (package / "a.py").write_text("x = 3\n")
    assert code_version(package) != code_version.__wrapped__(package)  # cached: read once per process
    assert code_version.__wrapped__(package) != code_version_at(tmp_path, "HEAD", "src/pkg")
    assert code_version_at(tmp_path, "no-such-commit", "src/pkg") is None


def test_provenance_outside_a_checkout_still_names_the_code():
    got = provenance(3)
    assert set(got) == set(PROVENANCE_COLUMNS) and got["threads"] == 3 and got["code"] == code_version()
    assert got["clean"] in ("true", "false") and len(got["commit"]) == 12  # this checkout


# -- checked results files -------------------------------------------------------------------------------------
def test_a_malformed_line_names_file_and_line(recorded, tmp_path):
    docs = copy_docs(recorded, tmp_path)
    path = docs / f"{recorded[1].name}.csv"
    path.write_text(path.read_text() + "garbage,line\n")
    with pytest.raises(ResultsError, match=rf"{path.name}, line 6: 2 cells where the header has"):
        ResultsDir(docs, recorded[1].name).rows()
    header, rows = read_csv(recorded[0] / "docs" / path.name)
    write_csv(path, header, rows[:1] + [{**rows[1], "seed": "x"}])
    with pytest.raises(ResultsError, match=r"line 3: seed is 'x', not a number"):
        ResultsDir(docs, recorded[1].name).rows()


def test_duplicated_and_conflicting_rows_are_refused_naming_both_lines(recorded, tmp_path):
    docs = copy_docs(recorded, tmp_path)
    record = ResultsDir(docs, recorded[1].name)
    header, rows = read_csv(record.csv)
    write_csv(record.csv, header, rows + [rows[0]])
    with pytest.raises(ResultsError, match=r"lines 2 and 6: the same row twice \(label relation, seed 0\)"):
        record.rows()
    write_csv(record.csv, header, rows + [{**rows[0], "value": "0.9"}])
    with pytest.raises(ResultsError, match=r"lines 2 and 6: two different rows for label relation, seed 0 "
                                           r"\(value '.*' vs '0.9'\)"):
        record.rows()
    experiment = recorded[1]
    run = experiment.runs("classification")[0]
    with pytest.raises(ResultsError):  # nothing is added to a damaged file
        record.save_run(rows[0], list(header), [], run_config(experiment, run, 1))
    history = record.history
    h_header, h_rows = read_csv(history)
    write_csv(history, h_header, h_rows + [h_rows[0]])
    with pytest.raises(ResultsError, match="history.csv, lines 2 and"):
        record.histories()


def test_cli_names_a_damaged_results_file(recorded, tmp_path, capsys):
    from tokenmix.cli import main

    docs = copy_docs(recorded, tmp_path)
    path = docs / f"{recorded[1].name}.csv"
    path.write_text(path.read_text() + "1,2,3\n")
    args = ["compare", *sum((["--set", s] for s in TINY), []), "--results", str(docs), "--out", str(tmp_path / "o")]
    for extra in (["--status"], []):
        with pytest.raises(SystemExit, match=rf"{path.name}, line 6"):
            main(args + extra)


# -- --verify ----------------------------------------------------------------------------------------------
def test_a_column_the_row_was_written_without_is_no_difference():
    from tokenmix.training.results import reproduction_difference

    old = {"value": "0.5", "params": "10", "train_cost": ""}  # written before train_cost existed
    assert reproduction_difference(old, [], {"value": 0.5, "params": 10, "train_cost": 0.42}, []) is None
    assert reproduction_difference(old, [], {"value": 0.51, "params": 10, "train_cost": 0.42}, []) == \
        "value 0.5 -> 0.51"


def test_choose_takes_each_code_version_in_turn_smallest_seed_first():
    rows = [{"seed": s, "code": c} for s, c in [(3, "a"), (1, "a"), (0, "b"), (2, "b"), (5, "c")]]
    assert [(r["code"], r["seed"]) for r in choose(rows, 4)] == [("a", 1), ("b", 0), ("c", 5), ("a", 3)]
    assert len(choose(rows, 10)) == 5


def test_choose_per_code_reaches_every_unchecked_code_with_labels_in_turn():
    from tokenmix.training.verify import choose_per_code

    rows = [{"label": label, "seed": s, "code": c} for label, s, c in
            [("x", 3, "a"), ("y", 1, "a"), ("x", 0, "a"), ("x", 2, "b"), ("y", 0, "b"), ("x", 5, "c")]]
    assert [(r["code"], r["label"], r["seed"]) for r in choose_per_code(rows, 1, set())] == [
        ("a", "x", 0), ("b", "y", 0), ("c", "x", 5)]
    assert [(r["code"], r["label"], r["seed"]) for r in choose_per_code(rows, 2, {"b"})] == [
        ("a", "x", 0), ("a", "y", 1), ("c", "x", 5)]  # checked codes are left out; labels in turn within a code


def test_verify_per_code_skips_the_codes_already_checked(recorded, tmp_path):
    docs = copy_docs(recorded, tmp_path)
    verify(recorded[1], docs, 1, tmp_path / "verify", progress=False)  # checks the one code of the rows
    chosen, _ = verify_plan(recorded[1], docs, 1, per="code")
    assert chosen == []
    with pytest.raises(ValueError, match="verify-per"):
        verify_plan(recorded[1], docs, 1, per="seed")


def test_verify_reproduces_rows_of_the_same_code(recorded, tmp_path):
    docs = copy_docs(recorded, tmp_path)
    added = verify(recorded[1], docs, 1, tmp_path / "verify", progress=False)
    assert [(r["label"], r["seed"], r["reproduced"]) for r in added] == [("relation", 0, "true"), ("mlp", 0, "true")]
    ledger = ResultsDir(docs, recorded[1].name).verifications()
    assert [r["reproduced"] for r in ledger] == ["true", "true"] and ledger[0]["rerun_code"] == code_version()
    assert ResultsDir(docs, recorded[1].name).stale_codes() == {}
    again = verify(recorded[1], docs, 1, tmp_path / "verify", progress=False)  # the rows not rerun yet
    assert [(r["label"], r["seed"], r["reproduced"]) for r in again] == [("relation", 1, "true"), ("mlp", 1, "true")]


def test_each_verification_is_recorded_and_committed_as_it_is_made(recorded, tmp_path, monkeypatch):
    """A verify stopped after its first seed keeps that seed's ledger rows, committed (with --commit)."""
    import tokenmix.training.verify as verify_module

    docs = copy_docs(recorded, tmp_path)
    subprocess.run(["git", "init", "-q", str(docs)], check=True)
    for key, value in (("user.email", "t@t"), ("user.name", "t")):
        subprocess.run(["git", "-C", str(docs), "config", key, value], check=True)
    subprocess.run(["git", "-C", str(docs), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(docs), "commit", "-qm", "rows"], check=True)
    real, calls = verify_module.compare, []

    def stopped_at_the_second_seed(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(verify_module, "compare", stopped_at_the_second_seed)
    with pytest.raises(KeyboardInterrupt):
        verify(recorded[1], docs, 2, tmp_path / "verify", progress=False, commit=True)
    ledger = ResultsDir(docs, recorded[1].name).verifications()
    assert sorted((r["label"], r["seed"]) for r in ledger) == [("mlp", "0"), ("relation", "0")]
    log = subprocess.run(["git", "-C", str(docs), "log", "--format=%s"], capture_output=True, text=True).stdout
    assert log.count("--verify: ") == 2 and "relation seed 0 reproduced" in log
    status = subprocess.run(["git", "-C", str(docs), "status", "--porcelain"], capture_output=True, text=True)
    assert status.stdout.strip() == ""  # the ledger is committed, nothing left over


def test_a_verify_stopped_within_a_seed_keeps_the_reruns_it_finished(recorded, tmp_path, monkeypatch):
    """Every rerun is compared and written as its run finishes, not when its seed's other reruns are done."""
    import tokenmix.training.verify as verify_module

    docs = copy_docs(recorded, tmp_path)
    real = verify_module.compare

    def stopped_after_the_first_run(*args, on_finished, **kwargs):
        def first_then_stop(p, result):
            on_finished(p, result)
            raise KeyboardInterrupt

        return real(*args, on_finished=first_then_stop, **kwargs)

    monkeypatch.setattr(verify_module, "compare", stopped_after_the_first_run)
    with pytest.raises(KeyboardInterrupt):
        verify(recorded[1], docs, 1, tmp_path / "verify", progress=False)
    ledger = ResultsDir(docs, recorded[1].name).verifications()
    assert [(r["label"], r["seed"], r["reproduced"]) for r in ledger] == [("relation", "0", "true")]
    monkeypatch.undo()
    again = verify(recorded[1], docs, 1, tmp_path / "verify", progress=False)  # relation seed 0 is done
    assert [(r["label"], r["seed"]) for r in again] == [("relation", 1), ("mlp", 0)]


def test_a_rerun_that_differs_under_the_same_code_keeps_the_rows_and_the_report_says_so(recorded, tmp_path):
    from tokenmix.report.document import not_pooled
    from tokenmix.report.notes import provenance_note
    from tokenmix.report.sections import Study

    docs = copy_docs(recorded, tmp_path)
    experiment, record = recorded[1], ResultsDir(docs, recorded[1].name)
    header, rows = read_csv(record.csv)
    rows[0]["value"] = "0.123"  # the recorded run "came out otherwise": same code, another host or run
    write_csv(record.csv, header, rows)
    added = verify(experiment, docs, 1, tmp_path / "verify", progress=False)
    relation = next(r for r in added if r["label"] == "relation")
    assert relation["reproduced"] == "false" and relation["row_code"] == relation["rerun_code"] == code_version()
    assert record.stale_codes() == {} and record.rows()[("relation", 0)]["value"] == "0.123"  # kept, not replaced
    study = Study(file="x.toml", experiment=experiment, paper=None, claims=[])
    excluded, _ = not_pooled(study, docs)
    assert excluded == {}
    found = type("Found", (), {"provenance": record.provenance_summary()})()
    line = next(x for x in provenance_note(found) if x.startswith(f"| {code_version()} "))
    assert "**1 differ**, 1 of them under the same code: not deterministic here" in line
    assert "relation seed 0: value 0.123 -> " in line and "1 rerun reproduced it exactly" in line


def test_a_rerun_under_other_code_and_other_numerics_keeps_the_rows(recorded, tmp_path):
    """A row of older code and unrecorded numerics (an unpinned row from before hosts were kept) that a rerun does
    not reproduce may differ by its code or by its host: the cause says so and no row is made stale."""
    from tokenmix.report.document import not_pooled
    from tokenmix.report.sections import Study

    docs = copy_docs(recorded, tmp_path)
    experiment, record = recorded[1], ResultsDir(docs, recorded[1].name)
    header, rows = read_csv(record.csv)
    old = [{**r, "code": "0123456789ab", "numerics": "", "host": ""} if r["label"] == "relation" else r
           for r in rows]
    old[0]["value"] = "0.123"
    write_csv(record.csv, header, old)
    added = verify(experiment, docs, 1, tmp_path / "verify", progress=False)
    relation = next(r for r in added if r["label"] == "relation")
    assert relation["reproduced"] == "false" and relation["cause"] == "code or host"
    assert record.stale_codes() == {} and record.rows()[("relation", 0)]["value"] == "0.123"  # kept
    excluded, _ = not_pooled(Study(file="x.toml", experiment=experiment, paper=None, claims=[]), docs)
    assert excluded == {}
    from tokenmix.report.notes import provenance_note

    found = type("Found", (), {"provenance": record.provenance_summary()})()
    line = next(x for x in provenance_note(found) if x.startswith("| 0123456789ab "))
    assert "**1 differ** (relation seed 0: value 0.123 -> " in line and "; code or host: rows kept)" in line


@pytest.fixture
def watch_training(monkeypatch):
    """A function that, once called, records (label, seed) of every run a sweep in this process trains (it still
    trains them) and returns that list. Called only where needed: a spawned sweep cannot pickle the spy."""
    def start() -> list[tuple[str, int]]:
        runs: list[tuple[str, int]] = []
        real = sweep_module.run_one

        def spy(*args, **kwargs):
            runs.append(args[1:3])
            return real(*args, **kwargs)

        monkeypatch.setattr(sweep_module, "run_one", spy)
        return runs

    return start


def test_rows_of_code_that_gives_other_results_are_stale_replaced_and_not_pooled(recorded, tmp_path, watch_training):
    docs = copy_docs(recorded, tmp_path)
    experiment, record = recorded[1], ResultsDir(docs, recorded[1].name)
    header, rows = read_csv(record.csv)
    # both relation rows "from older code", seed 0's with another result
    old = [{**r, "code": "0123456789ab"} if r["label"] == "relation" else r for r in rows]
    old[0]["value"] = "0.123"
    write_csv(record.csv, header, old)
    added = verify(experiment, docs, 1, tmp_path / "verify", progress=False)
    relation = next(r for r in added if r["label"] == "relation")
    assert relation["reproduced"] == "false" and relation["difference"].startswith("value 0.123 -> ")
    stale = record.stale_codes()
    assert list(stale) == ["0123456789ab"] and "relation seed 0" in stale["0123456789ab"]
    now = record.rows()
    assert now[("relation", 0)]["code"] == code_version()  # the rerun replaced the stale row
    run1 = next(r for r in experiment.runs("classification") if r.label == "relation" and r.seed == 1)
    assert "gives other results" in record.stale_reason(now[("relation", 1)], run_config(experiment, run1, 1))
    # the report pools neither it nor a row of a config the file no longer gives
    from tokenmix.report.document import not_pooled
    from tokenmix.report.sections import Study

    study = Study(file="x.toml", experiment=experiment, paper=None, claims=[])
    excluded, summary = not_pooled(study, docs)
    assert list(excluded) == [("relation", 1)]
    assert {g["code"]: g["rows"] for g in summary} == {code_version(): 3, "0123456789ab": 1}
    changed = tiny("train.lr=0.5")
    excluded, _ = not_pooled(Study(file="x.toml", experiment=changed, paper=None, claims=[]), docs)
    assert set(excluded) == {("relation", 0), ("relation", 1), ("mlp", 0), ("mlp", 1)}
    assert "train.lr" in excluded[("mlp", 0)]
    # and compare --results trains the stale row again, and only it
    trained = watch_training()
    compare(experiment, tmp_path / "again", isolate=False, progress=False, results_dir=docs)
    assert trained == [("relation", 1)]
    assert record.rows()[("relation", 1)]["code"] == code_version() and not_pooled(study, docs)[0] == {}


def test_a_label_whose_own_rerun_reproduced_keeps_its_rows_of_stale_code(recorded, tmp_path, watch_training):
    """A code change that alters one mechanism's arithmetic condemns that mechanism's rows of the old code, not
    those of a label whose own rerun under the new code reproduced a whole run bitwise."""
    docs = copy_docs(recorded, tmp_path)
    experiment, record = recorded[1], ResultsDir(docs, recorded[1].name)
    header, rows = read_csv(record.csv)
    old = [{**r, "code": "0123456789ab"} for r in rows]  # every row "from older code"; relation's seed 0 differs
    old[0]["value"] = "0.123"
    write_csv(record.csv, header, old)
    added = verify(experiment, docs, 1, tmp_path / "verify", progress=False)
    assert [(r["label"], r["reproduced"]) for r in added] == [("relation", "false"), ("mlp", "true")]
    assert list(record.stale_codes()) == ["0123456789ab"]
    now = record.rows()
    assert "gives other results" in record.stale_because("0123456789ab", "relation")
    assert record.stale_because("0123456789ab", "mlp") is None  # cleared by its own rerun
    assert "gives other results" in record.stale_because("0123456789ab")  # no label: the code-wide rule
    assert now[("mlp", 1)]["code"] == "0123456789ab"  # kept under its own code
    # twins: a label here is cleared by this record's ledger too
    mlp1 = now[("mlp", 1)]["config_hash"]
    assert record.twins({mlp1: "mlp"})[mlp1].seed == 1 and record.twins({mlp1: "relation"}) == {}
    assert record.twins([mlp1]) == {}
    from tokenmix.report.document import not_pooled
    from tokenmix.report.sections import Study

    excluded, summary = not_pooled(Study(file="x.toml", experiment=experiment, paper=None, claims=[]), docs)
    assert list(excluded) == [("relation", 1)]
    from tokenmix.report.notes import provenance_note

    found = type("Found", (), {"provenance": summary})()
    line = next(x for x in provenance_note(found) if x.startswith("| 0123456789ab "))
    assert "**1 differ**" in line and "the rows of mlp stand (their own reruns reproduced)" in line
    trained = watch_training()
    compare(experiment, tmp_path / "again", isolate=False, progress=False, results_dir=docs)
    assert trained == [("relation", 1)]


def test_a_label_is_cleared_only_under_the_code_that_found_the_others_stale(recorded, tmp_path):
    """A rerun that reproduced under one newer code says nothing about another newer code that changed more."""
    docs = copy_docs(recorded, tmp_path)
    record = ResultsDir(docs, recorded[1].name)
    line = {"config_hash": "h", "row_code": "old", "rerun_commit": "c", "rerun_clean": "true", "torch": "t",
            "threads": "1", "cpu": "x", "date": "d", "row_numerics": "p", "row_host": "h", "numerics": "p",
            "host": "h"}

    def ledger(*reruns):
        lines = [{**line, "label": label, "seed": seed, "rerun_code": code, "reproduced": ok,
                  "difference": "" if ok == "true" else "value 1 -> 2", "cause": "" if ok == "true" else "code"}
                 for label, seed, code, ok in reruns]
        from tokenmix.training.results import VERIFY_COLUMNS

        write_csv(record.verify, VERIFY_COLUMNS, lines)

    ledger(("a", 0, "y", "true"), ("b", 0, "z", "false"))
    assert "no rerun of a under code z" in record.stale_because("old", "a")
    assert record.stale_because("old", "c") is not None and record.stale_because("new", "a") is None
    ledger(("a", 0, "y", "true"), ("b", 0, "z", "false"), ("a", 1, "z", "true"))
    assert record.stale_because("old", "a") is None and "b seed 0" in record.stale_because("old", "b")
    ledger(("a", 0, "z", "true"), ("a", 1, "z", "false"))  # its own rerun differed on another seed: stale
    assert "a seed 1" in record.stale_because("old", "a")


def test_what_a_rerun_shows_about_one_config_holds_in_every_record_of_the_folder(recorded, tmp_path):
    """Another experiment's rerun of the same config (same config_hash) that did not reproduce makes this record's
    rows of that label and code stale (not the other labels: the code-wide rule stays with the ledger's record),
    and one that reproduced clears the label from this record's own code-wide finding."""
    from tokenmix.training.results import VERIFY_COLUMNS

    docs = copy_docs(recorded, tmp_path)
    record = ResultsDir(docs, recorded[1].name)
    header, rows = read_csv(record.csv)
    write_csv(record.csv, header, [{**r, "code": "old"} for r in rows])
    relation0 = record.rows()[("relation", 0)]["config_hash"]
    line = {"seed": 0, "row_code": "old", "rerun_code": "new", "rerun_commit": "c", "rerun_clean": "true",
            "torch": "t", "threads": "1", "cpu": "x", "date": "d", "row_numerics": "p", "row_host": "h",
            "numerics": "p", "host": "h"}
    differs = {"reproduced": "false", "difference": "value 1 -> 2", "cause": "code"}
    (docs / "other-configs.json").write_text("{}")  # another experiment's record in the folder
    write_csv(docs / "other-verify.csv", VERIFY_COLUMNS,
              [{**line, **differs, "label": "its-own-name", "config_hash": relation0}])
    assert "its-own-name seed 0" in record.stale_because("old", "relation")
    assert record.stale_because("old", "mlp") is None and record.stale_codes() == {}
    assert record.stale_because("older", "relation") is None  # another code's rows: no evidence
    from tokenmix.report.document import not_pooled
    from tokenmix.report.sections import Study

    study = Study(file="x.toml", experiment=recorded[1], paper=None, claims=[])
    assert sorted(not_pooled(study, docs)[0]) == [("relation", 0), ("relation", 1)]
    # this record's own rerun of mlp differed: every label of the code is stale, but for relation if the other
    # record's rerun of its config reproduced under the same newer code
    mlp0 = record.rows()[("mlp", 0)]["config_hash"]
    write_csv(record.verify, VERIFY_COLUMNS, [{**line, **differs, "label": "mlp", "config_hash": mlp0}])
    write_csv(docs / "other-verify.csv", VERIFY_COLUMNS,
              [{**line, "reproduced": "true", "difference": "", "cause": "", "label": "x", "config_hash": relation0}])
    assert record.stale_because("old", "relation") is None and "mlp seed 0" in record.stale_because("old", "mlp")


def test_a_rerun_speaks_for_its_mechanism_at_every_seed_and_learning_rate(recorded, tmp_path):
    """Another record's rerun of relation's config at another learning rate (a learning-rate stage's row) that
    did not reproduce makes relation's rows of that code stale here; mlp's stay."""
    import json

    from tokenmix.training.results import VERIFY_COLUMNS, mechanism_key

    docs = copy_docs(recorded, tmp_path)
    record = ResultsDir(docs, recorded[1].name)
    header, rows = read_csv(record.csv)
    write_csv(record.csv, header, [{**r, "code": "old"} for r in rows])
    configs = record.known_configs()
    relation = configs[record.rows()[("relation", 1)]["config_hash"]]
    at_other_rate = {**relation, "seed": 0, "train": {**relation["train"], "lr": 0.5}}
    assert mechanism_key(at_other_rate) == mechanism_key(relation) != mechanism_key(
        configs[record.rows()[("mlp", 1)]["config_hash"]])
    digest = config_hash(at_other_rate)
    (docs / "other-configs.json").write_text(json.dumps({digest: at_other_rate}))
    write_csv(docs / "other-verify.csv", VERIFY_COLUMNS, [
        {"label": "relation.lr0.5", "seed": 0, "config_hash": digest, "row_code": "old", "rerun_code": "new",
         "rerun_commit": "c", "rerun_clean": "true", "torch": "t", "threads": "1", "cpu": "x", "reproduced": "false",
         "difference": "value 1 -> 2", "date": "d", "cause": "code", "row_numerics": "p", "row_host": "h",
         "numerics": "p", "host": "h"}])
    assert "relation.lr0.5 seed 0" in record.stale_because("old", "relation")
    assert record.stale_because("old", "mlp") is None


def _save_many(folder: str, writer: int, count: int) -> None:
    record = ResultsDir(folder, "many")
    for i in range(count):
        row = {"experiment": "many", "task": "t", "label": f"w{writer}", "seed": i, "metric": "accuracy",
               "value": 0.5}
        record.save_run(row, ["experiment", "task", "label", "seed", "metric", "value"],
                        [{"step": 1, "epoch": 1.0, "wall_s": 1.0, "train_loss": 1.0, "val_loss": 1.0,
                          "val_metric": 0.5}], {"writer": writer, "seed": i})


def test_writers_in_several_processes_lose_no_row(tmp_path):
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_save_many, args=(str(tmp_path), w, 15)) for w in range(3)]
    for p in writers:
        p.start()
    for p in writers:
        p.join(120)
        assert p.exitcode == 0
    record = ResultsDir(tmp_path, "many")
    assert len(record.rows()) == 45 and sum(len(h) for h in record.histories().values()) == 45
    assert len(record.known_configs()) == 45
    assert sorted(p.name for p in tmp_path.iterdir()) == ["many-configs.json", "many-history.csv", "many.csv"]


def test_a_sweep_pins_the_numerics_of_the_runs_it_spawns_and_records_the_host(tmp_path):
    """Rows trained in spawned processes (every `tokenmix compare`) say they ran pinned, on which host; a pinned
    row is verified by a pinned rerun, which reproduces it."""
    import torch

    from tokenmix.training.numerics import PINNED, host_fingerprint

    if not torch.cpu._is_avx2_supported():
        pytest.skip("the pinned level needs AVX2")
    experiment = tiny("seeds=[0]", "report.baseline=false")
    compare(experiment, tmp_path / "out", jobs=1, progress=False, results_dir=tmp_path / "docs")
    (row,) = ResultsDir(tmp_path / "docs", experiment.name).rows().values()
    assert row["numerics"] == PINNED and row["host"] == host_fingerprint()
    (again,) = verify(experiment, tmp_path / "docs", 1, tmp_path / "verify", progress=False)
    assert again["reproduced"] == "true" and again["numerics"] == PINNED and again["cause"] == ""


def test_repin_trains_again_only_the_rows_not_computed_with_pinned_numerics(recorded, tmp_path, watch_training):
    """Rows trained in-process (unpinned) are kept by a plain `compare --results`, and trained again under pinned
    numerics, replacing them, with `--repin`; a pinned row is not trained again."""
    from tokenmix.training.numerics import PINNED

    docs = copy_docs(recorded, tmp_path)
    experiment = recorded[1]
    record = ResultsDir(docs, experiment.name)
    header, rows = read_csv(record.csv)
    write_csv(record.csv, header, [{**r, "numerics": PINNED} if r["label"] == "mlp" else r for r in rows])
    trained = watch_training()
    compare(experiment, tmp_path / "plain", isolate=False, progress=False, results_dir=docs)
    assert trained == []
    compare(experiment, tmp_path / "repin", isolate=False, progress=False, results_dir=docs, repin=True)
    assert sorted(trained) == [("relation", 0), ("relation", 1)]
