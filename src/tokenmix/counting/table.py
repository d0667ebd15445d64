"""``tokenmix count``: trainable parameters and arithmetic-operation counts of the mixers (issue 7; Chen (2023)
§7).

For each mixer, :func:`count_mixer` builds the module and reports

* ``params``: its trainable parameters, counted from the module itself;
* ``train``: the multiplications, additions, divisions and exponentiations of one forward pass over one
  sequence of ``length`` tokens (:func:`~tokenmix.counting.registry.count_ops`; Chen (2023) Tables 3-4 for
  softmax attention and the Extractors, derived the same way for the others, one module of
  :mod:`tokenmix.counting` per family of mechanisms);
* ``step``: for causal mixers, the extra operations for the output of token ``t`` given the cache/state of
  tokens ``1..t-1`` (:func:`~tokenmix.counting.registry.count_step_ops`; Chen (2023) Tables 5-6);
* ``measured_flops``: a cross-check, the FLOPs that :class:`torch.utils.flop_counter.FlopCounterMode` records
  for one forward pass of a ``(1, length, dim)`` input, and ``flop_ratio = measured / (mults + adds)``.

FlopCounterMode counts 2 FLOPs per multiply-add of matrix products, convolutions and fused attention, and
nothing for element-wise operations (exp, division, softmax, normalisation), so the ratio is about 1 for
mechanisms dominated by matrix products and departs from 1 where the implementation does work the formula
does not (causal masks over full ``l x l`` products, block-wise padding, chunked prefix sums), or does work
FlopCounterMode ignores (element-wise products, FFTs). The Extractors are measured on their ``"direct"``
(convolution) path, since ``torch.fft`` operations are not counted.

At ``dim = max_len = length = 128`` the counts of ``softmax`` (causal, 1 or 32 heads), ``extractor_she``,
``extractor_he``, ``extractor_we`` and ``extractor_me`` are Chen (2023) Table 7's.

``tokenmix count --mode paper-000`` is :mod:`.paper_000`'s.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from ..models.patterns import LayerMixer, parse_layer_mixer
from ..ops.spatial import square_grid
from ..registry import create_mixer, list_mixers, mixer_info
from ..tabulate import text_table
from ..validate import is_positive_int as _positive_int
from .opcounts import OpCounts
from .registry import count_ops, count_step_ops

__all__ = ["CountResult", "count_mixer", "count_table", "format_counts", "write_counts_csv", "flop_count"]

# Why a mechanism's FlopCounterMode FLOPs differ from mults + adds: (bidirectional note, causal note).
_CHUNKED = "the chunked prefix form's intra-chunk C x C products are extra matmul work"
_NOTES: dict[str, tuple[str, str]] = {
    "softmax": ("", "the fused attention is measured as the full l x l product (the causal mask saves nothing)"),
    "sparse_strided": ("the block-wise path also scores masked-out keys of its bands",) * 2,
    "sparse_fixed": ("the block-wise path also scores masked-out keys of its blocks",) * 2,
    "linear": ("", _CHUNKED),
    "performer": ("", _CHUNKED),
    "cosformer": ("", _CHUNKED),
    "kerformer": ("", _CHUNKED),
    "efficient": ("softmaxes are element-wise, not measured",) * 2,
    "relation": ("the mean and the element-wise product are not measured",) * 2,
    "average": ("gates, sigmoid and LayerNorm are element-wise, not measured",) * 2,
    "contextualizer": ("the softmax over tokens and the weighted sum are element-wise, not measured",) * 2,
}
_LONG_FILTER_NOTE = ("a long filter is computed by FFT from 64 taps on, which FlopCounterMode does not count: the "
                     "counts are the direct form's, every tap at every position")
_EXTRACTOR_NOTE = ("measured on path='direct' (FlopCounterMode does not count FFTs), where the causal "
                   "convolution's zero left padding about doubles the tap products")


@dataclass(frozen=True)
class CountResult:
    """One mixer's counts (see the module docstring). ``step`` and ``step_t`` are None for bidirectional
    mixers, ``measured_flops`` and ``flop_ratio`` when FLOPs were not measured; ``hw`` is the grid of a
    spatial mixer."""

    name: str
    causal: bool
    heads: int
    params: int
    train: OpCounts
    step: OpCounts | None
    measured_flops: int | None
    flop_ratio: float | None
    note: str
    dim: int = 0
    length: int = 0
    step_t: int | None = None
    hw: tuple[int, int] | None = None

    @property
    def mode(self) -> str:
        """``"causal"`` or ``"bidir"``."""
        return "causal" if self.causal else "bidir"


def _sdpa_cpu_flops(query_shape: Any, key_shape: Any, value_shape: Any, *args: Any, out_shape: Any = None,
                    **kwargs: Any) -> int:
    """FLOPs of CPU fused attention, as FlopCounterMode counts the CUDA kernels (the full score matrix)."""
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _custom_flop_mapping() -> dict[Any, Any]:
    """Formulas for ops FlopCounterMode lacks: CPU ``scaled_dot_product_attention`` (torch 2.x has one for the
    CUDA kernels only, so on CPU softmax attention would count only its projections)."""
    op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    return {} if op is None else {op: _sdpa_cpu_flops}


def flop_count(module: torch.nn.Module, length: int, dim: int, hw: tuple[int, int] | None = None) -> int:
    """FlopCounterMode's total for one forward pass of ``module`` on a ``(1, length, dim)`` input."""
    x = torch.randn(1, length, dim, generator=torch.Generator().manual_seed(0))
    x = x.to(next(module.parameters(), x).dtype)
    counter = FlopCounterMode(display=False, custom_mapping=_custom_flop_mapping())
    with torch.no_grad(), counter:
        if hw is None:
            module(x)
        else:
            module(x, hw=hw)
    return int(counter.get_total_flops())


