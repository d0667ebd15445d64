"""The delta rule and the gated delta rule as functions on per-head tensors, in flash-linear-attention's
conventions (names, argument order, shapes, ``(o, final_state)``), in three forms that compute the same thing.

The gated delta rule (Yang, Kautz & Hatamizadeh 2025, "Gated Delta Networks", eq. 10; the delta rule of Schlag,
Irie & Schmidhuber 2021, eq. 17-18, is the case ``g = 0``): per head, with the state ``S_t`` a (K, V) matrix,

    S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,        o_t = S_t^T (scale * q_t)

* :func:`naive_recurrent_gated_delta_rule`: the equation above token by token, the reference;
* :func:`fused_recurrent_gated_delta_rule`: the same recurrence as decoding runs it (decay, read the state's
  answer for ``k_t``, write ``beta_t`` times the difference), one token or many;
* :func:`chunk_gated_delta_rule`: parallel inside chunks, recurrent across them (Yang et al. 2024, "Parallelizing
  linear transformers with the delta rule over sequence length", sec. 3: the WY/UT form). Inside a chunk of
  positions ``1..C`` with ``b_i = g_1 + ... + g_i``, the writes ``u_i = beta_i (v_i - S_{i-1}^T k_i)`` solve the
  unit lower-triangular system

      u_i + beta_i sum_{j<i} exp(b_i - b_j) (k_i . k_j) u_j = beta_i (v_i - exp(b_i) S_0^T k_i)

  and then ``o_i = exp(b_i) S_0^T q_i + sum_{j<=i} exp(b_i - b_j) (q_i . k_j) u_j`` and
  ``S_C = exp(b_C) S_0 + sum_j exp(b_C - b_j) k_j u_j^T``: O(T C (K + V)) work, T / C sequential steps.

Shapes (flash-linear-attention's, ``head_first=False``): ``q, k`` (B, T, H, K); ``v`` (B, T, HV, V) with HV a
multiple of H (grouped values: each query/key head serves HV / H value heads); ``g`` (log decay, <= 0) and
``beta`` (B, T, HV); states (B, HV, K, V). ``scale`` defaults to K ** -0.5. Low-precision inputs are computed in
float32; the output has the input's dtype, the final state float32 (float64 for float64 inputs).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .conventions import check_heads, check_state, compute_dtype, finish

__all__ = ["naive_recurrent_gated_delta_rule", "fused_recurrent_gated_delta_rule", "chunk_gated_delta_rule",
           "naive_recurrent_delta_rule", "fused_recurrent_delta_rule", "chunk_delta_rule"]


def _prepare(name: str, q: Tensor, k: Tensor, v: Tensor, g: Tensor | None, beta: Tensor, scale: float | None,
             initial_state: Tensor | None, l2norm: bool) -> tuple[Tensor, ...]:
    """Checked inputs as (B, HV, T, ·) tensors in the compute dtype, q scaled; g zeros where None."""
    where = f"tokenmix.ops.delta_rule.{name}"
    check_heads(where, q, k, v, grouped_values=True)
    b, t, h, dk = q.shape
    hv = v.shape[2]
    for label, gate in (("beta", beta), ("g", g)):
        if gate is not None and tuple(gate.shape) != (b, t, hv):
            raise ValueError(f"{where}: {label} must be (B, T, HV) = {(b, t, hv)}, got {tuple(gate.shape)}")
    check_state(where, initial_state, (b, hv, dk, v.shape[3]), "(B, HV, K, V)")
    dtype = compute_dtype(q)
    if hv != h:
        q, k = q.repeat_interleave(hv // h, dim=2), k.repeat_interleave(hv // h, dim=2)
    q, k, v, beta = (x.transpose(1, 2).to(dtype) for x in (q, k, v, beta))
    g = torch.zeros_like(beta) if g is None else g.transpose(1, 2).to(dtype)
    if l2norm:
        q, k = F.normalize(q, dim=-1, eps=1e-6), F.normalize(k, dim=-1, eps=1e-6)
    q = q * (dk ** -0.5 if scale is None else scale)
    state = (torch.zeros(b, hv, dk, v.shape[-1], dtype=dtype, device=q.device) if initial_state is None
             else initial_state.to(dtype))
    return q, k, v, g, beta, state


def naive_recurrent_gated_delta_rule(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor,
                                     scale: float | None = None, initial_state: Tensor | None = None,
                                     output_final_state: bool = False,
                                     use_qk_l2norm_in_kernel: bool = False) -> tuple[Tensor, Tensor | None]:
    """The reference: ``S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T`` as written, one token
    at a time; ``o_t = S_t^T (scale q_t)``. See the module docstring for shapes."""
    dtype = v.dtype
    q, k, v, g, beta, state = _prepare("naive_recurrent_gated_delta_rule", q, k, v, g, beta, scale, initial_state,
                                       use_qk_l2norm_in_kernel)
    eye = torch.eye(k.shape[-1], dtype=k.dtype, device=k.device)
    outputs = []
    for t in range(q.shape[2]):
        kt, bt = k[:, :, t], beta[:, :, t, None, None]
        transition = g[:, :, t, None, None].exp() * (eye - bt * kt[..., :, None] * kt[..., None, :])
        state = transition @ state + bt * kt[..., :, None] * v[:, :, t, None, :]
        outputs.append((state * q[:, :, t, :, None]).sum(-2))
    return finish(torch.stack(outputs, dim=2), state, dtype, output_final_state)


def fused_recurrent_gated_delta_rule(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor,
                                     scale: float | None = None, initial_state: Tensor | None = None,
                                     output_final_state: bool = False,
                                     use_qk_l2norm_in_kernel: bool = False) -> tuple[Tensor, Tensor | None]:
    """The recurrent form decoding runs (any T, one token at a time): decay the state, read its answer
    ``S^T k_t``, write ``beta_t`` times the difference to ``v_t``, read out ``S^T q_t``."""
    dtype = v.dtype
    q, k, v, g, beta, state = _prepare("fused_recurrent_gated_delta_rule", q, k, v, g, beta, scale, initial_state,
                                       use_qk_l2norm_in_kernel)
    outputs = []
    for t in range(q.shape[2]):
        state = state * g[:, :, t, None, None].exp()
        kt = k[:, :, t]
        write = beta[:, :, t, None] * (v[:, :, t] - (state * kt[..., None]).sum(-2))
        state = state + kt[..., :, None] * write[..., None, :]
        outputs.append((state * q[:, :, t, :, None]).sum(-2))
    return finish(torch.stack(outputs, dim=2), state, dtype, output_final_state)


def chunk_gated_delta_rule(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, scale: float | None = None,
                           initial_state: Tensor | None = None, output_final_state: bool = False,
                           use_qk_l2norm_in_kernel: bool = False,
                           chunk_size: int = 64) -> tuple[Tensor, Tensor | None]:
    """The chunked form (training and prefill): the writes of a chunk from one triangular solve, then matrix
    products; see the module docstring. ``chunk_size`` trades parallel work for sequential steps."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"tokenmix.ops.delta_rule.chunk_gated_delta_rule: chunk_size must be a positive int, got "
                         f"{chunk_size!r}")
    dtype = v.dtype
    q, k, v, g, beta, state = _prepare("chunk_gated_delta_rule", q, k, v, g, beta, scale, initial_state,
                                       use_qk_l2norm_in_kernel)
    b, h, t, dk = q.shape
    pad = -t % chunk_size
    if pad:  # padded positions: k = 0, beta = 0, g = 0 write nothing and leave the state as it was
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        g, beta = F.pad(g, (0, pad)), F.pad(beta, (0, pad))
    n = (t + pad) // chunk_size
    q, k, v = (x.reshape(b, h, n, chunk_size, x.shape[-1]) for x in (q, k, v))
    g, beta = g.reshape(b, h, n, chunk_size), beta.reshape(b, h, n, chunk_size)
    cum = g.cumsum(-1)  # b_i
    lower = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device).tril()
    diagonal = torch.eye(chunk_size, dtype=torch.bool, device=q.device)
    gaps = (cum[..., :, None] - cum[..., None, :]).masked_fill(~lower, float("-inf"))
    decay = gaps.exp()  # exp(b_i - b_j) for j <= i, 0 above the diagonal
    strict = decay.masked_fill(diagonal, 0.0)
    system = diagonal.to(q.dtype) + beta[..., None] * strict * (k @ k.transpose(-1, -2))
    # (I + A) U = beta v - (beta exp(b) k) S_0, solved for both right-hand sides once per chunk
    w_v = torch.linalg.solve_triangular(system, beta[..., None] * v, upper=False, unitriangular=True)
    w_k = torch.linalg.solve_triangular(system, (beta * cum.exp())[..., None] * k, upper=False, unitriangular=True)
    scores = decay * (q @ k.transpose(-1, -2))  # exp(b_i - b_j) (q_i . k_j), j <= i
    q_decayed, k_to_end = q * cum.exp()[..., None], k * torch.exp(cum[..., -1:] - cum)[..., None]
    # one unbind per tensor: indexing chunk c inside the loop would give each slice a full-size gradient (O(n^2))
    chunks = zip(w_v.unbind(2), w_k.unbind(2), q_decayed.unbind(2), scores.unbind(2), k_to_end.unbind(2),
                 cum[..., -1].exp().unbind(2))
    outputs = []
    for w_v_c, w_k_c, q_c, scores_c, k_c, end_decay in chunks:
        writes = w_v_c - w_k_c @ state
        outputs.append(q_c @ state + scores_c @ writes)
        state = end_decay[..., None, None] * state + k_c.transpose(-1, -2) @ writes
    o = torch.cat(outputs, dim=2)[:, :, :t]
    return finish(o, state, dtype, output_final_state)


