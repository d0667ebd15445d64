"""Sparse Transformer attention (Child et al. 2019 §4.2-4.3; Ruggeri 2022 §4.1) with its decoding state, the
key/value cache, as functions in the conventions of the other :mod:`tokenmix.ops` forms ((B, T, H, ·) tensors,
``(o, final_state)``).

Query ``i`` attends to a sparse set of keys built from the factorised sets ``A_i^(1)`` (local) and ``A_i^(2)``
(strided or summary) of the ``kind`` of pattern (:func:`~tokenmix.ops.sparse_patterns.sparse_sets`: "strided" with
stride ``l``, "fixed" with blocks of ``l`` and ``summary`` positions each), ``softmax(scale q_i K_S^T) V_S``. The
``factorization`` says how the heads use the sets: "merged" (every head on their union, one softmax), "split" (the
first half of the heads on ``A^(1)``, the second half on ``A^(2)``), "A1" or "A2" (every head on that set). A head
whose set is empty for a query outputs 0 there. Positions count from the first cached token. Three forms:

* :func:`naive_sparse_attn`: the dense score matrix masked by the pattern (the reference);
* :func:`fused_recurrent_sparse_attn`: one token at a time against the cache, reading only the O(l + t / l) keys
  its pattern allows (decoding);
* :func:`parallel_sparse_attn`: :func:`blockwise_sparse_attention` (blocks of ``l``: a band of neighbouring blocks
  and the column keys, never an N x N matrix: O(N (l + N / l) d)) over the cached keys and the new ones.

``scale`` defaults to K ** -0.5. Low-precision inputs are computed in float32; the output has ``v``'s dtype.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .conventions import Cache, cached, check_cache
from .sparse_patterns import causal_keys, neighbour_blocks, softmax_or_zero, sparse_pattern

__all__ = ["naive_sparse_attn", "fused_recurrent_sparse_attn", "parallel_sparse_attn",
           "blockwise_sparse_attention", "head_parts", "FACTORIZATIONS"]

FACTORIZATIONS = ("merged", "split", "A1", "A2")
# One block-wise piece of attention: raw scores (B, H, nb, l, K), which of them are allowed (broadcastable, no
# head axis) and how to turn probabilities of that shape into outputs (B, H, nb, l, D).
_Part = tuple[Tensor, Tensor, Callable[[Tensor], Tensor]]


def head_parts(factorization: str, num_heads: int) -> tuple[tuple[str, int], ...]:
    """``(part, number of heads)`` in head order: every head on the union ("merged") or on one set ("A1",
    "A2"), or the first half on ``A1`` and the second half on ``A2`` ("split")."""
    if factorization == "split":
        return (("A1", num_heads // 2), ("A2", num_heads // 2))
    return ({"merged": "union"}.get(factorization, factorization), num_heads),


# -- the block-wise fast path --------------------------------------------------------------------------------------
def blockwise_sparse_attention(q: Tensor, k: Tensor, v: Tensor, kind: str, stride: int, summary: int, causal: bool,
                               parts: tuple[tuple[str, int], ...], key_mask: Tensor | None = None) -> Tensor:
    """The pattern on (B, H, N, D) heads (``q`` already scaled), unchecked: blocks of ``l``; per part of
    :func:`head_parts`, the local band and/or the column keys in one softmax. ``key_mask`` (B, N): padded keys
    excluded. Returns (B, H, N, D)."""
    b, h, n, d = q.shape
    nb = -(-n // stride)
    m = nb * stride
    if m != n:
        q, k, v = (torch.cat([t, t.new_zeros(b, h, m - n, t.shape[-1])], dim=2) for t in (q, k, v))
    real = torch.arange(m, device=q.device) < n
    real = real[None, :] if key_mask is None else torch.cat([key_mask, key_mask.new_zeros(b, m - n)], dim=1) & real
    rb = real.view(real.shape[0], nb, stride)  # (B|1, nb, l) key is real
    blocks = [t.view(b, h, nb, stride, t.shape[-1]) for t in (q, k, v)]
    outs, first = [], 0
    for part, g in parts:
        qb, kb, vb = (t[:, first:first + g] for t in blocks)
        first += g
        pieces = []
        if part != "A2":
            pieces.append(_local(kind, causal, qb, kb, vb, rb, part))
        if part != "A1":
            pieces.append(_column(kind, causal, summary, qb, kb, vb, rb, own_block=part == "A2"))
        scores = torch.cat([s.masked_fill(~a[:, None], float("-inf")) for s, a, _ in pieces], dim=-1)
        if part == "A2":  # the one set that can be empty (fixed pattern, causal; or all keys padding)
            p = softmax_or_zero(scores, pieces[0][1][:, None].any(dim=-1, keepdim=True))
        else:  # the local band always allows the query's own position: no empty row
            p = scores.softmax(dim=-1)
        p = p.split([s.shape[-1] for s, _, _ in pieces], dim=-1)
        outs.append(sum(apply(p_piece) for (_, _, apply), p_piece in zip(pieces, p)))
    return torch.cat(outs, dim=1).reshape(b, h, m, v.shape[-1])[:, :, :n]


def _band_blocks(kind: str, causal: bool) -> tuple[int, int]:
    """How many blocks before and after the query's own the local band spans."""
    if kind == "strided":
        return 1, 0 if causal else 1
    return 0, 0


