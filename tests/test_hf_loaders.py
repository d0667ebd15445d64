"""GLUE / IMDb loaders on fixture files in the official layouts, the "glue" / "imdb" tasks built from them,
and the Hugging Face path's errors (nothing here touches the network)."""

from __future__ import annotations

import math
import sys
import types
from pathlib import Path

import pytest
import torch

from tokenmix.data.hf import GLUE_NAMES, HubUnreachableError, load_glue, load_imdb
from tokenmix.tasks import create_task, task_info

# -- fixtures in the official layouts ---------------------------------------------------------------

SST2_TRAIN = [("a gorgeous , witty , seductive movie . ", 1), ("it 's a bad \"movie\" , really", 0),
              ("unflinchingly bleak and desperate ", 0), ("the best film of the year", 1),
              ("a masterpiece", 1), ("dull , dull , dull", 0), ("i loved every minute", 1),
              ("a waste of time", 0), ("funny and touching", 1), ("boring", 0)]
SST2_DEV = [("it 's a charming and often affecting journey . ", 1), ("unflinchingly bleak", 0)]
COLA_TRAIN = [("gj04", 1, "", "Our friends won't buy this analysis, let alone the next one we propose."),
              ("gj04", 0, "*", "They drank the pub."),
              ("gj04", 1, "", "The more we study verbs, the crazier they get."),
              ("gj04", 0, "*", "Day by day the facts are getting murkier the."),
              ("clc95", 1, "", "Fred watered the plants flat.")]
COLA_DEV = [("gj04", 1, "", "The sailors rode the breeze clear of the rocks."),
            ("gj04", 0, "*", "The more does Bill smoke.")]
MRPC_TRAIN = [(1, "702876", "702977",
               "Amrozi accused his brother , whom he called \" the witness \" , of deliberately distorting "
               "his evidence .",
               "Referring to him as only \" the witness \" , Amrozi accused his brother of deliberately distorting "
               "his evidence ."),
              (0, "2108705", "2108831",
               "Yucaipa owned Dominick 's before selling the chain to Safeway in 1998 for $ 2.5 billion .",
               "Yucaipa bought Dominick 's in 1995 for $ 693 million and sold it to Safeway for $ 1.8 billion "
               "in 1998 ."),
              (1, "1330381", "1330521", "They had published an advertisement on the Internet on June 10 .",
               "On June 10 , the ship 's owners had published an advertisement on the Internet ."),
              (0, "3344667", "3344648", "Around 0335 GMT , Tab shares were up 19 cents .",
               "Tab shares jumped 20 cents , or 4.6 % , to set a record closing high .")]
MRPC_DEV = [(1, "1355540", "1355592", "He said the foodservice pie business doesn 't fit .",
             "The foodservice pie business does not fit our long-term growth strategy .")]
RTE_TRAIN = [("No Weapons of Mass Destruction Found in Iraq Yet.", "Weapons of Mass Destruction Found in Iraq.",
              "not_entailment"),
             ("A place of sorrow, after Pope John Paul II died, became a place of celebration.",
              "Pope Benedict XVI is the new leader of the Roman Catholic Church.", "entailment"),
             ("Herceptin was already approved to treat the sickest breast cancer patients.",
              "Herceptin can be used to treat breast cancer.", "entailment"),
             ("Judie Vivian, chief executive at ProMedica, a medical service company.",
              "The previous name of Ho Chi Minh City was Saigon.", "not_entailment")]
RTE_DEV = [("Dana Reeve, the widow of the actor Christopher Reeve, has died of lung cancer at age 44.",
            "Christopher Reeve had an accident.", "not_entailment")]


def write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


@pytest.fixture(scope="module")
def glue_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("glue_data")
    for name, rows in (("train", SST2_TRAIN), ("dev", SST2_DEV)):
        write(root / "SST-2" / f"{name}.tsv", ["sentence\tlabel", *(f"{s}\t{y}" for s, y in rows)])
        write(root / "SST-2" / "test.tsv", ["index\tsentence", "0\tuncommon sense"])  # unlabelled, ignored
    for name, rows in (("train", COLA_TRAIN), ("dev", COLA_DEV)):  # no header
        write(root / "CoLA" / f"{name}.tsv", [f"{src}\t{y}\t{mark}\t{s}" for src, y, mark, s in rows])
    for name, rows in (("train", MRPC_TRAIN), ("dev", MRPC_DEV)):
        write(root / "MRPC" / f"{name}.tsv", ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String",
                                              *("\t".join(map(str, r)) for r in rows)])
    for name, rows in (("train", RTE_TRAIN), ("dev", RTE_DEV)):
        write(root / "RTE" / f"{name}.tsv", ["index\tsentence1\tsentence2\tlabel",
                                             *(f"{i}\t{a}\t{b}\t{y}" for i, (a, b, y) in enumerate(rows))])
    return root


