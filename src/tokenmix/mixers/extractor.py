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
real outputs equal the row run alone. Incremental decoding keeps the last ``l - 1`` convolution inputs
(:mod:`tokenmix.ops.causal_conv`, whose functions compute the convolution in every form): O(l d) per token
(O(l d^2) for the SHE, as Chen (2023) Table 5 counts); a prompt continues it in one pass.

Initialisation as in Chen (2023) §6: weights ``N(0, 0.01^2)``, biases zero.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ClassVar

import torch
import torch.nn as nn
from torch import Tensor

from ..ops.causal_conv import (
    FFT_MIN_TAPS,
    choose_path,
    chunk_causal_conv,
    conv_direct,
    conv_fft,
    conv_reference,
    fused_recurrent_causal_conv,
)
from ..ops.fft_conv import fft_size
from ..ops.init import normal_init_
from ..registry import register_mixer
from .base import Mixer

__all__ = ["Extractor", "SHE", "HE", "WE", "ME", "FFT_MIN_TAPS", "choose_path", "fft_size"]

_PATHS = ("auto", "direct", "fft")
_PAPER = "Chen (2023), Attention Is Not All You Need Anymore, section 5"
_INIT_STD = 0.01  # Chen (2023) §6

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
        conv = conv_fft if self.resolved_path(n) == "fft" else conv_direct
        return self._finish(x, conv(self._masked_conv_input(x, mask), w, self.kind)).to(x.dtype)

    def _mix_reference(self, x: Tensor, mask: Tensor | None) -> Tensor:
        """The literal double sum of the equations."""
        ext = conv_reference(self._masked_conv_input(x, mask), self.w_ext, self.kind)
        return self._finish(x, ext).to(x.dtype)

    def _masked_conv_input(self, x: Tensor, mask: Tensor | None) -> Tensor:
        """:meth:`_conv_input` with padded positions zeroed (after it: the HE's bias would otherwise leak)."""
        u = self._conv_input(x)
        return u if mask is None else u.masked_fill(~mask[..., None], 0.0)

    # -- incremental decoding -----------------------------------------------------------------
    def _init_state(self, batch_size: int, device: torch.device | None, dtype: torch.dtype) -> dict[str, Tensor]:
        return {
            # the last l - 1 convolution inputs, oldest first (zeros before the first token): tokenmix.ops.causal_conv
            "window": torch.zeros(batch_size, self.taps - 1, self.dim, device=device, dtype=dtype),
            "pos": torch.zeros((), dtype=torch.long, device=device),  # tokens seen so far
        }

    def _window(self, batch_size: int, state: dict[str, Tensor]) -> Tensor:
        window = state.get("window") if isinstance(state, dict) else None
        if not isinstance(window, Tensor) or window.shape != (batch_size, self.taps - 1, self.dim):
            self._fail(f"state must come from init_state({batch_size}) or step(); "
                       f"expected a window of shape {(batch_size, self.taps - 1, self.dim)}")
        return window

    def _continue(self, x: Tensor, state: dict[str, Tensor], form) -> tuple[Tensor, dict[str, Tensor]]:
        """L tokens (B, L, dim) continuing the state with one of :mod:`tokenmix.ops.causal_conv`'s forms."""
        window = self._window(x.shape[0], state)
        u = self._conv_input(x).to(window.dtype)
        ext, window = form(u, self.w_ext.to(window.dtype), initial_state=window, output_final_state=True)
        return self._finish(x, ext.to(x.dtype)).to(x.dtype), {"window": window, "pos": state["pos"] + x.shape[1]}

    def _step(self, x_t: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """The token enters the shift register; the taps read the last l inputs."""
        y, state = self._continue(x_t[:, None], state, fused_recurrent_causal_conv)
        return y[:, 0], state

    def _prefill(self, x: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """A prompt in one pass: the chunked form over the state's inputs and the prompt's, on the mixer's path
        (``"auto"`` resolved there for that length, as the forward resolves it)."""
        return self._continue(x, state, functools.partial(chunk_causal_conv, path=self.path))


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
