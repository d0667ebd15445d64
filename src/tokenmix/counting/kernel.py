"""Operation counts of kernel (linear) attention: ``linear``, ``performer``, ``cosformer``, ``kerformer``, ``based``.

Each is the Q/K/V projections (:func:`.attention.projections`) plus, per head, the feature maps ``phi(q)``,
``phi(k)`` (one function per mechanism below) and the attention given the features (:func:`kernel_ops`),
with ``F`` = the mixer's ``feature_dim`` features per head and ``D = head_dim``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from ..mixers.based import BasedAttention
from ..mixers.cosformer import CosFormer
from ..mixers.kerformer import Kerformer
from ..mixers.linear import KernelAttentionMixer, LinearAttention
from ..mixers.performer import Performer
from .attention import qkv_ops
from .opcounts import OpCounts, elementwise, linears, softmax_ops
from .registry import step, training

__all__ = ["kernel_ops", "fold_adds", "kernel_training", "kernel_step", "plain_kernel", "elu_features",
           "favor_features", "taylor_features", "cos_features", "angles", "kerformer_features", "se_k_ops"]

# One head's feature maps phi(q) and phi(k) of ``rows`` positions.
Features = Callable[[KernelAttentionMixer, int], OpCounts]


def kernel_ops(mixer: KernelAttentionMixer, queries: int, keys: int) -> OpCounts:
    """One head of kernel attention given the features, for ``queries`` outputs and ``keys`` keys folded into
    the state, counted in the recurrent (prefix-sum) form, whose totals are the same causal and
    bidirectional: with ``F`` = ``feature_dim`` and ``D`` = ``head_dim``

    * per key: the outer product ``phi(k_j) v_j^T`` (``F D`` multiplications) added into the state
      ``S = sum_j phi(k_j) v_j^T`` (``F D`` additions) and ``phi(k_j)`` into ``z = sum_j phi(k_j)``
      (``F`` additions), except that the first key starts the sums (no additions);
    * per query: ``phi(q_i) S`` (``F D`` multiplications, ``(F - 1) D`` additions), ``phi(q_i) . z`` (``F``
      and ``F - 1``), the ``eps`` guard (1 addition) and ``D`` divisions by the denominator.

    ``normalize=False`` has no ``z``, no ``phi(q_i) . z``, no guard and no divisions: ``2 N F D``
    multiplications for ``N`` queries and keys, Yamada et al. (2022) §4.2's ``2 N d^2`` at ``F = D = d``.

    The implementation appends a column of ones to V for the denominator (``F`` more multiplications per
    key, by 1, not counted) and, causally, computes the same sums chunk by chunk (an intra-chunk ``C x C``
    product plus the carried state), which ``FlopCounterMode`` sees as extra matmul work."""
    f, e = mixer.feature_dim, mixer.head_dim
    state = OpCounts(mults=keys * f * e, adds=max(keys - 1, 0) * fold_adds(mixer))
    if mixer.normalize:
        read = OpCounts(mults=f * e + f, adds=(f - 1) * e + (f - 1) + 1, divs=e)
    else:
        read = OpCounts(mults=f * e, adds=(f - 1) * e)
    return state + read * queries


def fold_adds(mixer: KernelAttentionMixer) -> int:
    """Additions to fold one more key into the state: ``S += phi(k) v^T`` (``F D``), ``z += phi(k)`` (``F``,
    only when normalising)."""
    f, e = mixer.feature_dim, mixer.head_dim
    return f * e + (f if mixer.normalize else 0)


def kernel_training(mixer: KernelAttentionMixer, length: int, features: Features) -> OpCounts:
    """The projections plus, per head, the features of the ``length`` queries and keys and
    :func:`kernel_ops` (causal or not: in the prefix form query ``i`` reads the state after key ``i``, and
    the totals are those of the whole sum)."""
    return qkv_ops(mixer, length, features(mixer, length) + kernel_ops(mixer, length, length))


def kernel_step(mixer: KernelAttentionMixer, t: int, features: Features) -> OpCounts:
    """The new token's projections and, per head, its features, its key and value folded into the state (no
    additions at ``t = 1``) and its query read out: :func:`kernel_ops` with one query, O(F D) whatever ``t``."""
    into_state = OpCounts(adds=fold_adds(mixer) if t > 1 else 0)
    return qkv_ops(mixer, 1, features(mixer, 1) + kernel_ops(mixer, 1, 1) + into_state)


def plain_kernel(cls: type[KernelAttentionMixer], features: Features) -> None:
    """Register the counts of a mechanism that is kernel attention with the feature count ``features`` and
    nothing else (``linear``, ``performer``): :func:`kernel_training` and :func:`kernel_step`."""
    training(cls)(functools.partial(kernel_training, features=features))
    step(cls)(functools.partial(kernel_step, features=features))


# -- linear: tau = elu + 1 --------------------------------------------------------------------------------
def elu_features(mixer: KernelAttentionMixer, rows: int) -> OpCounts:
    """``tau(x) = elu(x) + 1`` (Yamada et al. (2022) eq. 6) on every entry of Q and K: ``x + 1`` for
    ``x > 0`` (1 addition), ``e^x`` otherwise (1 exp; elu's ``- 1`` and the ``+ 1`` cancel). Which branch runs
    depends on the data, so each entry is counted as one exp and one addition, an upper bound of either (the
    comparison choosing the branch is not counted).

    With ``inner_dim=d, out_proj=False, normalize=False, bias=False`` (one head) the multiplications of the
    whole layer are Yamada et al. (2022) §4.2's ``2 N d^2 + 3 N d m``."""
    return elementwise(2 * rows * mixer.head_dim, adds=1, exps=1)


plain_kernel(LinearAttention, elu_features)


# -- performer: FAVOR+ ------------------------------------------------------------------------------------
def favor_features(mixer: Performer, rows: int) -> OpCounts:
    """FAVOR+ features of ``rows`` queries and ``rows`` keys (Choromanski et al. (2021)); per row, with
    ``D = head_dim`` and ``m`` features (``F = m``): the scaling ``x' = x D^(-1/4)`` (``D`` multiplications),
    the exponents ``w_r^T x'`` (``m D`` multiplications, ``m (D - 1)`` additions), ``|x'|^2 / 2`` (``D + 1``
    multiplications, ``D - 1`` additions), subtracting it from the ``m`` exponents (``m`` additions), ``m``
    exps and the ``1 / sqrt(m)`` factor (``m`` divisions, as the paper writes it). The stabilisers (each
    query's max exponent, the keys' max or running max, and the causal rescaling of the state by
    ``exp(s_{j-1} - s_j)``) cancel exactly in the ratio; like softmax's max in Chen (2023) they are not
    counted."""
    e, m = mixer.head_dim, mixer.nb_features
    per_row = OpCounts(mults=m * e + 2 * e + 1, adds=m * e + e - 1, divs=m, exps=m)
    return per_row * (2 * rows)


plain_kernel(Performer, favor_features)


# -- based: the second-order Taylor map -------------------------------------------------------------------
def taylor_features(mixer: BasedAttention, rows: int) -> OpCounts:
    """Based's features of ``rows`` queries and ``rows`` keys (Arora et al. (2024) §4.1); per row, with ``D =
    head_dim`` and ``r = feature_dim``: the per-head map to ``r`` (``D r`` multiplications, ``(D - 1) r``
    additions), the scaling by ``r^(-1/4)`` (``r`` divisions), the outer product (``r^2`` multiplications) and its
    ``1 / sqrt(2)`` (``r^2`` divisions); the constant feature 1 costs nothing."""
    d, r = mixer.head_dim, mixer.reduced_dim
    per_row = OpCounts(mults=d * r + r * r, adds=(d - 1) * r, divs=r + r * r)
    return per_row * (2 * rows)


plain_kernel(BasedAttention, taylor_features)


# -- cosformer: ReLU features re-weighted by cos / sin of the position -------------------------------------
def cos_features(mixer: CosFormer, rows: int) -> OpCounts:
    """``ReLU(x_i) cos(a_i)`` and ``ReLU(x_i) sin(a_i)`` (Qin et al. (2022) §3; ``F = 2 head_dim``) for the
    ``rows`` queries and keys: ``2 head_dim`` multiplications per row (ReLU is a comparison, not counted)."""
    return elementwise(2 * rows * 2 * mixer.head_dim, mults=1)


def angles(positions: int) -> OpCounts:
    """The angles ``a_i = (pi / 2) i / M``, one per position, shared by Q, K and every head: 1
    multiplication and 1 division each (``cos``/``sin`` are lookups, not counted)."""
    return elementwise(positions, mults=1, divs=1)


@training(CosFormer)
def cosformer_training(mixer: CosFormer, length: int) -> OpCounts:
    """Projections + heads x (features + kernel attention with ``F = 2 head_dim``) + the angles."""
    return kernel_training(mixer, length, cos_features) + angles(length)


@step(CosFormer)
def cosformer_step(mixer: CosFormer, t: int) -> OpCounts:
    """The new token's projections, features and state update/read-out, and its angle."""
    return kernel_step(mixer, t, cos_features) + angles(1)


# -- kerformer: sigmoid(Q), softmax(K) rows and the SE-K re-weighting -------------------------------------
def kerformer_features(mixer: Kerformer, rows: int) -> OpCounts:
    """Per head and row (Gan et al. (2023) eqs. 7-8, ``F = head_dim``): ``sigmoid(q) = 1 / (1 + e^-q)`` on
    the ``head_dim`` query entries (1 exp, 1 addition, 1 division each; the sign flip is not counted) when
    ``q_act``, and the row softmax of eq. 8 over the ``head_dim`` key entries when ``k_act``
    (:func:`~tokenmix.counting.opcounts.softmax_ops`)."""
    e = mixer.head_dim
    cost = OpCounts()
    if mixer.q_act:
        cost = cost + elementwise(rows * e, adds=1, divs=1, exps=1)
    if mixer.k_act:
        cost = cost + softmax_ops(e, rows)
    return cost


def se_k_ops(mixer: Kerformer, length: int) -> OpCounts:
    """SE-K (Gan et al. (2023) §3.5) over ``length`` positions: the squeeze, a mean over all ``dim`` entries
    of each key row (``dim - 1`` additions and 1 division per position, whichever ``sek_input``); ``se_fc1``
    and ``se_fc2`` on the zero-padded ``max_len`` vector (:func:`~tokenmix.counting.opcounts.linears`, with
    their biases: the module computes all ``max_len`` entries whatever ``length``); the sigmoid of the ``max_len``
    outputs (1 exp, 1 addition, 1 division each); and the scaling of every key feature (``length dim``
    multiplications over the heads)."""
    assert mixer.se_fc1 is not None and mixer.se_fc2 is not None
    return (elementwise(length, adds=mixer.dim - 1, divs=1)
            + linears(1, (mixer.se_fc1, mixer.se_fc2))
            + elementwise(mixer.se_fc2.out_features, adds=1, divs=1, exps=1)
            + elementwise(length * mixer.dim, mults=1))


@training(Kerformer)
def kerformer_training(mixer: Kerformer, length: int) -> OpCounts:
    """Projections + heads x (features + kernel attention, ``F = head_dim``) + SE-K when enabled."""
    base = kernel_training(mixer, length, kerformer_features)
    return base + se_k_ops(mixer, length) if mixer.se_k else base


@step(Kerformer)
def kerformer_step(mixer: Kerformer, t: int) -> OpCounts:
    """The new token's projections, features and state update/read-out (causal, so without SE-K)."""
    return kernel_step(mixer, t, kerformer_features)
