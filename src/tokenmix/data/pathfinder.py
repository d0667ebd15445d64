"""Pathfinder images (Linsley et al., 2018; the Long Range Arena's image task, Tay et al., 2021), generated here.

An image is a ``size x size`` grey canvas of dashed curves and two round markers. It is **positive** when both
markers sit on the two ends of one curve, **negative** when they sit on the ends of two different curves.
Written from the published descriptions (no code copied):

* a curve is a chain of ``dashes`` straight dashes ("paddles") of ``dash`` pixels, ``space`` pixels apart;
  each dash turns from the previous one by an angle drawn uniformly within ``±max_turn`` degrees (the
  contour's continuity), the first direction uniform. Strokes are drawn anti-aliased, ``width`` pixels wide,
  as 8-bit grey levels (a pixel's level is how much of it the nearest stroke covers), as Linsley et al.'s
  pictures and LRA's 256-level tokens are;
* every image holds two long curves of ``length`` dashes (the difficulty: LRA's 6, 9 and 14) — the *path*,
  whose two ends carry the markers, and its *twin*, drawn by the same law — and ``distractors`` short curves of
  ``distractor_length`` dashes (the same dashes and turns). Curves keep ``gap`` pixels between their centre
  lines (and ``gap + marker`` from the long curves' ends), and a curve keeps that distance from itself, so the
  only way from one marker to the other is along one curve;
* a marker is a disc of radius ``marker`` centred on a path end: both markers alike and round, so they do
  not tell which way the curve leaves them.

**The classes differ in one thing only.** One of the two long curves is *cut*: one of its inner dashes (at
least ``min_piece`` dashes from either end) is left out, which leaves a gap of ``dash + 2 space`` pixels —
wider than the spaces between dashes, so the cut curve is two curves. In a positive the twin is cut and the
path is whole; in a negative the path is cut, so its two ends (the markers) lie on two different curves. The
layout — every curve, which long curve is the path, where the markers are, which dash a cut removes — is drawn
before the label and does not depend on it, and the two long curves are exchangeable (drawn, checked and
placed alike, the path picked from them at random). So both classes hold the same number of curves with the
same lengths (one whole long curve, two pieces, the distractors), the same ink, the same marker distances and
the same strokes next to each marker; what tells them apart is whether the curve that leaves one marker
arrives at the other — which must be traced. (Following one curve from one marker to its far end and
finding no marker there, or finding it short, is that tracing.) This matching goes beyond the published
descriptions, whose negatives draw two separate curves; we do it so that cheap statistics — marker geometry,
ink, connected-component counts and sizes — carry no label (``tokenmix data audit pathfinder`` checks this on
held-out seeds).

:func:`generate` draws ``count`` images from ``numpy.random.default_rng(seed)`` (half of each class, in a
seeded random order), so a seed fixes the data set; :func:`pathfinder_arrays` caches them in the data cache
(:mod:`.cache`) under a name that spells out every parameter, with a progress bar while generating.
:func:`connected` is the rule: whether both markers lie in one connected component of the inked pixels once
the spaces between dashes are bridged.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .cache import cached

__all__ = ["PathfinderConfig", "generate", "generate_examples", "draw", "draw_pair", "pathfinder_arrays",
           "connected", "bridged", "save_examples", "INK", "VERSION"]

INK = 255  # the grey level of a fully covered pixel
VERSION = 2  # of the generator: part of the cache name
_MAX_TRIES = 200  # starts of one curve before the whole layout starts again
_TURN_TRIES = 12  # draws of one dash's turn before the curve starts again
_STEP = 0.5  # pixels between the centre-line samples that the distance checks use


@dataclass(frozen=True)
class PathfinderConfig:
    """The generator's parameters (see the module docstring); the defaults are LRA's 32 x 32 hard split
    (curves of 14 dashes)."""

    size: int = 32
    length: int = 14
    dash: float = 2.0
    space: float = 1.5
    max_turn: float = 30.0
    width: float = 1.0
    gap: float = 4.0
    marker: float = 1.5
    distractors: int = 2
    distractor_length: int = 4
    min_distance: float = 6.0
    min_piece: int = 2

    def __post_init__(self) -> None:
        for name in ("size", "length", "distractor_length", "min_piece"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"pathfinder: {name} must be a positive int, got {value!r}")
        if isinstance(self.distractors, bool) or not isinstance(self.distractors, int) or self.distractors < 0:
            raise ValueError(f"pathfinder: distractors must be an int >= 0, got {self.distractors!r}")
        if self.size < 16:
            raise ValueError(f"pathfinder: size must be >= 16 (two long curves and their markers), got {self.size}")
        for name in ("dash", "space", "max_turn", "width", "gap", "marker", "min_distance"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"pathfinder: {name} must be a finite number >= 0, got {value!r}")
        if self.dash < 1 or self.width <= 0:
            raise ValueError(f"pathfinder: dash must be >= 1 pixel and width > 0, got {self.dash}, {self.width}")
        if self.length < 2 * self.min_piece + 1:
            raise ValueError(f"pathfinder: length must be >= 2 min_piece + 1 = {2 * self.min_piece + 1} (a cut "
                             f"leaves two pieces of min_piece dashes at least), got {self.length}")

    def cache_name(self, seed: int, count: int) -> str:
        fields = "-".join(f"{k}{v:g}" if isinstance(v, float) else f"{k}{v}" for k, v in asdict(self).items())
        return f"pathfinder/v{VERSION}-{fields}-seed{seed}-n{count}.npz"


@dataclass(frozen=True)
class _Curve:
    """One curve: its dashes (n, 2, 2: start and end, rows and columns) and its centre line, sampled every
    ``_STEP`` pixels through dashes and spaces alike (m, 2)."""

    dashes: np.ndarray
    line: np.ndarray

    @property
    def ends(self) -> np.ndarray:
        return np.stack([self.dashes[0, 0], self.dashes[-1, 1]])


def _distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(-1))


class _Room:
    """What a new curve must keep clear of: the centre lines of the curves placed so far (by ``gap``) and the
    ends of the long ones (by ``gap + marker``, room for a marker)."""

    def __init__(self, config: PathfinderConfig) -> None:
        self.config = config
        self.lines = np.zeros((0, 2))
        self.ends = np.zeros((0, 2))
        self.low, self.high = config.marker + 0.5, config.size - 1.5 - config.marker

    def clear(self, points: np.ndarray, margin: float) -> bool:
        """Whether ``points`` lie inside the canvas (less a margin for the markers), at least ``margin`` from
        every placed line, and ``gap + marker`` from every long curve's end."""
        if points.min() < self.low or points.max() > self.high:
            return False
        if len(self.lines) and _distances(points, self.lines).min() < margin:
            return False
        return not len(self.ends) or _distances(points, self.ends).min() >= self.config.gap + self.config.marker

    def add(self, curve: _Curve, long: bool) -> None:
        self.lines = np.concatenate([self.lines, curve.line])
        if long:
            self.ends = np.concatenate([self.ends, curve.ends])


