"""The curves of a Pathfinder picture (:mod:`tokenmix.data.pathfinder`): growing dashed curves dash by dash in the
room the curves placed before them leave, laying out the two long curves and the distractors, and the dashes a
long curve may lose (or move aside) so that it is cut into two curves whose inked pixels never touch. Geometry
only: the pictures, the labels and the data sets are drawn in :mod:`.pathfinder`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

# the generator's parameters, :class:`tokenmix.data.pathfinder.PathfinderConfig` (that module imports this one)
PathfinderConfig = Any

_MAX_TRIES = 30  # starts of one curve before the whole layout starts again
_TURN_TRIES = 8  # draws of one dash's turn before the curve is dropped
_BATCH = 48  # curves grown side by side
_BRIDGE_BATCH = 4 * _BATCH  # side by side when a curve must end near a given point (few do)
_STEP = 0.5  # pixels between the centre-line samples that the distance checks use
_GRID = 2  # cells a pixel of the masks that keep curves apart


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
    capped ends of the long ones (so that no pixel of a cap touches another curve's; :func:`_apart`). Kept as
    two masks on a grid of ``_GRID`` cells a pixel — where a point of a curve may not lie, and where a long
    curve's end may not — each disc grown by the cells' half diagonal, so a point passes only if it keeps the
    distance."""

    def __init__(self, config: PathfinderConfig) -> None:
        self.config = config
        cells = config.size * _GRID + 1
        self.masks = {"line": np.zeros((cells, cells), dtype=bool), "end": np.zeros((cells, cells), dtype=bool)}
        self.low, self.high = config.marker + 0.5, config.size - 1.5 - config.marker
        self.narrow, self.wide, self.widest = (_disc(config.gap), _disc(_apart(config, caps=1)),
                                               _disc(_apart(config, caps=2)))

    def clear(self, points: np.ndarray, wide: bool = False) -> np.ndarray:
        """Per candidate (points: K, m, 2), whether all its points lie inside the canvas (less a margin for the
        markers) and far enough from every placed line and cap that no pixels touch (``wide``: the points are a
        long curve's capped end)."""
        flat = points.reshape(len(points), -1)
        ok = (flat.min(1) >= self.low) & (flat.max(1) <= self.high)
        mask = self.masks["end" if wide else "line"]
        cells = np.minimum(np.maximum((points * _GRID + 0.5).astype(np.int64), 0), len(mask) - 1)
        return ok & ~mask[cells[..., 0], cells[..., 1]].any(axis=1)

    def add(self, curve: _Curve, long: bool) -> None:
        stamps = [("line", curve.line, self.narrow), ("end", curve.line, self.wide)]
        if long:
            stamps += [("line", curve.ends, self.wide), ("end", curve.ends, self.widest)]
        for key, points, disc in stamps:
            mask = self.masks[key]
            cells = (np.rint(points * _GRID).astype(np.int64)[:, None, :] + disc[None]).reshape(-1, 2)
            cells = cells[((cells >= 0) & (cells < len(mask))).all(axis=1)]
            mask[cells[:, 0], cells[:, 1]] = True


def _disc(radius: float) -> np.ndarray:
    """The grid offsets (n, 2) of the cells whose centres may lie within ``radius`` pixels of a point that
    rounds to the centre cell (the radius grown by a cell's half diagonal)."""
    reach = radius * _GRID + math.sqrt(0.5)
    span = np.arange(-math.ceil(reach), math.ceil(reach) + 1)
    rows, cols = np.meshgrid(span, span, indexing="ij")
    keep = np.hypot(rows, cols) < reach
    return np.stack([rows[keep], cols[keep]], axis=1)


