"""Softmax attention (Vaswani et al. 2017, eq. 1) with its decoding state, the key/value cache, as functions in the
conventions of the other :mod:`tokenmix.ops` forms (flash-linear-attention's ``parallel_attn`` layout: (B, T, H, ·)
tensors; ``(o, final_state)``).

Per head, ``o_i = sum_j softmax_j(scale q_i . k_j) v_j`` over the cached keys and the new ones (causal: new query
``i`` sees the cache and the new keys up to ``i``). The state is the cache itself, ``(k_cache, v_cache)`` of shapes
(B, L, HKV, K) and (B, L, HKV, V): it grows by one token per token, which is what the recurrent mechanisms avoid.
Keys and values may have fewer heads than the queries (grouped-query attention: H a multiple of HKV, each key/value
head serving H / HKV query heads). Three forms compute the same thing:

* :func:`naive_softmax_attn`: the score matrix written out, masked, softmax, times the values (the reference);
* :func:`fused_recurrent_softmax_attn`: one token at a time against the growing cache (decoding);
* :func:`parallel_softmax_attn`: every new query at once by PyTorch's fused ``scaled_dot_product_attention`` (a
  prompt, or a prompt continuing a cache), the causal mask offset by the cache's length.

``scale`` defaults to K ** -0.5. The output has the inputs' dtype; the cache keeps the keys' and values' dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .conventions import Cache, cached, check_cache

__all__ = ["naive_softmax_attn", "fused_recurrent_softmax_attn", "parallel_softmax_attn"]


def _check(name: str, q: Tensor, k: Tensor, v: Tensor, initial_state: Cache | None) -> None:
    where = f"tokenmix.ops.softmax_attn.{name}"
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or k.shape[:3] != v.shape[:3] or k.shape[:2] != q.shape[:2] \
            or k.shape[3] != q.shape[3]:
        raise ValueError(f"{where}: q must be (B, T, H, K), k (B, T, HKV, K) and v (B, T, HKV, V) with the same B, T "
                         f"and K; got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if q.shape[2] % k.shape[2]:
        raise ValueError(f"{where}: the query heads ({q.shape[2]}) must be a multiple of the key/value heads "
                         f"({k.shape[2]})")
    check_cache(where, k, v, initial_state)


def _heads(q: Tensor, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(B, H, ·, ·) layouts, the key/value heads repeated for their query heads."""
    group = q.shape[2] // keys.shape[2]
    keys, values = (x.repeat_interleave(group, dim=2) if group > 1 else x for x in (keys, values))
    return q.transpose(1, 2), keys.transpose(1, 2).to(q.dtype), values.transpose(1, 2).to(q.dtype)


def _allowed(t: int, length: int, causal: bool, device: torch.device) -> Tensor | None:
    """(t, length) bool: new query i (at position length - t + i) sees keys up to its own position."""
    if not causal:
        return None
    start = length - t
    return torch.arange(length, device=device)[None, :] <= (start + torch.arange(t, device=device))[:, None]


def naive_softmax_attn(q: Tensor, k: Tensor, v: Tensor, scale: float | None = None,
                       initial_state: Cache | None = None, output_final_state: bool = False, *,
                       causal: bool = True) -> tuple[Tensor, Cache | None]:
    """The reference: ``softmax(scale Q K^T + mask) V`` over the cache and the new keys, written out."""
    _check("naive_softmax_attn", q, k, v, initial_state)
    keys, values = cached(k, v, initial_state)
    qh, kh, vh = _heads(q, keys, values)
    scores = (qh @ kh.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    allowed = _allowed(q.shape[1], keys.shape[1], causal, q.device)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    o = (scores.softmax(dim=-1) @ vh).transpose(1, 2)
    return o, ((keys, values) if output_final_state else None)


def fused_recurrent_softmax_attn(q: Tensor, k: Tensor, v: Tensor, scale: float | None = None,
                                 initial_state: Cache | None = None,
                                 output_final_state: bool = False) -> tuple[Tensor, Cache | None]:
    """Decoding: each token's key and value join the cache, then its query reads the whole cache (causal)."""
    _check("fused_recurrent_softmax_attn", q, k, v, initial_state)
    state, outputs = initial_state, []
    for t in range(q.shape[1]):
        state = cached(k[:, t:t + 1], v[:, t:t + 1], state)
        qh, kh, vh = _heads(q[:, t:t + 1], *state)
        outputs.append(F.scaled_dot_product_attention(qh, kh, vh, scale=scale).transpose(1, 2))
    o = torch.cat(outputs, dim=1) if outputs else q.new_zeros(*q.shape[:3], v.shape[3])
    if state is None:
        state = (k, v)
    return o, (state if output_final_state else None)


def parallel_softmax_attn(q: Tensor, k: Tensor, v: Tensor, scale: float | None = None,
                          initial_state: Cache | None = None, output_final_state: bool = False, *,
                          causal: bool = True, dropout_p: float = 0.0) -> tuple[Tensor, Cache | None]:
    """Every new query at once (PyTorch's fused attention), continuing the cache: the causal mask offset by the
    cache's length (its own ``is_causal`` where there is no cache). ``dropout_p``: on the weights, for training."""
    _check("parallel_softmax_attn", q, k, v, initial_state)
    keys, values = cached(k, v, initial_state)
    if q.shape[1] == 0:
        return q.new_zeros(*q.shape[:3], v.shape[3]), ((keys, values) if output_final_state else None)
    qh, kh, vh = _heads(q, keys, values)
    if initial_state is None or initial_state[0].shape[1] == 0:
        o = F.scaled_dot_product_attention(qh, kh, vh, dropout_p=dropout_p, is_causal=causal, scale=scale)
    else:
        mask = _allowed(q.shape[1], keys.shape[1], causal, q.device)
        o = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, dropout_p=dropout_p, scale=scale)
    return o.transpose(1, 2), ((keys, values) if output_final_state else None)