def _grow(rng: np.random.Generator, room: _Room, dashes: int, long: bool) -> _Curve | None:
    """A curve of ``dashes`` dashes grown one dash at a time from a uniform start: the first direction uniform,
    each later dash turning from the one before by an angle uniform within ``±max_turn``, among those that keep
    it clear of the
    ``room`` and of the curve itself (``_TURN_TRIES`` draws; None when none does). A long curve's ends also keep
    ``gap + marker`` from the placed lines, and its two ends ``min_distance`` apart."""
    config = room.config
    period, turn = config.dash + config.space, math.radians(config.max_turn)
    clear_end = config.gap + config.marker if long else config.gap
    start = rng.uniform(room.low, room.high, size=2)
    if not room.clear(start[None], clear_end):
        return None
    angle = 0.0
    t = np.arange(0.0, period, _STEP)
    point, starts, lines, arcs = start, [], [], []
    for i in range(dashes):
        last = i == dashes - 1
        reach = t[t <= config.dash] if last else t
        for _ in range(_TURN_TRIES):
            heading = angle + rng.uniform(-turn, turn) if i else rng.uniform(0, 2 * math.pi)
            unit = np.array([math.sin(heading), math.cos(heading)])
            samples = point + reach[:, None] * unit
            if last:
                samples = np.concatenate([samples, (point + config.dash * unit)[None]])
            if not room.clear(samples, config.gap):
                continue
            arc = i * period + np.concatenate([reach, [config.dash]] if last else [reach])
            if lines:
                done, done_arc = np.concatenate(lines), np.concatenate(arcs)
                far = np.abs(arc[:, None] - done_arc[None, :]) >= 2.5 * config.gap
                if (far & (_distances(samples, done) < config.gap)).any():
                    continue
            break
        else:
            return None
        starts.append((point, point + config.dash * unit))
        lines.append(samples)
        arcs.append(arc)
        angle, point = heading, point + period * unit
    curve = _Curve(np.array(starts), np.concatenate(lines))
    if long and (np.hypot(*(curve.ends[0] - curve.ends[1])) < config.min_distance
                 or not room.clear(curve.ends[-1:], clear_end)):
        return None
    return curve


def _layout(rng: np.random.Generator, config: PathfinderConfig) -> list[_Curve] | None:
    """The two long curves, then the distractors, each grown beside those before it; None when one could not
    be grown in ``_MAX_TRIES`` starts."""
    room = _Room(config)
    placed: list[_Curve] = []
    for index, dashes in enumerate([config.length] * 2 + [config.distractor_length] * config.distractors):
        long = index < 2
        for _ in range(_MAX_TRIES):
            if (curve := _grow(rng, room, dashes, long)) is not None:
                break
        else:
            return None
        room.add(curve, long)
        placed.append(curve)
    return placed