def _grow(rng: np.random.Generator, room: _Room, dashes: int, long: bool,
          between: tuple[np.ndarray, np.ndarray, float, float] | None = None) -> _Curve | None:
    """A curve of ``dashes`` dashes grown one dash at a time from a uniform start: the first direction uniform,
    each later dash turning from the one before by an angle uniform within ``±max_turn``, the first of
    ``_TURN_TRIES`` draws that keeps it clear of the ``room`` and of the curve itself; a curve with no such draw
    is dropped. ``_BATCH`` curves grow side by side (one array operation a dash) and the first that reaches its
    length is taken — the same law as growing them one after the other; None when none does. A long curve's
    ends also keep their caps clear of the placed lines (:func:`_apart`), and its two ends ``min_distance`` apart.
    ``between`` (a, b, low, high): the curve starts uniformly within ``low``-``high`` pixels of point ``a`` and is
    kept only if it ends that near ``b`` (more curves grow side by side, since few end there)."""
    config = room.config
    period, turn = config.dash + config.space, math.radians(config.max_turn)
    if between is None:
        point = rng.uniform(room.low, room.high, size=(_BATCH, 2))
    else:
        start, _, low, high = between
        radius = rng.uniform(low, high, size=_BRIDGE_BATCH)
        angle = rng.uniform(0, 2 * math.pi, size=_BRIDGE_BATCH)
        point = start + radius[:, None] * np.stack([np.sin(angle), np.cos(angle)], axis=1)
    alive = np.flatnonzero(room.clear(point[:, None, :], wide=long))
    point = point[alive]
    t = np.arange(0.0, period, _STEP)
    heading = np.zeros(len(point))
    bias = rng.uniform(-1, 1, size=len(point)) * math.radians(config.bend)
    starts, heads, lines = [], [], []
    for i in range(dashes):
        if not len(point):
            return None
        drawn = (heading[:, None] + bias[:, None] + rng.uniform(-turn, turn, size=(len(point), _TURN_TRIES)) if i
                 else rng.uniform(0, 2 * math.pi, size=(len(point), _TURN_TRIES)))
        reach = np.concatenate([t[t < config.dash], [config.dash]]) if i == dashes - 1 else t
        samples = np.empty((len(point), _TURN_TRIES, len(reach), 2))
        samples[..., 0] = point[:, None, None, 0] + reach * np.sin(drawn)[..., None]
        samples[..., 1] = point[:, None, None, 1] + reach * np.cos(drawn)[..., None]
        ok = room.clear(samples.reshape(-1, len(reach), 2)).reshape(len(point), _TURN_TRIES)
        far = int(max(0, math.floor((i * period - 2.5 * config.gap) / period)))  # earlier dashes far along
        if far and ok.any():
            before = np.concatenate(lines[:far], axis=1)  # (B, P, 2)
            flat = samples.reshape(len(point), -1, 2)
            squared = ((flat ** 2).sum(-1)[:, :, None] + (before ** 2).sum(-1)[:, None, :]
                       - 2 * flat @ before.transpose(0, 2, 1))  # (B, K m, P) squared distances
            ok &= (squared.reshape(len(point), _TURN_TRIES, -1) >= config.gap ** 2).all(-1)
        keep = ok.any(1)
        first = ok.argmax(1)[keep]
        alive, point, heading, bias = alive[keep], point[keep], drawn[keep, first], bias[keep]
        starts, heads = [a[keep] for a in starts], [h[keep] for h in heads]
        lines = [line[keep] for line in lines] + [samples[keep, first]]
        starts.append(point)
        heads.append(heading)
        point = point + period * np.stack([np.sin(heading), np.cos(heading)], axis=1)
    for b in range(len(alive)):
        begin = np.stack([s[b] for s in starts])
        unit = np.stack([np.sin([h[b] for h in heads]), np.cos([h[b] for h in heads])], axis=1)
        curve = _Curve(np.stack([begin, begin + config.dash * unit], axis=1), np.concatenate([x[b] for x in lines]))
        if between is not None and not between[2] <= np.hypot(*(curve.ends[1] - between[1])) <= between[3]:
            continue
        if not long or (np.hypot(*(curve.ends[0] - curve.ends[1])) >= config.min_distance
                        and room.clear(curve.ends[None, -1:], wide=True)[0]):
            return curve
    return None