def _local_allowed(kind: str, causal: bool, rel: Tensor, stride: int, part: str) -> Tensor:
    """From ``rel = i - j`` over the band: which keys are in the local set of ``part``."""
    if kind == "strided":
        reach = stride if part == "A1" else stride - 1  # the union leaves |i - j| = l to the strided part
        return (rel >= 0) & (rel <= reach) if causal else rel.abs() <= reach
    return rel >= 0 if causal else torch.ones_like(rel, dtype=torch.bool)


def _local(kind: str, causal: bool, qb: Tensor, kb: Tensor, vb: Tensor, rb: Tensor, part: str) -> _Part:
    """The band of whole blocks around each query's block, with the local set of ``part`` allowed (``A1``; for the
    union, ``A1`` minus what :func:`_column` covers)."""
    before, after = _band_blocks(kind, causal)
    stride = rb.shape[-1]
    k_loc, v_loc = neighbour_blocks(kb, before, after), neighbour_blocks(vb, before, after)
    real_loc = neighbour_blocks(rb[..., None], before, after)[..., 0]  # (B|1, nb, W)
    c = torch.arange((before + 1 + after) * stride, device=qb.device)[None, :]
    rel = torch.arange(stride, device=qb.device)[:, None] + before * stride - c  # i - j (query r, column c)
    # The diagonal, in A(1) anyway, stays allowed for a padded query too (its output is discarded).
    allowed = (_local_allowed(kind, causal, rel, stride, part) & real_loc[:, :, None, :]) | (rel == 0)
    return qb @ k_loc.transpose(-2, -1), allowed, lambda p: p @ v_loc


def _column_order(causal: bool, q_blk: Tensor, k_blk: Tensor, own: Tensor | bool) -> Tensor:
    """Which column keys a query sees, by block index: those of earlier (causal) or other (bidirectional) blocks,
    and those of its own block where ``own`` (False for the union, whose own-block keys are local)."""
    other = k_blk < q_blk if causal else k_blk != q_blk
    return other | ((k_blk == q_blk) & own)


def _column(kind: str, causal: bool, summary: int, qb: Tensor, kb: Tensor, vb: Tensor, rb: Tensor,
            own_block: bool) -> _Part:
    """The ``A2`` keys of whole other blocks (earlier ones when causal), and of the query's own block too when
    ``own_block``: the same residue mod ``l`` (strided) or the last ``summary`` positions of each block (fixed)."""
    if kind == "strided":  # per residue r, queries of every block against keys of every block
        qr, kr, vr = (t.transpose(-3, -2) for t in (qb, kb, vb))  # (B, H, l, nb, D)
        blk = torch.arange(rb.shape[-2], device=qb.device)
        order = _column_order(causal, blk[:, None], blk[None, :], own_block)  # own block: key i itself only
        allowed = order & rb.transpose(-2, -1)[:, :, None, :]  # (B|1, l, nb_q, nb_k)
        scores = (qr @ kr.transpose(-2, -1)).transpose(-3, -2)  # (B, H, nb_q, l, nb_k)
        return scores, allowed.transpose(-3, -2), lambda p: (p.transpose(-3, -2) @ vr).transpose(-3, -2)
    b, h, nb, stride, d = kb.shape  # summary keys, shared by all queries of a block
    ks, vs = (t[..., stride - summary:, :].reshape(b, h, 1, nb * summary, t.shape[-1]) for t in (kb, vb))
    real_s = rb[..., stride - summary:].reshape(rb.shape[0], 1, 1, nb * summary)
    key_blk = torch.arange(nb, device=qb.device).repeat_interleave(summary)  # (S,)
    key_off = torch.arange(stride - summary, stride, device=qb.device).repeat(nb)  # offset in its block
    own = own_block and (key_off <= torch.arange(stride, device=qb.device)[:, None] if causal else True)
    order = _column_order(causal, torch.arange(nb, device=qb.device)[:, None, None], key_blk, own)
    return qb @ ks.transpose(-2, -1), order & real_s, lambda p: p @ vs


