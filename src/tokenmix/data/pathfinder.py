"""Pathfinder images (Linsley et al., 2018; the Long Range Arena's image task, Tay et al., 2021), generated here.

An image is a ``size x size`` grey canvas holding two long curves, a few short distractor curves and two
square markers. It is **positive** when both markers sit on the two ends of the same long curve, **negative**
when they sit on one end of each long curve. Written from the published description (no code copied):

* a curve is a chain of ``length`` straight segments of ``segment`` pixels; each segment turns from the
  previous one by an angle drawn uniformly within ``±max_turn`` degrees (the contour's continuity), the first
  direction uniform; a curve that leaves the canvas (less a margin for the markers) is drawn again;
* curves never touch: every curve keeps a gap of at least ``gap`` pixels (Chebyshev) to every pixel already
  drawn, so that the only way from one marker to the other is along one curve. The two long curves have
  ``length`` segments (the difficulty: LRA's 6, 9 and 14), the ``distractors`` short ones
  ``distractor_length`` (LRA's hard split: 4);
* a marker is a 3 x 3 square centred on a curve's end pixel;
* no shortcut through the markers' distance: images are made in pairs, a positive first, then a negative whose
  markers lie as far apart (within ±1 pixel) — both classes share one distribution of marker distances, and
  every image holds the same kinds of strokes (two long curves, the same number of distractors, two markers),
  so the pixel count does not tell the class either; the markers are at least ``min_distance`` pixels apart.

:func:`generate` draws ``count`` images from ``numpy.random.default_rng(seed)`` (half of each class, in a
seeded random order), so a seed fixes the data set; :func:`pathfinder_arrays` caches them in the data cache
(:mod:`.cache`) under a name that spells out every parameter, with a progress bar while generating. Pixels are
0 (background) or 255 (strokes and markers).
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .cache import cached

__all__ = ["PathfinderConfig", "generate", "draw_pair", "pathfinder_arrays", "connected", "save_examples"]

INK = 255
_MAX_TRIES = 200  # draws of one curve, or of one negative's layout, before the whole image starts again


@dataclass(frozen=True)
class PathfinderConfig:
    """The generator's parameters (see the module docstring); the defaults are LRA's 32 x 32 hard split."""

    size: int = 32
    length: int = 14
    segment: float = 2.0
    max_turn: float = 30.0
    gap: int = 2
    distractors: int = 4
    distractor_length: int = 4
    min_distance: float = 7.0

    def __post_init__(self) -> None:
        for name in ("size", "length", "gap", "distractor_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"pathfinder: {name} must be a positive int, got {value!r}")
        if isinstance(self.distractors, bool) or not isinstance(self.distractors, int) or self.distractors < 0:
            raise ValueError(f"pathfinder: distractors must be an int >= 0, got {self.distractors!r}")
        if self.size < 12:
            raise ValueError(f"pathfinder: size must be >= 12 (two curves and their markers), got {self.size}")
        for name in ("segment", "max_turn", "min_distance"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"pathfinder: {name} must be a finite number >= 0, got {value!r}")
        if self.segment < 1:
            raise ValueError(f"pathfinder: segment must be >= 1 pixel, got {self.segment}")

    def cache_name(self, seed: int, count: int) -> str:
        fields = "-".join(f"{k}{v:g}" if isinstance(v, float) else f"{k}{v}" for k, v in asdict(self).items())
        return f"pathfinder/{fields}-seed{seed}-n{count}.npz"


def _curve(rng: np.random.Generator, config: PathfinderConfig, segments: int) -> np.ndarray | None:
    """The pixels (K, 2) of one curve of ``segments`` segments, rows and columns in drawing order (its ends first
    and last), or None when it leaves the canvas (a margin of 1 pixel kept for the markers)."""
    low, high = 1, config.size - 2
    start = rng.uniform(low, high, size=2)
    turns = rng.uniform(-1, 1, size=segments) * math.radians(config.max_turn)
    angles = rng.uniform(0, 2 * math.pi) + np.cumsum(turns)
    steps = max(2, int(math.ceil(config.segment * 4)))
    step = np.repeat(np.stack([np.cos(angles), np.sin(angles)], axis=1), steps, axis=0) * (config.segment / steps)
    points = np.concatenate([start[None], start + np.cumsum(step, axis=0)])  # (x, y)
    if points.min() < low or points.max() > high:
        return None
    pixels = np.rint(points[:, ::-1]).astype(np.int64)  # (row, column)
    keep = np.ones(len(pixels), dtype=bool)
    keep[1:] = (pixels[1:] != pixels[:-1]).any(axis=1)
    return pixels[keep]


def _place(rng: np.random.Generator, config: PathfinderConfig, near: np.ndarray,
           segments: int) -> np.ndarray | None:
    """A curve none of whose pixels is marked in ``near`` (the drawn pixels grown by ``gap``), which is then
    grown by it; None after ``_MAX_TRIES`` draws."""
    size, gap = config.size, config.gap
    for _ in range(_MAX_TRIES):
        pixels = _curve(rng, config, segments)
        if pixels is None or near[pixels[:, 0], pixels[:, 1]].any():
            continue
        for r, c in pixels:
            near[max(0, r - gap):min(size, r + gap + 1), max(0, c - gap):min(size, c + gap + 1)] = True
        return pixels
    return None


def _layout(rng: np.random.Generator, config: PathfinderConfig):
    """Two long curves and the distractors, each fitting beside the others; None when one could not be placed."""
    near = np.zeros((config.size, config.size), dtype=bool)
    curves = []
    for segments in [config.length] * 2 + [config.distractor_length] * config.distractors:
        pixels = _place(rng, config, near, segments)
        if pixels is None:
            return None
        curves.append(pixels)
    return curves


def _render(config: PathfinderConfig, curves, markers) -> np.ndarray:
    image = np.zeros((config.size, config.size), dtype=np.uint8)
    for pixels in curves:
        image[pixels[:, 0], pixels[:, 1]] = INK
    for r, c in markers:
        image[max(0, r - 1):r + 2, max(0, c - 1):c + 2] = INK
    return image


def _distance(a, b) -> float:
    return math.hypot(a[0] - b[0], a[1] - b[1])


def _self_touching(curve: np.ndarray) -> bool:
    """Whether the marker squares at the curve's two ends would touch each other."""
    return int(np.abs(curve[0] - curve[-1]).max()) < 4