def _layout(rng: np.random.Generator, config: PathfinderConfig) -> list[_Curve] | None:
    """The two long curves, then the distractors, each grown beside those before it; None when one could not
    be grown in ``_MAX_TRIES`` starts. With ``twin_near``, the second long curve runs from near one end of the
    first (which end drawn at random) to near the other: each of its ends within ``twin_near`` pixels of one of
    the first's, and as far as caps that do not touch (:func:`_apart`)."""
    room = _Room(config)
    placed: list[_Curve] = []
    for index, dashes in enumerate([config.length] * 2 + [config.distractor_length] * config.distractors):
        long, between = index < 2, None
        if index == 1 and config.twin_near:
            a, b = placed[0].ends if rng.integers(2) else placed[0].ends[::-1]
            between = (a, b, _apart(config, caps=2), config.twin_near)
        for _ in range(_MAX_TRIES):
            if (curve := _grow(rng, room, dashes, long, between)) is not None:
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


def _apart(config: PathfinderConfig, caps: int = 0) -> float:
    """The least distance between two centre lines (``caps``: how many of the two are a cap's centre instead) at
    which no inked pixel of one (closer than ``width / 2 + 0.5``, or ``marker + 0.5`` to a cap's centre)
    neighbours one of the other (8-neighbourhood: pixel centres up to √2 apart)."""
    reach = [config.marker + 0.5] * caps + [config.width / 2 + 0.5] * (2 - caps)
    return sum(reach) + math.sqrt(2) + 0.01


def _cuts(curve: _Curve, config: PathfinderConfig) -> list[int]:
    """The dashes whose removal cuts ``curve`` into two curves: at least ``min_piece`` dashes from either end,
    ``clearance`` pixels from both ends and ``chord_clearance`` from the straight segment between them (every
    point of the dash; both 0 by default), and leaving the two pieces, caps included, :func:`_apart` everywhere
    (so no inked pixel of one touches one of the other)."""
    t = np.linspace(0, 1, max(2, int(math.ceil(config.dash / 0.25)) + 1))
    starts, ends = curve.dashes[:, None, 0, :], curve.dashes[:, None, 1, :]
    points = starts + t[None, :, None] * (ends - starts)
    first, last = curve.ends[:1], curve.ends[1:]
    out = []
    for j in range(config.min_piece, len(curve.dashes) - config.min_piece):
        before, after = points[:j].reshape(-1, 2), points[j + 1:].reshape(-1, 2)
        if (_distances(points[j], curve.ends).min() < config.clearance
                or _coverage(points[j], first, last).min() < config.chord_clearance):
            continue
        if (_distances(before, after).min() >= _apart(config)
                and min(_distances(first, after).min(), _distances(last, before).min()) >= _apart(config, caps=1)):
            out.append(j)
    return out


def _moves(curves: list[_Curve], index: int, cuts: list[int], config: PathfinderConfig) -> list[np.ndarray]:
    """For the long curve ``curves[index]``: each of its ``cuts`` with the dash moved ``shift`` pixels to either
    side, as (dash index, moved dash (2, 2)) pairs, kept where the moved dash stays on the canvas and touches no
    other dash and no cap (:func:`_apart`), so that it is a component of its own."""
    curve = curves[index]
    others = np.concatenate([c.dashes for k, c in enumerate(curves) if k != index])
    caps = np.concatenate([c.ends for c in curves[:2]])
    low, high = config.marker + 0.5, config.size - 1.5 - config.marker
    t = np.linspace(0, 1, max(2, int(math.ceil(config.dash / 0.25)) + 1))
    out = []
    for j in cuts:
        start, end = curve.dashes[j]
        normal = np.array([end[1] - start[1], start[0] - end[0]]) / np.hypot(*(end - start))
        rest = np.concatenate([np.delete(curve.dashes, j, axis=0), others])
        for side in (1.0, -1.0):
            moved = curve.dashes[j] + side * config.shift * normal
            points = moved[0] + t[:, None] * (moved[1] - moved[0])
            if (points.min() >= low and points.max() <= high
                    and _coverage(points, rest[:, 0], rest[:, 1]).min() >= _apart(config)
                    and _distances(points, caps).min() >= _apart(config, caps=1)):
                out.append((j, moved))
    return out
