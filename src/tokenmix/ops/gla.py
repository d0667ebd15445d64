"""Linear attention with decay as functions on per-head tensors, in flash-linear-attention's conventions (names,
argument order, shapes, ``(o, final_state)``): gated linear attention, its scalar-gated case, and retention.

Per head, with the state ``S_t`` a (K, V) matrix and ``o_t = S_t^T (scale * q_t)``:

* gated linear attention (Yang, Wang, Shen, Panda & Kim 2024, "Gated Linear Attention Transformers with
  Hardware-Efficient Training", eq. 3): ``S_t = diag(exp(gk_t)) S_{t-1} + k_t v_t^T``, a log decay per key
  dimension ``gk`` (B, T, H, K);
* its scalar-gated case, ``simple_gla``: ``S_t = exp(g_t) S_{t-1} + k_t v_t^T``, one log decay per head and token
  ``g`` (B, T, H), or one per head for every token ``g_gamma`` (H,). Linear attention without a normaliser is
  ``g = 0``; Mamba-2's state-space dual form (Dao & Gu 2024, eq. 16 with ``a_t = exp(dt_t A)``) is this
  recurrence with ``q = C``, ``k = B``, ``v = dt x``, ``scale = 1``;
* retention (Sun et al. 2023, "Retentive Network", eq. 1-2): ``g_gamma = log(1 - 2^(-5 - h))`` for head ``h``
  of H, the decays RetNet fixes.

Each in three forms that compute the same thing: ``naive_recurrent_gla`` (the equation token by token, the
reference), ``fused_recurrent_*`` (the recurrence as decoding runs it, any T) and ``chunk_*`` (parallel inside
chunks of ``chunk_size`` tokens, recurrent across them: with ``b_i`` the cumulative log decay inside a chunk,
``o_i = (q_i * exp(b_i))^T S_0 + sum_{j<=i} (q_i . (k_j * exp(b_i - b_j))) v_j`` and
``S_C = exp(b_C) * S_0 + sum_j (k_j * exp(b_C - b_j)) v_j^T``, every exponent <= 0).

Shapes: ``q, k`` (B, T, H, K), ``v`` (B, T, H, V), states (B, H, K, V); ``scale`` defaults to K ** -0.5.
Low-precision inputs are computed in float32; the output has the inputs' dtype, the final state float32 (float64
for float64 inputs).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .conventions import check_heads, check_state, compute_dtype, finish

__all__ = ["naive_recurrent_gla", "fused_recurrent_gla", "chunk_gla", "fused_recurrent_simple_gla",
           "chunk_simple_gla", "fused_recurrent_retention", "chunk_retention", "retention_decays"]


def _prepare(name: str, q: Tensor, k: Tensor, v: Tensor, gate: Tensor | None, per_key: bool, scale: float | None,
             initial_state: Tensor | None) -> tuple[Tensor, ...]:
    """Checked inputs as (B, H, T, ·) tensors in the compute dtype, q scaled; the log decay as (B, H, T, K) or
    (B, H, T, 1), zeros where None."""
    where = f"tokenmix.ops.gla.{name}"
    check_heads(where, q, k, v)
    b, t, h, dk = q.shape
    want = (b, t, h, dk) if per_key else (b, t, h)
    if gate is not None and tuple(gate.shape) != want:
        raise ValueError(f"{where}: the log decay must be {'(B, T, H, K)' if per_key else '(B, T, H)'} = {want}, got "
                         f"{tuple(gate.shape)}")
    check_state(where, initial_state, (b, h, dk, v.shape[3]), "(B, H, K, V)")
    dtype = compute_dtype(q)
    q, k, v = (x.transpose(1, 2).to(dtype) for x in (q, k, v))
    if gate is None:
        gate = torch.zeros(b, h, t, 1, dtype=dtype, device=q.device)
    else:
        gate = gate.transpose(1, 2).to(dtype)
        gate = gate if per_key else gate[..., None]
    q = q * (dk ** -0.5 if scale is None else scale)
    state = (torch.zeros(b, h, dk, v.shape[-1], dtype=dtype, device=q.device) if initial_state is None
             else initial_state.to(dtype))
    return q, k, v, gate, state


def _scalar_gate(name: str, q: Tensor, g: Tensor | None, g_gamma: Tensor | None) -> Tensor | None:
    """``g`` (B, T, H), or ``g_gamma`` (H,) spread over every token, or None."""
    if g is not None and g_gamma is not None:
        raise ValueError(f"tokenmix.ops.gla.{name}: give g (per token) or g_gamma (per head), not both")
    if g_gamma is None:
        return g
    if tuple(g_gamma.shape) != (q.shape[2],):
        raise ValueError(f"tokenmix.ops.gla.{name}: g_gamma must be (H,) = ({q.shape[2]},), got {tuple(g_gamma.shape)}")
    return g_gamma.to(q.device).expand(q.shape[0], q.shape[1], q.shape[2])


def naive_recurrent_gla(q: Tensor, k: Tensor, v: Tensor, gk: Tensor | None, scale: float | None = None,
                        initial_state: Tensor | None = None,
                        output_final_state: bool = False) -> tuple[Tensor, Tensor | None]:
    """The reference: ``S_t = diag(exp(gk_t)) S_{t-1} + k_t v_t^T`` as written, one token at a time (``gk``
    (B, T, H, K), or None for no decay)."""
    dtype = v.dtype
    q, k, v, gate, state = _prepare("naive_recurrent_gla", q, k, v, gk, True, scale, initial_state)
    outputs = []
    for t in range(q.shape[2]):
        state = torch.diag_embed(gate[:, :, t].exp().expand(*q.shape[:2], q.shape[-1])) @ state \
            + k[:, :, t, :, None] @ v[:, :, t, None, :]
        outputs.append((q[:, :, t, None, :] @ state)[:, :, 0])
    return finish(torch.stack(outputs, dim=2), state, dtype, output_final_state)


def _recurrent(name: str, q: Tensor, k: Tensor, v: Tensor, gate: Tensor | None, per_key: bool, scale: float | None,
               initial_state: Tensor | None, output_final_state: bool) -> tuple[Tensor, Tensor | None]:
    dtype = v.dtype
    q, k, v, gate, state = _prepare(name, q, k, v, gate, per_key, scale, initial_state)
    outputs = []
    for t in range(q.shape[2]):
        state = state * gate[:, :, t, :, None].exp() + k[:, :, t, :, None] * v[:, :, t, None, :]
        outputs.append((state * q[:, :, t, :, None]).sum(-2))
    return finish(torch.stack(outputs, dim=2), state, dtype, output_final_state)


def _chunked(name: str, q: Tensor, k: Tensor, v: Tensor, gate: Tensor | None, per_key: bool, scale: float | None,
             initial_state: Tensor | None, output_final_state: bool, chunk_size: int) -> tuple[Tensor, Tensor | None]:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"tokenmix.ops.gla.{name}: chunk_size must be a positive int, got {chunk_size!r}")
    dtype = v.dtype
    q, k, v, gate, state = _prepare(name, q, k, v, gate, per_key, scale, initial_state)
    b, h, t, _ = q.shape
    pad = -t % chunk_size
    if pad:  # padded positions: k = 0 and no decay leave the state as it was
        q, k, v, gate = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v, gate))
    n = (t + pad) // chunk_size
    q, k, v, gate = (x.reshape(b, h, n, chunk_size, x.shape[-1]) for x in (q, k, v, gate))
    cum = gate.cumsum(-2)  # b_i: (B, H, n, C, K) or (B, H, n, C, 1)
    lower = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device).tril()
    gaps = (cum[..., :, None, :] - cum[..., None, :, :]).masked_fill(~lower[..., None], float("-inf"))
    if per_key:  # (q_i . (k_j * exp(b_i - b_j))), one decay per key dimension
        scores = torch.einsum("...id,...jd,...ijd->...ij", q, k, gaps.exp())
    else:
        scores = gaps[..., 0].exp() * (q @ k.transpose(-1, -2))
    q_decayed, k_to_end = q * cum.exp(), k * torch.exp(cum[..., -1:, :] - cum)
    # one unbind per tensor: indexing chunk c inside the loop would give each slice a full-size gradient (O(n^2))
    chunks = zip(q_decayed.unbind(2), scores.unbind(2), v.unbind(2), k_to_end.unbind(2),
                 cum[..., -1, :].exp().unbind(2))
    outputs = []
    for q_c, scores_c, v_c, k_c, end_decay in chunks:
        outputs.append(q_c @ state + scores_c @ v_c)
        state = end_decay[..., None] * state + k_c.transpose(-1, -2) @ v_c
    return finish(torch.cat(outputs, dim=2)[:, :, :t], state, dtype, output_final_state)


def fused_recurrent_gla(q: Tensor, k: Tensor, v: Tensor, gk: Tensor | None = None, gv: Tensor | None = None,
                        scale: float | None = None, initial_state: Tensor | None = None,
                        output_final_state: bool = False) -> tuple[Tensor, Tensor | None]:
    """Gated linear attention, the recurrent form decoding runs (any T). ``gv`` (a decay per value dimension)
    is flash-linear-attention's extension, not GLA's: it is refused."""
    if gv is not None:
        raise ValueError("tokenmix.ops.gla.fused_recurrent_gla: gv (a decay per value dimension) is not supported; "
                         "pass gk")
    return _recurrent("fused_recurrent_gla", q, k, v, gk, True, scale, initial_state, output_final_state)


def chunk_gla(q: Tensor, k: Tensor, v: Tensor, g: Tensor, scale: float | None = None,
              initial_state: Tensor | None = None, output_final_state: bool = False,
              chunk_size: int = 16) -> tuple[Tensor, Tensor | None]:
    """Gated linear attention, the chunked form (``g`` the log decay per key dimension, (B, T, H, K)). Inside a
    chunk the decay between every pair of positions is kept per dimension (C x C x K numbers per chunk, every
    exponent <= 0), hence the small default chunk."""
    return _chunked("chunk_gla", q, k, v, g, True, scale, initial_state, output_final_state, chunk_size)


def fused_recurrent_simple_gla(q: Tensor, k: Tensor, v: Tensor, g: Tensor | None = None, g_gamma: Tensor | None = None,
                               scale: float | None = None, initial_state: Tensor | None = None,
                               output_final_state: bool = False) -> tuple[Tensor, Tensor | None]:
    """Scalar-gated linear attention, the recurrent form (``g`` (B, T, H) or ``g_gamma`` (H,), log decays)."""
    gate = _scalar_gate("fused_recurrent_simple_gla", q, g, g_gamma)
    return _recurrent("fused_recurrent_simple_gla", q, k, v, gate, False, scale, initial_state, output_final_state)


def chunk_simple_gla(q: Tensor, k: Tensor, v: Tensor, g: Tensor | None = None, g_gamma: Tensor | None = None,
                     scale: float | None = None, initial_state: Tensor | None = None, output_final_state: bool = False,
                     chunk_size: int = 64) -> tuple[Tensor, Tensor | None]:
    """Scalar-gated linear attention, the chunked form (``g`` (B, T, H) or ``g_gamma`` (H,), log decays)."""
    gate = _scalar_gate("chunk_simple_gla", q, g, g_gamma)
    return _chunked("chunk_simple_gla", q, k, v, gate, False, scale, initial_state, output_final_state, chunk_size)


def retention_decays(num_heads: int) -> Tensor:
    """RetNet's fixed decay of each head, as log decays: ``log(1 - 2^(-5 - h))``, h = 0 .. H - 1 (Sun et al. 2023,
    sec. 2.2), in float64 (the computation casts them to its own dtype)."""
    return torch.tensor([math.log1p(-(2.0 ** (-5 - h))) for h in range(num_heads)], dtype=torch.float64)


def fused_recurrent_retention(q: Tensor, k: Tensor, v: Tensor, scale: float | None = None,
                              initial_state: Tensor | None = None,
                              output_final_state: bool = False) -> tuple[Tensor, Tensor | None]:
    """Retention, the recurrent form: :func:`fused_recurrent_simple_gla` with RetNet's per-head decays."""
    return fused_recurrent_simple_gla(q, k, v, g_gamma=retention_decays(q.shape[2]), scale=scale,
                                      initial_state=initial_state, output_final_state=output_final_state)


def chunk_retention(q: Tensor, k: Tensor, v: Tensor, scale: float | None = None, initial_state: Tensor | None = None,
                    output_final_state: bool = False, chunk_size: int = 64) -> tuple[Tensor, Tensor | None]:
    """Retention, the chunked form: :func:`chunk_simple_gla` with RetNet's per-head decays."""
    return chunk_simple_gla(q, k, v, g_gamma=retention_decays(q.shape[2]), scale=scale, initial_state=initial_state,
                            output_final_state=output_final_state, chunk_size=chunk_size)
