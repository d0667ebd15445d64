"""Relation: context through the element-wise mean of a projected sequence."""

from __future__ import annotations

import torch
import torch.nn as nn
from torch import Tensor

from ..ops.averaging import masked_mean, masked_mean_reference
from ..registry import register_mixer
from .base import Mixer

_ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "identity": nn.Identity}


@register_mixer(
    "relation",
    paper="Yamada, Baladram, Lin (2022) eqs. 7-12",
    complexity="O(N d^2)",
    causal=True,
    recurrent=True,
    multihead=False,
)
class Relation(Mixer):
    """Relation (000 eqs. 7-12): ``G = x W_G``, ``H = x W_H`` (eqs. 7-8), ``h' = mean_i h_i`` (eq. 10),
    broadcast to every position (eq. 11), ``R = phi((G * H') W)`` (eq. 12) with ``phi = ReLU``, then an
    output projection ``W_O`` back to ``dim`` so it drops into a residual block. O(N d^2) time, O(N d)
    memory: no N x N matrix is formed.

    Padding: the mean runs over real tokens only (divided by the real count). Causal: ``h'_i`` is the
    running mean of ``h_j`` over real ``j <= i`` (a cumulative sum divided by the running count).

    Decoding (causal): the running sum of ``h_j`` and the count, O(d^2) per token.

    Options:
        inner_dim: d, the width of G, H and W (default ``dim``).
        bias: biases in the projections (000 §3.2.1 networks have them, zero-initialised; ``bias=False``
            with ``inner_dim=dim`` gives ``4 dim^2`` parameters, the budget of "softmax").
        activation: phi, ``"relu"`` (paper), ``"gelu"`` or ``"identity"``.
    """

    def __init__(self, dim: int, *, num_heads: int = 1, causal: bool = False, max_len: int | None = None,
                 inner_dim: int | None = None, bias: bool = True, activation: str = "relu") -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len)
        if num_heads != 1:
            self._fail(f"num_heads={num_heads} is unsupported: Relation has no heads")
        inner = dim if inner_dim is None else inner_dim
        if not isinstance(inner, int) or inner <= 0:
            self._fail(f"inner_dim must be a positive int, got {inner_dim!r}")
        if activation not in _ACTIVATIONS:
            self._fail(f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")
        self.inner_dim = inner
        self.g_proj = nn.Linear(dim, inner, bias=bias)  # W_G, eq. 7
        self.h_proj = nn.Linear(dim, inner, bias=bias)  # W_H, eq. 8
        self.w = nn.Linear(inner, inner, bias=bias)
        self.phi = _ACTIVATIONS[activation]()
        self.proj = nn.Linear(inner, dim, bias=bias)

    def _init_state(self, batch_size: int, device: torch.device | None, dtype: torch.dtype) -> dict[str, Tensor]:
        return {"sum": torch.zeros(batch_size, self.inner_dim, device=device, dtype=dtype),
                "count": torch.zeros((), device=device, dtype=dtype)}

    def _step(self, x_t: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        g, h = self.g_proj(x_t), self.h_proj(x_t)
        total, count = state["sum"] + h, state["count"] + 1
        return self.proj(self.phi(self.w(g * (total / count)))), {"sum": total, "count": count}

    def _mix(self, x: Tensor, mask: Tensor | None, reference: bool) -> Tensor:
        g, h = self.g_proj(x), self.h_proj(x)
        mean = masked_mean_reference if reference else masked_mean
        context = mean(h, mask, self.causal)
        return self.proj(self.phi(self.w(g * context)))
