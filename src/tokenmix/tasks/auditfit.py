"""The machinery of ``tokenmix data audit`` (:mod:`.audit`): the Wilson interval, the logistic regression every
feature-map baseline is read by, a baseline and an audit row, and the rows of one setting."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch

__all__ = ["Z95", "L2_GRID", "wilson", "fit_logistic", "Baseline", "AuditRow", "audit_rows"]

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


def audit_rows(task: str, options: str, baselines: Sequence[Baseline], train: Any, test: Any,
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
