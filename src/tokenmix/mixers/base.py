"""The contract every token mixer follows, and the Q/K/V scaffolding shared by the attention family.

Contract (see :class:`Mixer`): ``y = mixer(x, mask=None)`` with ``x`` of shape ``(B, N, dim)`` and a
floating dtype, ``mask`` of shape ``(B, N)`` and dtype bool (True = real token). ``y`` has shape
``(B, N, mixer.out_dim)`` and the dtype of ``x``. Padded positions never influence real ones, and their
own outputs are zero, so a row that is all padding gives zeros (never NaN).

``out_dim`` is ``dim`` for every mixer except one built without its output projection (``out_proj=False``
of ``softmax``, ``linear`` and ``relation``, Yamada et al. (2022) eqs. 4, 5 and 12 as written): its output
is then the ``inner_dim``-wide concatenation of heads (or ``R``), so ``out_dim = inner_dim``. A model that
adds the mixer's output to its input (a residual) needs ``mixer.out_dim == dim``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import ClassVar

import torch
import torch.nn as nn
from torch import Tensor

from ..registry import MixerInfo
from ..validate import is_positive_int as _positive_int

__all__ = ["Mixer", "SpatialMixer", "split_heads", "merge_heads", "rms_norm"]


def split_heads(t: Tensor, num_heads: int) -> Tensor:
    """(B, N, H*D) -> (B, H, N, D)."""
    b, n, _ = t.shape
    return t.view(b, n, num_heads, -1).transpose(1, 2)


def merge_heads(t: Tensor) -> Tensor:
    """(B, H, N, D) -> (B, N, H*D)."""
    b, h, n, d = t.shape
    return t.transpose(1, 2).reshape(b, n, h * d)




def rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    """``x`` scaled to unit root-mean-square over its last dimension, times ``weight`` (RMSNorm without a shift;
    the per-head output norm of the delta-rule, decayed-linear and Mamba-2 layers)."""
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * weight


def autocast_enabled(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` (works on torch versions before and after 2.4)."""
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4 has no device_type argument
        return torch.is_autocast_enabled() if device_type == "cuda" else torch.is_autocast_cpu_enabled()


