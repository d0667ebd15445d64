"""Sliding-window softmax attention beside linear attention (LoLCATs' hybrid: Zhang et al. 2024b, "LoLCATs", §3.2,
in the arrangement of its released code) as functions on per-head tensors, in the conventions of
:mod:`tokenmix.ops.linear_attn` (flash-linear-attention's: (B, T, H, ·) tensors, ``(o, final_state)``).

Per head, with a window of ``w`` tokens (the query's own included), ``s_ij = scale q_i . k_j``, ``m_i`` the largest
``s_ij`` in the window and ``phi`` any feature map (applied by the caller: ``q_features``, ``k_features``)::

    o_i = (g sum_{i-w < j <= i} exp(s_ij - m_i) v_j + l sum_{j <= i-w} phi(q_i) . phi(k_j) v_j)
          / (g sum_{i-w < j <= i} exp(s_ij - m_i)     + l sum_{j <= i-w} phi(q_i) . phi(k_j))

``g`` (``window_weight``) and ``l`` (``linear_weight``) are per-head weights, a float or an (H,) tensor (gradients
flow into a tensor). The state (:class:`WindowLinearState`) is what decoding keeps: the last ``min(t, w)`` tokens'
keys, key features and values in position order, and linear attention's normalised state ``(S, z)`` of every token
before them (:mod:`tokenmix.ops.linear_attn`'s pair): ``w (K + F + V) + F (V + 1)`` numbers per head, whatever the
length. Three forms compute the same thing:

* :func:`naive_window_linear_attn`: every query's two sums written out over the state's tokens and the new ones
  (O(T^2); the reference);
* :func:`fused_recurrent_window_linear_attn`: the recurrence decoding runs, any T (a token enters the window, the one
  it pushes out enters ``(S, z)``);
* :func:`chunk_window_linear_attn`: the window as banded attention over blocks of ``w`` queries, the linear part as
  chunked causal linear attention over keys delayed by ``w`` (O(T w K + T F V)); a state's window tokens are put
  before the new ones.

Shapes: ``q, k`` (B, T, H, K); ``q_features, k_features`` (B, T, H, F); ``v`` (B, T, H, V). ``scale`` defaults to
K ** -0.5. Low-precision inputs are computed in float32; the output has the inputs' dtype, the state float32 (float64
for float64 inputs).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..validate import is_positive_int
from .conventions import check_heads, compute_dtype
from .kernel_attention import causal_kernel_attention, divide_away_from_zero, with_ones

__all__ = ["WindowLinearState", "naive_window_linear_attn", "fused_recurrent_window_linear_attn",
           "chunk_window_linear_attn", "window_linear_heads", "shifted_exp", "empty_window_linear_state"]


class WindowLinearState(NamedTuple):
    """The last ``L <= w`` tokens in position order and linear attention's state of every older one."""
    keys: Tensor  # (B, L, H, K)
    key_features: Tensor  # (B, L, H, F)
    values: Tensor  # (B, L, H, V)
    s: Tensor  # (B, H, F, V): sum of phi(k_j) v_j^T
    z: Tensor  # (B, 1, H, F): sum of phi(k_j)


Weight = float | Tensor


def _check(name: str, q: Tensor, k: Tensor, v: Tensor, q_features: Tensor, k_features: Tensor, window: int,
           weights: tuple[Weight, Weight], initial_state: WindowLinearState | None) -> None:
    where = f"tokenmix.ops.window_linear.{name}"
    check_heads(where, q, k, v)
    if q_features.dim() != 4 or k_features.shape != q_features.shape or q_features.shape[:3] != q.shape[:3]:
        raise ValueError(f"{where}: q_features and k_features must be (B, T, H, F) alike, with q's B, T and H; got "
                         f"{tuple(q_features.shape)}, {tuple(k_features.shape)}")
    if not is_positive_int(window):
        raise ValueError(f"{where}: window must be a positive int, got {window!r}")
    for label, weight in zip(("window_weight", "linear_weight"), weights):
        if isinstance(weight, Tensor) and weight.shape not in ((), (q.shape[2],)):
            raise ValueError(f"{where}: {label} must be a float or an (H,) = ({q.shape[2]},) tensor, got "
                             f"{tuple(weight.shape)}")
    if initial_state is None:
        return
    if not isinstance(initial_state, tuple) or len(initial_state) != 5:
        raise ValueError(f"{where}: initial_state must be a WindowLinearState (keys, key_features, values, s, z)")
    b, _, h, dk = q.shape
    f, dv = q_features.shape[3], v.shape[3]
    keys, features, values, s, z = initial_state
    length = keys.shape[1] if keys.dim() == 4 else -1
    want = {"keys": (keys, (b, length, h, dk)), "key_features": (features, (b, length, h, f)),
            "values": (values, (b, length, h, dv)), "s": (s, (b, h, f, dv)), "z": (z, (b, 1, h, f))}
    for label, (tensor, shape) in want.items():
        if tuple(tensor.shape) != shape:
            raise ValueError(f"{where}: the state's {label} must be {shape}, got {tuple(tensor.shape)}")
    if length > window:
        raise ValueError(f"{where}: the state holds {length} window tokens, more than window={window}")