# -- the functional forms ------------------------------------------------------------------------------------------
def _check(name: str, q: Tensor, k: Tensor, v: Tensor, kind: str, stride: int, summary: int, factorization: str,
           initial_state: Cache | None) -> None:
    where = f"tokenmix.ops.sparse_attn.{name}"
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"{where}: q and k must be (B, T, H, K) and v (B, T, H, V) with the same B, T and H; got "
                         f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if kind not in ("strided", "fixed"):
        raise ValueError(f"{where}: kind must be 'strided' or 'fixed', got {kind!r}")
    for label, value in (("stride", stride), ("summary", summary)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{where}: {label} must be a positive int, got {value!r}")
    if summary > stride:
        raise ValueError(f"{where}: summary={summary} exceeds the stride (block length) {stride}")
    if factorization not in FACTORIZATIONS:
        raise ValueError(f"{where}: factorization must be one of {FACTORIZATIONS}, got {factorization!r}")
    if factorization == "split" and q.shape[2] % 2:
        raise ValueError(f"{where}: factorization='split' needs an even number of heads, got {q.shape[2]}")
    check_cache(where, k, v, initial_state)


def _wide(q: Tensor, scale: float | None, *ts: Tensor) -> tuple[Tensor, ...]:
    """(B, H, ·, ·) heads in at least float32, q scaled."""
    dtype = torch.promote_types(q.dtype, torch.float32)
    q = q.to(dtype) * (q.shape[-1] ** -0.5 if scale is None else scale)
    return (q.transpose(1, 2), *(t.to(dtype).transpose(1, 2) for t in ts))


def naive_sparse_attn(q: Tensor, k: Tensor, v: Tensor, kind: str, stride: int, summary: int = 1,
                      factorization: str = "merged", scale: float | None = None,
                      initial_state: Cache | None = None, output_final_state: bool = False, *,
                      causal: bool = True) -> tuple[Tensor, Cache | None]:
    """The reference: scores over the cache and the new keys, masked by each head's pattern, softmax (an empty
    row gives 0), times the values."""
    _check("naive_sparse_attn", q, k, v, kind, stride, summary, factorization, initial_state)
    keys, values = cached(k, v, initial_state)
    n, t = keys.shape[1], q.shape[1]
    qh, kh, vh = _wide(q, scale, keys, values)
    allowed = torch.cat([sparse_pattern(n, kind, stride, summary, causal, q.device, part).expand(g, n, n)
                         for part, g in head_parts(factorization, q.shape[2])])[:, n - t:]  # (H, T, N)
    scores = (qh @ kh.transpose(-1, -2)).masked_fill(~allowed, float("-inf"))
    o = softmax_or_zero(scores, allowed.any(dim=-1, keepdim=True)) @ vh
    return o.transpose(1, 2).to(v.dtype), ((keys, values) if output_final_state else None)


def fused_recurrent_sparse_attn(q: Tensor, k: Tensor, v: Tensor, kind: str, stride: int, summary: int = 1,
                                factorization: str = "merged", scale: float | None = None,
                                initial_state: Cache | None = None,
                                output_final_state: bool = False) -> tuple[Tensor, Cache | None]:
    """Decoding (causal): each token joins the cache, then its query reads the keys its pattern allows."""
    _check("fused_recurrent_sparse_attn", q, k, v, kind, stride, summary, factorization, initial_state)
    state, outputs = initial_state, []
    for i in range(q.shape[1]):
        state = cached(k[:, i:i + 1], v[:, i:i + 1], state)
        position = state[0].shape[1] - 1
        qh, kh, vh = _wide(q[:, i:i + 1], scale, *state)
        heads, first = [], 0
        for part, g in head_parts(factorization, q.shape[2]):
            idx = causal_keys(kind, stride, summary, position, part).to(q.device)
            sl = slice(first, first + g)
            first += g
            if len(idx) == 0:  # an empty set contributes nothing
                heads.append(vh.new_zeros(vh.shape[0], g, 1, vh.shape[-1]))
                continue
            scores = qh[:, sl] @ kh[:, sl][:, :, idx].transpose(-1, -2)
            heads.append(scores.softmax(dim=-1) @ vh[:, sl][:, :, idx])
        outputs.append(torch.cat(heads, dim=1).transpose(1, 2))
    o = (torch.cat(outputs, dim=1) if outputs else q.new_zeros(*q.shape[:3], v.shape[3])).to(v.dtype)
    if state is None:
        state = (k, v)
    return o, (state if output_final_state else None)


def parallel_sparse_attn(q: Tensor, k: Tensor, v: Tensor, kind: str, stride: int, summary: int = 1,
                         factorization: str = "merged", scale: float | None = None,
                         initial_state: Cache | None = None, output_final_state: bool = False, *,
                         causal: bool = True) -> tuple[Tensor, Cache | None]:
    """Every new query at once: :func:`blockwise_sparse_attention` over the cached keys and the new ones (the cached
    positions' queries zero, their outputs dropped)."""
    _check("parallel_sparse_attn", q, k, v, kind, stride, summary, factorization, initial_state)
    keys, values = cached(k, v, initial_state)
    before = keys.shape[1] - q.shape[1]
    queries = torch.cat([q.new_zeros(q.shape[0], before, *q.shape[2:]), q], dim=1)
    qh, kh, vh = _wide(queries, scale, keys, values)
    o = blockwise_sparse_attention(qh, kh, vh, kind, stride, summary, causal, head_parts(factorization, q.shape[2]))
    return o[:, :, before:].transpose(1, 2).to(v.dtype), ((keys, values) if output_final_state else None)
