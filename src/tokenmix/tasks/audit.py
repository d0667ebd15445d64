"""``tokenmix data audit TASK``: does a task have a shortcut that no mechanism needs to beat?

Cheap baselines are fitted on examples drawn with the **training** seed and scored on examples drawn with a
**held-out** seed (another generator seed: other pictures, other trees, other passages), so a baseline scores
only what generalises. Each score comes with a 95 % Wilson interval over the ``n`` held-out examples, beside
the majority class. A baseline is a feature map read by a logistic regression (L2, its strength chosen on a
quarter of the training examples, then refitted on all of them; L-BFGS from zero weights, so deterministic),
or a rule that predicts directly.

Rows are of three kinds: ``shortcut`` (what a model could read without solving the task: these should stay
near the majority class), ``majority`` (the floor), and ``rule`` (the task itself, or a part of it, done by
hand: Pathfinder's "both markers in one connected component", which must reach about 1 so the task is
solvable; these are reported apart and are not shortcuts).

The baselines per task:

* ``pathfinder`` (Linsley et al., 2018; Tay et al., 2021): raw pixels; ink amount; marker positions and their
  distance; pixel patches around each marker (as drawn, and turned so that the other marker lies to the right:
  whether the curve leaves a marker towards the other, up to 21 x 21); the whole picture resampled in the
  markers' frame (centred between them, the other marker to the right); the pixels along the straight line
  between the markers (and a band either side); connected-component statistics — how many components, their
  sizes, the largest — at several ink thresholds and dilations that bridge the spaces between dashes, computed with
  ``scipy.ndimage.label`` and never locating the markers; all of these together. Apart: the rule (both markers
  in one component) and the size of each marker's own component (following one curve from a marker: tracing);
* ``lra_text`` (Tay et al., 2021, "Text"): bag of bytes; hashed byte n-grams (n up to 4); the length;
* ``lra_retrieval`` (Tay et al., 2021, "Retrieval"): the same per document, as pair features (``|u - v|``,
  ``u * v``), and "same predicted source": a per-document classifier of the novel, the pair called "same" when
  it predicts one novel for both;
* ``listops`` (Nangia & Bowman, 2018; Tay et al., 2021): the first k tokens (k = 1, 2, 3; the root operator
  first), length and depth, the bag of tokens;
* ``recall``: every position's token (one-hot), the query alone, the bag of tokens;
* ``mqar`` (Arora et al., 2023), one example per query: the query's key, its position, both (what a model
  that mixes nothing sees: chance, 1 / V); the pairs' values by pair, which can learn to copy one pair's value
  (1 / P: reading the context without matching keys); apart, the rule (match the key, read its value);
* ``fashion_pixels`` (Xiao et al., 2017): raw pixels and ink amount (the real data: the training split against
  the test split, which no seed changes).

Needs scipy (``pip install 'tokenmix-lab[audit]'``) for the component statistics.
"""

from __future__ import annotations

import ast
import csv
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..data.pathfinder import PathfinderConfig
from .auditfit import AuditRow, Baseline, audit_rows, fit_logistic, wilson
from .auditpathfinder import PathfinderData, pathfinder_baselines, pathfinder_data
from .registry import create_task

__all__ = ["AuditRow", "Baseline", "audit", "audit_task", "wilson", "fit_logistic", "parse_options", "ordered",
           "write_rows", "print_rows", "AUDITED", "pathfinder_data", "pathfinder_baselines", "PathfinderData"]


# -- byte documents (LRA Text, LRA Retrieval) --------------------------------------------------------------------
HASH_BUCKETS = 4096


def _ngrams(ids: np.ndarray, lengths: np.ndarray, n: int, buckets: int = HASH_BUCKETS) -> np.ndarray:
    """Per document, its byte n-grams' counts hashed into ``buckets`` (a fixed multiplicative hash), as
    frequencies scaled to unit length."""
    out = np.zeros((len(ids), buckets))
    for i, (row, length) in enumerate(zip(ids, lengths)):
        row = row[:length].astype(np.int64)
        if length < n:
            continue
        code = np.zeros(length - n + 1, dtype=np.int64)
        for k in range(n):
            code = code * 257 + row[k:length - n + 1 + k]
        out[i] = np.bincount((code * 2654435761) % 2 ** 31 % buckets, minlength=buckets)
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


@dataclass(frozen=True)
class TokenData:
    """Token ids (n, L), real lengths (n,), labels; ``groups``: per-document sources for a pair task."""

    ids: np.ndarray
    lengths: np.ndarray
    labels: np.ndarray
    groups: np.ndarray | None = None


