"""Relation: context through the element-wise mean of a projected sequence."""

from __future__ import annotations

import torch
import torch.nn as nn
from torch import Tensor

from ..ops.averaging import chunk_mean, masked_mean, masked_mean_reference
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
    """Relation (Yamada et al. (2022) eqs. 7-12): ``G = x W_G``, ``H = x W_H`` (eqs. 7-8),
    ``h' = mean_i h_i`` (eq. 10), broadcast to every position (eq. 11), ``R = phi((G * H') W)`` (eq. 12)
    with ``phi = ReLU``, then an output projection ``W_O`` back to ``dim`` so it drops into a residual
    block. O(N d^2) time, O(N d) memory: no N x N matrix is formed.

    ``out_proj=False`` ends at eq. 12, as the paper does: the output is ``R``, ``inner_dim`` wide
    (``out_dim = inner_dim``). With ``inner_dim=d, out_proj=False, bias=False`` the parameters are the
    paper's ``W_G, W_H in R^{m x d}`` and ``W in R^{d x d}``, ``2 m d + d^2`` (``m = dim``), and the
    multiplications its §4.2 count ``N d^2 + 2 N d m + N d`` (see :func:`tokenmix.counting.context.relation_training`).

    Padding: the mean runs over real tokens only (divided by the real count). Causal: ``h'_i`` is the
    running mean of ``h_j`` over real ``j <= i`` (a cumulative sum divided by the running count).

    Decoding (causal): the running sum of ``h_j`` and the count, O(d^2) per token.

    Options:
        inner_dim: d, the width of G, H and W (default ``dim``).
        bias: biases in the projections (Yamada et al. (2022) §3.2.1's networks have them, zero-initialised;
            ``bias=False`` with ``inner_dim=dim`` gives ``4 dim^2`` parameters, the budget of "softmax").
        activation: phi, ``"relu"`` (paper), ``"gelu"`` or ``"identity"``.
        out_proj: the output projection ``W_O`` back to ``dim`` (default True); False: the output is ``R``
            of eq. 12, ``inner_dim`` wide.
    """

    def __init__(self, dim: int, *, num_heads: int = 1, causal: bool = False, max_len: int | None = None,
                 inner_dim: int | None = None, bias: bool = True, activation: str = "relu",
                 out_proj: bool = True) -> None:
        if num_heads != 1:
            self._fail(f"num_heads={num_heads} is unsupported: Relation has no heads")
        self._check_flag(bias, "bias")
        self._check_flag(out_proj, "out_proj")
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, inner_dim=inner_dim,
                         out_dim=None if out_proj else (dim if inner_dim is None else inner_dim))
        if activation not in _ACTIVATIONS:
            self._fail(f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")
        inner = self.inner_dim
        self.out_proj = out_proj
        self.g_proj = nn.Linear(dim, inner, bias=bias)  # W_G, eq. 7
        self.h_proj = nn.Linear(dim, inner, bias=bias)  # W_H, eq. 8
        self.w = nn.Linear(inner, inner, bias=bias)
        self.phi = _ACTIVATIONS[activation]()
        self.proj = nn.Linear(inner, dim, bias=bias) if out_proj else None

    def _init_state(self, batch_size: int, device: torch.device | None, dtype: torch.dtype) -> dict[str, Tensor]:
        return {"sum": torch.zeros(batch_size, self.inner_dim, device=device, dtype=dtype),
                "count": torch.zeros((), device=device, dtype=dtype)}

    def _step(self, x_t: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        out, state = self._prefill(x_t[:, None], state)
        return out[:, 0], state

    def _prefill(self, x: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """L tokens continuing the state in one pass: the running mean of H from the state's sum and count."""
        context, (total, count) = chunk_mean(self.h_proj(x), (state["sum"], state["count"]), output_final_state=True)
        return self._relate(self.g_proj(x), context), {"sum": total, "count": count}

    def _mix(self, x: Tensor, mask: Tensor | None) -> Tensor:
        return self._relate(self.g_proj(x), masked_mean(self.h_proj(x), mask, self.causal))

    def _mix_reference(self, x: Tensor, mask: Tensor | None) -> Tensor:
        return self._relate(self.g_proj(x), masked_mean_reference(self.h_proj(x), mask, self.causal))

    def _relate(self, g: Tensor, context: Tensor) -> Tensor:
        """``R = phi((G * H') W)`` (eq. 12), then ``W_O`` when ``out_proj``."""
        r = self.phi(self.w(g * context))
        return r if self.proj is None else self.proj(r)
