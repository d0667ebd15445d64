"""The no-context baseline: a pointwise MLP that mixes nothing across positions."""

from __future__ import annotations

import torch
import torch.nn as nn
from torch import Tensor

from ..registry import register_mixer
from ..validate import is_positive_int
from .base import Mixer


@register_mixer(
    "mlp",
    paper="Yamada, Baladram, Lin (2022) §3.2.1 (Baseline)",
    complexity="O(N d^2)",
    causal=True,
    recurrent=True,
    multihead=False,
)
class PointwiseMLP(Mixer):
    """The Baseline of Yamada et al. (2022) §3.2.1: pointwise layers applied to each token on its own, so no information
    crosses positions (trivially causal and padding-proof). ``Linear(dim, hidden) -> ReLU ->
    Linear(hidden, dim)``; the default ``hidden = 2 dim`` with ``bias=False`` gives ``4 dim^2`` parameters,
    the budget of "softmax", as Yamada et al. (2022) match parameter sizes across their networks.

    Options:
        hidden: width of the hidden layer (default ``2 * dim``).
        bias: biases (Yamada et al. (2022)'s networks have them, zero-initialised).
    """

    def __init__(self, dim: int, *, num_heads: int = 1, causal: bool = False, max_len: int | None = None,
                 hidden: int | None = None, bias: bool = True) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len)
        if num_heads != 1:
            self._fail(f"num_heads={num_heads} is unsupported: the pointwise MLP has no heads")
        width = 2 * dim if hidden is None else hidden
        if not is_positive_int(width):
            self._fail(f"hidden must be a positive int, got {hidden!r}")
        self.net = nn.Sequential(nn.Linear(dim, width, bias=bias), nn.ReLU(), nn.Linear(width, dim, bias=bias))

    def _init_state(self, batch_size: int, device: torch.device | None, dtype: torch.dtype) -> dict[str, Tensor]:
        return {}  # nothing crosses positions, so there is nothing to remember

    def _step(self, x_t: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        return self.net(x_t), state

    def _mix(self, x: Tensor, mask: Tensor | None) -> Tensor:
        return self.net(x)

    def _mix_reference(self, x: Tensor, mask: Tensor | None) -> Tensor:
        """Token by token, to show nothing crosses positions."""
        return torch.stack([self.net(x[:, i]) for i in range(x.shape[1])], dim=1)