def _split_data(task: Any, split: str) -> TokenData:
    data = task.splits[split]
    ids = data.ids.numpy()
    lengths = (ids != task.pad_id).sum(1) if getattr(task, "pair_input", False) else data.lengths.numpy()
    groups = None
    if hasattr(task, "spans") and getattr(task, "pair_input", False):
        groups = np.array([[k for k, _, _ in pair] for pair in task.spans[split]])
    return TokenData(ids, lengths, data.labels.numpy(), groups)


def _text_baselines() -> list[Baseline]:
    bag = lambda n: lambda d: _ngrams(d.ids, d.lengths, n)  # noqa: E731
    return [
        Baseline("bag of bytes", bag(1), standardize=False),
        Baseline("byte 2-grams (hashed)", bag(2), standardize=False),
        Baseline("byte 3-grams (hashed)", bag(3), standardize=False),
        Baseline("byte 4-grams (hashed)", bag(4), standardize=False),
        Baseline("length", lambda d: d.lengths[:, None].astype(np.float64), binned=True),
    ]


def _halves(d: TokenData) -> tuple[TokenData, TokenData]:
    """The two documents of each pair as documents of their own."""
    width = d.ids.shape[1] // 2
    parts = []
    for k in range(2):
        ids = d.ids[:, k * width:(k + 1) * width]
        parts.append(TokenData(ids, (ids != 0).sum(1), d.labels))
    return parts[0], parts[1]


def _pair_features(per_document: Callable[[TokenData], np.ndarray]) -> Callable[[TokenData], np.ndarray]:
    def features(d: TokenData) -> np.ndarray:
        u, v = (per_document(half) for half in _halves(d))
        return np.concatenate([np.abs(u - v), u * v], 1)
    return features


def _same_source(n: int) -> Callable[[TokenData, TokenData], np.ndarray]:
    """"Same predicted source": a classifier of each document's source (byte ``n``-grams), pairs called "same"
    when it predicts one source for both documents."""
    def predict(train: TokenData, test: TokenData) -> np.ndarray:
        docs = [_ngrams(half.ids, half.lengths, n) for half in _halves(train)]
        sources = np.concatenate([train.groups[:, 0], train.groups[:, 1]])
        classes = int(max(train.groups.max(), test.groups.max())) + 1
        model = fit_logistic(np.concatenate(docs), sources, classes, standardize=False)
        a, b = (model.predict(_ngrams(half.ids, half.lengths, n)) for half in _halves(test))
        return (a == b).astype(np.int64)
    return predict


def _retrieval_baselines() -> list[Baseline]:
    return [
        Baseline("pair of bags of bytes", _pair_features(lambda d: _ngrams(d.ids, d.lengths, 1)), standardize=False),
        Baseline("pair of byte 4-gram bags (hashed)", _pair_features(lambda d: _ngrams(d.ids, d.lengths, 4)),
                 standardize=False),
        Baseline("pair lengths", lambda d: np.stack([h.lengths for h in _halves(d)], 1).astype(np.float64),
                 binned=True),
        Baseline("same predicted source (byte 4-grams)", predict=_same_source(4)),
        Baseline("same predicted source (bag of bytes)", predict=_same_source(1)),
    ]


# -- ListOps and recall ------------------------------------------------------------------------------------------
def _one_hot(ids: np.ndarray, vocab: int) -> np.ndarray:
    return np.eye(vocab)[ids].reshape(len(ids), -1)


def _depth(d: TokenData, open_ids: Sequence[int], close_id: int) -> np.ndarray:
    opens, closes = np.isin(d.ids, open_ids).astype(np.int64), (d.ids == close_id).astype(np.int64)
    return np.cumsum(opens - closes, axis=1).max(1)


def _listops_baselines(vocab: int) -> list[Baseline]:
    from .listops import CLOSE, OPERATORS

    out = [Baseline(f"first {k} token{'s' * (k > 1)}", (lambda k: lambda d: _one_hot(d.ids[:, :k], vocab))(k),
                    standardize=False) for k in (1, 2, 3)]
    return out + [
        Baseline("length and depth", lambda d: np.stack([d.lengths, _depth(d, OPERATORS, CLOSE)], 1).astype(float),
                 binned=True),
        Baseline("bag of tokens", lambda d: np.stack([(d.ids == t).sum(1) for t in range(vocab)], 1).astype(float)),
    ]


def _recall_baselines(vocab: int) -> list[Baseline]:
    return [
        Baseline("every position's token", lambda d: _one_hot(d.ids, vocab), standardize=False),
        Baseline("the query alone", lambda d: _one_hot(d.ids[:, -1:], vocab), standardize=False),
        Baseline("bag of tokens", lambda d: np.stack([(d.ids == t).sum(1) for t in range(vocab)], 1).astype(float)),
    ]