def naive_recurrent_delta_rule(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, scale: float | None = None,
                               initial_state: Tensor | None = None, output_final_state: bool = False,
                               use_qk_l2norm_in_kernel: bool = False) -> tuple[Tensor, Tensor | None]:
    """The delta rule (Schlag et al. 2021): :func:`naive_recurrent_gated_delta_rule` without decay."""
    return naive_recurrent_gated_delta_rule(q, k, v, None, beta, scale, initial_state, output_final_state,
                                            use_qk_l2norm_in_kernel)


def fused_recurrent_delta_rule(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, scale: float | None = None,
                               initial_state: Tensor | None = None, output_final_state: bool = False,
                               use_qk_l2norm_in_kernel: bool = False) -> tuple[Tensor, Tensor | None]:
    """The delta rule's recurrent form: :func:`fused_recurrent_gated_delta_rule` without decay."""
    return fused_recurrent_gated_delta_rule(q, k, v, None, beta, scale, initial_state, output_final_state,
                                            use_qk_l2norm_in_kernel)


def chunk_delta_rule(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, scale: float | None = None,
                     initial_state: Tensor | None = None, output_final_state: bool = False,
                     use_qk_l2norm_in_kernel: bool = False, chunk_size: int = 64) -> tuple[Tensor, Tensor | None]:
    """The delta rule's chunked form (Yang et al. 2024): :func:`chunk_gated_delta_rule` without decay."""
    return chunk_gated_delta_rule(q, k, v, None, beta, scale, initial_state, output_final_state,
                                  use_qk_l2norm_in_kernel, chunk_size)
