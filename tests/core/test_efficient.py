"""Tests of the "efficient" mixer (Shen et al. 2021: E(Q,K,V) = rho_q(Q) (rho_k(K)^T V))."""

from __future__ import annotations

import pytest
import torch

from conftest import assert_matches_reference, assert_padding_invisible, lengths_mask
from tokenmix import create_mixer, mixer_info
from tokenmix.mixers.base import merge_heads
from tokenmix.mixers.efficient import EfficientAttention, masked_softmax_over_positions

DIM = 8


def make(seed: int = 0, dtype: torch.dtype = torch.float64, num_heads: int = 2, **kw) -> EfficientAttention:
    torch.manual_seed(seed)
    return EfficientAttention(DIM, num_heads=num_heads, **kw).to(dtype)




@pytest.mark.parametrize("num_heads", [1, 2])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_fast_matches_reference(num_heads, masked, bias):
    m = make(num_heads=num_heads, bias=bias)
    torch.manual_seed(1)
    n = 12
    x = torch.randn(3, n, DIM, dtype=torch.float64)
    mask = lengths_mask([12, 7, 2], n) if masked else None
    assert_matches_reference(m, x, mask, rtol=1e-9, atol=1e-11)


def test_matches_formula():
    """rho_q = row softmax over features, rho_k = column softmax over positions, per head; no scaling."""
    m = make()
    torch.manual_seed(2)
    x = torch.randn(2, 6, DIM, dtype=torch.float64)
    q, k, v = m.qkv_heads(x)
    out = torch.empty_like(v)
    for b in range(2):
        for h in range(2):
            rq = torch.exp(q[b, h]) / torch.exp(q[b, h]).sum(dim=1, keepdim=True)
            rk = torch.exp(k[b, h]) / torch.exp(k[b, h]).sum(dim=0, keepdim=True)
            out[b, h] = rq @ (rk.T @ v[b, h])
    torch.testing.assert_close(m(x), m.proj(merge_heads(out)))


def test_padding_invariance_and_equals_alone():
    m = make()
    n, lengths = 10, [10, 6, 1]
    mask = lengths_mask(lengths, n)
    torch.manual_seed(3)
    assert_padding_invisible(m, torch.randn(3, n, DIM, dtype=torch.float64), mask, scale=1e3)


@pytest.mark.parametrize("reference", [False, True])
def test_all_padding_row_gives_zeros_without_nan(reference):
    m = make()
    x = torch.randn(2, 5, DIM, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True, True, True, False, False], [False] * 5])
    y = m.forward_reference(x, mask) if reference else m(x, mask)
    assert torch.isfinite(y).all() and torch.all(y[1] == 0)
    (y * torch.randn_like(y)).sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters())


def test_masked_softmax_over_positions():
    torch.manual_seed(4)
    k = (10 * torch.randn(2, 1, 4, 3, dtype=torch.float64)).requires_grad_(True)
    mask = torch.tensor([[True, False, True, False], [False] * 4])
    p = masked_softmax_over_positions(k, mask)
    assert torch.all(p[1] == 0)  # no real key: zeros, not NaN
    assert torch.all(p[0, :, [1, 3]] == 0)  # padded keys get weight exactly 0
    torch.testing.assert_close(p[0].sum(dim=1), torch.ones(1, 3, dtype=torch.float64))
    torch.testing.assert_close(p[0, :, [0, 2]], torch.softmax(k[0, :, [0, 2]], dim=1))
    (p * torch.randn_like(p)).sum().backward()
    assert torch.isfinite(k.grad).all() and torch.all(k.grad[1] == 0) and torch.all(k.grad[0, :, [1, 3]] == 0)


def test_causal_raises():
    with pytest.raises(ValueError, match="efficient"):
        EfficientAttention(DIM, causal=True)
    with pytest.raises(ValueError, match="efficient"):
        create_mixer("efficient", DIM, causal=True)


def test_parameters_and_registry():
    assert sum(p.numel() for p in EfficientAttention(DIM, num_heads=2).parameters()) == 4 * DIM * DIM
    assert sum(p.numel() for p in EfficientAttention(DIM, bias=True).parameters()) == 4 * DIM * DIM + 4 * DIM
    info = mixer_info("efficient")
    assert not info.causal and info.bidirectional and info.padding and not info.needs_max_len
    assert info.complexity == "O(N d^2)"
    assert set(info.options) == {"bias"}
