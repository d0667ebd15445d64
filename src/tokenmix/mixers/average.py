"""Average Attention: a cumulative average of the inputs, an FFN and input/forget gates."""

from __future__ import annotations

import torch
import torch.nn as nn
from torch import Tensor

from ..ops.averaging import masked_mean, masked_mean_reference
from ..ops.opcounts import OpCounts, elementwise, linear_ops
from ..registry import register_mixer
from .base import Mixer


@register_mixer(
    "average",
    paper="Zhang, Xiong, Su (2018) 'Accelerating neural transformer via an average attention network' "
          "§3; 002 §4.3",
    complexity="O(N d^2)",
    causal=True,
    recurrent=True,
    multihead=False,
    residual=True,
)
class AverageAttention(Mixer):
    """Average Attention (Zhang et al. 2018 §3; 002 §4.3)::

        g_j = FFN((1/j) sum_{i <= j} x_i)             # cumulative average, then an FFN
        i_j, f_j = sigmoid(W [x_j; g_j])               # input and forget gates
        h~_j = i_j * x_j + f_j * g_j
        h_j = LayerNorm(h~_j + x_j)

    The cumulative average is a cumulative sum divided by the running count (O(N d); the averaging
    matrix of Zhang et al.'s "masking trick" is O(N^2 d) and is only the test reference). The whole
    layer is O(N d^2). Non-causal variant: ``g`` is the FFN of the mean over all real tokens, the same at
    every position.

    The formula ends with its own residual connection and LayerNorm, so the mechanism is registered with
    ``residual=True``: a model block applies it to the layer input directly (``x = mixer(x)``) instead of
    wrapping it in a second pre-norm and residual.

    Padding: averages run over real tokens only (divided by their count); outputs at padded positions are
    zero. Decoding (causal): the running sum and count, O(d^2) per token.

    Options:
        ffn_dim: hidden width of the FFN (default ``4 dim``, the Transformer FFN's ratio).
        bias: biases in the FFN and the gate layer (Zhang et al. have them).
    """

    def __init__(self, dim: int, *, num_heads: int = 1, causal: bool = False, max_len: int | None = None,
                 ffn_dim: int | None = None, bias: bool = True) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len)
        if num_heads != 1:
            self._fail(f"num_heads={num_heads} is unsupported: Average Attention has no heads")
        hidden = 4 * dim if ffn_dim is None else ffn_dim
        if not isinstance(hidden, int) or hidden <= 0:
            self._fail(f"ffn_dim must be a positive int, got {ffn_dim!r}")
        self.ffn = nn.Sequential(nn.Linear(dim, hidden, bias=bias), nn.ReLU(), nn.Linear(hidden, dim, bias=bias))
        self.gates = nn.Linear(2 * dim, 2 * dim, bias=bias)
        self.norm = nn.LayerNorm(dim)

    def _gate(self, x: Tensor, average: Tensor) -> Tensor:
        g = self.ffn(average)
        input_gate, forget_gate = torch.sigmoid(self.gates(torch.cat([x, g], dim=-1))).chunk(2, dim=-1)
        return self.norm(input_gate * x + forget_gate * g + x)

    def _mix(self, x: Tensor, mask: Tensor | None) -> Tensor:
        return self._gate(x, masked_mean(x, mask, self.causal))

    def _mix_reference(self, x: Tensor, mask: Tensor | None) -> Tensor:
        return self._gate(x, masked_mean_reference(x, mask, self.causal))

    def _init_state(self, batch_size: int, device: torch.device | None, dtype: torch.dtype) -> dict[str, Tensor]:
        return {"sum": torch.zeros(batch_size, self.dim, device=device, dtype=dtype),
                "count": torch.zeros((), device=device, dtype=dtype)}

    def _step(self, x_t: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        total, count = state["sum"] + x_t, state["count"] + 1
        return self._gate(x_t, total / count), {"sum": total, "count": count}

    # -- operation counts ----------------------------------------------------------------------
    def _count_gate(self, rows: int) -> OpCounts:
        """:meth:`_gate` for ``rows`` positions, ``d = dim``: the FFN (two linear layers with their biases; ReLU
        not counted); the gate layer on ``[x; g]`` (``2d -> 2d``; the concatenation is free); the sigmoid of
        its ``2d`` outputs (1 exp, 1 addition, 1 division each); ``i * x + f * g + x`` (``2d`` multiplications,
        ``2d`` additions); LayerNorm: the mean (``d - 1`` additions, 1 division), centring (``d`` additions),
        the variance (``d`` multiplications, ``d - 1`` additions, 1 division), ``+ eps`` (1 addition), ``d``
        divisions by the standard deviation (the square root is not counted) and the affine ``d``
        multiplications and ``d`` additions (when the norm has them)."""
        d = self.dim
        layers = [m for m in self.ffn if isinstance(m, nn.Linear)] + [self.gates]
        cost = sum((linear_ops(rows, m.in_features, m.out_features, m.bias is not None) for m in layers),
                   OpCounts())
        cost = cost + elementwise(rows * 2 * d, adds=1, divs=1, exps=1) + elementwise(rows * 2 * d, mults=1, adds=1)
        norm = OpCounts(mults=d, adds=(d - 1) + d + (d - 1) + 1, divs=2 + d)
        if self.norm.weight is not None:
            norm = norm + OpCounts(mults=d)
        if self.norm.bias is not None:
            norm = norm + OpCounts(adds=d)
        return cost + norm * rows

    def _count_ops(self, length: int) -> OpCounts:
        """The average over ``l = length`` inputs of width ``d``: ``d (l - 1)`` additions (a sum, or a running
        sum when causal), then ``d`` divisions (one mean) or, causally, ``l d`` (each running sum by its
        count); then :meth:`_gate` at every position. Non-causally the module broadcasts the one mean and
        runs the FFN on every row, and that is what is counted (the FFN of one row would do). Causal: the
        sum of :meth:`_count_step_ops` over ``t = 1..l``."""
        d = self.dim
        divs = length * d if self.causal else d
        return OpCounts(adds=(length - 1) * d, divs=divs) + self._count_gate(length)

    def _count_step_ops(self, t: int) -> OpCounts:
        """``x_t`` added into the running sum (``d`` additions, none at ``t = 1``), divided by ``t`` (``d``
        divisions), and :meth:`_gate` for the new token: O(d^2) whatever ``t``."""
        d = self.dim
        return OpCounts(adds=d if t > 1 else 0, divs=d) + self._count_gate(1)
