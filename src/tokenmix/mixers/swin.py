"""Swin's window multi-head self-attention, W-MSA and shifted SW-MSA (Liu et al. 2021; Ruggeri (2022) §3.1)."""

from __future__ import annotations

import torch
import torch.nn as nn
from torch import Tensor

from ..ops.spatial import WindowAttention, window_attention, window_attention_reference, window_grid
from ..registry import register_mixer
from ..validate import is_positive_int as _positive_int
from .base import SpatialMixer
from .heads import QKVMixer


@register_mixer(
    "swin",
    paper="Liu et al. (2021) Swin Transformer §3.2 (W-MSA/SW-MSA, relative position bias, eq. 4); Ruggeri (2022) §3.1",
    complexity="O(M^2 h w C) = O(HW) (Ruggeri (2022) §3.1; per layer O(M^2 N d), linear in N = HW for a fixed "
               "window M)",
    causal=False,
    padding=False,
    spatial=True,
    alternate={"shift": True},
)
class SwinWindowAttention(SpatialMixer, QKVMixer):
    """Window multi-head self-attention with a relative position bias (Ruggeri (2022) §3.1; Swin §3.2, eq. 4)::

        Attention(Q, K, V) = softmax(Q K^T / sqrt(d) + B) V      inside each M x M window,

    ``B`` gathered from a learned table ``relative_position_bias_table`` of shape ((2M - 1)^2, heads)
    with Swin's index ``(dr + M - 1)(2M - 1) + (dc + M - 1)`` of the row/column offsets (dr, dc) of the
    two cells inside their window. ``shift=True`` gives SW-MSA: the grid is cyclically rolled by
    ``(-floor(M/2), -floor(M/2))``, attention is restricted to cells of the same sub-region of a window
    (Swin's attention mask, so cells rolled in from the other edge stay apart), and the result is rolled
    back. A model applies ``shift=True`` to every second layer (``alternate``).

    Complexity (Ruggeri (2022) §3.1): ``O(M^2 h w C) = O(HW)``; each of the ``HW / M^2`` windows costs
    ``O(M^4 C)``, i.e. ``O(M^2 N d)`` with ``N = HW``: linear in N for a fixed M (M = 7 in Swin).

    Grids that do not fit the window:
      * The window is clipped per dimension to ``min(M, H) x min(M, W)``, and there is no shift in a
        dimension where the grid is not larger than M (Swin uses ``min(H, W)`` square windows and drops the
        shift altogether when ``min(H, W) <= M``; clipping per dimension keeps whole M-wide windows and the
        shift along the long side). A clipped window reuses the table entries of its offsets.
      * Otherwise the grid is zero-padded at the bottom/right to a multiple of M (before the roll, as in
        Swin's detection code), but padded cells are masked out as keys (Swin does not mask them), so they
        never influence a real cell; their outputs are cropped. See :mod:`tokenmix.ops.spatial`.

    Fast path: batched per-window SDPA with an additive (bias + -inf) mask. Reference: dense attention over
    all N cells with the explicit N x N same-window (and same-region) mask and the bias gathered per pair.

    Options:
        window_size: M (default 7, as in Swin).
        shift: SW-MSA (default False, i.e. W-MSA).
        bias: biases in the Q/K/V and output projections (default True: Swin's ``qkv_bias=True``; its output
            projection always has one).
    """

    def __init__(
        self,
        dim: int,
        *,
        num_heads: int = 1,
        causal: bool = False,
        max_len: int | None = None,
        window_size: int = 7,
        shift: bool = False,
        bias: bool = True,
    ) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, bias=bias)
        if not _positive_int(window_size):
            self._fail(f"window_size must be a positive int, got {window_size!r}")
        if not isinstance(shift, bool):
            self._fail(f"shift must be a bool, got {shift!r}")
        self.window_size = window_size
        self.shift = shift
        self.relative_position_bias_table = nn.Parameter(torch.empty((2 * window_size - 1) ** 2, num_heads))
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, window_size={self.window_size}, shift={self.shift}"

    def _mix_spatial(self, x: Tensor, hw: tuple[int, int], mask: Tensor | None) -> Tensor:
        return self._windowed(x, hw, window_attention)

    def _mix_spatial_reference(self, x: Tensor, hw: tuple[int, int], mask: Tensor | None) -> Tensor:
        return self._windowed(x, hw, window_attention_reference)

    def _windowed(self, x: Tensor, hw: tuple[int, int], attention: WindowAttention) -> Tensor:
        """Attention inside the (shifted) windows with the bias, computed by ``attention``; then ``W_out``."""
        grid = window_grid(hw, self.window_size, self.shift)
        out = attention(self.q_proj(x), self.k_proj(x), self.v_proj(x), grid, self.num_heads,
                        bias_table=self.relative_position_bias_table, table_window=self.window_size)
        return self.proj(out)
