"""Kernelised (linear) attention, the operation shared by "linear", "performer", "cosformer" and "kerformer".

Given non-negative feature maps ``phi(q_i)``, ``phi(k_j)`` (Gan et al. (2023) eqs. 4-6, Katharopoulos et al.
(2020) eq. 2)::

    out_i = sum_j w_ij v_j / sum_j w_ij,     w_ij = phi(q_i) . phi(k_j)  [j <= i when causal, j real]

Non-causal: ``phi(Q) (phi(K)^T V)``, O(N F D) time and O(N (F + D) + F D) memory.

Causal, chunked: the sequence is cut into chunks of C positions. Inside a chunk the masked C x C product
is used; across chunks a running state ``S = sum phi(k_j) v_j^T`` (one F x D matrix per chunk boundary)
carries the prefix. Time O(N C (F + D) + N F D), memory O(N (C + D) + (N / C) F D): no (N, F, D) tensor
is ever materialised (``C ~ sqrt(F D)`` makes the last term O(N sqrt(F D))).

Optional per-key log-scales ``s_j`` (non-decreasing along the sequence) let a caller keep features in
range, as the Performer's stabiliser does: the true key feature is ``exp(s_j) phi(k_j)``, and query ``i``
is computed relative to its own ``s_i``, so every factor ``exp(s_j - s_i)`` with ``j <= i`` is at most 1
and nothing in the computation depends on keys after ``i``.

The denominator gets ``eps`` added away from zero (sign-preserving, so signed ablation features cannot
divide by ~0); a query with no real key gets 0.

``normalize=False`` drops the denominator: ``out_i = sum_j w_ij v_j``, i.e. ``phi(Q) (phi(K)^T V)`` as
Yamada et al. (2022) eq. 5 writes linear attention (Katharopoulos et al. (2020) eq. 6 divides by
``phi(q_i) . sum_j phi(k_j)``). Log-scales need the denominator (the query's own ``exp(s_i)`` cancels only
in the ratio), so they are rejected without it.

``kernel_attention_reference`` computes the same thing with an explicit N x N weight matrix.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..validate import is_positive_int

__all__ = ["kernel_attention", "causal_kernel_attention", "kernel_attention_reference", "kernel_attention_weights",
           "kernel_attention_step", "divide_away_from_zero", "auto_chunk_size", "upcast_low_precision",
           "rescaled_prefix_states", "rescaled_prefix_states_reference"]


def auto_chunk_size(n: int, feature_dim: int, value_dim: int) -> int:
    """Power of two near sqrt(F D) (balances the intra-chunk and the state memory), within [16, 256]."""
    target = 2 ** round(math.log2(max(1.0, math.sqrt(feature_dim * value_dim))))
    return max(1, min(n, max(16, min(256, target))))


def upcast_low_precision(*ts: Tensor) -> tuple[Tensor, ...]:
    """Low-precision inputs are accumulated in float32 (sums over N would lose too much in bf16/fp16)."""
    if any(t.dtype in (torch.float16, torch.bfloat16) for t in ts):
        return tuple(t.float() for t in ts)
    return ts


def with_ones(v: Tensor) -> Tensor:
    """``[v, 1]``: the last column accumulates the denominator alongside the numerator."""
    return torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)


def _normalise(num_den: Tensor, eps: float) -> Tensor:
    return divide_away_from_zero(num_den[..., :-1], num_den[..., -1:], eps)


def divide_away_from_zero(num: Tensor, den: Tensor, eps: float) -> Tensor:
    """``num / den`` with ``eps`` added to ``den`` away from zero (sign-preserving), as the normalised forms do."""
    return num / (den + torch.where(den >= 0, eps, -eps))


def _check_normalize(where: str, normalize: object, log_scaled: bool) -> None:
    if not isinstance(normalize, bool):
        raise ValueError(f"{where}: normalize must be a bool, got {normalize!r}")
    if log_scaled and not normalize:
        raise ValueError(f"{where}: log-scales need normalize=True (the query's own scale cancels only in the ratio)")


def _check(q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor | None, key_log_scale: Tensor | None,
           normalize: bool) -> None:
    _check_normalize("kernel_attention", normalize, key_log_scale is not None)
    if q.dim() != 4 or q.shape != k.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"kernel_attention: q, k must be (B, H, N, F) and v (B, H, N, D); got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if key_mask is not None and key_mask.shape != (q.shape[0], q.shape[2]):
        raise ValueError(f"kernel_attention: key_mask must be (B, N), got {tuple(key_mask.shape)}")
    if key_log_scale is not None and key_log_scale.shape != q.shape[:3]:
        raise ValueError(f"kernel_attention: key_log_scale must be (B, H, N), got {tuple(key_log_scale.shape)}")


def _prepared(q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor | None, normalize: bool) -> tuple[Tensor, ...]:
    """q, k and the values in the compute dtype, padded keys zeroed, ``[v, 1]`` when normalised."""
    q, k, v = upcast_low_precision(q, k, v)
    if key_mask is not None:
        k = k.masked_fill(~key_mask[:, None, :, None], 0.0)  # not a product: inf * 0 would be NaN
    return q, k, with_ones(v) if normalize else v


def kernel_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool,
    key_mask: Tensor | None = None,
    key_log_scale: Tensor | None = None,
    chunk_size: int | None = None,
    eps: float = 1e-6,
    normalize: bool = True,
) -> Tensor:
    """Linear-complexity kernel attention.

    Args:
        q, k: feature-mapped queries and keys, (B, H, N, F).
        v: values, (B, H, N, D).
        causal: position i sees keys j <= i only.
        key_mask: (B, N) bool, True = real key; padded keys leave numerator and denominator.
        key_log_scale: (B, H, N), causal only, finite and non-decreasing in N: the true key feature
            is ``exp(key_log_scale) * k`` (see the module docstring).
        chunk_size: causal chunk length C; default :func:`auto_chunk_size`.
        eps: added to the denominator, away from zero.
        normalize: divide by ``sum_j w_ij`` (default); False gives the bare ``sum_j w_ij v_j``.

    Returns: (B, H, N, D) in the dtype of ``v``. :func:`causal_kernel_attention` is the causal form with a state
    passed in and out.
    """
    if causal:
        return causal_kernel_attention(q, k, v, key_mask=key_mask, key_log_scale=key_log_scale,
                                       chunk_size=chunk_size, eps=eps, normalize=normalize)[0]
    _check(q, k, v, key_mask, key_log_scale, normalize)
    if key_log_scale is not None:
        raise ValueError("kernel_attention: key_log_scale is for the causal form only")
    out_dtype = v.dtype
    q, k, values = _prepared(q, k, v, key_mask, normalize)
    out = q @ (k.transpose(-2, -1) @ values)
    return (_normalise(out, eps) if normalize else out).to(out_dtype)


def causal_kernel_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    initial_state: Tensor | None = None,
    initial_log_scale: Tensor | None = None,
    output_final_state: bool = False,
    key_mask: Tensor | None = None,
    key_log_scale: Tensor | None = None,
    chunk_size: int | None = None,
    eps: float = 1e-6,
    normalize: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """Causal :func:`kernel_attention` continuing from a state, and the state after it: what N calls of
    :func:`kernel_attention_step` give, in the chunked form (prompts, a sequence cut anywhere).

    The state is :func:`kernel_attention_step`'s: ``sum_j phi(k_j) [v_j, 1]^T`` (B, H, F, D + 1), or
    ``sum_j phi(k_j) v_j^T`` (B, H, F, D) with ``normalize=False``, in float32 for low-precision inputs. With
    log-scales the state is kept relative to the log-scale of its newest key: ``initial_log_scale`` (B, H) is the
    initial state's (at most the first ``key_log_scale``), and the final state is relative to the last
    ``key_log_scale``. Returns (output (B, H, N, D) in the dtype of ``v``, the final state or None).
    """
    _check(q, k, v, key_mask, key_log_scale, normalize)
    if not isinstance(output_final_state, bool):
        raise ValueError(f"causal_kernel_attention: output_final_state must be a bool, got {output_final_state!r}")
    b, h, _, f = q.shape
    width = v.shape[-1] + (1 if normalize else 0)
    if initial_state is not None and tuple(initial_state.shape) != (b, h, f, width):
        raise ValueError(f"causal_kernel_attention: initial_state must be (B, H, F, {'D + 1' if normalize else 'D'}) "
                         f"= {(b, h, f, width)}, got {tuple(initial_state.shape)}")
    if (initial_log_scale is not None) != (initial_state is not None and key_log_scale is not None):
        raise ValueError("causal_kernel_attention: initial_log_scale goes with an initial_state and key_log_scale "
                         "(the log-scale the initial state is relative to), and only with them")
    if initial_log_scale is not None and tuple(initial_log_scale.shape) != (b, h):
        raise ValueError(f"causal_kernel_attention: initial_log_scale must be (B, H) = {(b, h)}, got "
                         f"{tuple(initial_log_scale.shape)}")
    out_dtype = v.dtype
    q, k, values = _prepared(q, k, v, key_mask, normalize)
    state = None if initial_state is None else initial_state.to(q.dtype)
    if q.shape[2] == 0:  # nothing to add: the state as it was
        final = q.new_zeros(b, h, f, width) if state is None else state
        return v.new_zeros(v.shape).to(out_dtype), (final if output_final_state else None)
    start = None if initial_log_scale is None else initial_log_scale.to(q.dtype)
    scale = None if key_log_scale is None else key_log_scale.to(q.dtype)
    out, final = _causal_chunked(q, k, values, scale, chunk_size or auto_chunk_size(q.shape[2], f, v.shape[3]),
                                 state, start, output_final_state)
    return (_normalise(out, eps) if normalize else out).to(out_dtype), final


def _causal_chunked(q: Tensor, k: Tensor, v: Tensor, s: Tensor | None, chunk: int, state: Tensor | None,
                    start: Tensor | None, want_state: bool) -> tuple[Tensor, Tensor | None]:
    b, h, n, f = q.shape
    d = v.shape[-1]
    if not is_positive_int(chunk):
        raise ValueError(f"kernel_attention: chunk_size must be a positive int, got {chunk!r}")
    pad = (-n) % chunk
    if pad:  # zero queries/keys/values at the end contribute nothing and are cropped
        q, k, v = (torch.nn.functional.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        if s is not None:
            s = torch.cat([s, s[..., -1:].expand(b, h, pad)], dim=-1)
    c = (n + pad) // chunk
    qc, kc, vc = q.view(b, h, c, chunk, f), k.view(b, h, c, chunk, f), v.view(b, h, c, chunk, d)

    # In-place steps (tril_, cumsum_, +=) keep the peak memory of a forward pass near the non-causal one;
    # none of them overwrites a tensor that autograd saved for the backward.
    scores = qc @ kc.transpose(-2, -1)  # (b, h, c, C, C)
    if s is not None:
        sc = s.view(b, h, c, chunk)
        scores = scores * torch.exp((sc[..., None, :] - sc[..., :, None]).clamp(max=0.0))
    out = scores.tril_() @ vc  # within each chunk
    del scores
    final = None
    if s is None and (c > 1 or state is not None or want_state):
        kv = (kc.transpose(-2, -1) @ vc).cumsum_(dim=2)  # inclusive prefix sums of the chunk states (b, h, c, F, D)
        if state is not None:
            kv += state[:, :, None]
            out[:, :, :1] += qc[:, :, :1] @ state[:, :, None]
        if c > 1:
            out[:, :, 1:] += qc[:, :, 1:] @ kv[:, :, :-1]  # chunk i sees the chunks before it
        final = kv[:, :, -1]
    elif s is not None:
        end = sc[..., -1]  # each chunk's state is kept relative to its last log-scale
        kv = (kc * torch.exp(sc - end[..., None])[..., None]).transpose(-2, -1) @ vc
        prefix = rescaled_prefix_states(kv, torch.exp(end[:, :, :-1] - end[:, :, 1:]))
        first = end[:, :, :1] if start is None else start[..., None]  # chunk 0's state: zero, or the initial one
        previous_end = torch.cat([first, end[:, :, :-1]], dim=2)
        if state is not None:  # the initial state, brought to each chunk's scale (the rescalings telescope)
            prefix = prefix + state[:, :, None] * torch.exp(first - previous_end)[..., None, None]
        decay = torch.exp((previous_end[..., None] - sc).clamp(max=0.0))[..., None]
        out += (qc @ prefix) * decay
        if want_state:
            final = prefix[:, :, -1] * torch.exp(previous_end[..., -1] - end[..., -1])[..., None, None] + kv[:, :, -1]
    return out.view(b, h, c * chunk, d)[:, :, :n], (final if want_state else None)


def rescaled_prefix_states(kv: Tensor, rescale: Tensor) -> Tensor:
    """The state before each chunk of a rescaled running sum: ``P_0 = 0``, ``P_1 = kv_0`` and
    ``P_{i+1} = P_i * rescale_{i-1} + kv_i``, for ``kv`` (B, H, c, F, D) and ``rescale`` (B, H, c - 1).

    One preallocated output and a hand-written backward (the reverse recurrence
    ``A_i = G_i + rescale_{i-1} A_{i+1}``): autograd through a per-chunk loop would either build a whole-tensor
    gradient per chunk (O(c^2) time) or keep a second copy of the states (memory).
    :func:`rescaled_prefix_states_reference` is the plain loop."""
    return _RescaledPrefix.apply(kv, rescale)


def rescaled_prefix_states_reference(kv: Tensor, rescale: Tensor) -> Tensor:
    """:func:`rescaled_prefix_states` as a plain loop under autograd."""
    states = [torch.zeros_like(kv[:, :, 0]), kv[:, :, 0]]
    for i in range(1, kv.shape[2] - 1):
        states.append(states[-1] * rescale[:, :, i - 1, None, None] + kv[:, :, i])
    return torch.stack(states[:kv.shape[2]], dim=2)


class _RescaledPrefix(torch.autograd.Function):
    @staticmethod
    def forward(ctx, kv: Tensor, rescale: Tensor) -> Tensor:  # type: ignore[override]
        c = kv.shape[2]
        prefix = torch.empty_like(kv)
        prefix[:, :, 0] = 0.0
        if c > 1:
            prefix[:, :, 1] = kv[:, :, 0]
        for i in range(1, c - 1):
            torch.addcmul(kv[:, :, i], prefix[:, :, i], rescale[:, :, i - 1, None, None], out=prefix[:, :, i + 1])
        ctx.save_for_backward(prefix, rescale)
        return prefix

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        prefix, rescale = ctx.saved_tensors
        c = prefix.shape[2]
        grad_kv = torch.zeros_like(prefix)  # grad_kv[:, :, i] = A_{i+1}, the gradient reaching P_{i+1}
        if c > 1:
            grad_kv[:, :, c - 2] = grad[:, :, c - 1]
        for i in range(c - 2, 0, -1):  # A_i = G_i + rescale_{i-1} A_{i+1}
            torch.addcmul(grad[:, :, i], grad_kv[:, :, i], rescale[:, :, i - 1, None, None], out=grad_kv[:, :, i - 1])
        grad_rescale = torch.zeros_like(rescale)  # rescale_{i-1} gets <A_{i+1}, P_i>; the last one is unused
        grad_rescale[:, :, :c - 2] = (grad_kv[:, :, 1:c - 1] * prefix[:, :, 1:c - 1]).sum(dim=(-2, -1))
        return grad_kv, grad_rescale


def kernel_attention_step(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    state: Tensor | None,
    *,
    log_scale: Tensor | None = None,
    prev_log_scale: Tensor | None = None,
    eps: float = 1e-6,
    normalize: bool = True,
) -> tuple[Tensor, Tensor]:
    """One causal step of :func:`kernel_attention`: O(F D), independent of the prefix length.

    ``q``, ``k`` (B, H, F) and ``v`` (B, H, D) belong to the new position; ``state`` (B, H, F, D + 1) is
    ``sum_j phi(k_j) [v_j, 1]^T`` over the prefix (None before the first token); with ``normalize=False``
    it is ``sum_j phi(k_j) v_j^T`` (B, H, F, D) and the output is not divided. With log-scales the state
    is kept relative to the newest one: it is rescaled by ``exp(prev_log_scale - log_scale) <= 1`` before
    the new key is added, exactly as the chunked form does between chunks. Returns (output (B, H, D) in
    the dtype of ``v``, new state).
    """
    _check_normalize("kernel_attention_step", normalize, log_scale is not None)
    out_dtype = v.dtype
    q, k, v = upcast_low_precision(q, k, v)
    values = with_ones(v) if normalize else v
    update = k[..., :, None] * values[..., None, :]
    if state is None:
        state = update
    elif log_scale is None:
        state = state + update
    else:
        state = state * torch.exp(prev_log_scale - log_scale)[..., None, None] + update
    out = (q[..., None, :] @ state).squeeze(-2)
    return (_normalise(out, eps) if normalize else out).to(out_dtype), state


def _weight_matrix(q: Tensor, k: Tensor, causal: bool, key_mask: Tensor | None,
                   key_log_scale: Tensor | None) -> Tensor:
    """The unnormalised (B, H, N, N) weights w_ij = phi(q_i).phi(k_j), rescaled by exp(s_j - s_i) with
    log-scales, zero where key j is padding or (causal) after i."""
    n = q.shape[2]
    w = q @ k.transpose(-2, -1)
    allowed = torch.ones(n, n, dtype=torch.bool, device=q.device)
    if causal:
        allowed = allowed.tril()
    allowed = allowed.expand(q.shape[0], 1, n, n)
    if key_mask is not None:
        allowed = allowed & key_mask[:, None, None, :]
    if key_log_scale is not None:
        s = key_log_scale.to(q.dtype)
        rel = (s[..., None, :] - s[..., :, None]).masked_fill(~allowed, float("-inf"))
        w = w * torch.exp(rel)
    return w.masked_fill(~allowed, 0.0)


def kernel_attention_reference(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool,
    key_mask: Tensor | None = None,
    key_log_scale: Tensor | None = None,
    eps: float = 1e-6,
    normalize: bool = True,
) -> Tensor:
    """The same function through the explicit (B, H, N, N) weight matrix w_ij = phi(q_i).phi(k_j)."""
    _check(q, k, v, key_mask, key_log_scale, normalize)
    out_dtype = v.dtype
    q, k, v = upcast_low_precision(q, k, v)
    w = _weight_matrix(q, k, causal, key_mask, key_log_scale)
    num = w @ v
    if not normalize:
        return num.to(out_dtype)
    den = w.sum(dim=-1, keepdim=True)
    return _normalise(torch.cat([num, den], dim=-1), eps).to(out_dtype)


def kernel_attention_weights(
    q: Tensor,
    k: Tensor,
    *,
    causal: bool,
    key_mask: Tensor | None = None,
    key_log_scale: Tensor | None = None,
    eps: float = 1e-6,
    normalize: bool = True,
) -> Tensor:
    """The (B, H, N, N) attention matrix of :func:`kernel_attention`: row i holds the weights query i gives
    each key, phi(q_i).phi(k_j) over their sum (``normalize=False``: not divided), zero for padded keys and,
    causally, for later ones; ``weights @ v`` is the attention's output. O(N^2) memory: for inspection
    (e.g. how local the attention is), not for the forward pass."""
    _check(q, k, k, key_mask, key_log_scale, normalize)
    q, k = upcast_low_precision(q, k)
    w = _weight_matrix(q, k, causal, key_mask, key_log_scale)
    if not normalize:
        return w
    return _normalise(torch.cat([w, w.sum(dim=-1, keepdim=True)], dim=-1), eps)
