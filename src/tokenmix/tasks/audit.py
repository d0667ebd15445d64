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
  whether the curve leaves a marker towards the other); the pixels along the straight line between the markers
  (and a band either side); connected-component statistics — how many components, their sizes, the largest —
  at several ink thresholds and dilations that bridge the spaces between dashes, computed with
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

Needs scipy (``pip install 'tokenmix[audit]'``) for the component statistics.
"""

from __future__ import annotations

import ast
import csv
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ..data.pathfinder import PathfinderConfig, generate_examples
from .base import create_task

__all__ = ["AuditRow", "Baseline", "audit", "audit_task", "wilson", "fit_logistic", "parse_options", "ordered",
           "write_rows", "print_rows", "AUDITED", "pathfinder_data", "pathfinder_baselines", "PathfinderData"]

Z95 = 1.959963984540054  # the standard normal's 97.5 % point
L2_GRID = (1e-4, 1e-2, 1.0)  # the logistic regression's L2 strengths tried (chosen on a quarter of the training set)


# -- statistics --------------------------------------------------------------------------------------------------
def wilson(correct: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of ``correct`` successes in ``n`` trials (95 % by default)."""
    if n <= 0:
        return 0.0, 1.0
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


# -- the logistic regression -------------------------------------------------------------------------------------
@dataclass
class _Logistic:
    mean: np.ndarray
    scale: np.ndarray
    weight: torch.Tensor
    bias: torch.Tensor

    def predict(self, x: np.ndarray) -> np.ndarray:
        z = torch.from_numpy((x - self.mean) / self.scale)
        return (z @ self.weight + self.bias).argmax(1).numpy()


