"""A causal convolution over the last ``K`` inputs (an FIR filter) as functions with a state, in the conventions of
the other :mod:`tokenmix.ops` forms (``(o, final_state)``): the Extractors' extraction (Chen 2023, "Attention Is Not
All You Need Anymore", §5, eqs. 23, 26, 27 and 29: ``e_i = sum_{k=1}^{K} u_{i-k+1} (x) w_k``) and BaseConv's short
filter (Arora et al. 2023, "Zoology", §5: a depthwise filter of ``K`` taps).

``weight[k]`` is the tap ``k`` positions back (``weight[0]`` meets the current input): ``(K,)`` one scalar per tap
(the ME), ``(K, D)`` one per channel (the HE, the WE, BaseConv's depthwise filter) or ``(K, D, D)`` a matrix (the
SHE: ``u_j @ weight[k]``). The state is the last ``K - 1`` inputs in position order, oldest first, zeros before the
first token (B, K - 1, D): a fixed size, and a zero state is "no tokens seen". Three forms compute the same thing:

* :func:`naive_causal_conv`: the double sum, one term at a time (the reference);
* :func:`fused_recurrent_causal_conv`: the shift register decoding runs, O(K D) per token (O(K D^2) for matrices);
* :func:`chunk_causal_conv`: the whole sequence at once, the state's inputs put before it, by ``conv1d``
  (:func:`conv_direct`) or overlap-add FFT (:func:`conv_fft`), chosen by :func:`choose_path`.

``x`` (B, T, D); ``bias`` (D,) added to every output. Half-precision inputs convolve in float32 on the CPU (see
:func:`conv_direct`); the output has the input's dtype, the state too.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .fft_conv import causal_conv_matrix_fft, fft_size, overlap_add, to_blocks

__all__ = ["naive_causal_conv", "fused_recurrent_causal_conv", "chunk_causal_conv", "conv_direct", "conv_fft",
           "conv_reference", "apply_taps", "choose_path", "taps_kind", "FFT_MIN_TAPS"]

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


def apply_taps(window: Tensor, w: Tensor, kind: str) -> Tensor:
    """``sum_k window[:, k] (x) w[k]``: window (B, K, d), w (K, ...) -> (B, d)."""
    if kind == "matrix":  # one (B, K d) x (K d, d) product: einsum would copy the K d x d taps per call
        return window.reshape(window.shape[0], -1) @ w.reshape(-1, w.shape[-1])
    if kind == "vector":
        return (window * w).sum(1)
    return torch.einsum("bkc,k->bc", window, w)


def conv_direct(u: Tensor, w: Tensor, kind: str) -> Tensor:
    """Causal convolution ``y_i = sum_k u_{i-k} (x) w[k]`` (k = 0..K-1) with conv1d; u (B, N, d).

    On the CPU, half-precision inputs are convolved in float32 and the result cast back: PyTorch 2.13's
    bfloat16 conv1d returns wrong values for some shapes on CPUs with AMX (16 taps over 6 channels: errors as
    large as the outputs), and its float16 conv1d is orders of magnitude slower there."""
    if u.device.type == "cpu" and u.dtype in (torch.float16, torch.bfloat16):
        with torch.autocast(device_type="cpu", enabled=False):
            return conv_direct(u.float(), w.float(), kind).to(u.dtype)
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
    """:func:`conv_direct` for d x d taps, tiled: blocks of up to ``_MATRIX_TILE`` outputs (moved into the
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


def conv_fft(u: Tensor, w: Tensor, kind: str) -> Tensor:
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


def conv_reference(u: Tensor, w: Tensor, kind: str) -> Tensor:
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


def taps_kind(weight: Tensor) -> str:
    """``"scalar"`` (K,), ``"vector"`` (K, D) or ``"matrix"`` (K, D, D) taps."""
    return {1: "scalar", 2: "vector", 3: "matrix"}[weight.dim()]


def _check(name: str, x: Tensor, weight: Tensor, bias: Tensor | None, initial_state: Tensor | None) -> None:
    where = f"tokenmix.ops.causal_conv.{name}"
    if x.dim() != 3:
        raise ValueError(f"{where}: x must be (B, T, D), got {tuple(x.shape)}")
    b, _, d = x.shape
    shapes = {1: (weight.shape[0],), 2: (weight.shape[0], d), 3: (weight.shape[0], d, d)}
    if weight.dim() not in shapes or tuple(weight.shape) != shapes[weight.dim()] or weight.shape[0] < 1:
        raise ValueError(f"{where}: weight must be (K,), (K, D) or (K, D, D) taps with D = {d} and K >= 1, got "
                         f"{tuple(weight.shape)}")
    if bias is not None and tuple(bias.shape) != (d,):
        raise ValueError(f"{where}: bias must be (D,) = ({d},), got {tuple(bias.shape)}")
    want = (b, weight.shape[0] - 1, d)
    if initial_state is not None and tuple(initial_state.shape) != want:
        raise ValueError(f"{where}: initial_state must be the last K - 1 inputs, (B, K - 1, D) = {want}, got "
                         f"{tuple(initial_state.shape)}")


def _with_state(x: Tensor, weight: Tensor, initial_state: Tensor | None) -> Tensor:
    """The state's inputs, then ``x`` (zeros where there is no state: the same outputs)."""
    state = x.new_zeros(x.shape[0], weight.shape[0] - 1, x.shape[2]) if initial_state is None else initial_state
    return torch.cat([state.to(x.dtype), x], dim=1)


def _out(y: Tensor, bias: Tensor | None, like: Tensor) -> Tensor:
    return (y if bias is None else y + bias.to(y.dtype)).to(like.dtype)


def naive_causal_conv(x: Tensor, weight: Tensor, bias: Tensor | None = None, initial_state: Tensor | None = None,
                      output_final_state: bool = False) -> tuple[Tensor, Tensor | None]:
    """The reference: :func:`conv_reference`, the double sum term by term, over the state's inputs and ``x``."""
    _check("naive_causal_conv", x, weight, bias, initial_state)
    u = _with_state(x, weight, initial_state)
    kept = u.shape[1] - x.shape[1]
    y = conv_reference(u, weight, taps_kind(weight))[:, kept:]
    return _out(y, bias, x), (u[:, u.shape[1] - kept:] if output_final_state else None)


def fused_recurrent_causal_conv(x: Tensor, weight: Tensor, bias: Tensor | None = None,
                                initial_state: Tensor | None = None,
                                output_final_state: bool = False) -> tuple[Tensor, Tensor | None]:
    """The recurrence decoding runs: per token, the last ``K`` inputs (the state and the token) times the taps."""
    _check("fused_recurrent_causal_conv", x, weight, bias, initial_state)
    kind, taps = taps_kind(weight), weight.shape[0]
    window = _with_state(x[:, :0], weight, initial_state)  # (B, K - 1, D)
    oldest_first = weight.to(x.dtype).flip(0)  # taps in the window's order: flipped once, not the window per token
    outputs = []
    for t in range(x.shape[1]):
        window = torch.cat([window, x[:, t:t + 1]], dim=1)  # inputs t - K + 1 .. t
        outputs.append(apply_taps(window, oldest_first, kind))
        window = window[:, 1:]
    y = torch.stack(outputs, dim=1) if outputs else x.new_zeros(x.shape)
    return _out(y, bias, x), (window[:, window.shape[1] - (taps - 1):] if output_final_state else None)


def chunk_causal_conv(x: Tensor, weight: Tensor, bias: Tensor | None = None, initial_state: Tensor | None = None,
                      output_final_state: bool = False, *, path: str = "auto") -> tuple[Tensor, Tensor | None]:
    """The whole sequence at once (training and prefill): the state's inputs put before ``x``, then
    :func:`conv_direct` or :func:`conv_fft` (``path``: "direct", "fft" or "auto", :func:`choose_path`)."""
    _check("chunk_causal_conv", x, weight, bias, initial_state)
    if path not in ("auto", "direct", "fft"):
        raise ValueError(f"tokenmix.ops.causal_conv.chunk_causal_conv: path must be 'auto', 'direct' or 'fft', got "
                         f"{path!r}")
    kind = taps_kind(weight)
    u = _with_state(x, weight, initial_state)
    kept = u.shape[1] - x.shape[1]
    if x.shape[1] == 0:
        y = x.new_zeros(x.shape)
    else:
        conv = conv_fft if choose_path(path, u.shape[1], weight.shape[0], kind) == "fft" else conv_direct
        y = conv(u, weight, kind)[:, kept:]
    return _out(y, bias, x), (u[:, u.shape[1] - kept:] if output_final_state else None)
