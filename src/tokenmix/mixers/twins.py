"""Twins' spatially separable self-attention: locally-grouped (LSA) and global sub-sampled (GSA) attention
(Chu et al. 2021; Ruggeri (2022) §3.3)."""

from __future__ import annotations

from torch import Tensor

from ..ops.spatial import WindowAttention, to_pair, window_attention, window_attention_reference, window_grid
from ..registry import register_mixer
from .base import SpatialMixer
from .heads import QKVMixer
from .pvt import SpatialReductionAttention

# The LSA window, and the GSA sub-sampling that gives one representative per such window (Ruggeri (2022) §3.3).
LSA_WINDOW = 7


@register_mixer(
    "twins_lsa",
    paper="Chu et al. (2021) Twins §2.2, locally-grouped self-attention (LSA); Ruggeri (2022) §3.3",
    complexity="O(k1 k2 H W d) (Ruggeri (2022) §3.3; linear in N = HW for a fixed k1 x k2 window)",
    causal=False,
    padding=False,
    spatial=True,
)
class LocallyGroupedAttention(SpatialMixer, QKVMixer):
    """Locally-grouped self-attention (Ruggeri (2022) §3.3; Twins §2.2): the ``H x W`` grid is cut into non-overlapping
    ``k1 x k2`` windows (``m x n`` of them) and multi-head self-attention runs inside each window; no
    relative position bias and no shift (Twins gets cross-window communication from GSA instead).

    Complexity (Ruggeri (2022) §3.3): ``O(H^2 W^2 d / (m n)) = O(k1 k2 H W d)``, linear in HW for fixed k1, k2.

    Grids that do not fit: the window is clipped to ``min(k1, H) x min(k2, W)``, the grid is zero-padded at
    the bottom/right to a multiple of it, and padded cells are masked out as keys (the released Twins code
    lets its zero-padded cells be attended to), so they never influence real cells; their outputs are
    cropped. Reference: dense attention with the explicit N x N block-diagonal mask.

    Options:
        window_size: k1 x k2, an int or a pair (default 7, Twins-SVT's window in every stage).
        bias: biases in the Q/K/V and output projections (default True, as Twins-SVT's released
            ``qkv_bias=True``; its output projection always has one).
    """

    def __init__(
        self,
        dim: int,
        *,
        num_heads: int = 1,
        causal: bool = False,
        max_len: int | None = None,
        window_size: int | tuple[int, int] = LSA_WINDOW,
        bias: bool = True,
    ) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, bias=bias)
        values = list(window_size) if isinstance(window_size, (tuple, list)) else [window_size]
        if (len(values) not in (1, 2)
                or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values)):
            self._fail(f"window_size must be a positive int or a pair of them, got {window_size!r}")
        self.window_size = to_pair(window_size)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, window_size={self.window_size}"

    def _mix_spatial(self, x: Tensor, hw: tuple[int, int], mask: Tensor | None) -> Tensor:
        return self._windowed(x, hw, window_attention)

    def _mix_spatial_reference(self, x: Tensor, hw: tuple[int, int], mask: Tensor | None) -> Tensor:
        return self._windowed(x, hw, window_attention_reference)

    def _windowed(self, x: Tensor, hw: tuple[int, int], attention: WindowAttention) -> Tensor:
        """Attention inside the windows, computed by ``attention``; then ``W_out``."""
        grid = window_grid(hw, self.window_size)
        return self.proj(attention(self.q_proj(x), self.k_proj(x), self.v_proj(x), grid, self.num_heads))


@register_mixer(
    "twins_gsa",
    paper="Chu et al. (2021) Twins §2.2, global sub-sampled attention (GSA); Ruggeri (2022) §3.3",
    complexity="O(H^2 W^2 d / (k1 k2)) (Ruggeri (2022) §3.3; k1 = k2 = sr_ratio, i.e. O(N^2 d / sr_ratio^2))",
    causal=False,
    padding=False,
    spatial=True,
)
class GlobalSubsampledAttention(SpatialReductionAttention):
    """Global sub-sampled attention (Ruggeri (2022) §3.3; Twins §2.2): full-resolution queries attend to one
    representative key/value per ``sr_ratio x sr_ratio`` cell of the grid. Twins sub-samples with a
    regular strided convolution (``Conv2d(dim, dim, kernel=sr, stride=sr)``, then LayerNorm), which makes
    GSA the same operator as PVT's SRA; this class reuses it (see :class:`SpatialReductionAttention` for the
    ceil-mode handling of grids that are not multiples of ``sr_ratio``, and the reference path). With
    ``sr_ratio=1`` it is plain multi-head attention.

    Complexity (Ruggeri (2022) §3.3): ``O(m n H W d) = O(H^2 W^2 d / (k1 k2))`` with ``k1 = k2 = sr_ratio``; with
    LSA in the same layer pair, ``O(k1 k2 H W d + H^2 W^2 d / (k1 k2))``, minimal at ``k1 k2 = sqrt(HW)``.

    Operation counts are SRA's: see :func:`tokenmix.counting.vision.sra_parts`.

    Options:
        sr_ratio: the sub-sampling stride (default :data:`LSA_WINDOW` = 7, the default window of
            ``twins_lsa``: Ruggeri (2022) §3.3 pairs LSA with a GSA that takes "one representative per window", so the
            SSSA pattern ``["twins_lsa", "twins_gsa"]`` is consistent at the defaults; Twins-SVT's own
            stages use 8, 4, 2, 1).
        bias: biases in the Q/K/V and output projections (default True).
    """

    def __init__(self, dim: int, *, num_heads: int = 1, causal: bool = False, max_len: int | None = None,
                 sr_ratio: int = LSA_WINDOW, bias: bool = True) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, sr_ratio=sr_ratio, bias=bias)
