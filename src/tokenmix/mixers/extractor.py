"""The Extractors of Chen (2023), "Attention Is Not All You Need Anymore" (§5).

An Extractor replaces self-attention with a causal "extraction" that weighs the inputs by their reverse
position (an FIR filter with ``l`` taps, ``l = max_len``), optionally followed by an element-wise
"adjustment" by a linear function of the current input and an output projection:

* SHE (eqs. 23-25): ``e_i = sum_{j<=i} x_j W^ext_{i-j+1}`` (``W^ext_k`` d x d matrices),
  ``a_i = (x_i W^adj) o e_i``, ``y_i = a_i W^out``.
* HE (eqs. 27-28, then 24-25): ``u = X W^in_ext``, ``e_i = sum_{j<=i} u_j o w^ext_{i-j+1}`` (vectors),
  adjustment and output projection as the SHE.
* WE (eq. 26, then 24-25): ``e_i = sum_{j<=i} x_j o w^ext_{i-j+1}`` (vectors), adjustment, projection.
* ME (eq. 29): ``y_i = sum_{j<=i} x_j w^ext_{i-j+1}`` (scalars); nothing else.

The paper assumes ``t <= l``. Here a sequence longer than ``l`` uses, at position ``i``, the last ``l``
inputs only (taps ``1..l``): a sliding causal convolution, so ``max_len`` is a window rather than a cap
on N (registered with ``sliding_window=True``). For ``i <= l`` this is exactly the paper's sum.

Three computations of the same convolution, selected by the ``path`` option:

* ``"direct"``: ``torch.nn.functional.conv1d`` with the taps (left zero padding), O(N l d) per
  channel-wise convolution (O(N l d^2) for the SHE's matrix taps, computed in tiles of 512 positions x
  512 taps, as CPU conv1d's backward is pathologically slow for long inputs with long kernels).
* ``"fft"``: block (overlap-add) FFT convolution: the sequence is cut into blocks of ``P = min(N, l)``
  positions, each block is zero-padded to an FFT length ``>= 2P`` (no circular wrap) and multiplied by the
  FFT of the taps, and each block's tail is added to the next block. O(N d log l) for a channel-wise
  convolution; for the SHE O(N d^2) for the per-frequency d x d products plus O(l d^2 log l) for the
  FFT of the taps, in :func:`tokenmix.ops.fft_conv.causal_conv_matrix_fft` (a hand-written backward,
  and blocks of l/4 positions when few rows share the taps' transform). Computed in float32 for
  half/bfloat16 inputs (``torch.fft`` has no bfloat16 on CPU) and cast back. Its causality holds up to
  round-off: a later input changes an earlier output by ~1e-7 (float32) relative, not by exactly 0 as
  with ``"direct"``.
* ``"auto"`` (default): ``"fft"`` when the number of taps in use, ``min(N, l)``, reaches
  :data:`FFT_MIN_TAPS` for the mechanism's kind of taps, else ``"direct"`` (see :func:`choose_path`).

``forward_reference`` is the literal double sum of the equations (a Python loop over positions and
taps), independent of both paths.

Padding: padded inputs (``mask`` False) are zeroed before the convolution (for the HE after ``W^in_ext``,
whose bias would otherwise leak), so they never reach a real position; with right padding each row's
real outputs equal the row run alone. Incremental decoding keeps the last ``l`` convolution inputs in a
shift register (newest first): O(l d) per token (O(l d^2) for the SHE, as Chen (2023) Table 5 counts).

Initialisation as in Chen (2023) §6: weights ``N(0, 0.01^2)``, biases zero.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ..ops.fft_conv import causal_conv_matrix_fft, fft_size, overlap_add, to_blocks
from ..ops.init import normal_init_
from ..registry import register_mixer
from .base import Mixer

__all__ = ["Extractor", "SHE", "HE", "WE", "ME", "FFT_MIN_TAPS", "choose_path", "fft_size"]

_PATHS = ("auto", "direct", "fft")
_PAPER = "Chen (2023), Attention Is Not All You Need Anymore, section 5"
_INIT_STD = 0.01  # Chen (2023) §6

# path="auto" uses the FFT from this many taps in use, min(N, max_len), on. Measured on a 2-core CPU
# (torch 2.13, dim 128, batch 4, float32, forward + backward, N = l and N = 4 l): the FFT path is as fast
# as or faster than the direct one from about 32-48 taps (vectors, scalars) and 64-96 taps (matrices, or
# 32 when N >= 4 l) on, and 2-4x faster from 128 taps on; 64 is a round crossover for all three.
FFT_MIN_TAPS: dict[str, int] = {"matrix": 64, "vector": 64, "scalar": 64}

# Tile (positions and taps) of the SHE's direct path (see _conv_direct_matrix).
_MATRIX_TILE = 512


def choose_path(path: str, n: int, taps: int, kind: str) -> str:
    """The computation ``path`` resolves to for a length-``n`` input and ``taps`` = max_len taps.

    ``"auto"`` gives ``"fft"`` when ``min(n, taps) >= FFT_MIN_TAPS[kind]`` and ``"direct"`` otherwise
    (the direct cost grows with the taps in use, the FFT's only with their logarithm).
    """
    if path != "auto":
        return path
    return "fft" if min(n, taps) >= FFT_MIN_TAPS[kind] else "direct"


def _apply_taps(window: Tensor, w: Tensor, kind: str) -> Tensor:
    """``sum_k window[:, k] (x) w[k]``: window (B, K, d), w (K, ...) -> (B, d)."""
    if kind == "matrix":  # one (B, K d) x (K d, d) product: einsum would copy the K d x d taps per call
        return window.reshape(window.shape[0], -1) @ w.reshape(-1, w.shape[-1])
    if kind == "vector":
        return (window * w).sum(1)
    return torch.einsum("bkc,k->bc", window, w)


def _conv_direct(u: Tensor, w: Tensor, kind: str) -> Tensor:
    """Causal convolution ``y_i = sum_k u_{i-k} (x) w[k]`` (k = 0..K-1) with conv1d; u (B, N, d).

    On the CPU, half-precision inputs are convolved in float32 and the result cast back: PyTorch 2.13's
    bfloat16 conv1d returns wrong values for some shapes on CPUs with AMX (16 taps over 6 channels: errors as
    large as the outputs), and its float16 conv1d is orders of magnitude slower there."""
    if u.device.type == "cpu" and u.dtype in (torch.float16, torch.bfloat16):
        with torch.autocast(device_type="cpu", enabled=False):
            return _conv_direct(u.float(), w.float(), kind).to(u.dtype)
    if kind == "matrix":
        return _conv_direct_matrix(u, w)
    d, k = u.shape[2], w.shape[0]
    ut = F.pad(u.transpose(1, 2), (k - 1, 0))  # (B, d, N + K - 1): zeros before the first input
    flipped = w.flip(0)  # conv1d correlates: its last kernel element meets the current input
    if kind == "vector":
        y = F.conv1d(ut, flipped.t().unsqueeze(1), groups=d)  # weight (d, 1, K)
    else:
        y = F.conv1d(ut, flipped.view(1, 1, k).expand(d, 1, k), groups=d)  # one kernel, every channel
    return y.transpose(1, 2)


def _conv_direct_matrix(u: Tensor, w: Tensor) -> Tensor:
    """:func:`_conv_direct` for d x d taps, tiled: blocks of up to ``_MATRIX_TILE`` outputs (moved into the
    batch) times chunks of up to ``_MATRIX_TILE`` taps. CPU conv1d's backward falls off a cliff for long
    inputs with long kernels (minutes at N = 4096 with 512 taps x 128 x 128); tiles keep its usual speed."""
    b, n, d = u.shape
    k = w.shape[0]
    tp = min(_MATRIX_TILE, n)  # outputs per block
    nb = -(-n // tp)
    up = F.pad(u.transpose(1, 2), (k - 1, nb * tp - n))  # (B, d, K - 1 + nb tp): zeros before the start
    y = None
    for c0 in range(0, k, _MATRIX_TILE):  # taps c0..c1-1 meet the inputs c0..c1-1 positions back
        c1 = min(k, c0 + _MATRIX_TILE)
        seg = up[:, :, k - c1: k - 1 - c0 + nb * tp]  # (B, d, nb tp + c1 - c0 - 1)
        windows = seg.unfold(2, tp + c1 - c0 - 1, tp).permute(0, 2, 1, 3).reshape(b * nb, d, -1)
        part = F.conv1d(windows, w[c0:c1].flip(0).permute(2, 1, 0))  # (B nb, d, tp); weight (d_out, d_in, .)
        y = part if y is None else y + part
    assert y is not None
    return y.view(b, nb, d, tp).transpose(2, 3).reshape(b, nb * tp, d)[:, :n]


def _conv_fft(u: Tensor, w: Tensor, kind: str) -> Tensor:
    """The same convolution by overlap-add FFT with blocks of ``P = K`` positions (K = taps in use); matrix
    taps go to :func:`tokenmix.ops.fft_conv.causal_conv_matrix_fft` (hand-written backward)."""
    dtype = torch.float32 if u.dtype in (torch.float16, torch.bfloat16) else u.dtype
    if kind == "matrix":
        with torch.autocast(device_type=u.device.type, enabled=False):
            return causal_conv_matrix_fft(u.to(dtype), w.to(dtype)).to(u.dtype)
    p = w.shape[0]
    length = fft_size(2 * p)  # a block's linear convolution has 2P - 1 <= length samples: no wrap
    with torch.autocast(device_type=u.device.type, enabled=False):
        spec = torch.fft.rfft(to_blocks(u.to(dtype), p), n=length, dim=2)  # (B, nb, F, d)
        taps = torch.fft.rfft(w.to(dtype), n=length, dim=0)  # (F, ...)
        if kind == "vector":
            spec = spec * taps
        else:
            spec = spec * taps[:, None]
        y = torch.fft.irfft(spec, n=length, dim=2)[:, :, : 2 * p]  # (B, nb, 2P, d)
        y = overlap_add(y, p, u.shape[1])  # each block's tail is added to the next block
    return y.to(u.dtype)


def _conv_reference(u: Tensor, w: Tensor, kind: str) -> Tensor:
    """Literally ``e_i = sum_{j=max(1, i-l+1)}^{i} u_j (x) w_{i-j+1}`` (1-based), one term at a time."""
    n, taps = u.shape[1], w.shape[0]
    rows = []
    for i in range(n):
        acc = torch.zeros_like(u[:, 0])
        for j in range(max(0, i - taps + 1), i + 1):
            tap = w[i - j]  # w_{i-j+1} in the paper's 1-based indexing
            acc = acc + (u[:, j] @ tap if kind == "matrix" else u[:, j] * tap)
        rows.append(acc)
    return torch.stack(rows, dim=1)


class Extractor(Mixer):
    """Shared machinery of the four Extractors; subclasses define the taps and the parts around them.

    ``w_ext`` holds the ``l`` taps, ``w_ext[k - 1] = w^ext_k`` (the weight of the input ``k - 1``
    positions back): shape (l, d, d) for matrices, (l, d) for vectors, (l,) for scalars.
    """

    kind: ClassVar[str]  # "matrix" | "vector" | "scalar"

    def __init__(self, dim: int, *, num_heads: int, causal: bool, max_len: int | None, path: str) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len)
        if max_len is None:
            self._fail("max_len (the number of taps l) is required")
        if path not in _PATHS:
            self._fail(f"path must be one of {', '.join(map(repr, _PATHS))}; got {path!r}")
        self.path = path

    def _check_flag(self, value: object, option: str) -> None:
        if not isinstance(value, bool):
            self._fail(f"{option} must be a bool, got {value!r}")

    @property
    def taps(self) -> int:
        """l, the number of taps (= max_len)."""
        assert self.max_len is not None
        return self.max_len

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, taps={self.taps}, path={self.path!r}"

    def resolved_path(self, n: int) -> str:
        """``"direct"`` or ``"fft"``: what ``forward`` uses for a length-``n`` input."""
        return choose_path(self.path, n, self.taps, self.kind)

    # -- the parts around the convolution (overridden by the subclasses) -------------------------
    def _conv_input(self, x: Tensor) -> Tensor:
        """What the taps are applied to (x itself; ``x W^in_ext`` for the HE)."""
        return x

    def _finish(self, x: Tensor, ext: Tensor) -> Tensor:
        """From the extraction to the output (adjustment and projection; nothing for the ME)."""
        return ext

    # -- forward ------------------------------------------------------------------------------
    def _mix(self, x: Tensor, mask: Tensor | None) -> Tensor:
        """The convolution on the resolved path (:meth:`resolved_path`)."""
        n = x.shape[1]
        # taps beyond position N never meet an input (no slice when all are used: its backward would
        # allocate and fill a zero gradient of every tap, which costs as much as an FFT for the SHE)
        w = self.w_ext if n >= self.taps else self.w_ext[:n]
        conv = _conv_fft if self.resolved_path(n) == "fft" else _conv_direct
        return self._finish(x, conv(self._masked_conv_input(x, mask), w, self.kind)).to(x.dtype)

    def _mix_reference(self, x: Tensor, mask: Tensor | None) -> Tensor:
        """The literal double sum of the equations."""
        ext = _conv_reference(self._masked_conv_input(x, mask), self.w_ext, self.kind)
        return self._finish(x, ext).to(x.dtype)

    def _masked_conv_input(self, x: Tensor, mask: Tensor | None) -> Tensor:
        """:meth:`_conv_input` with padded positions zeroed (after it: the HE's bias would otherwise leak)."""
        u = self._conv_input(x)
        return u if mask is None else u.masked_fill(~mask[..., None], 0.0)

    # -- incremental decoding -----------------------------------------------------------------
    def _init_state(self, batch_size: int, device: torch.device | None, dtype: torch.dtype) -> dict[str, Tensor]:
        return {
            # window[:, k] is the convolution input k positions back (zeros before the first token)
            "window": torch.zeros(batch_size, self.taps, self.dim, device=device, dtype=dtype),
            "pos": torch.zeros((), dtype=torch.long, device=device),  # tokens seen so far
        }

    def _step(self, x_t: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        window = state.get("window") if isinstance(state, dict) else None
        if not isinstance(window, Tensor) or window.shape != (x_t.shape[0], self.taps, self.dim):
            self._fail(f"state must come from init_state({x_t.shape[0]}) or step(); "
                       f"expected a window of shape {(x_t.shape[0], self.taps, self.dim)}")
        u_t = self._conv_input(x_t).to(window.dtype)
        window = torch.cat([u_t[:, None], window[:, :-1]], dim=1)  # shift register, newest first
        ext = _apply_taps(window, self.w_ext.to(window.dtype), self.kind)
        y_t = self._finish(x_t, ext.to(x_t.dtype)).to(x_t.dtype)
        return y_t, {"window": window, "pos": state["pos"] + 1}


def _register_extractor(name: str, paper: str, complexity: str) -> Callable[[type[Extractor]], type[Extractor]]:
    """Register an Extractor (``paper``: the section and equations after :data:`_PAPER`): causal only, with
    padding and decoding, no heads, and ``max_len`` taps that are a sliding window rather than a cap on N."""
    return register_mixer(name, paper=f"{_PAPER}{paper}", complexity=complexity, causal=True, bidirectional=False,
                          padding=True, recurrent=True, multihead=False, needs_max_len=True, sliding_window=True)


class _Adjusted(Extractor):
    """SHE/HE/WE: the adjustment ``(x W^adj) o e`` (eq. 24) and the optional ``W^out`` (eq. 25)."""

    def _build_adjustment(self, bias: bool, out_proj: bool) -> None:
        self._check_flag(bias, "bias")
        self._check_flag(out_proj, "out_proj")
        self.adj = nn.Linear(self.dim, self.dim, bias=bias)  # W^adj (eq. 24)
        self.out = nn.Linear(self.dim, self.dim, bias=bias) if out_proj else None  # W^out (eq. 25)
        self.out_proj = out_proj

    def _init_weights(self) -> None:
        # The Extractors' own default is Chen (2023) §6's; a model with an ``init_std`` re-initialises every
        # mixer alike (tokenmix.ops.init.normal_init_), so this only matters for a standalone mixer.
        normal_init_(self, _INIT_STD)

    def _finish(self, x: Tensor, ext: Tensor) -> Tensor:
        adjusted = self.adj(x) * ext
        return adjusted if self.out is None else self.out(adjusted)


@_register_extractor("extractor_she", ".1, eqs. 23-25 (SHE)",
                     "O(N l d^2); O(N d^2 + N d log l + l d^2 log l) with path='fft'")
class SHE(_Adjusted):
    """Super high-performance Extractor (Chen (2023) eqs. 23-25).

    ``e_i = sum_{j=i-l+1..i, j>=1} x_j W^ext_{i-j+1}`` with ``l`` d x d tap matrices,
    ``a_i = (x_i W^adj) o e_i``, ``y_i = a_i W^out``.

    Parameters (``bias=False``): ``l d^2 + d^2 + d^2`` with ``out_proj=True`` (the default, which
    reproduces Chen (2023) Tables 3 and 7: 2,129,920 at d = l = 128), ``l d^2 + d^2`` without it.

    Options:
        bias: biases in ``W^adj`` and ``W^out`` (the taps have none); default False, as counted in Chen (2023).
        out_proj: the optional output projection ``W^out`` of eq. 25 (default True).
        path: ``"auto"`` | ``"direct"`` | ``"fft"`` (see the module docstring).
    """

    kind = "matrix"

    def __init__(self, dim: int, *, num_heads: int = 1, causal: bool = True, max_len: int | None = None,
                 bias: bool = False, out_proj: bool = True, path: str = "auto") -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, path=path)
        self.w_ext = nn.Parameter(torch.empty(self.taps, dim, dim))  # W^ext_1..W^ext_l (eq. 23)
        self._build_adjustment(bias, out_proj)
        self._init_weights()


@_register_extractor("extractor_he", ".3, eqs. 27-28 with 24-25 (HE)",
                     "O(N l d + N d^2); O(N d log l + N d^2) with path='fft'")
class HE(_Adjusted):
    """Higher-performance Extractor (Chen (2023) eqs. 27-28, then the SHE's eqs. 24-25).

    ``u = X W^in_ext``, ``e_i = sum_{j=i-l+1..i, j>=1} u_j o w^ext_{i-j+1}`` with ``l`` tap vectors,
    ``a_i = (x_i W^adj) o e_i``, ``y_i = a_i W^out``.

    Parameters (``bias=False``): ``l d + 3 d^2`` with ``out_proj=True`` (the default, which reproduces
    Chen (2023) Tables 4 and 7: 65,536 at d = l = 128), ``l d + 2 d^2`` without it.

    Options:
        bias: biases in ``W^in_ext``, ``W^adj`` and ``W^out``; default False, as counted in Chen (2023).
        out_proj: the optional output projection ``W^out`` of eq. 25 (default True).
        path: ``"auto"`` | ``"direct"`` | ``"fft"`` (see the module docstring).
    """

    kind = "vector"

    def __init__(self, dim: int, *, num_heads: int = 1, causal: bool = True, max_len: int | None = None,
                 bias: bool = False, out_proj: bool = True, path: str = "auto") -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, path=path)
        self._check_flag(bias, "bias")
        self.in_ext = nn.Linear(dim, dim, bias=bias)  # W^in_ext (eq. 27)
        self.w_ext = nn.Parameter(torch.empty(self.taps, dim))  # w^ext_1..w^ext_l (eq. 28)
        self._build_adjustment(bias, out_proj)
        self._init_weights()

    def _conv_input(self, x: Tensor) -> Tensor:
        return self.in_ext(x)


@_register_extractor("extractor_we", ".2, eq. 26 with 24-25 (WE)",
                     "O(N l d + N d^2); O(N d log l + N d^2) with path='fft'")
class WE(_Adjusted):
    """Worthwhile Extractor (Chen (2023) eq. 26, then the SHE's eqs. 24-25).

    ``e_i = sum_{j=i-l+1..i, j>=1} x_j o w^ext_{i-j+1}`` with ``l`` tap vectors,
    ``a_i = (x_i W^adj) o e_i``, ``y_i = a_i W^out``.

    Parameters (``bias=False``): ``l d + 2 d^2`` with ``out_proj=True`` (the default, which reproduces
    Chen (2023) Tables 4 and 7: 49,152 at d = l = 128), ``l d + d^2`` without it.

    Options:
        bias: biases in ``W^adj`` and ``W^out``; default False, as counted in Chen (2023).
        out_proj: the optional output projection ``W^out`` of eq. 25 (default True).
        path: ``"auto"`` | ``"direct"`` | ``"fft"`` (see the module docstring).
    """

    kind = "vector"

    def __init__(self, dim: int, *, num_heads: int = 1, causal: bool = True, max_len: int | None = None,
                 bias: bool = False, out_proj: bool = True, path: str = "auto") -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, path=path)
        self.w_ext = nn.Parameter(torch.empty(self.taps, dim))  # w^ext_1..w^ext_l (eq. 26)
        self._build_adjustment(bias, out_proj)
        self._init_weights()


@_register_extractor("extractor_me", ".4, eq. 29 (ME)", "O(N l d); O(N d log l) with path='fft'")
class ME(Extractor):
    """Minimalist Extractor (Chen (2023) eq. 29): ``y_i = sum_{j=i-l+1..i, j>=1} x_j w^ext_{i-j+1}``.

    Only the extraction, with ``l`` scalar taps shared by all channels: ``l`` parameters (Chen (2023) Tables 4
    and 7: 128 at l = 128). It has no adjustment and no projection.

    Options:
        bias: must be False (eq. 29 has no linear layer to carry a bias); accepted so that the four
            Extractors take the same options.
        path: ``"auto"`` | ``"direct"`` | ``"fft"`` (see the module docstring).
    """

    kind = "scalar"

    def __init__(self, dim: int, *, num_heads: int = 1, causal: bool = True, max_len: int | None = None,
                 bias: bool = False, path: str = "auto") -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, path=path)
        self._check_flag(bias, "bias")
        if bias:
            self._fail("bias=True is unsupported: eq. 29 has no linear layer to carry a bias")
        self.w_ext = nn.Parameter(torch.empty(self.taps).normal_(0.0, _INIT_STD))  # w^ext_1..w^ext_l
