"""Operation counts of the Q/K/V attention mechanisms: ``softmax``, ``sparse_strided``, ``sparse_fixed``,
``efficient`` (the kernel-attention ones are in :mod:`.kernel`).

Each is Chen (2023) Table 3's structure: the projections ``W_Q``, ``W_K``, ``W_V``, ``W_out`` of the tokens
(:func:`projections`) plus ``num_heads`` times one head's attention rule given that head's Q, K, V
(:func:`qkv_ops`).
"""

from __future__ import annotations

from ..mixers.efficient import EfficientAttention
from ..mixers.heads import QKVMixer
from ..mixers.softmax import SoftmaxAttention
from ..mixers.sparse import SparseFixedAttention, SparseStridedAttention
from .opcounts import OpCounts, attention_pairs_ops, linears, matmul_ops, softmax_attention_ops, softmax_ops
from .registry import fail, step, training

__all__ = ["projections", "qkv_ops", "softmax_training", "softmax_step", "sparse_pairs", "sparse_training",
           "sparse_step", "efficient_training"]

_Sparse = SparseStridedAttention | SparseFixedAttention


def projections(mixer: QKVMixer, rows: int) -> OpCounts:
    """``W_Q``, ``W_K``, ``W_V`` and ``W_out`` applied to ``rows`` tokens: with ``m = dim`` and
    ``d = inner_dim``, ``4 rows m d`` multiplications (``3 rows m d`` without ``W_out``), ``3 rows d (m - 1)``
    additions plus ``rows m (d - 1)`` for ``W_out``, and one addition per output of a projection with a
    bias. At ``d = m``: ``4 rows m^2`` and ``4 rows m (m - 1)`` (Chen (2023) Table 3)."""
    return linears(rows, (mixer.q_proj, mixer.k_proj, mixer.v_proj) + (() if mixer.proj is None else (mixer.proj,)))


def qkv_ops(mixer: QKVMixer, rows: int, head: OpCounts) -> OpCounts:
    """The projections of ``rows`` tokens plus ``num_heads`` times ``head``, one head's attention rule."""
    return projections(mixer, rows) + mixer.num_heads * head


# -- softmax attention ------------------------------------------------------------------------------------
@training(SoftmaxAttention)
def softmax_training(mixer: SoftmaxAttention, length: int) -> OpCounts:
    """One head over ``length`` tokens, Chen (2023) Table 3: query ``t`` (1-based) attends to ``t`` keys when
    causal, to all ``length`` keys otherwise; each (query, key) pair costs one score (``head_dim``
    multiplications, ``head_dim - 1`` additions), one division by ``sqrt(head_dim)``, one exp, one addition
    into the softmax sum, one normalising division and one weighted value row (``head_dim`` multiplications
    and, but for the first key, ``head_dim`` additions); see :func:`~tokenmix.counting.opcounts.attention_pairs_ops`.

    Causal: ``sum_t t = l (l + 1) / 2`` pairs, so with the projections (``4 l d^2`` multiplications,
    ``4 l d (d - 1)`` additions) ``l^2 d + 4 l d^2 + l d`` multiplications, ``l^2 d + 4 l d^2 - 4 l d - l n``
    additions, ``n l^2 + n l`` divisions and ``(n l^2 + n l) / 2`` exps over ``n`` heads (Table 3; at
    d = l = 128: Table 7's 10,502,144 / 10,420,096 (n = 1) or 10,416,128 (n = 32) / 16,512 n / 8,256 n).
    Bidirectional: ``l^2`` pairs. In Yamada et al. (2022)'s setting (one head of width ``d = inner_dim``
    over ``m = dim``-wide tokens, no ``W_out``, bidirectional) that is ``2 l^2 d + 3 l m d``
    multiplications; their §4.2 gives no count for Attention to compare with."""
    pairs = length * (length + 1) // 2 if mixer.causal else length * length
    return qkv_ops(mixer, length, attention_pairs_ops(pairs, length, mixer.head_dim))