def _per_head(weight: Weight, dtype: torch.dtype, device: torch.device) -> Tensor:
    """A float or (H,) weight as a (1, H, 1, 1) tensor, to broadcast over (B, H, T, ·)."""
    return torch.as_tensor(weight, device=device).to(dtype).reshape(1, -1, 1, 1)


def empty_window_linear_state(b: int, h: int, dk: int, f: int, dv: int, dtype: torch.dtype,
                              device: torch.device | None) -> WindowLinearState:
    """The state before any token: no window tokens, zero sums."""
    zeros = dict(dtype=dtype, device=device)
    return WindowLinearState(torch.zeros(b, 0, h, dk, **zeros), torch.zeros(b, 0, h, f, **zeros),
                             torch.zeros(b, 0, h, dv, **zeros), torch.zeros(b, h, f, dv, **zeros),
                             torch.zeros(b, 1, h, f, **zeros))


def _inputs(q: Tensor, k: Tensor, v: Tensor, q_features: Tensor, k_features: Tensor, scale: float | None,
            initial_state: WindowLinearState | None) -> tuple[tuple[Tensor, ...], WindowLinearState]:
    """The inputs in the compute dtype, q scaled, and the state (an empty one where None)."""
    dtype = compute_dtype(q)
    b, _, h, dk = q.shape
    q, k, v, q_features, k_features = (x.to(dtype) for x in (q, k, v, q_features, k_features))
    q = q * (dk ** -0.5 if scale is None else scale)
    if initial_state is None:
        return (q, k, v, q_features, k_features), empty_window_linear_state(b, h, dk, q_features.shape[3],
                                                                            v.shape[3], dtype, q.device)
    state = WindowLinearState(*(x.to(dtype) for x in initial_state))
    return (q, k, v, q_features, k_features), state


def shifted_exp(scores: Tensor) -> Tensor:
    """``exp(s_ij - m_i)`` with ``m_i`` the row's largest score (0 for a row whose window holds no real key, so that
    its terms are 0 rather than NaN): the window's terms before the shared normalisation."""
    top = scores.amax(dim=-1, keepdim=True)
    return torch.exp(scores - torch.where(torch.isfinite(top), top, torch.zeros_like(top)))