def count_mixer(
    name: str,
    *,
    dim: int = 128,
    max_len: int | None = 128,
    heads: int = 1,
    length: int | None = None,
    step_t: int | None = None,
    causal: bool | None = None,
    measure_flops: bool = True,
    options: Mapping[str, Any] | None = None,
) -> CountResult:
    """Parameters and operation counts of the mixer ``name`` (see the module docstring).

    Args:
        name: a registered mixer.
        dim, max_len, heads: how the module is built (``create_mixer(name, dim, num_heads=heads, ...)``).
        length: the sequence length ``l`` counted (default ``max_len``); spatial mixers are counted on the
            most square grid with ``length`` cells (:func:`square_grid`).
        step_t: the length ``t`` of the incremental step counted (default ``length``; causal only).
        causal: the mode; default causal where the mixer supports it (Chen (2023)'s language-model setting),
            bidirectional otherwise.
        measure_flops: also run one forward pass under FlopCounterMode.
        options: the mechanism's own options (e.g. ``{"bias": True}``, ``{"nb_features": 64}``). The
            Extractors are built with ``path="direct"`` unless a path is given (counts do not depend on it).

    Raises ``ValueError`` naming the mixer for bad arguments or a mode the mixer lacks.
    """
    info = mixer_info(name)  # ValueError listing the names if unknown

    def fail(message: str) -> None:
        raise ValueError(f"count_mixer({name!r}): {message}")

    if not _positive_int(dim):
        fail(f"dim must be a positive int, got {dim!r}")
    if max_len is not None and not _positive_int(max_len):
        fail(f"max_len must be a positive int or None, got {max_len!r}")
    if not _positive_int(heads):
        fail(f"heads must be a positive int, got {heads!r}")
    if length is None:
        if max_len is None:
            fail("give length (or max_len, its default)")
        length = max_len
    if not _positive_int(length):
        fail(f"length must be a positive int, got {length!r}")
    if causal is None:
        causal = info.causal
    if not isinstance(causal, bool):
        fail(f"causal must be a bool or None, got {causal!r}")
    if step_t is not None:
        if not causal:
            fail("step_t is for causal counts (incremental inference is causal)")
        if not _positive_int(step_t):
            fail(f"step_t must be a positive int, got {step_t!r}")
    opts = dict(options or {})
    if "path" in info.options and "path" not in opts:
        opts["path"] = "direct"

    with torch.random.fork_rng(devices=[]):  # building the module draws weights: leave the global RNG alone
        torch.manual_seed(0)
        module = create_mixer(name, dim, num_heads=heads, causal=causal, max_len=max_len, **opts).eval()
        hw = square_grid(length) if info.spatial else None
        train = count_ops(module, length, hw=hw)
        step = None
        if causal:
            step_t = length if step_t is None else step_t
            step = count_step_ops(module, step_t)
        measured = flop_count(module, length, dim, hw) if measure_flops else None

    params = sum(p.numel() for p in module.parameters() if p.requires_grad)
    gemm_like = train.mults + train.adds
    ratio = measured / gemm_like if measured is not None and gemm_like > 0 else None
    note = _EXTRACTOR_NOTE if name.startswith("extractor_") else _NOTES.get(name, ("", ""))[causal]
    if getattr(module, "long_filter", False):
        note = _LONG_FILTER_NOTE
    if info.spatial:
        note = f"counted on the {hw[0]} x {hw[1]} grid" + (f"; {note}" if note else "")
    return CountResult(name=name, causal=causal, heads=heads, params=params, train=train, step=step,
                       measured_flops=measured, flop_ratio=ratio, note=note, dim=dim, length=length,
                       step_t=step_t if causal else None, hw=hw)