@dataclass(frozen=True)
class QueryData:
    """MQAR's queries, one example each: the key asked, its position, the sequence's pairs (keys, and values
    as value indices) and the value asked for (``labels``, a value index)."""

    key: np.ndarray
    position: np.ndarray
    pair_keys: np.ndarray
    pair_values: np.ndarray
    labels: np.ndarray


def _mqar_queries(task: Any, split: str) -> QueryData:
    ids, targets = task.splits[split].ids.numpy(), task.splits[split].labels.numpy()
    rows, position = np.nonzero(targets != -100)
    p, half = task.num_pairs, task.vocab_size // 2
    return QueryData(ids[rows, position], position, ids[rows, 0:2 * p:2], ids[rows, 1:2 * p:2] - half,
                     targets[rows, position] - half)


def _mqar_baselines(task: Any) -> list[Baseline]:
    """The per-position baselines (a model that mixes nothing sees the key and the position: chance, 1 / V);
    the pairs' values by pair, which can learn to copy one pair's value (right when that pair is asked:
    1 / P, what reading without matching gets); apart, the rule that does the task."""
    vocab, length, values = task.vocab_size, task.max_len, task.num_values

    def key(d: QueryData) -> np.ndarray:
        return np.eye(vocab)[d.key]

    def position(d: QueryData) -> np.ndarray:
        return np.eye(length)[d.position]

    def match(train: QueryData, test: QueryData) -> np.ndarray:
        return test.pair_values[np.arange(len(test.key)), (test.pair_keys == test.key[:, None]).argmax(1)]

    return [
        Baseline("the query's key", key, standardize=False),
        Baseline("the query's position", position, standardize=False),
        Baseline("the query's key and position", lambda d: np.concatenate([key(d), position(d)], 1),
                 standardize=False),
        Baseline("the pairs' values, by pair (copy one pair's value)",
                 lambda d: np.eye(values)[d.pair_values].reshape(len(d.key), -1), standardize=False),
        Baseline("match the key, read its value", predict=match, kind="rule"),
    ]


def _load_mqar(options: dict[str, Any], seed: int, split: str, n: int) -> tuple[Any, int, list[Baseline]]:
    task = create_task("mqar", seed=seed, **{**_sizes(split, n), **options})
    return _mqar_queries(task, split), task.num_values, _mqar_baselines(task)


@dataclass(frozen=True)
class ImageData:
    pixels: np.ndarray
    labels: np.ndarray


def _image_baselines() -> list[Baseline]:
    return [
        Baseline("raw pixels", lambda d: d.pixels),
        Baseline("ink amount", lambda d: np.stack([d.pixels.sum(1), (d.pixels > 0).sum(1)], 1), binned=True),
    ]


# -- the audited tasks -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Audited:
    """How to audit one task: its settings (option dicts) by default, the examples per split by default, and
    ``load(options, seed, split, n) -> (data, classes, baselines)``."""

    settings: tuple[dict[str, Any], ...]
    examples: int
    load: Callable[[dict[str, Any], int, str, int], tuple[Any, int, list[Baseline]]]


def _load_pathfinder(options: dict[str, Any], seed: int, split: str, n: int) -> tuple[Any, int, list[Baseline]]:
    # The generator itself: the markers are known. Each seed is its own draw, so split does not matter here.
    return pathfinder_data(n, seed, PathfinderConfig(**options)), 2, pathfinder_baselines()


def _sizes(split: str, n: int) -> dict[str, int]:
    """Split sizes that put ``n`` examples (even) in ``split`` and two in the others."""
    n += n % 2
    return {f"{s}_size": (n if s == split else 2) for s in ("train", "val", "test")}


def _load_task(name: str, baselines: Callable[[Any], list[Baseline]]
               ) -> Callable[[dict[str, Any], int, str, int], tuple[Any, int, list[Baseline]]]:
    def load(options: dict[str, Any], seed: int, split: str, n: int) -> tuple[Any, int, list[Baseline]]:
        task = create_task(name, seed=seed, **{**_sizes(split, n), **options})
        return _split_data(task, split), task.num_classes, baselines(task)
    return load


def _load_fashion(options: dict[str, Any], seed: int, split: str, n: int) -> tuple[Any, int, list[Baseline]]:
    task = create_task("fashion_pixels", **{**_sizes(split, n), **options})
    data = task.splits[split]
    return ImageData(data.ids.numpy().astype(np.float64) / 255, data.labels.numpy()), 10, _image_baselines()