def _fit(x: np.ndarray, y: np.ndarray, classes: int, l2: float, standardize: bool, steps: int) -> _Logistic:
    """Softmax regression, mean cross-entropy + ``l2 / 2 |W|²``, by L-BFGS from zero weights (float64)."""
    mean = x.mean(0) if standardize else np.zeros(x.shape[1])
    scale = np.maximum(x.std(0), 1e-6) if standardize else np.ones(x.shape[1])
    z = torch.from_numpy((x - mean) / scale)
    target = torch.from_numpy(y).long()
    weight = torch.zeros(x.shape[1], classes, dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(classes, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([weight, bias], lr=1.0, max_iter=steps, line_search_fn="strong_wolfe",
                                  tolerance_grad=1e-9, tolerance_change=1e-12, history_size=20)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(z @ weight + bias, target) + 0.5 * l2 * (weight ** 2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return _Logistic(mean, scale, weight.detach(), bias.detach())


def fit_logistic(x: np.ndarray, y: np.ndarray, classes: int, standardize: bool = True,
                 steps: int = 200) -> _Logistic:
    """A logistic regression of ``y`` (0 .. classes - 1) on ``x``: its L2 strength chosen from ``L2_GRID`` by the
    accuracy on the last quarter of the examples (fitted on the rest), then refitted on all of them."""
    x = np.asarray(x, dtype=np.float64)
    cut = (3 * len(y)) // 4
    best, best_l2 = -1.0, L2_GRID[0]
    for l2 in L2_GRID:
        accuracy = float((_fit(x[:cut], y[:cut], classes, l2, standardize, steps).predict(x[cut:]) == y[cut:]).mean())
        if accuracy > best:
            best, best_l2 = accuracy, l2
    return _fit(x, y, classes, best_l2, standardize, steps)


# -- baselines and rows ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Baseline:
    """A baseline: ``features(data) -> (n, d)`` read by a logistic regression (``standardize``: scale each
    feature on the training set; ``binned``: quantile bins of each feature too, so that a non-monotone relation
    counts), or ``predict(train, test) -> predictions`` directly. ``kind``: ``shortcut`` or ``rule``."""

    name: str
    features: Callable[[Any], np.ndarray] | None = None
    predict: Callable[[Any, Any], np.ndarray] | None = None
    kind: str = "shortcut"
    standardize: bool = True
    binned: bool = False


@dataclass(frozen=True)
class AuditRow:
    """One baseline's held-out accuracy and its 95 % Wilson interval."""

    task: str
    options: str
    baseline: str
    kind: str
    accuracy: float
    low: float
    high: float
    n: int


def _bins(train: np.ndarray, test: np.ndarray, bins: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Each column as one-hot quantile bins (edges from ``train``), beside the column itself."""
    out_train, out_test = [train], [test]
    for j in range(train.shape[1]):
        edges = np.unique(np.quantile(train[:, j], np.linspace(0, 1, bins + 1)[1:-1]))
        a, b = np.searchsorted(edges, train[:, j], "right"), np.searchsorted(edges, test[:, j], "right")
        out_train.append(np.eye(len(edges) + 1)[a])
        out_test.append(np.eye(len(edges) + 1)[b])
    return np.concatenate(out_train, 1), np.concatenate(out_test, 1)


def _score(baseline: Baseline, train: Any, test: Any, classes: int) -> np.ndarray:
    """The baseline's predictions on ``test`` after fitting on ``train``."""
    if baseline.predict is not None:
        return np.asarray(baseline.predict(train, test))
    x_train = np.asarray(baseline.features(train), dtype=np.float64)
    x_test = np.asarray(baseline.features(test), dtype=np.float64)
    if baseline.binned:
        x_train, x_test = _bins(x_train, x_test)
    return fit_logistic(x_train, train.labels, classes, baseline.standardize).predict(x_test)


def _rows(task: str, options: str, baselines: Sequence[Baseline], train: Any, test: Any,
          classes: int) -> list[AuditRow]:
    """Every baseline's row, then the majority class's."""
    n = len(test.labels)
    rows = []
    for baseline in baselines:
        correct = int((_score(baseline, train, test, classes) == test.labels).sum())
        rows.append(AuditRow(task, options, baseline.name, baseline.kind, correct / n, *wilson(correct, n), n))
    majority = int(np.bincount(train.labels, minlength=classes).argmax())
    correct = int((test.labels == majority).sum())
    rows.append(AuditRow(task, options, "majority class", "majority", correct / n, *wilson(correct, n), n))
    return rows


# -- Pathfinder --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PathfinderData:
    """Pictures as the task reads them (grey levels scaled to 0..1), the markers' centres (n, 2, 2; the two
    markers in a fixed order: by row, then column) and the labels."""

    images: np.ndarray
    markers: np.ndarray
    labels: np.ndarray
    _cache: dict = field(default_factory=dict, compare=False, repr=False)


def pathfinder_data(count: int, seed: int, config: PathfinderConfig) -> PathfinderData:
    """``count`` pictures of the generator from ``seed`` (even ``count``)."""
    images, labels, markers = generate_examples(count + count % 2, seed, config, progress=False)
    order = np.lexsort((markers[:, :, 1], markers[:, :, 0]), axis=1)
    markers = np.take_along_axis(markers, order[:, :, None], axis=1)
    return PathfinderData(images[:count].astype(np.float64) / 255, markers[:count], labels[:count])


def _sample(images: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Bilinear samples of each image (n, H, W) at its points (n, P, 2: rows, columns; 0 outside)."""
    n, h, w = images.shape
    padded = np.pad(images, ((0, 0), (1, 2), (1, 2)))
    r = np.clip(points[..., 0] + 1, 0, h + 1)
    c = np.clip(points[..., 1] + 1, 0, w + 1)
    r0, c0 = np.floor(r).astype(np.int64), np.floor(c).astype(np.int64)
    fr, fc = r - r0, c - c0
    index = np.arange(n)[:, None]
    return ((1 - fr) * (1 - fc) * padded[index, r0, c0] + (1 - fr) * fc * padded[index, r0, c0 + 1]
            + fr * (1 - fc) * padded[index, r0 + 1, c0] + fr * fc * padded[index, r0 + 1, c0 + 1])


def _frame(data: PathfinderData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The markers (n, 2, 2), the unit vector from the first marker to the second (n, 2) and its normal."""
    m = data.markers.astype(np.float64)
    along = m[:, 1] - m[:, 0]
    along /= np.maximum(np.linalg.norm(along, axis=1, keepdims=True), 1e-9)
    return m, along, np.stack([-along[:, 1], along[:, 0]], axis=1)


def _patches(data: PathfinderData, radius: int) -> np.ndarray:
    """The (2 radius + 1)² pixels around each marker, both markers side by side."""
    padded = np.pad(data.images, ((0, 0), (radius, radius), (radius, radius)))
    offsets = np.arange(-radius, radius + 1)
    out = []
    for k in range(2):
        rows = data.markers[:, k, 0][:, None, None] + radius + offsets[None, :, None]
        cols = data.markers[:, k, 1][:, None, None] + radius + offsets[None, None, :]
        out.append(padded[np.arange(len(padded))[:, None, None], rows, cols].reshape(len(padded), -1))
    return np.concatenate(out, 1)


def _aligned_patches(data: PathfinderData, radius: int) -> np.ndarray:
    """The pixels around each marker sampled in a frame turned so that the other marker lies along +x: whether
    the curve leaves a marker towards the other one, and how."""
    m, along, normal = _frame(data)
    offsets = np.arange(-radius, radius + 1, dtype=np.float64)
    grid_a, grid_n = np.meshgrid(offsets, offsets, indexing="ij")
    out = []
    for k, sign in ((0, 1.0), (1, -1.0)):
        points = (m[:, k, None, :] + sign * grid_a.reshape(1, -1, 1) * along[:, None, :]
                  + sign * grid_n.reshape(1, -1, 1) * normal[:, None, :])
        out.append(_sample(data.images, points))
    return np.concatenate(out, 1)


def _chord(data: PathfinderData, steps: int = 16, half_width: int = 3, threshold: float | None = None) -> np.ndarray:
    """The picture along the straight line between the markers (``steps`` points) and on lines beside it (up to
    ``half_width`` pixels either side), with each line's mean; ``threshold``: of the inked pixels alone (level
    above it, 0..1), as the rule sees them."""
    m, along, normal = _frame(data)
    images = data.images if threshold is None else (data.images > threshold).astype(np.float64)
    fractions = (np.arange(steps) + 0.5) / steps
    lines = []
    for offset in range(-half_width, half_width + 1):
        points = (m[:, 0, None, :] + fractions[None, :, None] * (m[:, 1] - m[:, 0])[:, None, :]
                  + offset * normal[:, None, :])
        lines.append(_sample(images, points))
    profile = np.concatenate(lines, 1)
    means = np.stack([line.mean(1) for line in lines], 1)
    return np.concatenate([profile, means], 1)


def _labelled(data: PathfinderData, threshold: float, dilation: int) -> list[tuple[np.ndarray, int]]:
    """Per picture, its connected components (8-neighbourhood) of the pixels above ``threshold`` (0..1), grown
    ``dilation`` times by a 3 x 3 square to bridge the spaces between dashes: (labels, how many)."""
    key = (threshold, dilation)
    if key not in data._cache:
        try:
            from scipy import ndimage
        except ModuleNotFoundError:
            raise ModuleNotFoundError("the component statistics need scipy: pip install 'tokenmix[audit]'") from None

        square = np.ones((3, 3), dtype=bool)
        out = []
        for image in data.images:
            ink = image > threshold
            if dilation:
                ink = ndimage.binary_dilation(ink, square, iterations=dilation)
            out.append(ndimage.label(ink, square))
        data._cache[key] = out
    return data._cache[key]


BRIDGES = ((0.0, 0), (0.0, 1), (0.25, 0), (0.25, 1), (0.25, 2), (0.45, 1), (0.6, 0))  # (threshold, dilations)
RULE_BRIDGE = (0.0, 0)  # the bridge of the rule: the generator's ``connected`` (any ink, the 8-neighbourhood)


def _component_stats(data: PathfinderData, top: int = 6) -> np.ndarray:
    """Never locating the markers: per bridge, how many components, the ``top`` largest sizes, the mean size,
    how many of 1-4 pixels and the ink."""
    features = []
    for threshold, dilation in BRIDGES:
        rows = []
        for labels, count in _labelled(data, threshold, dilation):
            sizes = np.sort(np.bincount(labels.ravel())[1:])[::-1]
            largest = np.zeros(top)
            largest[:min(top, len(sizes))] = sizes[:top]
            rows.append([count, *largest, sizes.mean() if count else 0.0, (sizes < 5).sum(), sizes.sum()])
        features.append(np.array(rows, dtype=np.float64))
    return np.concatenate(features, 1)


def _marker_components(data: PathfinderData) -> tuple[np.ndarray, np.ndarray]:
    """Per picture, the component labels of the two markers under the rule's bridge (n, 2) and their sizes."""
    labels = _labelled(data, *RULE_BRIDGE)
    ids, sizes = np.zeros((len(labels), 2), dtype=np.int64), np.zeros((len(labels), 2))
    for i, (label, _) in enumerate(labels):
        counts = np.bincount(label.ravel())
        for k in range(2):
            ids[i, k] = label[tuple(data.markers[i, k])]
            sizes[i, k] = counts[ids[i, k]] if ids[i, k] else 0
    return ids, sizes


def _rule(train: PathfinderData, test: PathfinderData) -> np.ndarray:
    ids, _ = _marker_components(test)
    return ((ids[:, 0] == ids[:, 1]) & (ids[:, 0] > 0)).astype(np.int64)


def _ink(data: PathfinderData) -> np.ndarray:
    flat = data.images.reshape(len(data.images), -1)
    return np.stack([flat.sum(1), (flat > 0).sum(1), (flat > 0.25).sum(1), (flat > 0.6).sum(1)], 1)


def _marker_geometry(data: PathfinderData) -> np.ndarray:
    m = data.markers.astype(np.float64)
    d = m[:, 1] - m[:, 0]
    return np.concatenate([m.reshape(len(m), -1), np.abs(d), np.linalg.norm(d, axis=1, keepdims=True)], 1)


def _cheap(data: PathfinderData) -> np.ndarray:
    """Every cheap Pathfinder feature at once."""
    return np.concatenate([_ink(data), _marker_geometry(data), _patches(data, 3), _aligned_patches(data, 4),
                           _chord(data), _component_stats(data)], 1)


def pathfinder_baselines() -> list[Baseline]:
    """The Pathfinder baselines (module docstring), the rule and the marker's own component last."""
    return [
        Baseline("raw pixels", lambda d: d.images.reshape(len(d.images), -1)),
        Baseline("ink amount", _ink, binned=True),
        Baseline("marker positions and distance", _marker_geometry, binned=True),
        Baseline("marker distance", lambda d: _marker_geometry(d)[:, -1:], binned=True),
        Baseline("patches at the markers (5 x 5)", lambda d: _patches(d, 2)),
        Baseline("patches at the markers (9 x 9)", lambda d: _patches(d, 4)),
        Baseline("patches at the markers, turned to the other (9 x 9)", lambda d: _aligned_patches(d, 4)),
        Baseline("patches at the markers, turned to the other (15 x 15)", lambda d: _aligned_patches(d, 7)),
        Baseline("line between the markers (±3 px)", _chord),
        Baseline("line between the markers (±3 px), inked or not", lambda d: _chord(d, threshold=0.0)),
        Baseline("component statistics (bridged; no markers)", _component_stats, binned=True),
        Baseline("all of the above", _cheap),
        Baseline("the rule: both markers in one component", predict=_rule, kind="rule"),
        Baseline("tracing: each marker's component size", lambda d: np.sort(_marker_components(d)[1], 1),
                 kind="rule", binned=True),
    ]


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
    return _rows(name, _spell(options), baselines, train, test, classes)


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
