"""Runs that start from another experiment's trained softmax weights (tokenmix.training.warmstart): the teacher's
weights are loaded where they fit, the attention transfer trains the feature maps alone, and what does not fit is
refused by name."""

from __future__ import annotations

import json

import pytest
import torch

from tokenmix.training.build import build_model, make_task
from tokenmix.training.experiment import load_experiment
from tokenmix.training.sweep import compare
from tokenmix.training.warmstart import load_teacher, teacher_file, transfer_stage

TINY = ["task.name='recall'", "model.dim=16", "model.depth=1", "model.heads=2", "train.max_steps=4",
        "train.eval_every=2", "train.batch_size=16", "seeds=[0]", "report.plots=[]", "report.baseline=false"]


def _student(tmp_path, transfer: str = ", transfer={method='hedgehog', steps=3}"):
    entry = (f"{{label='hedgehog', name='linear', options={{feature_map='hedgehog'}}, model={{init_from="
             f"{{experiment='teacher', label='softmax', runs='{tmp_path / 'teacher'}'}}{transfer}}}}}")
    scratch = "{label='scratch', name='linear', options={feature_map='hedgehog'}}"
    return load_experiment(None, [*TINY, "name='student'", f"mixers=[{entry}, {scratch}]"])


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    root = tmp_path_factory.mktemp("warm")
    experiment = load_experiment(None, [*TINY, "name='teacher'", "mixers=['softmax']"])
    compare(experiment, root / "teacher", isolate=False, progress=False)
    return root, root / "teacher" / "runs" / "softmax" / "seed0" / "best.safetensors"


def test_a_run_starts_from_its_teachers_weights_and_records_them(teacher):
    root, weights = teacher
    experiment = _student(root)
    compare(experiment, root / "student", isolate=False, progress=False)
    result = json.loads((root / "student" / "runs" / "hedgehog" / "seed0" / "result.json").read_text())
    assert len(result["provenance"]["teacher_sha256"]) == 64
    scratch = json.loads((root / "student" / "runs" / "scratch" / "seed0" / "result.json").read_text())
    assert "teacher_sha256" not in scratch["provenance"]


def test_the_teachers_weights_fill_everything_but_the_mechanisms_own(teacher):
    root, weights = teacher
    experiment = _student(root, transfer="")
    task = make_task(experiment, 0)
    run = next(r for r in experiment.runs(task.info.kind) if r.label == "hedgehog")
    model = build_model(task, run)
    maps_before = {n: p.detach().clone() for n, p in model.named_parameters() if ".phi_" in n}
    load_teacher(model, weights)
    from safetensors.torch import load_file

    for name, value in load_file(str(weights)).items():
        assert torch.equal(model.state_dict()[name], value), name
    assert maps_before and all(torch.equal(p, maps_before[n]) for n, p in model.named_parameters() if n in maps_before)
    losses = transfer_stage(model, task, {"method": "lolcats", "steps": 5}, batch_size=16, seed=0)
    assert len(losses) == 5
    after = dict(model.named_parameters())
    for name, value in load_file(str(weights)).items():  # the transfer moved the feature maps only
        assert torch.equal(after[name], value), name
    assert any(not torch.equal(after[n], maps_before[n]) for n in maps_before)


def test_what_does_not_fit_is_refused_by_name(teacher, tmp_path):
    root, weights = teacher
    wider = load_experiment(None, [*TINY, "model.dim=32", "name='student'", "mixers=['linear']"])
    task = make_task(wider, 0)
    model = build_model(task, wider.runs(task.info.kind)[0])
    with pytest.raises(ValueError, match="does not fit the model: shapes differ"):
        load_teacher(model, weights)
    with pytest.raises(FileNotFoundError, match="run the teacher first.*teacher.toml"):
        teacher_file({"experiment": "teacher", "label": "softmax", "runs": str(tmp_path)}, 0)
    bad = _student(root, transfer=", transfer={method='distill'}")
    with pytest.raises(ValueError, match="'hedgehog'.*transfer method must be one of"):
        build_model(task, bad.runs(task.info.kind)[0])
    no_teacher = load_experiment(None, [*TINY, "mixers=[{label='x', name='linear', model={transfer={method="
                                                "'hedgehog'}}}]"])
    with pytest.raises(ValueError, match="'x'.*transfer needs init_from"):
        build_model(task, no_teacher.runs(task.info.kind)[0])
    plain = build_model(task, load_experiment(None, [*TINY, "mixers=['linear']"]).runs(task.info.kind)[0])
    with pytest.raises(ValueError, match="no learned feature map"):
        transfer_stage(plain, task, {"method": "hedgehog", "steps": 1}, batch_size=16, seed=0)


def test_skip_leaves_a_head_of_another_shape_at_its_initialisation(teacher):
    root, weights = teacher
    experiment = load_experiment(None, [*TINY, "name='student'", "mixers=['softmax']"])
    task = make_task(experiment, 0)
    model = build_model(task, experiment.runs(task.info.kind)[0])
    model.head = torch.nn.Linear(model.head.in_features, 7)  # another number of classes
    head_before = {n: p.detach().clone() for n, p in model.head.named_parameters()}
    with pytest.raises(ValueError, match="shapes differ: head"):
        load_teacher(model, weights)
    load_teacher(model, weights, skip=["head"])
    from safetensors.torch import load_file

    teacher_state = load_file(str(weights))
    own = model.state_dict()
    assert all(torch.equal(own[k], v) for k, v in teacher_state.items() if not k.startswith("head."))
    assert all(torch.equal(p, head_before[n]) for n, p in model.head.named_parameters())
    with pytest.raises(ValueError, match=r"skip \['heads'\] names no weight"):
        load_teacher(model, weights, skip=["heads"])
    bad = load_experiment(None, [*TINY, "mixers=[{label='x', name='linear', model={init_from={experiment='t', "
                                        "label='softmax', skip='head'}}}]"])
    with pytest.raises(ValueError, match="'x'.*skip must be a list of module paths"):
        build_model(task, bad.runs(task.info.kind)[0])


def test_a_missing_teacher_stops_the_sweep_before_any_run_trains(tmp_path):
    experiment = _student(tmp_path / "nowhere", transfer="")
    with pytest.raises(FileNotFoundError, match="run the teacher first"):
        compare(experiment, tmp_path / "student", isolate=False, progress=False)
    assert not (tmp_path / "student" / "runs").exists()


def test_a_run_failing_in_its_process_stops_the_sweep_with_its_own_error_alone(teacher, tmp_path, monkeypatch):
    import threading

    root, _ = teacher
    thread_errors = []
    monkeypatch.setattr(threading, "excepthook", thread_errors.append)
    entry = (f"{{label='x', name='linear', model={{init_from={{experiment='teacher', label='softmax', "
             f"runs='{root / 'teacher'}', skip=['nothing']}}}}}}")
    experiment = load_experiment(None, [*TINY, "name='student'", f"mixers=[{entry}]"])
    with pytest.raises(ValueError, match=r"skip \['nothing'\] names no weight"):
        compare(experiment, tmp_path / "student", isolate=True, progress=False, jobs=1)
    assert thread_errors == []  # the pool shut down without racing its own thread
