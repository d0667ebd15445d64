"""Pathfinder images (Linsley et al., 2018; the Long Range Arena's image task, Tay et al., 2021), generated here.

An image is a ``size x size`` grey canvas of dashed curves and two round markers. It is **positive** when both
markers sit on the two ends of one curve, **negative** when they sit on the ends of two different curves.
Written from the published descriptions (no code copied):

* a curve is a chain of straight dashes ("paddles") of ``dash`` pixels, ``space`` pixels apart; each dash turns
  from the one before by the curve's *bend* plus an angle drawn uniformly within ``±max_turn`` degrees (the
  contour's continuity), the first direction uniform. The bend is drawn once a curve, uniformly within ``±bend``
  degrees, so curves are arcs and spirals of every curvature, bending either way, as well as near-straight
  strokes. Without it (Linsley et al.'s law) a path of 9 dashes stays close enough to the straight line between
  its markers that the pixels along that line show the cut (0.59 of the time, version 2 of this generator; 0.52
  with the bend, version 3). Strokes are anti-aliased, ``width`` pixels wide, as 8-bit grey levels (a pixel's
  level is how much of it the nearest stroke covers, times ``level``), as Linsley et al.'s pictures and LRA's
  256-level tokens are. The spaces are narrower than the strokes' faint fringe, so a curve's inked pixels
  (any level above 0) are connected, while its dashes stand apart at mid grey;
* every image holds two long curves of ``length`` dashes (the difficulty: LRA's 6, 9 and 14) — the *path*,
  whose two ends carry the markers, and its *twin*, drawn by the same law — and ``distractors`` short curves of
  ``distractor_length`` dashes (the same dashes and turns). Curves keep ``gap`` pixels between their centre
  lines (more from the long curves' capped ends), and a curve keeps that distance from itself, so no inked
  pixel of one curve touches another's; the only way from one marker to the other is along one curve;
* both ends of both long curves carry a *cap*, a grey disc of radius ``marker``; the two *markers* are the path's
  caps, each with a bright core (a disc of radius ``core``, up to 255). A marker is round, so it does not tell
  which way its curve leaves it, and it covers exactly the pixels of a cap at every grey level below the
  strokes' (only the cores pass a higher threshold): the marker ink joins the marked curves' components, and
  the caps on the twin make up for it, so component sizes do not tell which curve is marked.

**The classes differ in one thing only.** One of the two long curves is *cut*: one of its dashes (at least
``min_piece`` dashes from either end, where the two pieces then keep apart) is left out, which leaves a gap of
``dash + 2 space`` pixels that no inked pixel bridges, so the cut curve is two curves. In a positive the twin
is cut and the path is whole; in a negative the path is cut, so its two ends (the markers) lie on two different
curves. The layout — every curve, which long curve is the path (the markers), which dash each long curve would
lose — is drawn before the label and does not depend on it, and the two long curves are exchangeable (drawn,
checked and capped alike, the path picked from them at random). So both classes hold the same curves (one whole
long curve, two pieces with a cap each, the distractors), the same ink, the same marker positions and
distances, and components of the same sizes at every threshold and dilation; what tells them apart is whether
the curve that leaves one marker arrives at the other, which must be traced. (Following the curve from one
marker to its far end and finding no marker there, or finding it short, is that tracing.) This matching goes
beyond the published descriptions, whose negatives draw two separate curves; it is there so that cheap
statistics carry no label, which ``tokenmix data audit pathfinder`` checks on held-out seeds. One thing it
cannot hide: where a path is short (6 dashes), it lies within a few pixels of its markers, bent or not, and the
cut with it, so the pixels near the markers and between them show the cut. At 9 dashes a weaker form of it
stays: the path lies in a region its markers predict, so the whole picture resampled in the markers' frame still
tells the class 0.56 of the time (all cheap features together 0.57); at 14 nothing cheap passes 0.52. The task
retires both shorter settings for claims (:meth:`tokenmix.tasks.pathfinder.PathfinderTask.retired_setting`). Two options
move the cut away from where cheap features look, for the audit's variants (both 0 by default): ``clearance``,
the least distance in pixels from the cut dash to either end of its curve, and ``chord_clearance``, from the
straight segment between the ends; they select which layouts can be cut, alike for both classes, and move the
leak rather than remove it. A third, ``shift``, moves the cut dash that many pixels sideways instead of leaving
it out (it then touches nothing: the ink stays, the curve is still cut); a fourth, ``twin_near``, grows the twin
from near one end of the path to near the other (each of its ends at most that many pixels from one of the
path's), so that the twin, and a positive's cut, run where the markers predict the path. Both lower the leak a
little, not below 0.55 (the audit notes give their numbers).

:func:`generate` draws ``count`` images from ``numpy.random.default_rng(seed)`` (half of each class, in a
seeded random order), so a seed fixes the data set; :func:`generate_examples` gives the markers' centres too;
:func:`pathfinder_arrays` caches the images in the data cache (:mod:`.cache`) under a name that spells out every
parameter, with a progress bar while generating. :func:`connected` is the rule: whether both markers lie in one
8-connected component of the inked pixels. The curves themselves (growing, layout, cuts) are drawn in
:mod:`.pathfinder_curves`.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .cache import cached
from .pathfinder_curves import _apart, _coverage, _cuts, _distances, _layout, _moves

__all__ = ["PathfinderConfig", "generate", "generate_examples", "draw", "draw_pair", "pathfinder_arrays",
           "connected", "bridged", "save_examples", "INK", "VERSION"]

INK = 255  # the grey level of a fully covered pixel
VERSION = 3  # of the generator: part of the cache name
_MAX_LAYOUTS = 2000  # layouts drawn for one picture before the parameters are declared unworkable


@dataclass(frozen=True)
class PathfinderConfig:
    """The generator's parameters (see the module docstring); the defaults are LRA's 32 x 32 hard split
    (curves of 14 dashes)."""

    size: int = 32
    length: int = 14
    dash: float = 1.5
    space: float = 1.25
    max_turn: float = 30.0
    width: float = 1.0
    gap: float = 3.5
    marker: float = 1.5
    core: float = 0.75
    level: float = 0.5
    distractors: int = 2
    distractor_length: int = 4
    min_distance: float = 6.0
    min_piece: int = 2
    bend: float = 40.0
    clearance: float = 0.0
    chord_clearance: float = 0.0
    shift: float = 0.0
    twin_near: float = 0.0

    def __post_init__(self) -> None:
        for name in ("size", "length", "distractor_length", "min_piece"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"pathfinder: {name} must be a positive int, got {value!r}")
        if isinstance(self.distractors, bool) or not isinstance(self.distractors, int) or self.distractors < 0:
            raise ValueError(f"pathfinder: distractors must be an int >= 0, got {self.distractors!r}")
        if self.size < 16:
            raise ValueError(f"pathfinder: size must be >= 16 (two long curves and their markers), got {self.size}")
        for name in ("dash", "space", "max_turn", "bend", "clearance", "chord_clearance", "shift", "twin_near",
                     "width", "gap", "marker", "core", "level", "min_distance"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"pathfinder: {name} must be a finite number >= 0, got {value!r}")
        if self.dash < 1 or self.width <= 0:
            raise ValueError(f"pathfinder: dash must be >= 1 pixel and width > 0, got {self.dash}, {self.width}")
        if not 0 < self.level < 1 or self.core > self.marker - 1 + self.level:
            raise ValueError(f"pathfinder: need 0 < level < 1 and core <= marker - 1 + level (a marker's core inside "
                             f"its cap at every grey level below the strokes'), got level {self.level}, core "
                             f"{self.core}, marker {self.marker}")
        if self.gap < self.width + 1 + math.sqrt(2) + 0.01 or self.min_distance < 2 * self.marker + 1 + math.sqrt(2):
            raise ValueError(f"pathfinder: need gap >= width + 1 + √2 and min_distance >= 2 marker + 1 + √2 (so "
                             f"that no inked pixels of two curves, or of the two markers, touch), got gap {self.gap}, "
                             f"width {self.width}, min_distance {self.min_distance}, marker {self.marker}")
        if self.twin_near and self.twin_near <= _apart(self, caps=2):
            raise ValueError(f"pathfinder: twin_near must be 0 (the twin drawn anywhere) or more than "
                             f"{_apart(self, caps=2):.2f} pixels (two caps closer would touch), got {self.twin_near}")
        if self.length < 2 * self.min_piece + 1:
            raise ValueError(f"pathfinder: length must be >= 2 min_piece + 1 = {2 * self.min_piece + 1} (a cut "
                             f"leaves two pieces of min_piece dashes at least), got {self.length}")
        period = self.dash + self.space
        if not any(min(j, self.length - 1 - j) * period >= self.clearance
                   for j in range(self.min_piece, self.length - self.min_piece)):
            raise ValueError(f"pathfinder: no dash of a curve of {self.length} dashes lies clearance = "
                             f"{self.clearance:g} pixels along the curve from both its ends, so none could be cut: "
                             f"lower clearance or draw longer curves")

    def cache_name(self, seed: int, count: int) -> str:
        fields = "-".join(f"{k}{v:g}" if isinstance(v, float) else f"{k}{v}" for k, v in asdict(self).items())
        return f"pathfinder/v{VERSION}-{fields}-seed{seed}-n{count}.npz"


def _render(config: PathfinderConfig, segments: np.ndarray, caps: np.ndarray, markers: np.ndarray) -> np.ndarray:
    """The anti-aliased picture: each pixel's level is how much the nearest stroke (``width`` wide) or cap (a disc
    of radius ``marker``) covers it, times ``level``; a marker is a cap whose core (a disc of radius ``core``)
    is drawn up to ``INK``. The core lies inside its cap at every grey level below ``level``, so a marker and a
    cap cover the same pixels at every threshold below it, and only the cores pass any threshold above it."""
    size = config.size
    rows, cols = np.meshgrid(np.arange(size, dtype=float), np.arange(size, dtype=float), indexing="ij")
    pixels = np.stack([rows.ravel(), cols.ravel()], axis=1)
    stroke = np.clip(config.width / 2 + 0.5 - _coverage(pixels, segments[:, 0], segments[:, 1]), 0, 1).max(1)
    cap = np.clip(config.marker + 0.5 - _distances(pixels, caps), 0, 1).max(1)
    core = np.clip(config.core + 0.5 - _distances(pixels, markers), 0, 1).max(1)
    level = np.maximum(np.maximum(stroke, cap) * config.level, core)
    return np.rint(level * INK).astype(np.uint8).reshape(size, size)


Example = tuple[np.ndarray, list[tuple[int, int]]]  # an image and its two markers' centres (row, column), rounded


def draw(rng: np.random.Generator, config: PathfinderConfig, label: int) -> Example:
    """One picture of class ``label`` (1: both markers on one curve) and its markers. The layout, the path, the
    markers and each long curve's cut dash (and, with ``shift``, where it moves) are drawn first, alike for both
    labels; ``label`` only says which long curve is cut (the twin for 1, the path for 0)."""
    for _ in range(_MAX_LAYOUTS):
        curves = _layout(rng, config)
        if curves is None or not all(cuts := [_cuts(c, config) for c in curves[:2]]):
            continue
        if not config.shift or all(moves := [_moves(curves, i, cuts[i], config) for i in range(2)]):
            break
    else:
        raise ValueError(f"pathfinder: none of {_MAX_LAYOUTS} layouts drawn with {config} held two long curves that "
                         f"could be cut; ease the constraints (length, size, distractors, min_piece, clearance, "
                         f"chord_clearance, shift)")
    path = int(rng.integers(2))
    if config.shift:
        cut, moved = zip(*[m[int(rng.integers(len(m)))] for m in moves])
    else:
        cut, moved = [int(rng.choice(c)) for c in cuts], [None, None]
    cut_curve = 1 - path if label else path
    segments = [c.dashes for c in curves]
    segments[cut_curve] = np.delete(segments[cut_curve], cut[cut_curve], axis=0)
    if moved[cut_curve] is not None:
        segments.append(moved[cut_curve][None])
    markers = curves[path].ends
    image = _render(config, np.concatenate(segments), np.concatenate([curves[0].ends, curves[1].ends]), markers)
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


def bridged(image: np.ndarray, threshold: int = 0, bridge: int = 0) -> np.ndarray:
    """The inked pixels (level above ``threshold``), grown ``bridge`` times by one pixel (3 x 3 dilation). At
    threshold 0 the spaces between a curve's dashes need no bridge (the strokes' fringe spans them); above it,
    a dilation bridges them — and, past a point, the cuts and the gaps between curves too."""
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
              bridge: int = 0) -> bool:
    """Whether the inked pixels (:func:`bridged`: by default every level above 0, no dilation) join ``a`` to ``b``
    (8-neighbourhood flood fill): the rule that decides the label."""
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
    each titled with its class; needs matplotlib (``pip install 'tokenmix-lab[plot]'``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError:
        raise ModuleNotFoundError("pathfinder: drawing examples needs matplotlib: "
                                  "pip install 'tokenmix-lab[plot]'") from None
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
