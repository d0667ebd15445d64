"""BaseConv: a linear projection gating a short or long convolution (Arora et al. 2023, Zoology)."""

from __future__ import annotations

import functools

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ..ops.causal_conv import chunk_causal_conv, fused_recurrent_causal_conv
from ..registry import register_mixer
from ..validate import is_positive_int
from .base import Mixer


@register_mixer(
    "baseconv",
    paper="Arora, Eyuboglu, Timalsina, Johnson, Poli, Zou, Rudra, Ré (2023) 'Zoology: measuring and improving "
          "recall in efficient language models' §5 (BaseConv); Arora et al. (2024) 'Simple linear attention "
          "language models balance the recall-throughput tradeoff' §3 (the short convolution beside each mixer)",
    complexity="O(N d^2 + N d k); a long filter (kernel_size=None): O(N d^2 + N d log N)",
    causal=True,
    recurrent=True,
    multihead=False,
)
class BaseConv(Mixer):
    """BaseConv (Arora et al. 2023, Zoology §5)::

        y = (u W + b) * (h conv u)          # elementwise gate; h: a depthwise filter of k taps per channel

    The gated convolution Zoology builds its architectures from, and what Arora et al. (2024) put before every
    mechanism on their recall benchmark (MQAR): with a filter of ``k = 3`` taps a token sees its two
    predecessors, so a key's identity reaches the value after it and the mechanism that follows is left with
    the lookup itself. A short filter alone sees ``L (k - 1)`` tokens back in ``L`` layers, so on its own it
    cannot recall anything further; Zoology's BaseConv also takes a *long* filter, one tap per position of the
    sequence (its explicit long convolution): ``kernel_size=None`` builds that, ``max_len`` taps, causal only,
    computed by FFT from 64 taps on (:func:`tokenmix.ops.causal_conv.choose_path`), O(N log N) per channel;
    decoding then keeps the last ``max_len - 1`` inputs. Zoology's module adds its input back (``y + u``); here
    the model's block adds the residual, as for every mixer.

    Causal: the filter covers positions ``t - k + 1 .. t`` (PyTorch's ``conv1d`` with ``k - 1`` zeros on the
    left, Zoology's ``ShortConvolution``); bidirectional: ``k`` odd, centred on ``t``. Padded positions are
    zeroed before the filter, so they are invisible to real ones, and their outputs are zero. Decoding (causal):
    the last ``k - 1`` inputs, O(d k) per token (:mod:`tokenmix.ops.causal_conv`); a prompt continues it in one pass.

    Options:
        kernel_size: the filter's taps ``k`` (Zoology's default 3), or None for a long filter of ``max_len``
            taps (causal; needs ``max_len``).
        bias: the projection's and the filter's biases (Zoology has both).
    """

    def __init__(self, dim: int, *, num_heads: int = 1, causal: bool = False, max_len: int | None = None,
                 kernel_size: int | None = 3, bias: bool = True) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len)
        if num_heads != 1:
            self._fail(f"num_heads={num_heads} is unsupported: BaseConv has no heads")
        self.long_filter = kernel_size is None
        if self.long_filter:
            if not causal:
                self._fail("kernel_size=None (a long filter, one tap per position) is causal only")
            if max_len is None:
                self._fail("kernel_size=None (a long filter) needs max_len, its number of taps")
            kernel_size = max_len
        if not is_positive_int(kernel_size):
            self._fail(f"kernel_size must be a positive int or None (a long filter), got {kernel_size!r}")
        if not causal and kernel_size % 2 == 0:
            self._fail(f"kernel_size={kernel_size} must be odd when bidirectional (a filter centred on each token)")
        self._check_flag(bias, "bias")
        self.kernel_size = kernel_size
        self.projection = nn.Linear(dim, dim, bias=bias)
        self.conv = nn.Conv1d(dim, dim, kernel_size, groups=dim, bias=bias)

    def _filtered(self, x: Tensor) -> Tensor:
        """The depthwise filter over (B, N, d), causal or centred, by ``conv1d``; a long one by
        :func:`~tokenmix.ops.causal_conv.chunk_causal_conv` (the FFT from 64 taps on)."""
        if self.long_filter:
            return chunk_causal_conv(x, self._taps(), self.conv.bias)[0]
        k = self.kernel_size
        left = k - 1 if self.causal else k // 2
        padded = F.pad(x.transpose(1, 2), (left, k - 1 - left))
        return self.conv(padded).transpose(1, 2)

    def _filtered_reference(self, x: Tensor) -> Tensor:
        """The same filter as a sum over taps: output t reads input t - (k - 1) + j (causal) or t - k//2 + j."""
        k, n = self.kernel_size, x.shape[1]
        left = k - 1 if self.causal else k // 2
        weight = self.conv.weight[:, 0, :]  # (d, k)
        out = torch.zeros_like(x) if self.conv.bias is None else self.conv.bias.expand_as(x).clone()
        for j in range(k):
            shift = j - left  # input position = t + shift
            lo, hi = max(0, -shift), min(n, n - shift)
            if lo < hi:
                out[:, lo:hi] = out[:, lo:hi] + x[:, lo + shift:hi + shift] * weight[:, j]
        return out

    @staticmethod
    def _masked(x: Tensor, mask: Tensor | None) -> Tensor:
        return x if mask is None else x.masked_fill(~mask[..., None], 0.0)

    def _mix(self, x: Tensor, mask: Tensor | None) -> Tensor:
        x = self._masked(x, mask)
        return self.projection(x) * self._filtered(x)

    def _mix_reference(self, x: Tensor, mask: Tensor | None) -> Tensor:
        x = self._masked(x, mask)
        return self.projection(x) * self._filtered_reference(x)

    def _taps(self) -> Tensor:
        """The filter as :mod:`tokenmix.ops.causal_conv` takes it: (k, d), ``taps[j]`` meets the input j back."""
        return self.conv.weight[:, 0, :].flip(-1).T

    def _init_state(self, batch_size: int, device: torch.device | None, dtype: torch.dtype) -> dict[str, Tensor]:
        return {"window": torch.zeros(batch_size, self.kernel_size - 1, self.dim, device=device, dtype=dtype)}

    def _continue(self, x: Tensor, state: dict[str, Tensor], form) -> tuple[Tensor, dict[str, Tensor]]:
        """L tokens (B, L, d) continuing the state (the last k - 1 inputs) with one of
        :mod:`tokenmix.ops.causal_conv`'s forms."""
        filtered, window = form(x, self._taps(), self.conv.bias, initial_state=state["window"],
                                output_final_state=True)
        return self.projection(x) * filtered, {"window": window}

    def _step(self, x_t: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        y, state = self._continue(x_t[:, None], state, fused_recurrent_causal_conv)
        return y[:, 0], state

    def _prefill(self, x: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """A prompt in one pass (the direct convolution over the state's inputs and the prompt's)."""
        path = "auto" if self.long_filter else "direct"
        return self._continue(x, state, functools.partial(chunk_causal_conv, path=path))
