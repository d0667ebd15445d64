"""Tests of the "cosformer" mixer (Qin et al. 2022: ReLU kernel with cos-based re-weighting)."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import assert_matches_reference, assert_padding_invisible, lengths_mask
from tokenmix import create_mixer, mixer_info
from tokenmix.mixers.base import merge_heads
from tokenmix.mixers.cosformer import CosFormer

DIM, HEADS, MAX_LEN = 8, 2, 24


def make(seed: int = 0, dtype: torch.dtype = torch.float64, **kw) -> CosFormer:
    torch.manual_seed(seed)
    kw.setdefault("num_heads", HEADS)
    if kw.get("causal"):
        kw.setdefault("max_len", MAX_LEN)
    return CosFormer(DIM, **kw).to(dtype)


CONFIGS = [(False, None), (True, None), (True, 1), (True, 3), (True, 16)]  # (causal, chunk_size)


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("causal,chunk_size", CONFIGS)
def test_fast_matches_reference(causal, chunk_size, masked):
    m = make(causal=causal, chunk_size=chunk_size)
    torch.manual_seed(1)
    n = 20
    x = torch.randn(3, n, DIM, dtype=torch.float64)
    mask = lengths_mask([20, 13, 4], n) if masked else None
    assert_matches_reference(m, x, mask)


def direct(m: CosFormer, x: torch.Tensor, lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Independent computation: w_ij = ReLU(q_i).ReLU(k_j) cos(pi/2 (i-j)/M), then normalised attention.

    Returns the (B, H, N, N) weight matrix (zero where not allowed) and the mixer output.
    """
    b, n, _ = x.shape
    q, k, v = m.qkv_heads(x)
    i = torch.arange(n, dtype=torch.float64)
    w = torch.zeros(b, HEADS, n, n, dtype=torch.float64)
    for row, length in enumerate(lengths):
        horizon = m.max_len if m.causal else length
        cos = torch.cos(math.pi / 2 * (i[:, None] - i[None, :]) / horizon)
        w[row] = (torch.relu(q[row]) @ torch.relu(k[row]).transpose(-2, -1)) * cos
        w[row, :, :, length:] = 0.0  # padded keys
        if m.causal:
            w[row] = w[row].tril()
    out = (w @ v) / (w.sum(-1, keepdim=True) + m.eps)
    y = m.proj(merge_heads(out))
    y = y * lengths_mask(lengths, n)[..., None]
    return w, y


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_decomposition_matches_direct_cos_reweighting(causal, masked):
    m = make(causal=causal)
    torch.manual_seed(2)
    n = 11
    lengths = [11, 7, 1] if masked else [11, 11, 11]
    x = torch.randn(3, n, DIM, dtype=torch.float64)
    mask = lengths_mask(lengths, n) if masked else None
    w_direct, y_direct = direct(m, x, lengths)

    # the feature map reproduces the weight matrix exactly on the allowed (real query, real key) pairs
    q, k, _ = m.qkv_heads(x)
    phi_q, phi_k, scale = m._features(q, k, mask)
    assert scale is None and phi_q.shape[-1] == 2 * (DIM // HEADS)
    w_feat = phi_q @ phi_k.transpose(-2, -1)
    real = lengths_mask(lengths, n)
    allowed = real[:, None, :, None] & real[:, None, None, :]
    if causal:
        allowed = allowed & torch.ones(n, n, dtype=torch.bool).tril()
    allowed = allowed.expand(-1, HEADS, -1, -1)
    torch.testing.assert_close(w_feat[allowed], w_direct[allowed], rtol=1e-10, atol=1e-12)
    assert torch.all(w_direct[allowed] >= 0)  # angle within [0, pi/2): weights non-negative

    torch.testing.assert_close(m.forward_reference(x, mask), y_direct, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(m(x, mask), y_direct, rtol=1e-9, atol=1e-11)


def test_reweighting_changes_the_output():
    """The cos re-weighting is not a no-op: plain ReLU linear attention differs."""
    m = make()
    torch.manual_seed(3)
    x = torch.randn(1, 16, DIM, dtype=torch.float64)
    q, k, v = m.qkv_heads(x)
    w = torch.relu(q) @ torch.relu(k).transpose(-2, -1)
    plain = m.proj(merge_heads((w @ v) / (w.sum(-1, keepdim=True) + m.eps)))
    assert (m(x) - plain).abs().max() > 1e-3


@pytest.mark.parametrize("chunk_size", [None, 1, 3])
def test_causal_no_leak(chunk_size):
    m = make(causal=True, chunk_size=chunk_size)
    n = 7
    torch.manual_seed(4)
    x = torch.randn(1, n, DIM, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda t: m(t), x)[0, :, :, 0]  # (N, dim, N, dim)
    for i in range(n):
        assert torch.all(jac[i, :, i + 1:] == 0), f"output {i} depends on a later input"


@pytest.mark.parametrize("causal", [False, True])
def test_padding_invariance_and_equals_alone(causal):
    m = make(causal=causal, chunk_size=3 if causal else None)
    n, lengths = 10, [10, 6, 1]
    mask = lengths_mask(lengths, n)
    torch.manual_seed(5)
    assert_padding_invisible(m, torch.randn(3, n, DIM, dtype=torch.float64), mask, scale=1e3)


def test_left_padding_equals_alone():
    """Positions count real tokens, so padding before the sequence changes nothing either."""
    m = make()
    torch.manual_seed(6)
    assert_padding_invisible(m, torch.randn(2, 9, DIM, dtype=torch.float64), lengths_mask([6, 2], 9, left=True))


def test_all_padding_row_is_zero():
    m = make()
    x = torch.randn(2, 5, DIM, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True] * 5, [False] * 5])
    y = m(x, mask)
    assert torch.all(y[1] == 0) and torch.isfinite(y).all()
    y.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_causal_needs_max_len():
    msg = "cosformer: causal=True needs max_len (the re-weighting horizon M)"
    with pytest.raises(ValueError) as err:
        CosFormer(DIM, causal=True)
    assert str(err.value) == msg
    with pytest.raises(ValueError, match=r"cosformer: causal=True needs max_len"):
        create_mixer("cosformer", DIM, causal=True)
    assert create_mixer("cosformer", DIM, causal=True, max_len=8).max_len == 8


def test_other_errors():
    with pytest.raises(ValueError, match=r"cosformer.*exceeds max_len"):
        make(causal=True, max_len=6)(torch.randn(1, 7, DIM, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"cosformer.*chunk_size"):
        CosFormer(DIM, chunk_size=4)


def test_parameters_and_registry():
    assert sum(p.numel() for p in CosFormer(DIM, num_heads=HEADS).parameters()) == 4 * DIM * DIM
    assert sum(p.numel() for p in CosFormer(DIM, bias=True).parameters()) == 4 * DIM * DIM + 4 * DIM
    info = mixer_info("cosformer")
    assert info.causal and info.bidirectional and info.padding and info.needs_max_len  # when causal
    assert info.complexity == "O(N d^2)"
    assert set(info.options) == {"bias", "chunk_size", "eps"}
