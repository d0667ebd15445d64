"""Pathfinder (Linsley et al., 2018), the Long Range Arena's image task (Tay et al., 2021): are the two markers of a
32 x 32 picture joined by one curve? Fed as the picture's 1,024 pixels in row-major order, one token each.

The pictures are generated here (:mod:`tokenmix.data.pathfinder`: dashed, anti-aliased curves; two long curves
of ``length`` dashes, the difficulty (Linsley et al.'s 6, 9 and 14; LRA's Pathfinder is the 14), one of them cut
in two; ``distractors`` short curves; the markers at both ends of one long curve; the classes differ only in which
long curve is cut, so they match in marker geometry, ink and connected-component sizes), cached in the data cache
after the first build. Tokens (``vocab_size = 257``): ``1 + g`` for the pixel's 8-bit grey level ``g`` (LRA feeds
the grey levels, a vocabulary of 256), ``0`` padding (never used: every sequence is ``size²`` long).

Paths of fewer than 14 dashes are retired for claims (:meth:`PathfinderTask.retired_setting`; they still train):
the markers predict where a shorter path runs, and so where a negative's cut is, and the audit's cheap baselines
read it (best of them 0.83 at 6 dashes, 0.57 at 9; at 14 dashes 0.51). Presets: ``quick`` (curves of 9 dashes,
2,000 / 500 / 500 pictures: a fast trial, not for claims) and ``paper`` (LRA's hard split: 14 dashes; 20,000 /
2,000 / 2,000 pictures, against LRA's 160,000 / 20,000 / 20,000: the size two CPU cores can train on). Each split
is its own seeded draw (seed ``3 s + i`` for task seed ``s`` and split ``i``), half of each class, so ``seed``
fixes all three. ``tokenmix data audit pathfinder`` scores cheap baselines on held-out seeds.
"""

from __future__ import annotations

import numpy as np
import torch

from ..data.pathfinder import PathfinderConfig, pathfinder_arrays
from .base import Task, TaskShape
from .batches import Split
from .registry import register_task

__all__ = ["PathfinderTask", "LEVEL0", "SHORTEST_FOR_CLAIMS"]

LEVEL0 = 1  # the token of grey level 0; level g is LEVEL0 + g
SHORTEST_FOR_CLAIMS = 14  # dashes: the markers predict where a shorter path runs, and so the cut (the audit)
# the best cheap baseline at each shorter audited length (`tokenmix data audit pathfinder`, generator version 3)
_SHORTCUT_CEILINGS = {6: ("0.83", "the line between the markers alone 0.77"),
                      9: ("0.57", "the picture in the markers' frame alone 0.56")}

PRESETS = {
    "quick": dict(length=9, train_size=2_000, val_size=500, test_size=500),
    "paper": dict(length=14, train_size=20_000, val_size=2_000, test_size=2_000),
}


@register_task(
    "pathfinder",
    description="Pathfinder (LRA image task): are the two markers on one curve? 32 x 32 grey pictures as 1,024 "
                "pixel tokens",
    kind="classification",
    metric="accuracy",
    source="Linsley et al. (2018); Tay et al. (2021) Long Range Arena; generated here from the published "
           "description (tokenmix.data.pathfinder)",
    seed_draws="every picture of every split, test included (generated from it)",
)
class PathfinderTask(Task):
    """Options (``None`` = from ``preset``): ``length`` (dashes of the two long curves: the difficulty),
    ``distractors``, ``size`` (pixels a side), ``train_size``, ``val_size``, ``test_size`` (even numbers),
    ``progress`` (a bar while generating; None: on a terminal). See the module docstring."""

    num_classes = 2
    vocab_size = 257
    pad_id = 0
    data_source = None  # generated
    retired_settings = f"length < {SHORTEST_FOR_CLAIMS} dashes"

    def __init__(self, preset: str = "quick", seed: int = 0, length: int | None = None, distractors: int = 2,
                 size: int = 32, train_size: int | None = None, val_size: int | None = None,
                 test_size: int | None = None, progress: bool | None = None) -> None:
        cfg, config = self._config(preset, seed, length, distractors, size, train_size, val_size, test_size)
        sizes = [cfg["train_size"], cfg["val_size"], cfg["test_size"]]
        self.preset, self.seed, self.config = preset, seed, config
        self.max_len = size * size
        self.splits = {}
        for i, (name, count) in enumerate(zip(("train", "val", "test"), sizes)):
            # each split its own draw (seed 3 s + i: distinct over every seed s), balanced exactly
            images, labels = pathfinder_arrays(count, 3 * seed + i, config, progress)
            ids = torch.from_numpy(images.reshape(count, -1).astype(np.int64) + LEVEL0)
            self.splits[name] = Split(labels=torch.from_numpy(labels).long(), ids=ids,
                                      lengths=torch.full((count,), self.max_len, dtype=torch.long))

    @classmethod
    def _config(cls, preset: str, seed: int, length: int | None, distractors: int, size: int,
                train_size: int | None, val_size: int | None, test_size: int | None
                ) -> tuple[dict[str, int], PathfinderConfig]:
        if preset not in PRESETS:
            cls._fail(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
        given = dict(length=length, train_size=train_size, val_size=val_size, test_size=test_size)
        cfg = {k: (PRESETS[preset][k] if v is None else v) for k, v in given.items()}
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            cls._fail(f"seed must be an int >= 0, got {seed!r}")
        for name in ("train_size", "val_size", "test_size"):
            value = cfg[name]
            if isinstance(value, bool) or not isinstance(value, int) or value < 2 or value % 2:
                cls._fail(f"{name} must be an even int >= 2 (the classes come in pairs), got {value!r}")
        try:
            config = PathfinderConfig(size=size, length=cfg["length"], distractors=distractors)
        except ValueError as error:
            cls._fail(str(error).removeprefix("pathfinder: "))
        return cfg, config

    @classmethod
    def retired_setting(cls, options: dict) -> str | None:
        """Paths shorter than :data:`SHORTEST_FOR_CLAIMS` dashes are retired for claims (they still train)."""
        preset = options.get("preset", "quick")
        length = options.get("length") or PRESETS.get(preset, PRESETS["quick"])["length"]
        if isinstance(length, int) and length < SHORTEST_FOR_CLAIMS:
            audited = max((n for n in _SHORTCUT_CEILINGS if n <= length), default=min(_SHORTCUT_CEILINGS))
            ceiling, best_single = _SHORTCUT_CEILINGS[audited]
            unaudited = "" if audited == length else f"are not audited, and at {audited} dashes paths "
            return (f"paths of {length} dashes (fewer than {SHORTEST_FOR_CLAIMS}) {unaudited}run where their markers "
                    f"predict, and a negative's cut with them: cheap baselines on held-out seeds tell the class "
                    f"{ceiling} of the time at {audited} dashes ({best_single}; `tokenmix data audit pathfinder`), "
                    f"above the 0.55 a claim's task may leak, so accuracy there does not measure tracing.")
        return None

    @classmethod
    def stated_shape(cls, preset: str = "quick", seed: int = 0, length: int | None = None, distractors: int = 2,
                     size: int = 32, train_size: int | None = None, val_size: int | None = None,
                     test_size: int | None = None, progress: bool | None = None) -> TaskShape:
        """The shape from the options alone (see :class:`~tokenmix.tasks.base.Task`)."""
        cfg, _ = cls._config(preset, seed, length, distractors, size, train_size, val_size, test_size)
        return TaskShape({s: cfg[f"{s}_size"] for s in ("train", "val", "test")}, num_classes=2, vocab_size=257,
                         max_len=size * size, pad_id=cls.pad_id)
