"""GLUE (Wang et al., 2019) classification tasks and IMDb (Maas et al., 2011), from local files in their
official layouts or through Hugging Face ``datasets``.

Both loaders return ``{split: [(text, label), ...]}`` where ``text`` is a string, or a
``(text_a, text_b)`` tuple for sentence-pair tasks.

**Local files** (``data_dir=...``; plain Python, no ``datasets`` needed):

* GLUE: the layout of the official download (``download_glue_data.py``): ``data_dir`` is either the GLUE
  root holding one folder per task (``SST-2/``, ``CoLA/``, ``MRPC/``, ``QQP/``, ``MNLI/``, ``QNLI/``,
  ``RTE/``, ``WNLI/``) or that task's folder itself; ``train.tsv`` and ``dev.tsv`` (MNLI:
  ``dev_matched.tsv``, ``dev_mismatched.tsv``) are read as tab-separated with *no* quoting (quotes are
  text). Columns:

  ========  ==========================================================  ======================
  task      columns read (header names; CoLA has no header)             labels
  ========  ==========================================================  ======================
  CoLA      no header: source, label, original mark, sentence           0/1 (1 = acceptable)
  SST-2     ``sentence``, ``label``                                     0/1 (1 = positive)
  MRPC      ``#1 String``, ``#2 String``, ``Quality``                   0/1 (1 = paraphrase)
  QQP       ``question1``, ``question2``, ``is_duplicate``              0/1 (1 = duplicate)
  MNLI      ``sentence1``, ``sentence2``, ``gold_label``                entailment 0, neutral 1,
                                                                        contradiction 2
  QNLI      ``question``, ``sentence``, ``label``                       entailment 0,
                                                                        not_entailment 1
  RTE       ``sentence1``, ``sentence2``, ``label``                     entailment 0,
                                                                        not_entailment 1
  WNLI      ``sentence1``, ``sentence2``, ``label``                     0/1 (1 = entailment)
  ========  ==========================================================  ======================

  The label ids are those of the Hugging Face ``glue`` configurations, so both sources agree.
* IMDb: the ``aclImdb`` directory of the official archive (``data_dir`` is ``aclImdb`` or its parent):
  ``train/neg/*.txt``, ``train/pos/*.txt``, ``test/neg/*.txt``, ``test/pos/*.txt`` (files
  ``<id>_<rating>.txt``; ``train/unsup`` is ignored). Label 1 = positive; negatives first, each class
  in file-id order (as the Hugging Face copy). The text is returned as is (with its ``<br />`` tags).

**Hugging Face** (``data_dir=None``): ``datasets.load_dataset("nyu-mll/glue", name)`` /
``datasets.load_dataset("stanfordnlp/imdb")``. ``datasets`` is an optional extra
(``pip install 'tokenmix-lab[hf]'``) imported only here, inside the functions. When the hub cannot be reached
(no network) a :class:`HubUnreachableError` says so and how to use local files instead.

Splits: GLUE's test sets have no public labels, so :func:`load_glue` returns ``"train"`` and the
labelled official dev set as ``"validation"`` (MNLI: ``"validation"`` = matched, plus
``"validation_mismatched"``; the name ``"mnli_mismatched"`` returns the mismatched dev set as
``"validation"``). STS-B (regression) is not supported. IMDb: ``"train"`` and ``"test"`` (25,000 each).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from .source import DataSource

__all__ = ["GLUE_SOURCE", "GLUE_TASKS", "GLUE_NAMES", "HF_INSTALL_HINT", "HubUnreachableError", "IMDB_SOURCE",
           "glue_spec", "load_glue", "load_imdb"]

HF_INSTALL_HINT = "pip install 'tokenmix-lab[hf]'  (or: pip install datasets)"

Example = tuple[Union[str, tuple[str, str]], int]


class HubUnreachableError(ConnectionError):
    """``datasets.load_dataset`` failed: the Hugging Face hub is not reachable (or the data is not cached)."""


@dataclass(frozen=True)
class GlueSpec:
    name: str  # our name, e.g. "sst2"
    folder: str  # the official folder, e.g. "SST-2"
    hf_config: str  # the Hugging Face "glue" configuration
    text_columns: tuple[str, ...]  # TSV header names (CoLA: column indices as strings)
    label_column: str
    labels: tuple[str, ...]  # TSV label strings in id order
    hf_text_columns: tuple[str, ...]
    dev_files: tuple[tuple[str, str], ...]  # (our split, TSV file)
    hf_dev_splits: tuple[tuple[str, str], ...]  # (our split, HF split)
    header: bool = True

    @property
    def num_classes(self) -> int:
        return len(self.labels)

    @property
    def pairs(self) -> bool:
        return len(self.text_columns) == 2


_NLI2 = ("entailment", "not_entailment")
_DEV = (("validation", "dev.tsv"),)
_HF_DEV = (("validation", "validation"),)

GLUE_TASKS: dict[str, GlueSpec] = {s.name: s for s in (
    GlueSpec("cola", "CoLA", "cola", ("3",), "1", ("0", "1"), ("sentence",), _DEV, _HF_DEV, header=False),
    GlueSpec("sst2", "SST-2", "sst2", ("sentence",), "label", ("0", "1"), ("sentence",), _DEV, _HF_DEV),
    GlueSpec("mrpc", "MRPC", "mrpc", ("#1 String", "#2 String"), "Quality", ("0", "1"), ("sentence1", "sentence2"),
             _DEV, _HF_DEV),
    GlueSpec("qqp", "QQP", "qqp", ("question1", "question2"), "is_duplicate", ("0", "1"), ("question1", "question2"),
             _DEV, _HF_DEV),
    GlueSpec("mnli", "MNLI", "mnli", ("sentence1", "sentence2"), "gold_label",
             ("entailment", "neutral", "contradiction"), ("premise", "hypothesis"),
             (("validation", "dev_matched.tsv"), ("validation_mismatched", "dev_mismatched.tsv")),
             (("validation", "validation_matched"), ("validation_mismatched", "validation_mismatched"))),
    GlueSpec("mnli_mismatched", "MNLI", "mnli", ("sentence1", "sentence2"), "gold_label",
             ("entailment", "neutral", "contradiction"), ("premise", "hypothesis"),
             (("validation", "dev_mismatched.tsv"),), (("validation", "validation_mismatched"),)),
    GlueSpec("qnli", "QNLI", "qnli", ("question", "sentence"), "label", _NLI2, ("question", "sentence"),
             _DEV, _HF_DEV),
    GlueSpec("rte", "RTE", "rte", ("sentence1", "sentence2"), "label", _NLI2, ("sentence1", "sentence2"),
             _DEV, _HF_DEV),
    GlueSpec("wnli", "WNLI", "wnli", ("sentence1", "sentence2"), "label", ("0", "1"), ("sentence1", "sentence2"),
             _DEV, _HF_DEV),
)}
GLUE_NAMES = tuple(GLUE_TASKS)


def glue_spec(name: str) -> GlueSpec:
    """The spec of a GLUE task; accepts e.g. ``"SST-2"``, ``"sst-2"``, ``"sst2"``. Unknown -> ValueError."""
    key = str(name).lower().replace("-", "").replace("_", "")
    for spec in GLUE_TASKS.values():
        if key in (spec.name.replace("_", ""), spec.folder.lower().replace("-", "")):
            return spec
    extra = " (STS-B is a regression task)" if key == "stsb" else ""
    raise ValueError(f"unknown GLUE task {name!r}{extra}; supported: {', '.join(GLUE_NAMES)}")


# -- Hugging Face ---------------------------------------------------------------------------------

def _datasets():
    try:
        import datasets
    except ImportError as err:
        raise ImportError("loading from the Hugging Face hub needs the 'datasets' package, which is not installed; "
                          f"install it with: {HF_INSTALL_HINT} -- or pass data_dir=<local files> "
                          "(see tokenmix.data.hf)") from err
    return datasets


def _load_dataset(path: str, config: str | None, local_hint: str) -> Any:
    datasets = _datasets()
    try:
        return datasets.load_dataset(path, config) if config else datasets.load_dataset(path)
    except Exception as err:  # offline, DNS, proxy, not cached: datasets raises many types
        what = f"{path}" + (f" ({config})" if config else "")
        raise HubUnreachableError(
            f"could not load {what} with datasets.load_dataset: the Hugging Face hub looks unreachable "
            f"({type(err).__name__}: {err}). Download the data where the hub is reachable and pass "
            f"data_dir=<directory> ({local_hint}), or, if it is already in the datasets cache, set "
            "HF_DATASETS_OFFLINE=1.") from err


def _hf_rows(split: Any, text_columns: tuple[str, ...], label_column: str = "label") -> list[Example]:
    cols = [list(split[c]) for c in text_columns]
    labels = [int(v) for v in split[label_column]]
    texts = cols[0] if len(cols) == 1 else list(zip(*cols))
    return [(t if isinstance(t, str) else (str(t[0]), str(t[1])), y) for t, y in zip(texts, labels)]


# -- local files ----------------------------------------------------------------------------------

def _read_tsv(path: Path) -> list[tuple[int, list[str]]]:
    """(line number, fields) of each non-empty line; tab-separated, no quoting, BOM and CR stripped."""
    text = path.read_text(encoding="utf-8-sig")
    rows = []
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.rstrip("\r")
        if line.strip():
            rows.append((number, line.split("\t")))
    return rows


def _parse_glue_file(spec: GlueSpec, path: Path) -> list[Example]:
    rows = _read_tsv(path)
    if spec.header:
        if not rows:
            raise ValueError(f"{path}: empty file (expected a header)")
        header = rows.pop(0)[1]
        wanted = (*spec.text_columns, spec.label_column)
        missing = [c for c in wanted if c not in header]
        if missing:
            raise ValueError(f"{path}: no column(s) {missing} in the header {header} (GLUE {spec.folder} layout)")
        where = [header.index(c) for c in wanted]
    else:
        where = [int(c) for c in (*spec.text_columns, spec.label_column)]
    out = []
    for number, fields in rows:
        if len(fields) <= max(where):
            raise ValueError(f"{path}:{number}: {len(fields)} tab-separated fields, expected at least "
                             f"{max(where) + 1} (GLUE {spec.folder} layout)")
        *texts, label = (fields[i] for i in where)
        label = label.strip()
        if label not in spec.labels:
            raise ValueError(f"{path}:{number}: label {label!r} is not one of {list(spec.labels)}")
        out.append((texts[0] if len(texts) == 1 else (texts[0], texts[1]), spec.labels.index(label)))
    return out


def _glue_dir(spec: GlueSpec, data_dir: Path) -> Path:
    for candidate in (data_dir / spec.folder, data_dir):
        if (candidate / "train.tsv").is_file():
            return candidate
    raise FileNotFoundError(f"GLUE {spec.folder}: no train.tsv in {data_dir / spec.folder} or {data_dir}; "
                            "data_dir must be the GLUE root (holding one folder per task, as the official "
                            "download) or the task's folder")


def load_glue(task: str, data_dir: str | Path | None = None) -> dict[str, list[Example]]:
    """``{"train": [...], "validation": [...]}`` (MNLI also ``"validation_mismatched"``) of a GLUE
    classification task: from ``data_dir`` in the official TSV layout, else through ``datasets``.
    The official test set is not returned (no labels). Unknown task -> ValueError listing the supported."""
    spec = glue_spec(task)
    if data_dir is not None:
        folder = _glue_dir(spec, Path(data_dir).expanduser())
        out = {"train": _parse_glue_file(spec, folder / "train.tsv")}
        for split, filename in spec.dev_files:
            path = folder / filename
            if not path.is_file():
                raise FileNotFoundError(f"GLUE {spec.folder}: {path} is missing (the labelled dev set)")
            out[split] = _parse_glue_file(spec, path)
        return out
    ds = _load_dataset("nyu-mll/glue", spec.hf_config,
                       f"the GLUE root of the official TSV download, e.g. <dir>/{spec.folder}/train.tsv")
    out = {"train": _hf_rows(ds["train"], spec.hf_text_columns)}
    for split, hf_split in spec.hf_dev_splits:
        out[split] = _hf_rows(ds[hf_split], spec.hf_text_columns)
    return out


_IMDB_NAME = re.compile(r"^(\d+)(?:_(\d+))?\.txt$")


def _imdb_root(data_dir: Path) -> Path:
    for candidate in (data_dir, data_dir / "aclImdb"):
        if all((candidate / s / c).is_dir() for s in ("train", "test") for c in ("neg", "pos")):
            return candidate
    raise FileNotFoundError(f"IMDb: no aclImdb layout (train/neg, train/pos, test/neg, test/pos) in {data_dir} "
                            f"or {data_dir / 'aclImdb'}; unpack aclImdb_v1.tar.gz "
                            "(https://ai.stanford.edu/~amaas/data/sentiment/) and pass its directory")


def _sort_key(path: Path) -> tuple:
    match = _IMDB_NAME.match(path.name)
    return (0, int(match.group(1)), path.name) if match else (1, 0, path.name)


def load_imdb(data_dir: str | Path | None = None) -> dict[str, list[tuple[str, int]]]:
    """``{"train": [...], "test": [...]}`` of IMDb, label 1 = positive: from the ``aclImdb`` directory
    when ``data_dir`` is given, else through ``datasets`` (``stanfordnlp/imdb``)."""
    if data_dir is not None:
        root = _imdb_root(Path(data_dir).expanduser())
        out: dict[str, list[tuple[str, int]]] = {}
        for split in ("train", "test"):
            rows = []
            for label, cls in enumerate(("neg", "pos")):
                for path in sorted((root / split / cls).glob("*.txt"), key=_sort_key):
                    rows.append((path.read_text(encoding="utf-8", errors="replace"), label))
            out[split] = rows
        return out
    ds = _load_dataset("stanfordnlp/imdb", None, "the unpacked aclImdb directory")
    return {split: _hf_rows(ds[split], ("text",)) for split in ("train", "test")}


def _hf_how(hub_name: str, local: str) -> str:
    return (f"fetched by the Hugging Face datasets library on first use ({hub_name}: needs the hub or its cache, "
            f"and {HF_INSTALL_HINT}), or read from data_dir=<{local}>")


# tokenmix cannot tell whether the datasets library has them cached, nor fetch them through it here.
IMDB_SOURCE = DataSource("IMDb", how=_hf_how("stanfordnlp/imdb", "the unpacked aclImdb directory"))
GLUE_SOURCE = DataSource("GLUE", how=_hf_how("nyu-mll/glue", "the official GLUE download"))
