"""Operation and parameter counts of the mixers: ``tokenmix count`` and every count table (Chen (2023) §7).

This package sits above :mod:`tokenmix.mixers`: it imports the mixer classes, and no mixer, op or model
imports it. Its modules:

* :mod:`.opcounts`: :class:`OpCounts` and the conventions (what a multiplication, an addition, a division and an
  exponentiation are, and what is not counted), with the counts of matrix products, dot products, softmax;
* :mod:`.blocks`: :class:`CountPart` and the building blocks of the vision counts (window attention,
  convolutions, LayerNorm, GELU);
* :mod:`.registry`: which function counts which mixer class, and the entry points :func:`count_ops`,
  :func:`count_step_ops` and :func:`grid_parts`;
* one module per family of mechanisms, one function per mechanism with its derivation as its docstring:
  :mod:`.attention` (Q/K/V projections, softmax attention (Chen (2023) Tables 3 and 5), the Sparse
  Transformer patterns, efficient attention), :mod:`.kernel` (``linear``, ``performer``, ``cosformer``,
  ``kerformer``), :mod:`.hybrid` (``window_linear``), :mod:`.delta` (``deltanet``, ``gated_deltanet``), :mod:`.gla`
  (``retention``, ``gla``), :mod:`.ssd` (``mamba2``), :mod:`.context` (``relation``, ``average``,
  ``mlp``, ``contextualizer``), :mod:`.extractor`
  (Chen (2023)'s four Extractors) and :mod:`.vision` (the vision mixers, as labelled steps over a grid);
* :mod:`.table`: :func:`count_mixer` / :func:`count_table` (parameters, counts, the FlopCounterMode
  cross-check) and their text and CSV tables; :mod:`.paper_000`: Yamada et al. (2022) §4.2's counts.
"""

from __future__ import annotations

# The family modules register their count functions on import.
from . import attention, context, delta, extractor, gla, hybrid, kernel, ssd, vision  # noqa: F401
from .blocks import CountPart, gemm_mults, total
from .opcounts import OpCounts
from .paper_000 import PAPER_000_MIXERS, count_paper_000, format_paper_000, paper_000_mults, paper_000_options
from .registry import count_ops, count_step_ops, grid_parts
from .table import CountResult, count_mixer, count_table, flop_count, format_counts, write_counts_csv

__all__ = ["OpCounts", "CountPart", "total", "gemm_mults", "count_ops", "count_step_ops", "grid_parts",
           "CountResult", "count_mixer", "count_table", "flop_count", "format_counts", "write_counts_csv",
           "PAPER_000_MIXERS", "paper_000_options", "paper_000_mults", "count_paper_000", "format_paper_000"]