def count_table(
    names: Sequence[str | LayerMixer] | None = None,
    *,
    dim: int = 128,
    max_len: int | None = 128,
    heads: int = 1,
    length: int | None = None,
    step_t: int | None = None,
    causal: bool | None = None,
    measure_flops: bool = True,
) -> list[CountResult]:
    """:func:`count_mixer` for each of ``names`` (default: every registered mixer), each a name or an entry with
    its options as ``compare`` takes them (``"performer:nb_features=64"``, or a
    :class:`~tokenmix.models.patterns.LayerMixer`); a result with options is named by its entry. ``heads``
    applies to the multi-head mixers; the others have one head. ``causal=None`` picks each mixer's default mode."""
    if names is None:
        names = list_mixers()
    if isinstance(names, str):
        raise ValueError(f"count_table: names must be a sequence of mixer names, got the string {names!r}")
    layers = [parse_layer_mixer(n, "count_table") for n in names]
    return [replace(count_mixer(layer.name, dim=dim, max_len=max_len, heads=mixer_info(layer.name).heads(heads) or 1,
                                length=length, step_t=step_t, causal=causal, measure_flops=measure_flops,
                                options=dict(layer.options)), name=layer.label)
            for layer in layers]


_OPS = ("mults", "adds", "divs", "exps")


def _rows(results: Sequence[CountResult]) -> tuple[list[str], list[list[str]]]:
    header = ["mixer", "mode", "heads", "l", "params", *_OPS, "total", "step t", *(f"step {o}" for o in _OPS),
              "FLOPs", "FLOPs/(m+a)"]
    rows = []
    for r in results:
        step = [f"{getattr(r.step, o):,}" for o in _OPS] if r.step is not None else ["-"] * 4
        rows.append([
            r.name, r.mode, str(r.heads), str(r.length), f"{r.params:,}",
            *(f"{getattr(r.train, o):,}" for o in _OPS), f"{r.train.total:,}",
            str(r.step_t) if r.step_t is not None else "-", *step,
            f"{r.measured_flops:,}" if r.measured_flops is not None else "-",
            f"{r.flop_ratio:.3f}" if r.flop_ratio is not None else "-",
        ])
    return header, rows


def format_counts(results: Sequence[CountResult]) -> str:
    """A readable table (thousands separators) of :func:`count_table`'s results, with the notes below it."""
    header, rows = _rows(results)
    out = [text_table(header, rows, align="ll" + "r" * (len(header) - 2), rule_per_column=True)]  # numbers right
    notes = list(dict.fromkeys(f"  {r.name} ({r.mode}): {r.note}" for r in results if r.note))
    if notes:
        out += ["", "FLOPs: torch.utils.flop_counter.FlopCounterMode, 2 per multiply-add of matmuls/convolutions/"
                    "fused attention, element-wise ops not counted. Notes:", *notes]
    return "\n".join(out)


def write_counts_csv(results: Sequence[CountResult], path: str | Path) -> None:
    """One row per result: mixer, mode, heads, dim, length, grid, params, the four counts and their total,
    the step length and its counts (empty when bidirectional), the measured FLOPs, the ratio and the note."""
    fields = ["mixer", "mode", "heads", "dim", "length", "hw", "params", *_OPS, "total", "step_t",
              *(f"step_{o}" for o in _OPS), "step_total", "measured_flops", "flop_ratio", "note"]
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(fields)
        for r in results:
            step = [getattr(r.step, o) for o in _OPS] + [r.step.total] if r.step is not None else [""] * 5
            writer.writerow([
                r.name, r.mode, r.heads, r.dim, r.length, "" if r.hw is None else f"{r.hw[0]}x{r.hw[1]}",
                r.params, *(getattr(r.train, o) for o in _OPS), r.train.total,
                "" if r.step_t is None else r.step_t, *step,
                "" if r.measured_flops is None else r.measured_flops,
                "" if r.flop_ratio is None else f"{r.flop_ratio:.6f}", r.note,
            ])
