"""Mamba-2's state-space dual layer (SSD), on :func:`tokenmix.ops.gla.chunk_simple_gla`."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ..ops.gla import chunk_simple_gla, fused_recurrent_simple_gla, naive_recurrent_gla
from ..registry import register_mixer
from ..validate import is_positive_int
from .base import Mixer, rms_norm

__all__ = ["Mamba2"]


@register_mixer(
    "mamba2",
    paper="Dao, Gu (2024) 'Transformers are SSMs: Generalized Models and Efficient Algorithms Through Structured "
          "State Space Duality' §3-6 (the SSD recurrence and its chunked dual form, eq. 16), §7 (the Mamba-2 "
          "layer and its initialisation)",
    complexity="O(N C e d + N e d S / H)",
    causal=True,
    bidirectional=False,
    recurrent=True,
)
class Mamba2(Mixer):
    """The Mamba-2 layer without its short convolution (Dao & Gu 2024 §7): one input projection gives ``z``,
    ``x`` (``expand * dim`` wide, split into ``num_heads`` heads of ``P``), ``B`` and ``C`` (``state_size``
    each, shared by the heads) and ``dt`` (one per head); then per head the selective state-space recurrence

        h_t = exp(dt_t A) h_{t-1} + B_t (dt_t x_t)^T,        y_t = h_t^T C_t + D x_t

    with ``A = -exp(A_log)`` a scalar per head (the SSD restriction, §3), ``dt = softplus(dt_raw + dt_bias)``;
    ``y`` gated and normalised, ``RMSNorm(y * SiLU(z))``, then the output projection. The recurrence is
    scalar-gated linear attention with ``q = C``, ``k = B``, ``v = dt x`` and no scaling, trained in its chunked
    (dual) form. Initialisation as the paper's code: ``A`` from U(1, 16), ``dt`` log-uniform in [0.001, 0.1]
    (``dt_bias`` its inverse softplus), ``D = 1``. Not here: the depthwise convolution over x, B, C before the
    recurrence (BaseConv is a mechanism of its own in tokenmix).

    Options:
        state_size: the state's size per head, N (64 in the paper).
        expand: the inner width over ``dim`` (2 in the paper).
        chunk_size: tokens per chunk of the chunked form (speed only).
    """

    def __init__(self, dim: int, *, num_heads: int = 1, causal: bool = True, max_len: int | None = None,
                 state_size: int = 64, expand: int = 2, chunk_size: int = 64) -> None:
        for value, option in ((state_size, "state_size"), (expand, "expand"), (chunk_size, "chunk_size")):
            if not is_positive_int(value):
                raise ValueError(f"mamba2: {option} must be a positive int, got {value!r}")
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, inner_dim=expand * dim)
        self.state_size, self.expand, self.chunk_size = state_size, expand, chunk_size
        inner = self.inner_dim
        self.in_proj = nn.Linear(dim, 2 * inner + 2 * state_size + num_heads, bias=False)
        self.A_log = nn.Parameter(torch.empty(num_heads).uniform_(1, 16).log())
        dt = torch.exp(torch.empty(num_heads).uniform_(math.log(1e-3), math.log(1e-1))).clamp_(min=1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus(dt_bias) = dt
        self.D = nn.Parameter(torch.ones(num_heads))
        self.norm_weight = nn.Parameter(torch.ones(inner))
        self.out_proj = nn.Linear(inner, dim, bias=False)

    def parameter_roles(self) -> dict[str, str]:
        # the paper's own draws and starting values, not a model-wide initialisation; the norm's gain at one
        return {"A_log": "keep", "dt_bias": "keep", "D": "keep", "norm_weight": "norm_gain"}

    def _inputs(self, x: Tensor, mask: Tensor | None) -> tuple[Tensor, ...]:
        """q = C, k = B (B, N, H, S), v = dt x (B, N, H, P), the log decay dt A (B, N, H); x (B, N, H, P) and the
        gate z (B, N, inner) for the output. Padded positions write nothing and decay nothing."""
        b, n, _ = x.shape
        z, xs, bs, cs, dt = self.in_proj(x).split([self.inner_dim, self.inner_dim, self.state_size, self.state_size,
                                                   self.num_heads], dim=-1)
        dt = F.softplus(dt + self.dt_bias)  # (B, N, H)
        heads = xs.view(b, n, self.num_heads, self.head_dim)
        decay = -self.A_log.exp() * dt
        k = bs[:, :, None, :].expand(b, n, self.num_heads, self.state_size)
        q = cs[:, :, None, :].expand(b, n, self.num_heads, self.state_size)
        v = heads * dt[..., None]
        if mask is not None:
            real = mask[..., None].to(x.dtype)
            k, v, decay = k * real[..., None], v * real[..., None], decay * real
        return q, k, v, decay, heads, z

    def _output(self, y: Tensor, heads: Tensor, z: Tensor) -> Tensor:
        y = (y.to(z.dtype) + self.D[:, None] * heads).reshape(*z.shape)
        return self.out_proj(rms_norm(y * F.silu(z), self.norm_weight))

    def _mix(self, x: Tensor, mask: Tensor | None) -> Tensor:
        q, k, v, decay, heads, z = self._inputs(x, mask)
        y, _ = chunk_simple_gla(q, k, v, decay, scale=1.0, chunk_size=self.chunk_size)
        return self._output(y, heads, z)

    def _mix_reference(self, x: Tensor, mask: Tensor | None) -> Tensor:
        q, k, v, decay, heads, z = self._inputs(x, mask)
        y, _ = naive_recurrent_gla(q, k, v, decay[..., None].expand(*k.shape), scale=1.0)
        return self._output(y, heads, z)

    def _init_state(self, batch_size: int, device: torch.device | None, dtype: torch.dtype) -> dict[str, Tensor]:
        state_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        return {"S": torch.zeros(batch_size, self.num_heads, self.state_size, self.head_dim, dtype=state_dtype,
                                 device=device)}

    def _step(self, x_t: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        q, k, v, decay, heads, z = self._inputs(x_t[:, None], None)
        y, s = fused_recurrent_simple_gla(q, k, v, decay, scale=1.0, initial_state=state["S"], output_final_state=True)
        return self._output(y, heads, z)[:, 0], {"S": s}

    def _prefill(self, x: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        q, k, v, decay, heads, z = self._inputs(x, None)
        y, s = chunk_simple_gla(q, k, v, decay, scale=1.0, initial_state=state["S"], output_final_state=True,
                                chunk_size=self.chunk_size)
        return self._output(y, heads, z), {"S": s}