def _joined(state: WindowLinearState, k: Tensor, k_features: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The state's window tokens, then the new ones: keys, key features, values (B, L + T, H, ·)."""
    return tuple(torch.cat([old, new], dim=1) for old, new in
                 ((state.keys, k), (state.key_features, k_features), (state.values, v)))


def _advanced(state: WindowLinearState, keys: Tensor, features: Tensor, values: Tensor,
              window: int) -> WindowLinearState:
    """The state after the tokens :func:`_joined` gave (the window's and the new ones): the last ``w`` in the
    window, the ones pushed out of it into ``(S, z)``."""
    leaving = max(keys.shape[1] - window, 0)
    s = state.s + torch.einsum("blhf,blhv->bhfv", features[:, :leaving], values[:, :leaving])
    z = state.z + features[:, :leaving].sum(1, keepdim=True)
    return WindowLinearState(keys[:, leaving:], features[:, leaving:], values[:, leaving:], s, z)


def naive_window_linear_attn(q: Tensor, k: Tensor, v: Tensor, q_features: Tensor, k_features: Tensor, window: int,
                             window_weight: Weight, linear_weight: Weight = 1.0, scale: float | None = None,
                             initial_state: WindowLinearState | None = None, output_final_state: bool = False, *,
                             eps: float = 1e-6) -> tuple[Tensor, WindowLinearState | None]:
    """The reference: each query's window sum and linear sum written out over the state's tokens and the new
    ones (positions counted from the state's oldest window token)."""
    _check("naive_window_linear_attn", q, k, v, q_features, k_features, window, (window_weight, linear_weight),
           initial_state)
    out_dtype = v.dtype
    (q, k, v, q_features, k_features), state = _inputs(q, k, v, q_features, k_features, scale, initial_state)
    g = _per_head(window_weight, q.dtype, q.device)[:, :, 0, 0]
    lin = _per_head(linear_weight, q.dtype, q.device)[:, :, 0, 0]
    before = state.keys.shape[1]
    keys, features, values = _joined(state, k, k_features, v)
    outputs = []
    for t in range(q.shape[1]):
        i = before + t
        near = range(max(0, i - window + 1), i + 1)
        scores = torch.stack([(q[:, t] * keys[:, j]).sum(-1) for j in near], dim=-1)  # (B, H, |W|)
        e = torch.exp(scores - scores.amax(-1, keepdim=True))
        num = g[..., None] * torch.einsum("bhw,bwhv->bhv", e, values[:, near.start:i + 1])
        den = g * e.sum(-1)
        s, z = state.s, state.z[:, 0]
        for j in range(0, i - window + 1):
            s = s + features[:, j, :, :, None] * values[:, j, :, None, :]
            z = z + features[:, j]
        num = num + lin[..., None] * torch.einsum("bhf,bhfv->bhv", q_features[:, t], s)
        den = den + lin * (q_features[:, t] * z).sum(-1)
        outputs.append(divide_away_from_zero(num, den[..., None], eps))
    o = (torch.stack(outputs, dim=1) if outputs else v.new_zeros(v.shape)).to(out_dtype)
    return o, (_advanced(state, keys, features, values, window) if output_final_state else None)


def fused_recurrent_window_linear_attn(q: Tensor, k: Tensor, v: Tensor, q_features: Tensor, k_features: Tensor,
                                       window: int, window_weight: Weight, linear_weight: Weight = 1.0,
                                       scale: float | None = None, initial_state: WindowLinearState | None = None,
                                       output_final_state: bool = False, *,
                                       eps: float = 1e-6) -> tuple[Tensor, WindowLinearState | None]:
    """The recurrence decoding runs (any T; O(w K + F V) per token): the token enters the window, the one it
    pushes out enters ``(S, z)``, the output reads both."""
    _check("fused_recurrent_window_linear_attn", q, k, v, q_features, k_features, window,
           (window_weight, linear_weight), initial_state)
    out_dtype = v.dtype
    (q, k, v, q_features, k_features), state = _inputs(q, k, v, q_features, k_features, scale, initial_state)
    g = _per_head(window_weight, q.dtype, q.device)[:, :, 0, 0]
    lin = _per_head(linear_weight, q.dtype, q.device)[:, :, 0, 0]
    outputs = []
    for t in range(q.shape[1]):
        state = _advanced(state, *_joined(state, k[:, t:t + 1], k_features[:, t:t + 1], v[:, t:t + 1]), window)
        e = shifted_exp(torch.einsum("bhk,bwhk->bhw", q[:, t], state.keys))
        num = g[..., None] * torch.einsum("bhw,bwhv->bhv", e, state.values)
        num = num + lin[..., None] * torch.einsum("bhf,bhfv->bhv", q_features[:, t], state.s)
        den = g * e.sum(-1) + lin * (q_features[:, t] * state.z[:, 0]).sum(-1)
        outputs.append(divide_away_from_zero(num, den[..., None], eps))
    o = (torch.stack(outputs, dim=1) if outputs else v.new_zeros(v.shape)).to(out_dtype)
    return o, (state if output_final_state else None)


def chunk_window_linear_attn(q: Tensor, k: Tensor, v: Tensor, q_features: Tensor, k_features: Tensor, window: int,
                             window_weight: Weight, linear_weight: Weight = 1.0, scale: float | None = None,
                             initial_state: WindowLinearState | None = None, output_final_state: bool = False, *,
                             chunk_size: int | None = None,
                             eps: float = 1e-6) -> tuple[Tensor, WindowLinearState | None]:
    """The chunked form (training and prefill): :func:`window_linear_heads` over the state's window tokens and the
    new ones, from the state's ``(S, z)``; only the new positions' outputs returned."""
    _check("chunk_window_linear_attn", q, k, v, q_features, k_features, window, (window_weight, linear_weight),
           initial_state)
    out_dtype = v.dtype
    (q, k, v, q_features, k_features), state = _inputs(q, k, v, q_features, k_features, scale, initial_state)
    if q.shape[1] == 0:
        return v.new_zeros(v.shape).to(out_dtype), (state if output_final_state else None)
    before = state.keys.shape[1]
    keys, features, values = _joined(state, k, k_features, v)
    queries, query_features = (F.pad(x, (0, 0, 0, 0, before, 0)) for x in (q, q_features))  # outputs dropped
    linear = torch.cat([state.s, state.z[:, 0, :, :, None]], dim=-1)
    heads = (x.transpose(1, 2) for x in (queries, keys, values, query_features, features))
    o = window_linear_heads(*heads, window, window_weight, linear_weight, scale=1.0, eps=eps, chunk_size=chunk_size,
                            linear_state=linear)[:, :, before:]
    o = o.transpose(1, 2).to(out_dtype)
    return o, (_advanced(state, keys, features, values, window) if output_final_state else None)


def window_linear_heads(q: Tensor, k: Tensor, v: Tensor, q_features: Tensor, k_features: Tensor, window: int,
                        window_weight: Weight, linear_weight: Weight = 1.0, *, scale: float | None = None,
                        eps: float = 1e-6, chunk_size: int | None = None, key_mask: Tensor | None = None,
                        linear_state: Tensor | None = None) -> Tensor:
    """The fast path on (B, H, T, ·) heads (the mixers' layout), unchecked: ``key_mask`` (B, T) keeps padded keys
    out of both parts; ``linear_state`` (B, H, F, V + 1) is ``[S, z]`` of the keys before the first position.
    Returns the output (B, H, T, V) in ``v``'s dtype."""
    wide = torch.promote_types(v.dtype, torch.float32)  # exp in float32 under bfloat16
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    num_w, den_w = _window_part(q.to(wide) * scale, k.to(wide), v.to(wide), window, key_mask)
    num_l, den_l = _linear_part(q_features, k_features, v, window, key_mask, linear_state, chunk_size)
    g, lin = _per_head(window_weight, wide, q.device), _per_head(linear_weight, wide, q.device)
    return divide_away_from_zero(g * num_w + lin * num_l.to(wide), g * den_w + lin * den_l.to(wide), eps).to(v.dtype)


def _window_part(q: Tensor, k: Tensor, v: Tensor, window: int, key_mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """``sum_{j in W(i)} exp(s_ij - m_i) [v_j, 1]`` (q already scaled), by blocks of ``c = min(w, T)`` queries
    against ``2 c`` keys (their own block and the one before, which together hold every key of their windows)."""
    b, h, n, _ = q.shape
    c = min(window, n) or 1
    blocks = -(-n // c)
    pad = blocks * c - n
    real = torch.ones(b, n, dtype=torch.bool, device=q.device) if key_mask is None else key_mask
    q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
    real = F.pad(real, (c, pad))  # the c keys before the first block: none
    k, v = (F.pad(t, (0, 0, c, 0)) for t in (k, v))

    def pairs_of_blocks(t: Tensor) -> Tensor:  # (..., c + blocks c, x) -> (..., blocks, 2 c, x)
        lead = t.shape[:-2]
        return torch.cat([t[..., :-c, :].reshape(*lead, blocks, c, t.shape[-1]),
                          t[..., c:, :].reshape(*lead, blocks, c, t.shape[-1])], dim=-2)

    kb, vb = pairs_of_blocks(k), pairs_of_blocks(v)
    rb = pairs_of_blocks(real[..., None])[..., 0]  # (B, blocks, 2 c)
    lag = (torch.arange(c, device=q.device)[:, None] + c) - torch.arange(2 * c, device=q.device)[None, :]
    allowed = ((lag >= 0) & (lag < window))[None, None, None] & rb[:, None, :, None, :]
    e = shifted_exp((q.view(b, h, blocks, c, -1) @ kb.transpose(-2, -1)).masked_fill(~allowed, float("-inf")))
    num, den = e @ vb, e.sum(dim=-1, keepdim=True)
    return num.reshape(b, h, blocks * c, -1)[:, :, :n], den.reshape(b, h, blocks * c, 1)[:, :, :n]


def _linear_part(q_features: Tensor, k_features: Tensor, v: Tensor, window: int, key_mask: Tensor | None,
                 linear_state: Tensor | None, chunk_size: int | None) -> tuple[Tensor, Tensor]:
    """``sum_{j <= i - w} phi(q_i) . phi(k_j) [v_j, 1]``: causal kernel attention over keys delayed by ``w``, from
    ``linear_state`` where there is one."""
    n = q_features.shape[2]
    if key_mask is not None:
        k_features = k_features * key_mask[:, None, :, None].to(k_features.dtype)
    delayed_k = F.pad(k_features, (0, 0, window, 0))[:, :, :n]
    delayed = F.pad(with_ones(v), (0, 0, window, 0))[:, :, :n]
    both, _ = causal_kernel_attention(q_features, delayed_k, delayed, initial_state=linear_state,
                                      chunk_size=chunk_size, normalize=False)
    return both[..., :-1], both[..., -1:]
