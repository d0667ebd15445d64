"""Operation counts of LoLCATs' sliding window + linear attention (``window_linear``).

Per head, with ``w`` the window, ``F`` the features and ``D = head_dim``: the feature maps (as for ``linear``), the
window's softmax terms over the ``P = sum_i min(i, w)`` (query, key) pairs, the linear part's state of the keys
that have left the windows and its read-out by every query, and the combination of the two into one output.
"""

from __future__ import annotations

from ..mixers.hybrid import WindowLinearAttention
from .attention import qkv_ops
from .kernel import elu_features
from .opcounts import OpCounts, elementwise
from .registry import step, training

__all__ = ["window_pairs", "window_terms", "linear_terms", "combine"]


def window_pairs(length: int, window: int) -> int:
    """The (query, key) pairs of the windows over ``length`` queries: query ``i`` (1-based) sees ``min(i, w)``."""
    full = max(length - window, 0)
    ramp = min(length, window)
    return ramp * (ramp + 1) // 2 + full * window


def window_terms(pairs: int, queries: int, head_dim: int) -> OpCounts:
    """Per pair: the score (``D`` multiplications, ``D - 1`` additions), its division by ``sqrt(D)``, the shift by
    the row's maximum (1 addition; the maximum itself is comparisons, not counted), 1 exp, the weighted value row
    (``D`` multiplications, ``D`` additions but for each query's first key) and the weight into the row's sum
    (1 addition but for the first)."""
    e = head_dim
    return OpCounts(mults=2 * pairs * e, adds=pairs * (e - 1) + pairs + (pairs - queries) * (e + 1), divs=pairs,
                    exps=pairs)


def linear_terms(mixer: WindowLinearAttention, queries: int, keys: int) -> OpCounts:
    """``keys`` keys folded into ``S = sum phi(k) v^T`` and ``z = sum phi(k)`` (``F D`` multiplications; ``F D + F``
    additions but for the first), and per query ``phi(q) S`` and ``phi(q) . z`` (``F D + F`` multiplications,
    ``(F - 1)(D + 1)`` additions); no division: the output's is shared with the window (:func:`combine`)."""
    f, e = mixer.feature_dim, mixer.head_dim
    fold = OpCounts(mults=keys * f * e, adds=max(keys - 1, 0) * (f * e + f))
    return fold + OpCounts(mults=f * e + f, adds=(f - 1) * (e + 1)) * queries


def combine(mixer: WindowLinearAttention, queries: int) -> OpCounts:
    """Per query: the window's numerator and sum times ``g`` (``D + 1`` multiplications; as many again for the
    linear part's ``1 - g`` with ``affine=True``), numerators and sums added (``D + 1``), the ``eps`` guard (1) and
    ``D`` divisions."""
    e = mixer.head_dim
    mults = (e + 1) * (2 if mixer.affine else 1)
    return OpCounts(mults=mults, adds=e + 2, divs=e) * queries


@training(WindowLinearAttention)
def window_linear_training(mixer: WindowLinearAttention, length: int) -> OpCounts:
    """The projections and, per head, every query's window and linear terms and their combination."""
    head = (elu_features(mixer, length) + window_terms(window_pairs(length, mixer.window), length, mixer.head_dim)
            + linear_terms(mixer, length, max(length - mixer.window, 0)) + combine(mixer, length))
    return qkv_ops(mixer, length, head)


@step(WindowLinearAttention)
def window_linear_step(mixer: WindowLinearAttention, t: int) -> OpCounts:
    """The ``t``-th token: its projections and features, the key leaving the window (from ``t = w + 1``: its
    feature map, folded into the state, which it starts at ``t = w + 1``), the window of ``min(t, w)`` keys and the
    state read out, combined: O(w D + F D) whatever ``t``."""
    f, e = mixer.feature_dim, mixer.head_dim
    head = (elu_features(mixer, 1) + window_terms(min(t, mixer.window), 1, e) + linear_terms(mixer, 1, 0)
            + combine(mixer, 1))
    if t > mixer.window:
        head = head + elementwise(e, adds=1, exps=1) + OpCounts(mults=f * e)
    if t > mixer.window + 1:
        head = head + OpCounts(adds=f * e + f)
    return qkv_ops(mixer, 1, head)
