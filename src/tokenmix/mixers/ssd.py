"""Mamba-2's state-space dual layer (SSD), on :func:`tokenmix.ops.gla.chunk_simple_gla`."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ..ops.gla import chunk_simple_gla, fused_recurrent_simple_gla, naive_recurrent_gla
from ..registry import building_projections, register_mixer
from ..validate import is_positive_int
from .base import merge_heads, rms_norm, split_heads
from .heads import GatedHeadsMixer
from .shortconv import ShortConvolution

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
class Mamba2(GatedHeadsMixer):
    """The Mamba-2 layer (Dao & Gu 2024 §7), by default without its short convolution: one input projection gives ``z``,
    ``x`` (``expand * dim`` wide, split into ``num_heads`` heads of ``P``), ``B`` and ``C`` (``state_size``
    each, shared by the heads) and ``dt`` (one per head); then per head the selective state-space recurrence

        h_t = exp(dt_t A) h_{t-1} + B_t (dt_t x_t)^T,        y_t = h_t^T C_t + D x_t

    with ``A = -exp(A_log)`` a scalar per head (the SSD restriction, §3), ``dt = softplus(dt_raw + dt_bias)``;
    ``y`` gated and normalised, ``RMSNorm(y * SiLU(z))``, then the output projection. The recurrence is
    scalar-gated linear attention with ``q = C``, ``k = B``, ``v = dt x`` and no scaling, trained in its chunked
    (dual) form. Initialisation as the paper's code: ``A`` from U(1, 16), ``dt`` log-uniform in [0.001, 0.1]
    (``dt_bias`` its inverse softplus), ``D = 1``. ``conv_size`` adds the layer's depthwise causal convolution over
    x, B and C before the recurrence, ``x, B, C = SiLU(conv(x W_xBC))`` (4 taps with a bias in the paper's code,
    :class:`~tokenmix.mixers.shortconv.ShortConvolution`); decoding then also keeps the last ``conv_size - 1``
    projected tokens. Off by default (None), as the recall sweep's files ran it; the paper's layer is
    ``conv_size=4``. It runs on the mechanism's own projections only.

    On a host's Q, K, V (:func:`tokenmix.create_heads`): ``C``, ``B`` and ``x`` are the host's queries, keys and
    values, each head with its own ``B`` and ``C`` (the multi-head pattern of §7.2, the one attention has), so the
    state per head is the host's head width by its head width, and ``expand`` is 1; ``z`` and ``dt`` come from a
    projection of the hidden states of their own (``gate_proj``).

    Options:
        state_size: the state's size per head, N (64 in the paper; the host's head width on a host's Q, K, V).
        expand: the inner width over ``dim`` (2 in the paper; 1 on a host's Q, K, V).
        chunk_size: tokens per chunk of the chunked form (speed only).
        conv_size: taps of the short convolution over x, B and C (the paper's layer: 4), or None (default): none.
    """

    transferred = ("gate_proj", "A_log", "dt_bias", "D", "norm_weight")  # fitted by tokenmix.linearize

    def __init__(self, dim: int, *, num_heads: int = 1, causal: bool = True, max_len: int | None = None,
                 state_size: int | None = None, expand: int | None = None, chunk_size: int = 64,
                 conv_size: int | None = None) -> None:
        own = building_projections()
        if not own and (state_size is not None or expand is not None):
            raise ValueError("mamba2: on a host's Q, K, V the state size is the host's head width and expand is 1: "
                             "state_size and expand do not apply")
        if conv_size is not None and not is_positive_int(conv_size):
            raise ValueError(f"mamba2: conv_size must be a positive int (the short convolution's taps) or None, got "
                             f"{conv_size!r}")
        if conv_size is not None and not own:
            raise ValueError(f"mamba2: conv_size={conv_size}: the short convolution runs on the mechanism's own "
                             f"projections, not on a host's Q, K, V (tokenmix.create_heads)")
        state_size = (64 if own else dim // num_heads if _divides(num_heads, dim) else 1) if state_size is None \
            else state_size
        expand = (2 if own else 1) if expand is None else expand
        for value, option in ((state_size, "state_size"), (expand, "expand"), (chunk_size, "chunk_size")):
            if not is_positive_int(value):
                raise ValueError(f"mamba2: {option} must be a positive int, got {value!r}")
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, inner_dim=expand * dim)
        self.state_size, self.expand, self.chunk_size = state_size, expand, chunk_size
        inner = self.inner_dim
        if self.has_projections:
            self.in_proj = nn.Linear(dim, 2 * inner + 2 * state_size + num_heads, bias=False)
        else:
            self.gate_proj = nn.Linear(dim, inner + num_heads, bias=False)  # z and dt
        self.A_log = nn.Parameter(torch.empty(num_heads).uniform_(1, 16).log())
        dt = torch.exp(torch.empty(num_heads).uniform_(math.log(1e-3), math.log(1e-1))).clamp_(min=1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus(dt_bias) = dt
        self.D = nn.Parameter(torch.ones(num_heads))
        self.norm_weight = nn.Parameter(torch.ones(inner))
        if self.has_projections:
            self.out_proj = nn.Linear(inner, dim, bias=False)
        self.short_conv = None if conv_size is None else ShortConvolution(inner + 2 * state_size, conv_size, bias=True)

    def parameter_roles(self) -> dict[str, str]:
        # the paper's own draws and starting values, not a model-wide initialisation; the norm's gain at one
        return {"A_log": "keep", "dt_bias": "keep", "D": "keep", "norm_weight": "norm_gain"}

    def _rows(self) -> tuple[slice, slice, slice]:
        """The rows of ``in_proj`` giving x, B, C (one block), z and dt."""
        inner, s = self.inner_dim, self.state_size
        return slice(inner, 2 * inner + 2 * s), slice(0, inner), slice(2 * inner + 2 * s, None)

    def _projected_heads(self, x: Tensor, mask: Tensor | None = None, conv: Tensor | None = None, *,
                         reference: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """C, B (shared by the heads, (B, H, N, S)) and x (B, H, N, P) by ``in_proj``, through the short
        convolution where there is one (continuing its state ``conv`` where given: :meth:`_convolved_heads`)."""
        return self._convolved_heads(x, mask, conv, reference=reference)[0]

    def _convolved_heads(self, x: Tensor, mask: Tensor | None, conv: Tensor | None = None, *,
                         reference: bool = False) -> tuple[tuple[Tensor, Tensor, Tensor], Tensor | None]:
        """:meth:`_projected_heads`, and the short convolution's state after ``x`` (None without one, or
        without ``conv``)."""
        if not self.has_projections:
            super()._projected_heads(x)  # refuses, naming what to call instead
        b, n, _ = x.shape
        xbc = F.linear(x, self.in_proj.weight[self._rows()[0]])
        if self.short_conv is not None:
            xbc, conv = self.short_conv(xbc, mask, conv, reference=reference)
            xbc = F.silu(xbc)
        xs, bs, cs = xbc.split([self.inner_dim, self.state_size, self.state_size], dim=-1)
        shared = (b, self.num_heads, n, self.state_size)
        return (cs[:, None].expand(shared), bs[:, None].expand(shared), split_heads(xs, self.num_heads)), conv

    def _z_dt(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The output gate z (B, N, inner) and dt_raw (B, N, H) from the hidden states."""
        if self.has_projections:
            _, z_rows, dt_rows = self._rows()
            return F.linear(x, self.in_proj.weight[z_rows]), F.linear(x, self.in_proj.weight[dt_rows])
        return self.gate_proj(x).split([self.inner_dim, self.num_heads], dim=-1)

    def _rule_inputs(self, q: Tensor, k: Tensor, v: Tensor, x: Tensor, mask: Tensor | None) -> tuple[Tensor, ...]:
        """q = C, k = B (B, N, H, S), v = dt x (B, N, H, P), the log decay dt A (B, N, H); x's heads (B, N, H, P)
        and the gate z (B, N, inner) for the output. Padded positions write nothing and decay nothing."""
        z, dt = self._z_dt(x)
        dt = F.softplus(dt + self.dt_bias)  # (B, N, H)
        q, k, heads = (t.transpose(1, 2) for t in (q, k, v))
        decay = -self.A_log.exp() * dt
        v = heads * dt[..., None]
        if mask is not None:
            real = mask[..., None].to(x.dtype)
            k, v, decay = k * real[..., None], v * real[..., None], decay * real
        return q, k, v, decay, heads, z

    def _heads_output(self, y: Tensor, heads: Tensor, z: Tensor) -> Tensor:
        """``RMSNorm((y + D x) * SiLU(z))`` over the inner width, as heads (B, H, N, P)."""
        y = (y.to(z.dtype) + self.D[:, None] * heads).reshape(*z.shape)
        return split_heads(rms_norm(y * F.silu(z), self.norm_weight), self.num_heads)

    def _mix(self, x: Tensor, mask: Tensor | None) -> Tensor:
        return self.out_proj(merge_heads(self.attend_heads(*self._projected_heads(x, mask), mask, hidden=x)))

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, *, hidden: Tensor) -> Tensor:
        q, k, v, decay, heads, z = self._rule_inputs(q, k, v, hidden, mask)
        y, _ = chunk_simple_gla(q, k, v, decay, scale=1.0, chunk_size=self.chunk_size)
        return self._heads_output(y, heads, z)

    def _mix_reference(self, x: Tensor, mask: Tensor | None) -> Tensor:
        q, k, v, decay, heads, z = self._rule_inputs(*self._projected_heads(x, mask, reference=True), x, mask)
        y, _ = naive_recurrent_gla(q, k, v, decay[..., None].expand(*k.shape), scale=1.0)
        return self.out_proj(merge_heads(self._heads_output(y, heads, z)))

    def _init_state(self, batch_size: int, device: torch.device | None, dtype: torch.dtype) -> dict[str, Tensor]:
        state_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        state = {"S": torch.zeros(batch_size, self.num_heads, self.state_size, self.head_dim, dtype=state_dtype,
                                  device=device)}
        if self.short_conv is not None:  # the last conv_size - 1 projected tokens (x, B and C)
            state["conv"] = torch.zeros(batch_size, self.short_conv.size - 1, self.inner_dim + 2 * self.state_size,
                                        device=device, dtype=dtype)
        return state

    def _continue(self, q: Tensor, k: Tensor, v: Tensor, state: dict[str, Tensor],
                  hidden: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        q, k, v, decay, heads, z = self._rule_inputs(q, k, v, hidden, None)
        if q.shape[1] == 1:  # one token: the recurrent form (the chunked one would pad it to a whole chunk)
            y, s = fused_recurrent_simple_gla(q, k, v, decay, scale=1.0, initial_state=state["S"],
                                              output_final_state=True)
        else:
            y, s = chunk_simple_gla(q, k, v, decay, scale=1.0, initial_state=state["S"], output_final_state=True,
                                    chunk_size=self.chunk_size)
        return self._heads_output(y, heads, z), {"S": s}

    def _prefill(self, x: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        heads, conv = self._convolved_heads(x, None, state.get("conv"))
        out, rule_state = self.prefill_heads(*heads, {"S": state["S"]}, hidden=x)
        return self.out_proj(merge_heads(out)), rule_state if conv is None else {**rule_state, "conv": conv}


def _divides(heads: int, dim: int) -> bool:
    return is_positive_int(heads) and is_positive_int(dim) and dim % heads == 0
