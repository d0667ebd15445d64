"""The SHE's FFT convolution with its hand-written backward (tokenmix.ops.fft_conv)."""

from __future__ import annotations

import pytest
import torch

from tokenmix.ops.fft_conv import (
    block_conv_matrix,
    block_conv_matrix_reference,
    causal_conv_matrix_fft,
)


def literal_causal_conv(u: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """y_i = sum_{k < K, k <= i} u_{i-k} @ w[k], one term at a time."""
    y = torch.zeros_like(u)
    for i in range(u.shape[1]):
        for k in range(min(i + 1, w.shape[0])):
            y[:, i] += u[:, i - k] @ w[k]
    return y


@pytest.mark.parametrize("rows,block,taps,dim,n_fft", [(3, 5, 4, 3, 8), (2, 7, 7, 4, 16), (1, 4, 9, 2, 12)])
def test_block_conv_matches_autograd_reference_and_gradcheck(rows, block, taps, dim, n_fft):
    torch.manual_seed(0)
    blocks = torch.randn(rows, block, dim, dtype=torch.float64, requires_grad=True)
    w = torch.randn(taps, dim, dim, dtype=torch.float64, requires_grad=True)
    fast, ref = block_conv_matrix(blocks, w, n_fft), block_conv_matrix_reference(blocks, w, n_fft)
    torch.testing.assert_close(fast, ref, rtol=1e-12, atol=1e-12)
    grads_fast = torch.autograd.grad(fast.sin().sum(), (blocks, w))
    grads_ref = torch.autograd.grad(ref.sin().sum(), (blocks, w))
    for a, b in zip(grads_fast, grads_ref):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradcheck(lambda b, w: block_conv_matrix(b, w, n_fft), (blocks, w))


@pytest.mark.parametrize("batch,n,taps,block", [(2, 10, 4, None), (1, 7, 7, None), (1, 9, 16, None),
                                                (2, 13, 5, 2), (1, 20, 8, 3), (1, 5, 8, 8), (3, 6, 1, None)])
def test_causal_conv_equals_the_literal_sum(batch, n, taps, block):
    torch.manual_seed(1)
    u = torch.randn(batch, n, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(taps, 3, 3, dtype=torch.float64, requires_grad=True)
    fast, ref = causal_conv_matrix_fft(u, w, block), literal_causal_conv(u, w)
    torch.testing.assert_close(fast, ref, rtol=1e-10, atol=1e-12)
    probe = torch.randn_like(ref)
    grads_fast = torch.autograd.grad((fast * probe).sum(), (u, w))
    for a, b in zip(grads_fast, torch.autograd.grad((ref * probe).sum(), (u, w))):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_short_blocks_are_chosen_when_the_taps_dominate():
    """With few rows the default block is K/4 (FFT length ~1.25 K instead of ~2 K); the result is the same."""
    torch.manual_seed(2)
    u, w = torch.randn(1, 32, 2, dtype=torch.float64), torch.randn(32, 2, 2, dtype=torch.float64)
    torch.testing.assert_close(causal_conv_matrix_fft(u, w), causal_conv_matrix_fft(u, w, block=32))


def test_bad_arguments_are_refused():
    blocks, w = torch.randn(1, 4, 3), torch.randn(2, 3, 3)
    with pytest.raises(ValueError, match="wrap"):
        block_conv_matrix(blocks, w, 4)
    with pytest.raises(ValueError, match=r"\(K, d, d\)"):
        block_conv_matrix(blocks, torch.randn(2, 3, 2), 8)
    with pytest.raises(TypeError, match="dtype"):
        block_conv_matrix(blocks, w.double(), 8)