AUDITED: dict[str, _Audited] = {
    "pathfinder": _Audited(({"length": 6}, {"length": 9}, {"length": 14}), 200, _load_pathfinder),
    "lra_text": _Audited(({"preset": "quick"}, {"preset": "paper"}), 500,
                         _load_task("lra_text", lambda task: _text_baselines())),
    "lra_retrieval": _Audited(({"preset": "quick"}, {"preset": "paper"}), 500,
                              _load_task("lra_retrieval", lambda task: _retrieval_baselines())),
    "listops": _Audited(({"preset": "quick"}, {"preset": "paper"}), 500,
                        _load_task("listops", lambda task: _listops_baselines(task.vocab_size))),
    "recall": _Audited(({"preset": "quick"}, {"preset": "paper"}), 1000,
                       _load_task("recall", lambda task: _recall_baselines(task.vocab_size))),
    "fashion_pixels": _Audited(({},), 1000, _load_fashion),
    # n sequences, each P queries: the rows count queries
    "mqar": _Audited(({"preset": "quick"}, {"preset": "quick", "seq_len": 128, "num_pairs": 16}), 1000, _load_mqar),
}


def parse_options(pairs: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings as a dict, each value a Python literal where it parses as one (else a string)."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"an option is KEY=VALUE, got {pair!r}")
        try:
            options[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            options[key] = value
    return options


def _spell(options: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in options.items()) or "default"


def audit_task(name: str, options: dict[str, Any], examples: int | None = None,
               seeds: tuple[int, int] = (0, 1)) -> list[AuditRow]:
    """Task ``name`` with ``options``: every baseline fitted on ``examples`` training examples of seed
    ``seeds[0]`` and scored on as many held-out ones of seed ``seeds[1]``; rows as :func:`_rows` gives them."""
    if name not in AUDITED:
        raise ValueError(f"no audit for task {name!r}; audited tasks: {', '.join(AUDITED)}")
    if seeds[0] == seeds[1] and name != "fashion_pixels":
        raise ValueError(f"the held-out seed must differ from the training seed, got {seeds}")
    spec = AUDITED[name]
    n = examples or spec.examples
    train, classes, baselines = spec.load(options, seeds[0], "train", n)
    test, _, _ = spec.load(options, seeds[1], "test", n)
    return audit_rows(name, _spell(options), baselines, train, test, classes)


def audit(names: Sequence[str], options: dict[str, Any] | None = None, examples: int | None = None,
          seeds: tuple[int, int] = (0, 1), on_rows: Callable[[list[AuditRow]], None] | None = None
          ) -> list[AuditRow]:
    """:func:`audit_task` for each task of ``names`` at each of its default settings (or at ``options`` alone
    when given); ``on_rows`` is called with each setting's rows as they are known."""
    unknown = [name for name in names if name not in AUDITED]
    if unknown:
        raise ValueError(f"no audit for task(s) {', '.join(map(repr, unknown))}; audited tasks: {', '.join(AUDITED)}")
    out = []
    for name in names:
        for setting in ([options] if options else AUDITED[name].settings):
            rows = audit_task(name, setting, examples, seeds)
            if on_rows is not None:
                on_rows(rows)
            out += rows
    return out


# -- output ------------------------------------------------------------------------------------------------------
_ORDER = {"shortcut": 0, "majority": 1, "rule": 2}


def ordered(rows: Sequence[AuditRow]) -> list[AuditRow]:
    """Shortcuts best first, then the majority class, then the rule rows (the task done by hand)."""
    return sorted(rows, key=lambda r: (_ORDER[r.kind], -r.accuracy, r.baseline))


def print_rows(rows: Sequence[AuditRow]) -> None:
    """One setting's table: baseline, accuracy and its 95 % interval, n."""
    from ..tabulate import text_table

    if not rows:
        return
    print(f"\n{rows[0].task} ({rows[0].options}): held-out accuracy, 95 % Wilson interval")
    body = [[r.baseline + (" [the task itself]" if r.kind == "rule" else ""), f"{r.accuracy:.3f}",
             f"[{r.low:.3f}, {r.high:.3f}]", str(r.n)] for r in ordered(rows)]
    print(text_table(["baseline", "accuracy", "95 % interval", "n"], body, align="lrlr"), flush=True)


FIELDS = ("task", "options", "baseline", "kind", "accuracy", "low", "high", "n")


def write_rows(rows: Sequence[AuditRow], path: str | Path) -> Path:
    """The rows (each setting's in :func:`ordered` order) as CSV, or as JSON when ``path`` ends in .json."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    groups: dict[tuple[str, str], list[AuditRow]] = {}
    for row in rows:
        groups.setdefault((row.task, row.options), []).append(row)
    rows = [row for group in groups.values() for row in ordered(group)]
    if path.suffix == ".json":
        path.write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
        return path
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(FIELDS)
        for r in rows:
            writer.writerow([r.task, r.options, r.baseline, r.kind, f"{r.accuracy:.4f}", f"{r.low:.4f}",
                             f"{r.high:.4f}", r.n])
    return path
