"""Linear convolution with matrix taps by FFT, with a hand-written backward (the SHE's fast path).

``block_conv_matrix(blocks, w, n_fft)`` computes, for every row ``r`` of ``blocks`` (R, P, d) and every
output position ``i < n_fft``, ``out[r, i] = sum_k blocks[r, i - k] @ w[k]`` with ``w`` (K, d, d) and
zeros outside the block: the full linear convolution when ``n_fft >= P + K - 1`` (no circular wrap).

Why a custom autograd function: letting autograd differentiate ``rfft(w) -> per-frequency matmul -> irfft``
costs far more than the forward on CPU, because the backward of ``rfft`` runs a complex-to-complex FFT of
the zero-filled full spectrum of all ``d^2`` tap channels, and the backward of a complex ``bmm`` copies
per frequency. Written out, both gradients are correlations and cost one FFT each:

* ``d blocks[r, j] = sum_k g[r, j + k] @ w[k]^T``: spectrum ``G(f) conj(W(f))^T``;
* ``d w[k] = sum_r sum_j blocks[r, j]^T g[r, j + k]``: spectrum ``sum_r conj(X_r(f))^T G_r(f)``,

exact (no wrap) for the lags ``0 <= k < K`` because ``n_fft >= P + K - 1``. The complex products are done
as real ``bmm``s against the tap spectrum seen as a real matrix (see :class:`_BlockConvMatrix`), so no
large tensor is ever transposed. The tap spectrum is computed once in the forward and kept for the
backward (``2 (n_fft/2 + 1) d^2`` floats), instead of being transformed twice.

:func:`block_conv_matrix_reference` is the same computation left to autograd (for the tests).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["block_conv_matrix", "block_conv_matrix_reference", "causal_conv_matrix_fft", "fft_size", "to_blocks",
           "overlap_add"]


def fft_size(n: int) -> int:
    """The smallest 2^a 3^b 5^c >= n (a length pocketfft transforms quickly)."""
    best = 1 << max(n - 1, 0).bit_length()
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            m = p35
            while m < n:
                m *= 2
            best = min(best, m)
            p35 *= 3
        p5 *= 5
    return best


def causal_conv_matrix_fft(u: Tensor, w: Tensor, block: int | None = None) -> Tensor:
    """``y_i = sum_{k < K} u_{i-k} @ w[k]`` (zeros before the start) by overlap-add block FFT.

    u (B, N, d), w (K, d, d). The sequence is cut into blocks of ``P`` positions; each block's full linear
    convolution (``P + K - 1`` samples, FFT length ``fft_size(P + K - 1)``) is added at its offset. ``P``
    defaults to ``K // 4`` when there are few rows to convolve (``B * N <= 2 K``: the transform of the
    ``d^2`` tap channels dominates and shorter blocks shrink it from length ~2K to ~1.25K), else ``K``.
    """
    b, n, d = u.shape
    k = w.shape[0]
    p = block or (max(1, k // 4) if b * n <= 2 * k else k)
    n_fft = fft_size(p + k - 1)
    segments = -(-(p + k - 1) // p)  # each block's output spans this many blocks
    blocks = to_blocks(u, p)
    out = block_conv_matrix(blocks.flatten(0, 1), w, n_fft)[:, : segments * p]
    if n_fft < segments * p:
        out = torch.nn.functional.pad(out, (0, 0, 0, segments * p - n_fft))
    return overlap_add(out.view(blocks.shape[0], blocks.shape[1], segments * p, d), p, n)


def to_blocks(u: Tensor, p: int) -> Tensor:
    """(B, N, d) -> (B, nb, P, d): blocks of ``P`` positions, the last one zero-padded."""
    b, n, d = u.shape
    nb = -(-n // p)
    return torch.nn.functional.pad(u, (0, 0, 0, nb * p - n)).view(b, nb, p, d)


def overlap_add(out: Tensor, p: int, n: int) -> Tensor:
    """The outputs of the blocks of :func:`to_blocks`, (B, nb, S P, d), block ``j``'s starting at position
    ``j P``, summed into the first ``n`` positions of the sequence: (B, n, d)."""
    b, nb, length, d = out.shape
    segments = length // p
    out = out.view(b, nb, segments, p, d)
    y = out[:, :, 0]
    for s in range(1, min(segments, nb)):  # the tail of block j lands on block j + s
        y = y + torch.nn.functional.pad(out[:, : nb - s, s], (0, 0, 0, 0, s, 0))
    return y.reshape(b, nb * p, d)[:, :n]


def _stack_real_imag(spec: Tensor) -> Tensor:
    """(R, F, d) complex -> (F, 2R, d) real: the real parts of all rows, then their imaginary parts."""
    r, f, d = spec.shape
    return torch.view_as_real(spec).permute(1, 3, 0, 2).reshape(f, 2 * r, d)


def _interleave(a: Tensor, b: Tensor) -> Tensor:
    """(F, R, d) and (F, R, d) -> (F, R, 2d) with columns a_0, b_0, a_1, b_1, ..."""
    return torch.stack([a, b], dim=-1).flatten(-2)


class _BlockConvMatrix(torch.autograd.Function):
    """The tap spectrum ``W(f)`` (F, d, d) complex is used as the real (F, d, 2d) matrix ``W2`` whose
    columns interleave real and imaginary parts (its ``view_as_real``, no copy). Every complex product
    then is one real ``bmm`` against ``W2`` with the few data rows arranged around it:

    * forward ``X W``: ``[Xr; Xi] @ W2`` gives ``Xr W`` and ``Xi W`` interleaved; ``XW = XrW + i XiW``;
    * ``G conj(W)^T``: ``W2 @ [Gr, Gi | Gi, -Gr]`` (interleaved columns) gives its real and imaginary parts;
    * ``sum_r conj(X_r)^T G_r``: ``[Xr; Xi]^T @ [Gr, Gi; Gi, -Gr]`` gives ``dW(f)`` already interleaved,
      i.e. as the ``view_as_real`` of the complex spectrum that ``irfft`` takes.
    """

    @staticmethod
    def forward(ctx, blocks: Tensor, w: Tensor, n_fft: int) -> Tensor:  # type: ignore[override]
        r, _, d = blocks.shape
        x = _stack_real_imag(torch.fft.rfft(blocks, n=n_fft, dim=1))  # (F, 2R, d): [Xr; Xi]
        f = x.shape[0]
        w2 = torch.view_as_real(torch.fft.rfft(w, n=n_fft, dim=0)).reshape(f, d, 2 * d)
        prod = (x @ w2).view(f, 2 * r, d, 2)  # rows [Xr W; Xi W], (re, im) last
        re = prod[:, :r, :, 0] - prod[:, r:, :, 1]
        im = prod[:, :r, :, 1] + prod[:, r:, :, 0]
        ctx.save_for_backward(x, w2)
        ctx.block, ctx.taps = blocks.shape[1], w.shape[0]
        ctx.n_fft = n_fft
        return torch.fft.irfft(torch.complex(re, im).transpose(0, 1), n=n_fft, dim=1)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None]:  # type: ignore[override]
        x, w2 = ctx.saved_tensors
        n_fft = ctx.n_fft
        f, two_r, d = x.shape
        r = two_r // 2
        g = _stack_real_imag(torch.fft.rfft(grad, n=n_fft, dim=1))  # (F, 2R, d): [Gr; Gi]
        g_re, g_im = g[:, :r], g[:, r:]
        # rows r: [Gr_e, Gi_e] interleaved, rows R + r: [Gi_e, -Gr_e]; both gradients multiply by it
        g2 = torch.cat([_interleave(g_re, g_im), _interleave(g_im, -g_re)], dim=1)  # (F, 2R, 2d)
        d_blocks = d_w = None
        if ctx.needs_input_grad[0]:
            du = w2 @ g2.transpose(1, 2)  # (F, d, 2R): real parts in columns r, imaginary in R + r
            spec = torch.complex(du[:, :, :r], du[:, :, r:]).permute(2, 0, 1)  # (R, F, d)
            d_blocks = torch.fft.irfft(spec, n=n_fft, dim=1)[:, : ctx.block]
        if ctx.needs_input_grad[1]:
            spec = torch.view_as_complex((x.transpose(1, 2) @ g2).view(f, d, d, 2))  # (F, d, d)
            d_w = torch.fft.irfft(spec, n=n_fft, dim=0)[: ctx.taps]
        return d_blocks, d_w, None


def block_conv_matrix(blocks: Tensor, w: Tensor, n_fft: int) -> Tensor:
    """``out[r, i] = sum_k blocks[r, i - k] @ w[k]`` for ``i < n_fft``; blocks (R, P, d), w (K, d, d),
    real, same dtype; ``n_fft >= P + K - 1``. Returns (R, n_fft, d)."""
    _check(blocks, w, n_fft)
    return _BlockConvMatrix.apply(blocks, w, n_fft)


def block_conv_matrix_reference(blocks: Tensor, w: Tensor, n_fft: int) -> Tensor:
    """The same, written with ``torch.fft`` and a complex matmul, differentiated by autograd."""
    _check(blocks, w, n_fft)
    spec = torch.fft.rfft(blocks, n=n_fft, dim=1)  # (R, F, d)
    taps = torch.fft.rfft(w, n=n_fft, dim=0)  # (F, d, d)
    y = (spec.transpose(0, 1) @ taps).transpose(0, 1)
    return torch.fft.irfft(y, n=n_fft, dim=1)


def _check(blocks: Tensor, w: Tensor, n_fft: int) -> None:
    if blocks.dim() != 3 or w.dim() != 3 or w.shape[1:] != (blocks.shape[2], blocks.shape[2]):
        raise ValueError(f"block_conv_matrix: blocks must be (R, P, d) and w (K, d, d); got "
                         f"{tuple(blocks.shape)} and {tuple(w.shape)}")
    if blocks.dtype != w.dtype or blocks.is_complex():
        raise TypeError(f"block_conv_matrix: blocks and w must share a real dtype; got {blocks.dtype}, {w.dtype}")
    if n_fft < blocks.shape[1] + w.shape[0] - 1:
        raise ValueError(f"block_conv_matrix: n_fft={n_fft} < P + K - 1 = {blocks.shape[1] + w.shape[0] - 1} "
                         "would wrap around")