IMDB_TRAIN = {"pos": {"10_9.txt": "Great film.<br /><br />Loved it!", "2_8.txt": "A fine movie, well acted.",
                      "0_10.txt": "Best movie ever."},
              "neg": {"1_1.txt": "Awful. Just awful.", "11_2.txt": "I want my money back.", "3_3.txt": "Dull plot."}}
IMDB_TEST = {"pos": {"0_7.txt": "Good fun for the family."}, "neg": {"0_2.txt": "Terrible acting."}}


@pytest.fixture(scope="module")
def imdb_root(tmp_path_factory) -> Path:
    parent = tmp_path_factory.mktemp("imdb")
    root = parent / "aclImdb"
    for split, classes in (("train", IMDB_TRAIN), ("test", IMDB_TEST)):
        for cls, files in classes.items():
            for name, text in files.items():
                path = root / split / cls / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
    (root / "train" / "unsup").mkdir()
    (root / "train" / "unsup" / "0_0.txt").write_text("unlabelled", encoding="utf-8")
    (root / "imdb.vocab").write_text("the\n", encoding="utf-8")
    return parent


# -- loaders ----------------------------------------------------------------------------------------

def test_sst2(glue_root):
    data = load_glue("sst2", glue_root)
    assert set(data) == {"train", "validation"}
    assert data["train"] == SST2_TRAIN  # quotes are text, not CSV quoting
    assert data["validation"] == SST2_DEV
    assert load_glue("SST-2", glue_root / "SST-2") == data  # the task folder itself works too


def test_cola_no_header(glue_root):
    data = load_glue("cola", glue_root)
    assert data["train"] == [(s, y) for _, y, _, s in COLA_TRAIN]
    assert data["validation"] == [(s, y) for _, y, _, s in COLA_DEV]


def test_mrpc_pairs(glue_root):
    data = load_glue("mrpc", glue_root)
    assert data["train"] == [((a, b), q) for q, _, _, a, b in MRPC_TRAIN]
    assert data["validation"] == [((a, b), q) for q, _, _, a, b in MRPC_DEV]


def test_rte_labels(glue_root):
    data = load_glue("rte", glue_root)
    assert data["train"] == [((a, b), 0 if y == "entailment" else 1) for a, b, y in RTE_TRAIN]
    assert data["validation"] == [((RTE_DEV[0][0], RTE_DEV[0][1]), 1)]


def test_glue_layout_errors(glue_root, tmp_path):
    with pytest.raises(FileNotFoundError, match="no train.tsv"):
        load_glue("qnli", glue_root)
    write(tmp_path / "SST-2" / "train.tsv", ["sentence\tlabel", "fine\t1", "bad row without label"])
    write(tmp_path / "SST-2" / "dev.tsv", ["sentence\tlabel", "ok\t1"])
    with pytest.raises(ValueError, match=r"train.tsv:3"):
        load_glue("sst2", tmp_path)
    write(tmp_path / "SST-2" / "train.tsv", ["text\tlabel", "fine\t1"])
    with pytest.raises(ValueError, match="sentence"):
        load_glue("sst2", tmp_path)
    write(tmp_path / "SST-2" / "train.tsv", ["sentence\tlabel", "fine\t7"])
    with pytest.raises(ValueError, match="label '7'"):
        load_glue("sst2", tmp_path)


def test_unknown_glue_name():
    with pytest.raises(ValueError, match="supported: cola, sst2, mrpc, qqp, mnli") as err:
        load_glue("squad")
    for name in ("sst2", "cola", "mrpc", "qnli", "rte", "qqp", "mnli"):
        assert name in str(err.value) and name in GLUE_NAMES
    with pytest.raises(ValueError, match="regression"):
        load_glue("stsb")
    with pytest.raises(ValueError, match="supported: .*rte"):
        create_task("glue", subtask="squad")


def test_imdb_layout(imdb_root):
    for where in (imdb_root, imdb_root / "aclImdb"):
        data = load_imdb(where)
        assert set(data) == {"train", "test"}
        # negatives first, each class in file-id order; unsup ignored
        assert data["train"] == [("Awful. Just awful.", 0), ("Dull plot.", 0), ("I want my money back.", 0),
                                 ("Best movie ever.", 1), ("A fine movie, well acted.", 1),
                                 ("Great film.<br /><br />Loved it!", 1)]
        assert data["test"] == [("Terrible acting.", 0), ("Good fun for the family.", 1)]
    with pytest.raises(FileNotFoundError, match="aclImdb"):
        load_imdb(imdb_root / "aclImdb" / "train")


# -- tasks built from the fixtures ------------------------------------------------------------------

def _check_batches(task):
    torch.manual_seed(0)
    model = task.build_model("softmax", dim=16, depth=1)
    batch = next(task.batches("train", 4, shuffle=True, seed=0))
    assert batch.ids.shape == batch.mask.shape and batch.labels.shape[0] == batch.ids.shape[0]
    assert int(batch.ids.max()) < task.vocab_size
    loss = task.loss(model, batch)
    assert math.isfinite(loss.item())
    loss.backward()
    result = task.evaluate(model, "test", batch_size=4)
    assert 0.0 <= result["accuracy"] <= 1.0