def _coverage(points: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The distance (P, S) from each point to each segment."""
    direction = ends - starts
    length2 = np.maximum((direction ** 2).sum(-1), 1e-12)
    t = ((points[:, None, :] - starts[None]) * direction[None]).sum(-1) / length2
    nearest = starts[None] + np.clip(t, 0, 1)[..., None] * direction[None]
    return np.sqrt(((points[:, None, :] - nearest) ** 2).sum(-1))


def _render(config: PathfinderConfig, segments: np.ndarray, markers: np.ndarray) -> np.ndarray:
    """The anti-aliased picture: each pixel's level is how much the nearest stroke (``width`` wide) or marker
    disc covers it, 0 to ``INK``."""
    size = config.size
    rows, cols = np.meshgrid(np.arange(size, dtype=float), np.arange(size, dtype=float), indexing="ij")
    pixels = np.stack([rows.ravel(), cols.ravel()], axis=1)
    stroke = np.clip(config.width / 2 + 0.5 - _coverage(pixels, segments[:, 0], segments[:, 1]), 0, 1).max(1)
    disc = np.clip(config.marker + 0.5 - _distances(pixels, markers), 0, 1).max(1)
    return np.rint(np.maximum(stroke, disc) * INK).astype(np.uint8).reshape(size, size)


Example = tuple[np.ndarray, list[tuple[int, int]]]  # an image and its two markers' centres (row, column), rounded


def draw(rng: np.random.Generator, config: PathfinderConfig, label: int) -> Example:
    """One picture of class ``label`` (1: both markers on one curve) and its markers. The layout, the path, the
    markers and the cut dash are drawn first, alike for both labels; ``label`` only says which long curve the
    cut falls on (the twin for 1, the path for 0)."""
    while (curves := _layout(rng, config)) is None:
        pass
    path = int(rng.integers(2))
    cut = int(rng.integers(config.min_piece, config.length - config.min_piece))
    cut_curve = 1 - path if label else path
    segments = np.concatenate([np.delete(c.dashes, cut, axis=0) if i == cut_curve else c.dashes
                               for i, c in enumerate(curves)])
    markers = curves[path].ends
    image = _render(config, segments, markers)
    return image, [tuple(int(v) for v in np.rint(m)) for m in markers]


def draw_pair(rng: np.random.Generator, config: PathfinderConfig) -> tuple[Example, Example]:
    """A positive and a negative example, each of its own layout."""
    return draw(rng, config, 1), draw(rng, config, 0)


def generate_examples(count: int, seed: int, config: PathfinderConfig = PathfinderConfig(),
                      progress: bool | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``count`` images (count, size, size) uint8, their labels (1 = positive) and their markers' centres
    (count, 2, 2: rows and columns, rounded) from ``seed``: ``count // 2`` of each class (``count`` even), in a
    seeded random order. ``progress``: a bar on stderr (None: only when stderr is a terminal)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 2 or count % 2:
        raise ValueError(f"pathfinder: count must be an even int >= 2, got {count!r}")
    from tqdm.auto import tqdm

    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.repeat(np.array([1, 0], dtype=np.int64), count // 2))
    images = np.empty((count, config.size, config.size), dtype=np.uint8)
    markers = np.empty((count, 2, 2), dtype=np.int64)
    quiet = progress is False or (progress is None and not sys.stderr.isatty())
    with tqdm(total=count, desc="pathfinder images", unit="img", disable=quiet, leave=False) as bar:
        for i, label in enumerate(labels):
            images[i], markers[i] = draw(rng, config, int(label))
            bar.update(1)
    return images, labels, markers


def generate(count: int, seed: int, config: PathfinderConfig = PathfinderConfig(),
             progress: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`generate_examples` without the markers: images (count, size, size) uint8 and labels."""
    images, labels, _ = generate_examples(count, seed, config, progress)
    return images, labels


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


def bridged(image: np.ndarray, threshold: int = 0, bridge: int = 1) -> np.ndarray:
    """The inked pixels (level above ``threshold``), grown ``bridge`` times by one pixel (3 x 3 dilation), so
    that the spaces between the dashes of one curve close; curves keep more than that apart."""
    ink = image > threshold
    for _ in range(bridge):
        grown = ink.copy()
        grown[1:] |= ink[:-1]
        grown[:-1] |= ink[1:]
        grown[:, 1:] |= grown[:, :-1].copy()
        grown[:, :-1] |= grown[:, 1:].copy()
        ink = grown
    return ink


def connected(image: np.ndarray, a: tuple[int, int], b: tuple[int, int], threshold: int = 0,
              bridge: int = 1) -> bool:
    """Whether the inked pixels join ``a`` to ``b`` once the spaces between dashes are bridged (:func:`bridged`;
    8-neighbourhood flood fill): the rule that decides the label."""
    ink = bridged(image, threshold, bridge)
    size = ink.shape
    seen = np.zeros_like(ink)
    stack = [tuple(a)]
    seen[tuple(a)] = True
    while stack:
        r, c = stack.pop()
        if (r, c) == tuple(b):
            return True
        for dr in (-1, 0, 1):
            for dc in (-1, 0, 1):
                rr, cc = r + dr, c + dc
                if 0 <= rr < size[0] and 0 <= cc < size[1] and ink[rr, cc] and not seen[rr, cc]:
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
