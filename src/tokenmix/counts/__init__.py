"""The operation counts of each mechanism, derived from its code: what :meth:`tokenmix.mixers.Mixer.count_ops`
and :meth:`~tokenmix.mixers.Mixer.count_step_ops` return and ``tokenmix count`` (:mod:`tokenmix.counting`)
tabulates.

One module per family, one function per mechanism (taking the mixer instance), each with its derivation
as its docstring:

* :mod:`.attention`: the Q/K/V projections shared by the attention family, softmax attention (Chen (2023)
  Tables 3 and 5), the Sparse Transformer patterns, efficient attention;
* :mod:`.kernel`: kernel (linear) attention and its feature maps: ``linear``, ``performer``, ``cosformer``,
  ``kerformer``;
* :mod:`.context`: the mechanisms without attention scores: ``relation``, ``average``, ``mlp``,
  ``contextualizer``;
* :mod:`.extractor`: Chen (2023)'s four Extractors (Tables 3-6; Table 7 at ``d = l = 128``);
* :mod:`.vision`: the vision mixers, as labelled steps over an ``H x W`` grid.

The conventions (what a multiplication, an addition, a division and an exponentiation are, and what is
not counted) are :mod:`tokenmix.ops.opcounts`'s; the building blocks of the vision counts are in
:mod:`tokenmix.ops.spatial_counts`. :mod:`.registry` connects the functions to the mixer classes; the family
modules are imported (and so registered) by :mod:`tokenmix.mixers` once the mechanisms are defined.
"""

from __future__ import annotations

import importlib
import pkgutil

from .registry import fail, grid, grid_parts, step, step_ops, training, training_ops

__all__ = ["training_ops", "step_ops", "grid_parts", "training", "step", "grid", "fail", "load_families"]


def load_families() -> None:
    """Import every family module of this package, which registers its count functions."""
    for module in pkgutil.iter_modules(__path__):
        if module.name != "registry":
            importlib.import_module(f"{__name__}.{module.name}")
