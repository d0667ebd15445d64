"""``tokenmix count --mode paper-000``: ``softmax``, ``linear`` and ``relation`` as Yamada et al. (2022) §3.1
define them (one head of depth ``d`` over ``m``-wide tokens, no output projection), their multiplications
beside the paper's §4.2 counts (:func:`paper_000_mults`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..models.relationnet import paper_000_mixer_options
from ..validate import is_positive_int as _positive_int
from .table import CountResult, count_mixer

__all__ = ["PAPER_000_MIXERS", "paper_000_options", "paper_000_mults", "count_paper_000", "format_paper_000"]

PAPER_000_MIXERS = ("softmax", "linear", "relation")

# The paper's §4.2 formulas, as printed, for the mixers it gives one for (none for Attention).
_PAPER_000_FORMULAS = {"linear": "2 N d^2 + 3 N d m", "relation": "N d^2 + 2 N d m + N d"}


def paper_000_options(name: str, inner_dim: int) -> dict[str, Any]:
    """The options that make ``name`` (one of :data:`PAPER_000_MIXERS`) Yamada et al. (2022)'s mechanism at
    depth ``d = inner_dim``: ``W_Q, W_K, W_V`` (eqs. 1-3) or ``W_G, W_H`` (eqs. 7-8) from ``m = dim`` to
    ``d``, no output projection (eqs. 4, 5 and 12 end at ``V``, ``V`` and ``phi(.)``), no biases in the
    counted layers, and eq. 5's linear attention without a denominator. Built with one head."""
    if name not in PAPER_000_MIXERS:
        raise ValueError(f"paper_000_options: {name!r} is not one of Yamada et al. (2022)'s mechanisms "
                         f"{PAPER_000_MIXERS}")
    return paper_000_mixer_options(name, inner_dim)  # the options RelationNet builds them with


def paper_000_mults(name: str, length: int, dim: int, inner_dim: int) -> int | None:
    """Yamada et al. (2022) §4.2's operation count for ``name`` at ``N = length``, ``m = dim`` (the embedding
    width) and ``d = inner_dim`` (the depth): linear attention ``2 N d^2 + 3 N d m``, Relation
    ``N d^2 + 2 N d m + N d``; None for Attention (the paper gives no formula for it).

    The paper calls these the "time complexity ... when the projection and depth ... are considered"; what
    they add up are multiplications, and exactly those of the mechanisms as :func:`paper_000_options` builds
    them: ``3 N d m`` for ``x W_Q, x W_K, x W_V``, ``N d^2`` for ``tau(K)^T V`` and ``N d^2`` for
    ``tau(Q) (.)`` (eq. 5); ``2 N d m`` for ``x W_G, x W_H``, ``N d`` for ``G * H'`` and ``N d^2`` for
    ``(.) W`` (eqs. 7-12). So they equal tokenmix's ``mults``, not its total: they leave out the additions,
    the mean's ``d`` divisions, and the feature map ``tau`` of eq. 6 (one exp or one addition per entry of
    Q and K, which tokenmix counts in ``exps`` and ``adds``, never in ``mults``). Katharopoulos et al.
    (2020)'s normalised form (``normalize=True``) would add ``N d`` multiplications (``tau(q_i) . z``)."""
    for label, value in (("length", length), ("dim", dim), ("inner_dim", inner_dim)):
        if not _positive_int(value):
            raise ValueError(f"paper_000_mults: {label} must be a positive int, got {value!r}")
    n, m, d = length, dim, inner_dim
    if name == "linear":
        return 2 * n * d * d + 3 * n * d * m
    if name == "relation":
        return n * d * d + 2 * n * d * m + n * d
    if name == "softmax":
        return None
    raise ValueError(f"paper_000_mults: {name!r} is not one of {PAPER_000_MIXERS}")


def count_paper_000(*, dim: int = 128, inner_dim: int = 64, length: int = 512,
                    measure_flops: bool = True) -> list[CountResult]:
    """:func:`count_mixer` for ``softmax``, ``linear`` and ``relation`` built by :func:`paper_000_options`:
    one head, bidirectional (the paper's networks are classifiers, §3.2.1), ``m = dim``, ``d = inner_dim``,
    ``N = length``, no ``max_len``. Their ``train.mults`` are :func:`paper_000_mults`'s counts."""
    for label, value in (("dim", dim), ("inner_dim", inner_dim), ("length", length)):
        if not _positive_int(value):
            raise ValueError(f"count_paper_000: {label} must be a positive int, got {value!r}")
    return [count_mixer(name, dim=dim, max_len=None, heads=1, length=length, causal=False,
                        measure_flops=measure_flops, options=paper_000_options(name, inner_dim))
            for name in PAPER_000_MIXERS]


def format_paper_000(results: Sequence[CountResult], inner_dim: int) -> str:
    """Each result's multiplications beside Yamada et al. (2022) §4.2's count for it (results of
    :func:`count_paper_000`, whose ``inner_dim`` must be given again)."""
    lines = [f"Yamada et al. (2022) §4.2 counts multiplications (N = l, m = dim, d = inner_dim = {inner_dim}):"]
    for r in results:
        paper = paper_000_mults(r.name, r.length, r.dim, inner_dim)
        if paper is None:
            lines.append(f"  {r.name:<9} no count in the paper; tokenmix mults {r.train.mults:,}")
            continue
        verdict = "equal" if paper == r.train.mults else f"DIFFERENT by {r.train.mults - paper:+,}"
        lines.append(f"  {r.name:<9} {_PAPER_000_FORMULAS[r.name]:<22} = {paper:,}; tokenmix mults "
                     f"{r.train.mults:,} ({verdict})")
    return "\n".join(lines)