@step(SoftmaxAttention)
def softmax_step(mixer: SoftmaxAttention, t: int) -> OpCounts:
    """One head for the newest query at length ``t`` over the KV cache (Chen (2023) Table 5): ``t`` keys, so
    with the projections of the new token ``2 t d + 4 d^2`` multiplications, ``2 t d + 4 d^2 - 5 d - n``
    additions, ``2 t n`` divisions and ``t n`` exps. (Table 5 prints the additions as
    ``2td - tn + t + 4d^2 - 5d - 1``, which equals its own unsimplified sum
    ``(3 (d - 1) d/n + t (d/n - 1) + (t - 1) d/n + (t - 1)) n + (d - 1) d`` only for ``n = 1``; the sum,
    counted here, is ``2td + 4d^2 - 5d - n`` and adds up over t = 1..l to Table 3's training count.)"""
    return qkv_ops(mixer, 1, softmax_attention_ops(1, t, mixer.head_dim))


# -- the Sparse Transformer patterns ----------------------------------------------------------------------
def sparse_pairs(mixer: _Sparse, pairs: int, queries: int) -> OpCounts:
    """One head, ``queries`` queries (those with at least one key) with ``pairs`` allowed (query, key) pairs
    in all, counted as softmax attention (Chen (2023) Table 3,
    :func:`~tokenmix.counting.opcounts.attention_pairs_ops`) restricted to the pattern: per pair a score (``D``
    multiplications, ``D - 1`` additions), an exp, an addition into the softmax sum, a normalising division
    and a weighted value row (``D`` multiplications, ``D`` additions but for each query's first key); but
    the ``1 / sqrt(D)`` scaling is applied, as the mixer does, to the query (``D`` divisions per query)
    rather than to each score. Only allowed pairs are counted: the block-wise fast path also scores
    masked-out keys of its bands (up to about twice as many scores, ``score_shapes``), which
    ``FlopCounterMode`` sees. A query with no key (the fixed pattern's empty ``A2``) costs nothing."""
    e = mixer.head_dim
    return OpCounts(mults=2 * pairs * e, adds=2 * pairs * e - queries * (e + 1), divs=pairs + queries * e,
                    exps=pairs)


@training(SparseStridedAttention, SparseFixedAttention)
def sparse_training(mixer: _Sparse, length: int) -> OpCounts:
    """The four projections plus, per part of ``head_parts``, its heads each attending to that part: the
    pattern's allowed pairs at this length (``pattern``; O(l sqrt(l)) of them at the automatic stride
    ``~ sqrt(l)``), through :func:`sparse_pairs`. With ``factorization="split"`` each head scores only its
    own set."""
    total = projections(mixer, length)
    for part, heads in mixer.head_parts():
        allowed = mixer.pattern(length, part=part)
        total = total + heads * sparse_pairs(mixer, int(allowed.sum()), int(allowed.any(dim=-1).sum()))
    return total


@step(SparseStridedAttention, SparseFixedAttention)
def sparse_step(mixer: _Sparse, t: int) -> OpCounts:
    """The four projections of the new token plus, per part of ``head_parts``, its heads each scoring the
    newest query (position ``t - 1``, 0-based) over its allowed cached keys of that part (``allowed_keys``:
    ``O(l + t / l)`` of them), through :func:`sparse_pairs`; needs a fixed stride, as decoding does."""
    if mixer.stride is None and mixer.max_len is None:
        fail(mixer, "incremental counts need a fixed stride: create the mixer with an explicit `stride` "
                    "(or with max_len, which fixes the automatic stride to round(sqrt(max_len)))")
    total = projections(mixer, 1)
    for part, heads in mixer.head_parts():
        keys = len(mixer.allowed_keys(t - 1, part))
        total = total + heads * sparse_pairs(mixer, keys, int(keys > 0))
    return total


# -- efficient attention ----------------------------------------------------------------------------------
@training(EfficientAttention)
def efficient_training(mixer: EfficientAttention, length: int) -> OpCounts:
    """One head, ``D = head_dim``, ``l = length``: ``rho_q``, a softmax over the ``D`` entries of each of the
    ``l`` query rows; ``rho_k``, a softmax over the ``l`` positions of each of the ``D`` key columns; then
    right to left ``rho_k(K)^T V`` (``D x l`` by ``l x D``: ``l D^2`` multiplications, ``D^2 (l - 1)``
    additions) and ``rho_q(Q) (.)`` (``l x D`` by ``D x D``: ``l D^2`` and ``l D (D - 1)``); plus the
    projections. Bidirectional only, so no incremental count."""
    e = mixer.head_dim
    head = softmax_ops(e, length) + softmax_ops(length, e) + matmul_ops(e, length, e) + matmul_ops(length, e, e)
    return qkv_ops(mixer, length, head)
