"""Linear attention and Based's Taylor-feature attention as functions on per-head tensors, in flash-linear-attention's
conventions (names, argument order, shapes, ``(o, final_state)``).

Linear attention (Katharopoulos, Vyas, Pappas & Fleuret 2020, "Transformers are RNNs", eqs. 4-6 and 16-20) on
queries and keys already passed through a feature map (``elu + 1``, Performer's random features, cosFormer's
re-weighted ReLU, ...), per head, with the state ``S_t`` a (K, V) matrix::

    S_t = S_{t-1} + k_t v_t^T,    o_t = S_t^T (scale * q_t)                          (normalize=False)
    z_t = z_{t-1} + k_t,          o_t = S_t^T (scale * q_t) / (scale * q_t . z_t)    (normalize=True)

With ``normalize=True`` the state is the pair ``(S, z)``, ``z`` (B, 1, H, K) the running sum of the keys, as
flash-linear-attention's ``chunk_linear_attn`` takes and returns it; with ``normalize=False`` it is ``S`` alone. The
defaults follow flash-linear-attention's, which differ between the forms (``normalize`` False in the recurrent ones,
True in the chunked one): pass it explicitly. The denominator gets ``eps`` added away from zero.

Based (Arora et al. 2024, "Simple linear attention language models balance the recall-throughput tradeoff", §4.1) is
linear attention on the second-order Taylor features of ``exp``: the weight of key j for query i is ``1 + a + a^2 /
2`` with ``a = scale * q_i . k_j`` (:func:`taylor_feature_map`), normalised by default (``use_norm``). Its state is
linear attention's, on ``1 + K + K^2`` features.

Each in three forms that compute the same thing: ``naive_recurrent_*`` (the equation token by token, the reference),
``fused_recurrent_*`` (the recurrence decoding runs, any T) and ``chunk_*`` (parallel inside chunks, recurrent
across them: :func:`tokenmix.ops.kernel_attention.causal_kernel_attention`). Shapes: ``q, k`` (B, T, H, K), ``v``
(B, T, H, V), ``S`` (B, H, K, V); ``scale`` defaults to K ** -0.5. Low-precision inputs are computed in float32; the
output has the inputs' dtype, the state float32 (float64 for float64 inputs).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .conventions import check_heads, compute_dtype
from .kernel_attention import causal_kernel_attention, divide_away_from_zero, kernel_attention_step

__all__ = ["naive_recurrent_linear_attn", "fused_recurrent_linear_attn", "chunk_linear_attn",
           "taylor_feature_map", "naive_recurrent_based", "fused_recurrent_based", "fused_chunk_based",
           "parallel_based"]

State = Tensor | tuple[Tensor, Tensor]


def _check(name: str, q: Tensor, k: Tensor, v: Tensor, initial_state: State | None, normalize: bool) -> None:
    where = f"tokenmix.ops.linear_attn.{name}"
    check_heads(where, q, k, v)
    if not isinstance(normalize, bool):
        raise ValueError(f"{where}: normalize must be a bool, got {normalize!r}")
    if initial_state is None:
        return
    b, _, h, dk = q.shape
    want_s = (b, h, dk, v.shape[3])
    if normalize:
        if not (isinstance(initial_state, tuple) and len(initial_state) == 2):
            raise ValueError(f"{where}: with normalize=True the state is the pair (S, z): S (B, H, K, V) and z "
                             f"(B, 1, H, K), the running sum of the keys; got {type(initial_state).__name__}")
        s, z = initial_state
        if tuple(z.shape) != (b, 1, h, dk):
            raise ValueError(f"{where}: the state's z must be (B, 1, H, K) = {(b, 1, h, dk)}, got {tuple(z.shape)}")
    else:
        if not isinstance(initial_state, Tensor):
            raise ValueError(f"{where}: with normalize=False the state is S (B, H, K, V), one tensor; got "
                             f"{type(initial_state).__name__}")
        s = initial_state
    if tuple(s.shape) != want_s:
        raise ValueError(f"{where}: the state's S must be (B, H, K, V) = {want_s}, got {tuple(s.shape)}")


def _joined(initial_state: State | None, normalize: bool, dtype: torch.dtype) -> Tensor | None:
    """The state as one (B, H, K, V [+ 1]) tensor: S with z as its last column when normalised."""
    if initial_state is None:
        return None
    if not normalize:
        return initial_state.to(dtype)
    s, z = initial_state
    return torch.cat([s.to(dtype), z[:, 0, :, :, None].to(dtype)], dim=-1)


def _split(state: Tensor, normalize: bool) -> State:
    """The inverse of :func:`_joined`."""
    return (state[..., :-1], state[..., -1].unsqueeze(1)) if normalize else state


def naive_recurrent_linear_attn(q: Tensor, k: Tensor, v: Tensor, scale: float | None = None,
                                initial_state: State | None = None, output_final_state: bool = False,
                                normalize: bool = False, *, eps: float = 1e-10) -> tuple[Tensor, State | None]:
    """The reference: the recurrence as written, one token at a time."""
    _check("naive_recurrent_linear_attn", q, k, v, initial_state, normalize)
    out_dtype, dtype = v.dtype, compute_dtype(q)
    b, t, h, dk = q.shape
    q, k, v = (x.to(dtype) for x in (q, k, v))
    q = q * (dk ** -0.5 if scale is None else scale)
    s = torch.zeros(b, h, dk, v.shape[-1], dtype=dtype, device=q.device)
    z = torch.zeros(b, h, dk, dtype=dtype, device=q.device)
    if initial_state is not None:
        s = s + (initial_state[0] if normalize else initial_state).to(dtype)
        if normalize:
            z = z + initial_state[1][:, 0].to(dtype)
    outputs = []
    for i in range(t):
        s = s + k[:, i, :, :, None] * v[:, i, :, None, :]
        o = torch.einsum("bhk,bhkv->bhv", q[:, i], s)
        if normalize:
            z = z + k[:, i]
            o = divide_away_from_zero(o, (q[:, i] * z).sum(-1, keepdim=True), eps)
        outputs.append(o)
    o = torch.stack(outputs, dim=1).to(out_dtype)
    if not output_final_state:
        return o, None
    return o, ((s, z[:, None]) if normalize else s)


def fused_recurrent_linear_attn(q: Tensor, k: Tensor, v: Tensor, scale: float | None = None,
                                initial_state: State | None = None, output_final_state: bool = False,
                                normalize: bool = False, *, eps: float = 1e-10) -> tuple[Tensor, State | None]:
    """The recurrent form decoding runs (any T; O(K V) per token): one
    :func:`~tokenmix.ops.kernel_attention.kernel_attention_step` per token."""
    _check("fused_recurrent_linear_attn", q, k, v, initial_state, normalize)
    out_dtype, dtype = v.dtype, compute_dtype(q)
    q, k, v = (x.to(dtype) for x in (q, k, v))
    q = q * (q.shape[-1] ** -0.5 if scale is None else scale)
    state = _joined(initial_state, normalize, dtype)
    if state is None:  # a zero state, so that T = 0 returns one too
        state = q.new_zeros(q.shape[0], q.shape[2], q.shape[3], v.shape[3] + (1 if normalize else 0))
    outputs = []
    for i in range(q.shape[1]):
        o, state = kernel_attention_step(q[:, i], k[:, i], v[:, i], state, eps=eps, normalize=normalize)
        outputs.append(o)
    o = (torch.stack(outputs, dim=1) if outputs else v.new_zeros(v.shape)).to(out_dtype)
    return o, (_split(state, normalize) if output_final_state else None)


def chunk_linear_attn(q: Tensor, k: Tensor, v: Tensor, scale: float | None = None,
                      initial_state: State | None = None, output_final_state: bool = False,
                      normalize: bool = True, *, chunk_size: int | None = None,
                      eps: float = 1e-10) -> tuple[Tensor, State | None]:
    """The chunked form: inside a chunk of ``chunk_size`` tokens the masked product, across chunks the state
    (:func:`~tokenmix.ops.kernel_attention.causal_kernel_attention`; default chunk about sqrt(K V))."""
    _check("chunk_linear_attn", q, k, v, initial_state, normalize)
    out_dtype, dtype = v.dtype, compute_dtype(q)
    q, k, v = (x.to(dtype).transpose(1, 2) for x in (q, k, v))
    q = q * (q.shape[-1] ** -0.5 if scale is None else scale)
    o, state = causal_kernel_attention(q, k, v, initial_state=_joined(initial_state, normalize, dtype),
                                       output_final_state=output_final_state, chunk_size=chunk_size, eps=eps,
                                       normalize=normalize)
    return o.transpose(1, 2).to(out_dtype), (None if state is None else _split(state, normalize))


def taylor_feature_map(x: Tensor, scale: float | None = None) -> Tensor:
    """``phi(x) = [1, sqrt(scale) x, scale vec(x x^T) / sqrt(2)]`` for ``x`` (..., r), so that ``phi(q) . phi(k) =
    1 + a + a^2 / 2`` with ``a = scale q . k`` (``scale`` defaults to ``r ** -0.5``): the exponential's
    second-order Taylor polynomial, positive for every ``a`` (``((a + 1)^2 + 1) / 2``). (..., r) -> (..., 1 + r +
    r^2)."""
    first = x * math.sqrt(x.shape[-1] ** -0.5 if scale is None else scale)
    second = (first[..., :, None] * first[..., None, :]).flatten(-2) / math.sqrt(2)
    return torch.cat([torch.ones_like(x[..., :1]), first, second], dim=-1)


def _based(form, q: Tensor, k: Tensor, v: Tensor, scale: float | None, initial_state: State | None,
           output_final_state: bool, use_norm: bool, **options) -> tuple[Tensor, State | None]:
    """Based as linear attention on Taylor features (``scale`` is inside the features, so the form's is 1)."""
    if q.dim() != 4 or k.shape != q.shape:
        raise ValueError(f"tokenmix.ops.linear_attn: Based's q and k must be (B, T, H, K) alike, got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}")
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return form(taylor_feature_map(q, scale), taylor_feature_map(k, scale), v, 1.0, initial_state,
                output_final_state, use_norm, eps=1e-6, **options)


def naive_recurrent_based(q: Tensor, k: Tensor, v: Tensor, scale: float | None = None, use_norm: bool = True, *,
                          initial_state: State | None = None,
                          output_final_state: bool = False) -> tuple[Tensor, State | None]:
    """Based, the reference: :func:`naive_recurrent_linear_attn` on :func:`taylor_feature_map`'s features."""
    return _based(naive_recurrent_linear_attn, q, k, v, scale, initial_state, output_final_state, use_norm)


def fused_recurrent_based(q: Tensor, k: Tensor, v: Tensor, scale: float | None = None, use_norm: bool = True, *,
                          initial_state: State | None = None,
                          output_final_state: bool = False) -> tuple[Tensor, State | None]:
    """Based, the recurrent form decoding runs (the state has ``1 + K + K^2`` rows)."""
    return _based(fused_recurrent_linear_attn, q, k, v, scale, initial_state, output_final_state, use_norm)


def fused_chunk_based(q: Tensor, k: Tensor, v: Tensor, scale: float | None = None, use_norm: bool = True, *,
                      initial_state: State | None = None, output_final_state: bool = False,
                      chunk_size: int | None = None) -> tuple[Tensor, State | None]:
    """Based, the chunked form (flash-linear-attention's name and first five arguments; it returns ``o`` alone
    and takes no state, this returns ``(o, final_state)``)."""
    return _based(chunk_linear_attn, q, k, v, scale, initial_state, output_final_state, use_norm,
                  chunk_size=chunk_size)


def parallel_based(q: Tensor, k: Tensor, v: Tensor, scale: float | None = None, use_norm: bool = True, *,
                   initial_state: State | None = None, output_final_state: bool = False,
                   chunk_size: int | None = None) -> tuple[Tensor, State | None]:
    """flash-linear-attention's other name for Based's training form: :func:`fused_chunk_based` here."""
    return fused_chunk_based(q, k, v, scale, use_norm, initial_state=initial_state,
                             output_final_state=output_final_state, chunk_size=chunk_size)
