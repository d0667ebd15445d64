"""``tokenmix data audit pathfinder``'s data and baselines (:mod:`.audit` lists them): the generator's pictures with
their markers, and the shortcuts and the rule read from them."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..data.pathfinder import PathfinderConfig, generate_examples
from .auditfit import Baseline

__all__ = ["PathfinderData", "pathfinder_data", "pathfinder_baselines", "BRIDGES", "RULE_BRIDGE"]


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


def _turned_square(data: PathfinderData, centres: np.ndarray, half: int, sign: float, along: np.ndarray,
                   normal: np.ndarray) -> np.ndarray:
    """The pixels on a (2 half + 1)² grid of pixel steps around each picture's centre (n, 2), its axes ``sign``
    times the frame's ``along`` and ``normal`` directions."""
    offsets = np.arange(-half, half + 1, dtype=np.float64)
    grid_a, grid_n = np.meshgrid(offsets, offsets, indexing="ij")
    points = (centres[:, None, :] + sign * grid_a.reshape(1, -1, 1) * along[:, None, :]
              + sign * grid_n.reshape(1, -1, 1) * normal[:, None, :])
    return _sample(data.images, points)


def _aligned_patches(data: PathfinderData, radius: int) -> np.ndarray:
    """The pixels around each marker sampled in a frame turned so that the other marker lies along +x: whether
    the curve leaves a marker towards the other one, and how."""
    m, along, normal = _frame(data)
    return np.concatenate([_turned_square(data, m[:, k], radius, sign, along, normal)
                           for k, sign in ((0, 1.0), (1, -1.0))], 1)


def _frame_picture(data: PathfinderData, half: int = 16) -> np.ndarray:
    """The whole picture resampled on a (2 half + 1)² grid of pixel steps centred between the markers and turned so
    that the second marker lies along +x: where the ink lies relative to both markers at once."""
    m, along, normal = _frame(data)
    return _turned_square(data, m.mean(1), half, 1.0, along, normal)


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
            raise ModuleNotFoundError("the component statistics need scipy: "
                                      "pip install 'tokenmix-lab[audit]'") from None

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
    return np.concatenate([_ink(data), _marker_geometry(data), _patches(data, 3), _aligned_patches(data, 10),
                           _frame_picture(data), _chord(data), _component_stats(data)], 1)


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
        Baseline("patches at the markers, turned to the other (21 x 21)", lambda d: _aligned_patches(d, 10)),
        Baseline("the picture in the markers' frame (33 x 33)", _frame_picture),
        Baseline("line between the markers (±3 px)", _chord),
        Baseline("line between the markers (±3 px), inked or not", lambda d: _chord(d, threshold=0.0)),
        Baseline("component statistics (bridged; no markers)", _component_stats, binned=True),
        Baseline("all of the above", _cheap),
        Baseline("the rule: both markers in one component", predict=_rule, kind="rule"),
        Baseline("tracing: each marker's component size", lambda d: np.sort(_marker_components(d)[1], 1),
                 kind="rule", binned=True),
    ]
