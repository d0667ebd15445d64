"""The short causal convolution the newer recurrent layers put on their projected inputs before the recurrence:
on q, k and v in DeltaNet (Yang et al. 2024, §4) and Gated DeltaNet (Yang, Kautz, Hatamizadeh 2025, §3.3), on x,
B and C in Mamba-2 (Dao, Gu 2024, §7). A depthwise filter of a few taps (4 in all three) over each channel, so that
a token's key carries its predecessors': a one-layer shift that lets the recurrence bind a key to the value after it.

:class:`ShortConvolution` holds the taps as PyTorch's ``Conv1d`` does (and initialises them as it does) and computes
with :mod:`tokenmix.ops.causal_conv`, whose state (the last ``size - 1`` inputs) is what decoding keeps.
"""

from __future__ import annotations

import torch.nn as nn
from torch import Tensor

from ..ops.causal_conv import chunk_causal_conv, naive_causal_conv

__all__ = ["ShortConvolution"]


class ShortConvolution(nn.Module):
    """A causal depthwise convolution of ``size`` taps over ``channels`` channels (no activation: the layer applies
    its own). Padded positions (``mask`` False) are zeroed before the filter, so no padded input reaches a real
    position, whichever side the padding is on."""

    def __init__(self, channels: int, size: int, *, bias: bool) -> None:
        super().__init__()
        self.size = size
        self.conv = nn.Conv1d(channels, channels, size, groups=channels, bias=bias)

    def taps(self) -> Tensor:
        """(size, channels): ``taps[j]`` meets the input ``j`` positions back, as :mod:`tokenmix.ops.causal_conv`
        takes them."""
        return self.conv.weight[:, 0, :].flip(-1).T

    def forward(self, x: Tensor, mask: Tensor | None = None, state: Tensor | None = None, *,
                reference: bool = False) -> tuple[Tensor, Tensor | None]:
        """``x`` (B, L, channels) filtered, continuing ``state`` (B, size - 1, channels: the inputs before ``x``;
        None: none, as at a sequence's start); returns the output and, when a state was given, the state after
        ``x``. ``reference``: the tap-by-tap sum instead of ``conv1d``."""
        if mask is not None:
            x = x.masked_fill(~mask[..., None], 0.0)
        form = naive_causal_conv if reference else chunk_causal_conv
        kwargs = {} if reference else {"path": "direct"}
        return form(x, self.taps(), self.conv.bias, initial_state=state, output_final_state=state is not None,
                    **kwargs)