Example = tuple[np.ndarray, list[tuple[int, int]]]  # an image and its two markers' centres (row, column)


def draw_pair(rng: np.random.Generator, config: PathfinderConfig) -> tuple[Example, Example]:
    """A positive and a negative example whose markers lie equally far apart (within ±1 pixel)."""
    while True:
        curves = _layout(rng, config)
        if curves is None:
            continue
        a = curves[0]
        distance = _distance(a[0], a[-1])
        if distance < config.min_distance or _self_touching(a):
            continue
        ends = [tuple(int(v) for v in a[0]), tuple(int(v) for v in a[-1])]
        positive = (_render(config, curves, ends), ends)
        for _ in range(_MAX_TRIES):
            other = _layout(rng, config)
            if other is None:
                continue
            pairs = [(tuple(int(v) for v in p), tuple(int(v) for v in q))
                     for p in (other[0][0], other[0][-1]) for q in (other[1][0], other[1][-1])]
            close = [(p, q) for p, q in pairs if abs(_distance(p, q) - distance) <= 1.0]
            if close:
                p, q = close[rng.integers(len(close))]
                return positive, (_render(config, other, [p, q]), [p, q])


def generate(count: int, seed: int, config: PathfinderConfig = PathfinderConfig(),
             progress: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``count`` images (count, size, size) uint8 and their labels (1 = positive) from ``seed``: ``count // 2``
    positives and as many negatives drawn in pairs (``count`` even), in a seeded random order. ``progress``: a
    bar on stderr (None: only when stderr is a terminal)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 2 or count % 2:
        raise ValueError(f"pathfinder: count must be an even int >= 2, got {count!r}")
    from tqdm.auto import tqdm

    rng = np.random.default_rng(seed)
    images = np.empty((count, config.size, config.size), dtype=np.uint8)
    labels = np.empty(count, dtype=np.int64)
    quiet = progress is False or (progress is None and not sys.stderr.isatty())
    with tqdm(total=count, desc="pathfinder images", unit="img", disable=quiet, leave=False) as bar:
        for i in range(0, count, 2):
            (images[i], _), (images[i + 1], _) = draw_pair(rng, config)
            labels[i], labels[i + 1] = 1, 0
            bar.update(2)
    order = rng.permutation(count)
    return images[order], labels[order]


def pathfinder_arrays(count: int, seed: int, config: PathfinderConfig = PathfinderConfig(),
                      progress: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`generate`, cached: the first call writes ``pathfinder/<parameters>.npz`` to the data cache, later
    calls read it."""
    def build(tmp: Path) -> None:
        images, labels = generate(count, seed, config, progress)
        with open(tmp, "wb") as f:
            np.savez_compressed(f, images=images, labels=labels)

    path = cached(config.cache_name(seed, count), build)
    with np.load(path) as data:
        return data["images"], data["labels"]


def connected(image: np.ndarray, a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether the inked pixels join ``a`` to ``b`` (8-neighbourhood flood fill): the label's ground truth."""
    size = image.shape[0]
    ink = image > 0
    seen = np.zeros_like(ink)
    stack = [a]
    seen[a] = True
    while stack:
        r, c = stack.pop()
        if (r, c) == b:
            return True
        for dr in (-1, 0, 1):
            for dc in (-1, 0, 1):
                rr, cc = r + dr, c + dc
                if 0 <= rr < size and 0 <= cc < size and ink[rr, cc] and not seen[rr, cc]:
                    seen[rr, cc] = True
                    stack.append((rr, cc))
    return False


def save_examples(path: str | Path, per_class: int = 4, seed: int = 0,
                  configs: tuple[PathfinderConfig, ...] = tuple(PathfinderConfig(length=n) for n in (6, 9, 14))
                  ) -> Path:
    """A PNG of ``per_class`` positive and negative pictures per difficulty (one row each), drawn from ``seed``,
    each titled with its class; needs matplotlib (``pip install 'tokenmix[plot]'``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError:
        raise ModuleNotFoundError("pathfinder: drawing examples needs matplotlib: pip install 'tokenmix[plot]'") from None
    rng = np.random.default_rng(seed)
    figure, axes = plt.subplots(len(configs), 2 * per_class, figsize=(2 * per_class * 1.3, len(configs) * 1.5),
                                squeeze=False)
    for row, config in enumerate(configs):
        for i in range(per_class):
            pair = draw_pair(rng, config)
            for j, ((image, _), name) in enumerate(zip(pair, ("joined", "apart"))):
                ax = axes[row, 2 * i + j]
                ax.imshow(image, cmap="gray", vmin=0, vmax=INK)
                ax.set_title(f"{name} (length {config.length})" if i == 0 else name, fontsize=7)
                ax.set_xticks([])
                ax.set_yticks([])
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