@pytest.mark.parametrize("unit", ["words", "bytes"])
def test_glue_task_sst2(glue_root, unit):
    info = task_info("glue")
    assert (info.kind, info.metric) == ("classification", "accuracy")
    assert {"subtask", "data_dir", "unit", "max_len", "vocab_size", "preset", "seed"} <= set(info.options)
    task = create_task("glue", subtask="sst2", data_dir=str(glue_root), unit=unit, val_fraction=0.2)
    sizes = {k: len(v) for k, v in task.splits.items()}
    assert sizes == {"train": 8, "val": 2, "test": len(SST2_DEV)}  # test = the official dev set
    assert task.num_classes == 2
    assert sorted(task.splits["val"].labels.tolist()) == [0, 1]  # stratified carve
    assert task.vocab_size == (257 if unit == "bytes" else len(task.encoder.vocab))
    _check_batches(task)


def test_glue_task_pairs(glue_root):
    task = create_task("glue", subtask="mrpc", data_dir=str(glue_root), val_fraction=0.25, max_len=12)
    assert task.encoder.sep_id == 2 and task.encoder.vocab.tokens[2] == "<sep>"
    for split in task.splits.values():
        for row, n in zip(split.ids, split.lengths):
            assert int(n) <= 12 and (row[:n] == 2).sum() == 1  # one separator, both sides kept
    _check_batches(task)
    btask = create_task("glue", subtask="rte", data_dir=str(glue_root), unit="bytes", val_fraction=0.25)
    assert btask.vocab_size == 258
    assert all(int((r[:n] == 257).sum()) == 1 for r, n in zip(btask.splits["test"].ids, btask.splits["test"].lengths))
    _check_batches(btask)


def test_glue_task_vocab_from_train_only(glue_root):
    task = create_task("glue", subtask="cola", data_dir=str(glue_root), val_fraction=0.2, seed=0)
    vocab = task.encoder.vocab
    assert "sailors" not in vocab  # only in the dev (= test) split
    assert int(task.splits["test"].ids[0, 1]) == 1  # "the sailors ..." -> sailors is <unk>


def test_imdb_task(imdb_root):
    task = create_task("imdb", data_dir=str(imdb_root), val_fraction=0.34)
    assert {k: len(v) for k, v in task.splits.items()} == {"train": 4, "val": 2, "test": 2}
    assert "br" not in task.encoder.vocab  # <br /> tags are spaces
    _check_batches(task)
    again = create_task("imdb", data_dir=str(imdb_root), val_fraction=0.34)
    assert torch.equal(again.splits["train"].ids, task.splits["train"].ids)
    btask = create_task("imdb", data_dir=str(imdb_root), unit="bytes", max_len=8, val_fraction=0.34)
    assert btask.max_len == 8 and btask.vocab_size == 257
    _check_batches(btask)


# -- the Hugging Face path, without the network -------------------------------------------------------

def test_missing_datasets(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` -> ImportError
    with pytest.raises(ImportError, match=r"pip install 'tokenmix-lab\[hf\]'"):
        load_glue("sst2")
    with pytest.raises(ImportError, match=r"pip install 'tokenmix-lab\[hf\]'.*data_dir"):
        load_imdb()
    with pytest.raises(ImportError, match="datasets"):
        create_task("imdb")


def test_hub_unreachable(monkeypatch):
    def load_dataset(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'nyu-mll/glue' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    with pytest.raises(HubUnreachableError, match="hub looks unreachable.*data_dir=") as err:
        load_glue("rte")
    assert "RTE/train.tsv" in str(err.value)
    with pytest.raises(HubUnreachableError, match="aclImdb"):
        load_imdb()


def test_hf_rows_converted(monkeypatch):
    """A stand-in for datasets.load_dataset with the Hugging Face column names and splits."""
    calls = []

    def load_dataset(path, config=None):
        calls.append((path, config))
        if path == "stanfordnlp/imdb":
            split = {"text": ["good", "bad"], "label": [1, 0]}
            return {"train": split, "test": split, "unsupervised": {"text": ["x"], "label": [-1]}}
        split = {"premise": ["p1", "p2"], "hypothesis": ["h1", "h2"], "label": [2, 0], "idx": [0, 1]}
        return {"train": split, "validation_matched": split, "validation_mismatched": split,
                "test_matched": {"premise": ["p"], "hypothesis": ["h"], "label": [-1], "idx": [0]}}

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    mnli = load_glue("mnli")
    assert set(mnli) == {"train", "validation", "validation_mismatched"}
    assert mnli["validation"] == [(("p1", "h1"), 2), (("p2", "h2"), 0)]
    assert load_imdb() == {"train": [("good", 1), ("bad", 0)], "test": [("good", 1), ("bad", 0)]}
    assert calls == [("nyu-mll/glue", "mnli"), ("stanfordnlp/imdb", None)]
