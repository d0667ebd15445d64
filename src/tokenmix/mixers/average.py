"""Average Attention: a cumulative average of the inputs, an FFN and input/forget gates."""

from __future__ import annotations

import torch
import torch.nn as nn
from torch import Tensor

from ..ops.averaging import chunk_mean, masked_mean, masked_mean_reference
from ..registry import register_mixer
from ..validate import is_positive_int
from .base import Mixer


@register_mixer(
    "average",
    paper="Zhang, Xiong, Su (2018) 'Accelerating neural transformer via an average attention network' "
          "§3; Ruggeri (2022) §4.3",
    complexity="O(N d^2)",
    causal=True,
    recurrent=True,
    multihead=False,
    residual=True,
)
class AverageAttention(Mixer):
    """Average Attention (Zhang et al. 2018 §3; Ruggeri (2022) §4.3)::

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
        if not is_positive_int(hidden):
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
        out, state = self._prefill(x_t[:, None], state)
        return out[:, 0], state

    def _prefill(self, x: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """L tokens continuing the state in one pass: the cumulative average from the state's sum and count."""
        average, (total, count) = chunk_mean(x, (state["sum"], state["count"]), output_final_state=True)
        return self._gate(x, average), {"sum": total, "count": count}