class Mixer(nn.Module):
    """Base class of all token mixers: argument and input validation, and padding semantics.

    Subclasses implement ``_mix(x, mask)``, the fast path that :meth:`forward` runs, and
    ``_mix_reference(x, mask)``, a plain, obviously-correct computation of the same function (explicit
    N x N matrices, token-by-token loops) that :meth:`forward_reference` runs and the tests hold the fast
    path to. ``mask`` reaches both as None when there is no padding at all.
    """

    info: ClassVar[MixerInfo]
    _substitute: Callable[..., Tensor] | None = None  # see substituted_attention

    def __init__(self, dim: int, *, num_heads: int, causal: bool, max_len: int | None,
                 inner_dim: int | None = None, out_dim: int | None = None) -> None:
        """``inner_dim`` is the width split into ``num_heads`` heads (Q/K/V width of attention, d of
        Relation; default ``dim``): ``head_dim = inner_dim / num_heads``. ``out_dim`` is the output width
        (default ``dim``; see the module docstring)."""
        super().__init__()
        if not _positive_int(dim):
            self._fail(f"dim must be a positive int, got {dim!r}")
        if not _positive_int(num_heads):
            self._fail(f"num_heads must be a positive int, got {num_heads!r}")
        if inner_dim is None:
            if dim % num_heads:
                self._fail(f"dim={dim} is not divisible by num_heads={num_heads}")
            inner_dim = dim
        elif not _positive_int(inner_dim):
            self._fail(f"inner_dim must be a positive int or None, got {inner_dim!r}")
        elif inner_dim % num_heads:
            self._fail(f"inner_dim={inner_dim} is not divisible by num_heads={num_heads}")
        if out_dim is not None and not _positive_int(out_dim):
            self._fail(f"out_dim must be a positive int or None, got {out_dim!r}")
        if max_len is not None and not _positive_int(max_len):
            self._fail(f"max_len must be a positive int or None, got {max_len!r}")
        if causal and not self.info.causal:
            self._fail("causal=True is unsupported: this mechanism cannot run causally")
        if not causal and not self.info.bidirectional:
            self._fail("causal=False is unsupported: this mechanism is causal only; pass causal=True")
        self.dim = dim
        self.num_heads = num_heads
        self.inner_dim = inner_dim
        self.head_dim = inner_dim // num_heads
        self.out_dim = dim if out_dim is None else out_dim
        self.causal = bool(causal)
        self.max_len = max_len

    @property
    def name(self) -> str:
        return self.info.name

    def _fail(self, message: str, error: type[Exception] = ValueError) -> None:
        raise error(f"{self.info.name}: {message}")

    def _check_flag(self, value: object, option: str) -> None:
        """A bool option is a bool (``bias=1`` or ``out_proj="no"`` would be silently truthy or falsy)."""
        if not isinstance(value, bool):
            self._fail(f"{option} must be a bool, got {value!r}")

    @contextlib.contextmanager
    def substituted_attention(self, substitute: Callable[[Tensor, Tensor, Tensor, Tensor | None], Tensor]
                              ) -> Iterator[None]:
        """Within it, ``attend_heads`` (a mechanism with a per-head rule: Q/K/V mixers, the gated ones) returns
        ``substitute(q, k, v, mask, **gates)`` instead of this mechanism's output (its own rule stays callable as
        ``_attend(q, k, v, mask, **gates)``): how attention transfer passes a softmax teacher's output on while the
        mechanism learns beside it."""
        if self._substitute is not None:
            self._fail("substituted_attention: a substitute is already in place", RuntimeError)
        self._substitute = substitute
        try:
            yield
        finally:
            self._substitute = None

    def extra_repr(self) -> str:
        widths = "".join(f", {k}={v}" for k, v in (("inner_dim", self.inner_dim), ("out_dim", self.out_dim))
                         if v != self.dim)
        return f"dim={self.dim}{widths}, num_heads={self.num_heads}, causal={self.causal}, max_len={self.max_len}"

    # -- input checks -------------------------------------------------------------------------
    def _check_input(self, x: Tensor, mask: Tensor | None) -> Tensor | None:
        if not isinstance(x, Tensor):
            self._fail(f"x must be a torch.Tensor, got {type(x).__name__}", TypeError)
        if x.dim() != 3:
            self._fail(f"x must have shape (B, N, dim); got rank {x.dim()} with shape {tuple(x.shape)}")
        if x.shape[-1] != self.dim:
            self._fail(f"x has width {x.shape[-1]} but the mixer was built with dim={self.dim}")
        if not x.is_floating_point():
            self._fail(f"x must be a floating-point tensor, got {x.dtype}", TypeError)
        param = next(self.parameters(), None)
        if param is not None and param.dtype != x.dtype and not autocast_enabled(x.device.type):
            self._fail(f"x has dtype {x.dtype} but the parameters are {param.dtype}; cast one to the other", TypeError)
        if x.shape[0] == 0:
            self._fail("x has an empty batch (B = 0)")
        if x.shape[1] == 0:
            self._fail("x has an empty sequence (N = 0)")
        if self.max_len is not None and x.shape[1] > self.max_len and not self.info.sliding_window:
            self._fail(f"sequence length {x.shape[1]} exceeds max_len={self.max_len}")
        if mask is None:
            return None
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
            got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
            self._fail(f"mask must be a bool tensor (True = real token), got {got}", TypeError)
        if mask.shape != x.shape[:2]:
            self._fail(f"mask must have shape (B, N) = {tuple(x.shape[:2])}, got {tuple(mask.shape)}")
        if mask.device != x.device:
            self._fail(f"mask is on {mask.device} but x is on {x.device}")
        # Whether anything is padded is a value, and reading it on a GPU waits for the device: on CUDA a mask
        # goes through as given (an all-True mask gives the same output as none; the models drop such masks
        # once per batch), unless the mechanism cannot take padding and must know.
        if (mask.device.type == "cpu" or not self.info.padding) and bool(mask.all()):
            return None
        if not self.info.padding:
            self._fail("padding is unsupported by this mechanism", NotImplementedError)
        return mask

    # -- forward ------------------------------------------------------------------------------
    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """Mix tokens: ``x`` (B, N, dim) -> (B, N, out_dim); ``mask`` (B, N) bool, True = real token."""
        mask = self._check_input(x, mask)
        return self._zero_padded(self._mix(x, mask), mask)

    def forward_reference(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """The same function computed the plain way (quadratic or sequential); for tests."""
        mask = self._check_input(x, mask)
        return self._zero_padded(self._mix_reference(x, mask), mask)

    @staticmethod
    def _zero_padded(y: Tensor, mask: Tensor | None) -> Tensor:
        return y if mask is None else y.masked_fill(~mask[..., None], 0.0)

    def _mix(self, x: Tensor, mask: Tensor | None) -> Tensor:
        """The fast path: (B, N, dim), mask (B, N) or None -> (B, N, out_dim)."""
        raise NotImplementedError

    def _mix_reference(self, x: Tensor, mask: Tensor | None) -> Tensor:
        """The plain computation of :meth:`_mix`."""
        raise NotImplementedError

    # -- incremental decoding (mechanisms registered with recurrent=True) ----------------------
    def init_state(self, batch_size: int, *, device: torch.device | str | None = None,
                   dtype: torch.dtype | None = None) -> dict[str, Tensor]:
        """The decoding state before the first token: a dict of tensors, for :meth:`step`."""
        self._check_recurrent()
        if not _positive_int(batch_size):
            self._fail(f"batch_size must be a positive int, got {batch_size!r}")
        param = next(self.parameters(), None)
        device = torch.device(device) if device is not None else (param.device if param is not None else None)
        dtype = dtype or (param.dtype if param is not None else torch.get_default_dtype())
        return self._init_state(batch_size, device, dtype)

    def step(self, x_t: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """One causal step: ``x_t`` (B, dim) is the next token; returns its output (B, out_dim) and the new
        state. Feeding a sequence token by token gives the causal ``forward`` of the whole sequence."""
        self._check_recurrent()
        if not isinstance(x_t, Tensor) or x_t.dim() != 2 or x_t.shape[-1] != self.dim:
            shape = tuple(x_t.shape) if isinstance(x_t, Tensor) else type(x_t).__name__
            self._fail(f"step input must have shape (B, dim={self.dim}), got {shape}")
        self._check_input(x_t[:, None], None)  # dtype and device checks, as for forward
        return self._step(x_t, state)

    def prefill(self, x: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """Several causal steps at once: ``x`` (B, L, dim) continues the sequences ``state`` has seen; returns the
        outputs (B, L, out_dim) and the state after them, what L calls of :meth:`step` give. Mechanisms with a
        chunked form compute it in one pass (``_prefill``); the others step through the tokens."""
        self._check_recurrent()
        if not isinstance(x, Tensor) or x.dim() != 3:
            shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            self._fail(f"prefill input must have shape (B, L, dim={self.dim}), got {shape}")
        self._check_input(x, None)
        return self._prefill(x, state)

    def _prefill(self, x: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        outputs = []
        for t in range(x.shape[1]):
            y_t, state = self._step(x[:, t], state)
            outputs.append(y_t)
        return torch.stack(outputs, dim=1), state

    def _check_recurrent(self) -> None:
        if not self.info.recurrent:
            self._fail("incremental decoding (init_state/step) is unsupported by this mechanism",
                       NotImplementedError)
        if not self.causal:
            self._fail("init_state/step need a causal mixer (create it with causal=True)")

    def _init_state(self, batch_size: int, device: torch.device | None, dtype: torch.dtype) -> dict[str, Tensor]:
        raise NotImplementedError

    def _step(self, x_t: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        raise NotImplementedError


class SpatialMixer(Mixer):
    """Base of the vision mixers: ``y = mixer(x, hw=(H, W), mask=None)`` with ``x`` of shape
    ``(B, H*W, dim)``, the grid flattened row by row. A missing ``hw`` or ``H * W != N`` is an error.

    Subclasses implement ``_mix_spatial(x, hw, mask)`` and ``_mix_spatial_reference(x, hw, mask)``; ``x``
    arrives as (B, N, dim).
    """

    def check_hw(self, x: Tensor | None, hw: tuple[int, int] | None) -> tuple[int, int]:
        """``hw`` as ``(H, W)`` positive ints with ``H * W`` = the tokens of ``x`` (unchecked when ``x`` is None);
        else ``ValueError`` naming the mechanism."""
        if hw is None:
            self._fail("needs the grid size: call mixer(x, hw=(H, W))")
        if (not isinstance(hw, (tuple, list)) or len(hw) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in hw)):
            self._fail(f"hw must be a pair of positive ints (H, W), got {hw!r}")
        if isinstance(x, Tensor) and x.dim() == 3 and hw[0] * hw[1] != x.shape[1]:
            self._fail(f"hw={tuple(hw)} has {hw[0] * hw[1]} cells but x has N={x.shape[1]} tokens")
        return int(hw[0]), int(hw[1])

    def forward(self, x: Tensor, mask: Tensor | None = None, *, hw: tuple[int, int] | None = None) -> Tensor:
        """``x`` (B, H*W, dim) on the grid ``hw`` -> (B, H*W, dim)."""
        mask = self._check_input(x, mask)
        hw = self.check_hw(x, hw)
        return self._zero_padded(self._mix_spatial(x, hw, mask), mask)

    def forward_reference(self, x: Tensor, mask: Tensor | None = None, *,
                          hw: tuple[int, int] | None = None) -> Tensor:
        """The same function computed the plain way (dense masked attention); for tests."""
        mask = self._check_input(x, mask)
        hw = self.check_hw(x, hw)
        return self._zero_padded(self._mix_spatial_reference(x, hw, mask), mask)

    def _mix(self, x: Tensor, mask: Tensor | None) -> Tensor:
        self._fail("is spatial and needs hw")
        raise AssertionError  # unreachable

    _mix_reference = _mix

    def _mix_spatial(self, x: Tensor, hw: tuple[int, int], mask: Tensor | None) -> Tensor:
        """The fast path on the ``hw`` grid: (B, H*W, dim) -> (B, H*W, dim)."""
        raise NotImplementedError

    def _mix_spatial_reference(self, x: Tensor, hw: tuple[int, int], mask: Tensor | None) -> Tensor:
        """The plain computation of :meth:`_mix_spatial`."""
        raise NotImplementedError
