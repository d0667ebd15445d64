"""Tests of the "kerformer" mixer (Gan et al. 2023, eqs. 7-9 and SE-K of §3.5)."""

from __future__ import annotations

import itertools

import pytest
import torch

from conftest import assert_matches_reference, assert_padding_invisible, lengths_mask
from tokenmix import create_mixer, mixer_info
from tokenmix.mixers.base import merge_heads
from tokenmix.mixers.kerformer import Kerformer

DIM, HEADS, MAX_LEN = 8, 2, 12
ACTS = list(itertools.product([True, False], repeat=2))  # (q_act, k_act)


def make(seed: int = 0, dtype: torch.dtype = torch.float64, **kw) -> Kerformer:
    torch.manual_seed(seed)
    kw.setdefault("num_heads", HEADS)
    kw.setdefault("max_len", MAX_LEN)
    return Kerformer(DIM, **kw).to(dtype)


# ---- fast path == reference ---------------------------------------------------------------------
CONFIGS = [
    # (q_act, k_act, se_k, sek_input, causal, chunk_size)
    *[(qa, ka, True, si, False, None) for (qa, ka), si in itertools.product(ACTS, ["keys", "activated"])],
    *[(qa, ka, False, "keys", False, None) for qa, ka in ACTS],
    *[(qa, ka, False, "keys", True, cs) for (qa, ka), cs in itertools.product(ACTS, [None, 3])],
]


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("q_act,k_act,se_k,sek_input,causal,chunk_size", CONFIGS)
def test_fast_matches_reference(q_act, k_act, se_k, sek_input, causal, chunk_size, masked):
    m = make(q_act=q_act, k_act=k_act, se_k=se_k, sek_input=sek_input, causal=causal, chunk_size=chunk_size)
    torch.manual_seed(1)
    n = 10
    x = torch.randn(3, n, DIM, dtype=torch.float64)
    mask = lengths_mask([10, 6, 3], n) if masked else None
    assert_matches_reference(m, x, mask)


# ---- padding ------------------------------------------------------------------------------------
@pytest.mark.parametrize("q_act,k_act,se_k,causal,sek_input", [
    (True, True, True, False, "keys"), (False, True, True, False, "keys"), (True, False, True, False, "keys"),
    (True, True, True, False, "activated"), (True, False, True, False, "activated"),
    (True, True, False, False, "keys"), (True, True, False, True, "keys"), (False, False, False, True, "keys"),
])
def test_padding_invariance_and_equals_alone(q_act, k_act, se_k, causal, sek_input):
    m = make(q_act=q_act, k_act=k_act, se_k=se_k, causal=causal, sek_input=sek_input)
    n, lengths = 9, [9, 5, 2]
    mask = lengths_mask(lengths, n)
    torch.manual_seed(2)
    assert_padding_invisible(m, torch.randn(3, n, DIM, dtype=torch.float64), mask, scale=1e3)


def test_se_k_weights_ignore_padded_content():
    m = make()
    n, lengths = 9, [9, 5, 2]
    mask = lengths_mask(lengths, n)
    torch.manual_seed(3)
    x = torch.randn(3, n, DIM, dtype=torch.float64)
    garbage = x.clone()
    garbage[~mask] = 50 * torch.randn(int((~mask).sum()), DIM, dtype=torch.float64)

    def weights(inp, msk):
        k = m.qkv_heads(inp)[1]
        return m.se_weights(k, msk)

    w1, w2 = weights(x, mask), weights(garbage, mask)
    assert w1.shape == (3, n)
    assert torch.equal(w1[mask], w2[mask])
    assert torch.all((w1 > 0) & (w1 < 1))
    for b, length in enumerate(lengths):
        torch.testing.assert_close(w2[b, :length], weights(x[b:b + 1, :length], None)[0], rtol=0, atol=1e-12)
    # the weights do depend on the real content (the block is input-dependent)
    other = x.clone()
    other[0, 0] += 3.0
    assert not torch.allclose(weights(other, mask)[0], w1[0])


def test_se_k_uses_pre_activation_keys():
    """Pooling post-softmax keys would be constant (1/head_dim); the squeeze must vary with the input."""
    m = make()
    k = torch.randn(2, HEADS, 5, DIM // HEADS, dtype=torch.float64)
    torch.testing.assert_close(torch.softmax(k, -1).mean(dim=(1, 3)), torch.full((2, 5), HEADS / DIM,
                               dtype=torch.float64))
    w = m.se_weights(k, None)
    expected = torch.sigmoid(m.se_fc2(m.se_fc1(torch.nn.functional.pad(k.mean(dim=(1, 3)), (0, MAX_LEN - 5)))))
    torch.testing.assert_close(w, expected[:, :5])
    assert m.se_squeeze(k, None).std(dim=1).min() > 1e-3  # the default squeeze varies along the sequence


def test_literal_se_k_pools_the_constant_one_over_head_dim():
    """sek_input="activated" (§3.5 as written): the squeeze of K' = softmax(K) is 1/head_dim at every real
    position (0 at padding) for any input, so the SE-K weights depend on the mask only, not on the tokens."""
    m = make(sek_input="activated")
    torch.manual_seed(9)
    n, mask = 9, lengths_mask([9, 5], 9)
    x, other = torch.randn(2, n, DIM, dtype=torch.float64), 30 * torch.randn(2, n, DIM, dtype=torch.float64)
    k, k_other = m.qkv_heads(x)[1], m.qkv_heads(other)[1]
    constant = torch.where(mask, HEADS / DIM, 0.0).to(torch.float64)
    for keys in (k, k_other):
        torch.testing.assert_close(m.se_squeeze(keys, mask), constant, rtol=0, atol=1e-15)
    w = m.se_weights(k, mask)
    torch.testing.assert_close(m.se_weights(k_other, mask), w, rtol=0, atol=1e-14)
    pooled = torch.nn.functional.pad(constant, (0, MAX_LEN - n))
    torch.testing.assert_close(w, torch.sigmoid(m.se_fc2(m.se_fc1(pooled)))[:, :n], rtol=0, atol=1e-14)
    # the default pools the pre-activation K: its squeeze and weights follow the input
    default = make()
    assert (default.se_squeeze(k, mask) - default.se_squeeze(k_other, mask)).abs().max() > 1e-2
    assert (default.se_squeeze(k, None) - HEADS / DIM).abs().max() > 1e-2
    assert (default.se_weights(k, mask) - default.se_weights(k_other, mask)).abs().max() > 1e-4
    # without the activation K' = K, and the two forms coincide
    plain, literal = make(k_act=False), make(k_act=False, sek_input="activated")
    torch.testing.assert_close(literal(x, mask), plain(x, mask), rtol=0, atol=0)


@pytest.mark.parametrize("q_act,k_act", ACTS)
@pytest.mark.parametrize("sek_input", ["keys", "activated"])
def test_matches_paper_formula(q_act, k_act, sek_input):
    """Independent full computation of eqs. 7-9 with SE-K, pooled from the pre-activation K ("keys") or
    from K' = phi(K) ("activated")."""
    m = make(q_act=q_act, k_act=k_act, sek_input=sek_input)
    torch.manual_seed(8)
    n = 7
    x = torch.randn(2, n, DIM, dtype=torch.float64)
    q, k, v = m.qkv_heads(x)
    k_prime = torch.exp(k) / torch.exp(k).sum(-1, keepdim=True) if k_act else k
    pooled = torch.zeros(2, MAX_LEN, dtype=torch.float64)
    # mean over all heads' features, of K (pre-softmax) or of K'
    pooled[:, :n] = m.k_proj(x).mean(dim=-1) if sek_input == "keys" else k_prime.mean(dim=(1, 3))
    se = (pooled @ m.se_fc1.weight.T + m.se_fc1.bias) @ m.se_fc2.weight.T + m.se_fc2.bias  # no ReLU between
    weights = torch.sigmoid(se)[:, :n]
    phi_q = torch.sigmoid(q) if q_act else q
    phi_k = k_prime * weights[:, None, :, None]
    num = phi_q @ (phi_k.transpose(-2, -1) @ v)
    den = phi_q @ phi_k.sum(dim=2)[..., None]
    den = den + torch.where(den >= 0, m.eps, -m.eps)
    expected = m.proj(merge_heads(num / den))
    torch.testing.assert_close(m(x), expected)


def test_se_k_is_not_a_no_op():
    with_se = make(se_k=True)
    without = make(se_k=False)
    missing, unexpected = without.load_state_dict(with_se.state_dict(), strict=False)
    assert not missing and set(unexpected) == {"se_fc1.weight", "se_fc1.bias", "se_fc2.weight", "se_fc2.bias"}
    torch.manual_seed(4)
    x = torch.randn(2, 7, DIM, dtype=torch.float64)
    assert (with_se(x) - without(x)).abs().max() > 1e-3


# ---- errors -------------------------------------------------------------------------------------
def test_se_k_requires_max_len():
    with pytest.raises(ValueError, match=r"kerformer.*se_k.*max_len"):
        Kerformer(DIM)
    with pytest.raises(ValueError, match=r"kerformer.*se_k.*max_len"):
        create_mixer("kerformer", DIM)
    m = create_mixer("kerformer", DIM, se_k=False)  # no max_len needed without SE-K
    assert m(torch.randn(1, 20, DIM)).shape == (1, 20, DIM)


def test_sequence_longer_than_max_len_raises():
    m = make()
    with pytest.raises(ValueError, match=r"kerformer.*exceeds max_len"):
        m(torch.randn(1, MAX_LEN + 1, DIM, dtype=torch.float64))
    assert m(torch.randn(1, MAX_LEN, DIM, dtype=torch.float64)).shape == (1, MAX_LEN, DIM)


@pytest.mark.parametrize("kw,match", [
    ({"sek_input": "pooled"}, r"sek_input must be one of \('keys', 'activated'\), got 'pooled'"),
    ({"sek_input": None}, "sek_input must be one of"), ({"sek_input": "Keys"}, "sek_input must be one of"),
    ({"sek_input": "activated", "se_k": False}, r"sek_input='activated'.*se_k=True"),
    ({"sek_input": "activated", "causal": True}, r"sek_input='activated'.*se_k=True"),
    ({"sek_input": "activated", "causal": True, "se_k": True}, r"causal=True.*se_k=True"),
])
def test_bad_sek_input_raises(kw, match):
    with pytest.raises(ValueError, match=rf"kerformer: {match}"):
        create_mixer("kerformer", DIM, max_len=MAX_LEN, **kw)


def test_causal_with_se_k_raises():
    with pytest.raises(ValueError, match=r"kerformer.*se_k"):
        Kerformer(DIM, causal=True, max_len=MAX_LEN, se_k=True)
    with pytest.raises(ValueError, match=r"kerformer.*se_k"):
        create_mixer("kerformer", DIM, causal=True, max_len=MAX_LEN, se_k=True)
    assert create_mixer("kerformer", DIM, causal=True, se_k=False).causal


def test_se_k_default_follows_causal():
    assert Kerformer(DIM, max_len=MAX_LEN).se_k
    causal = create_mixer("kerformer", DIM, causal=True)  # no max_len needed: SE-K is off
    assert causal.causal and not causal.se_k


@pytest.mark.parametrize("kw,match", [
    ({"se_reduction": 0}, "se_reduction"),
    ({"eps": 0.0}, "eps"),
    ({"chunk_size": 4}, "chunk_size"),
])
def test_bad_options_raise(kw, match):
    with pytest.raises(ValueError, match=rf"kerformer.*{match}"):
        Kerformer(DIM, max_len=MAX_LEN, **kw)


# ---- causal -------------------------------------------------------------------------------------
@pytest.mark.parametrize("q_act,k_act", ACTS)
@pytest.mark.parametrize("chunk_size", [None, 2])
def test_causal_no_leak(q_act, k_act, chunk_size):
    m = make(q_act=q_act, k_act=k_act, se_k=False, causal=True, chunk_size=chunk_size)
    n = 5
    torch.manual_seed(5)
    x = 0.5 * torch.randn(1, n, DIM, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda t: m(t), x)[0, :, :, 0]  # (N, dim, N, dim)
    for i in range(n):
        assert torch.all(jac[i, :, i + 1:] == 0), f"output {i} depends on a later input"
        assert jac[i, :, : i + 1].abs().sum() > 0


# ---- numerics -----------------------------------------------------------------------------------
@pytest.mark.parametrize("q_act,k_act,se_k", [(qa, ka, se) for (qa, ka), se in itertools.product(ACTS, [True, False])])
def test_finite_for_large_inputs(q_act, k_act, se_k):
    m = make(dtype=torch.float32, q_act=q_act, k_act=k_act, se_k=se_k)
    torch.manual_seed(6)
    x = torch.empty(2, MAX_LEN, DIM).uniform_(-10, 10)
    mask = lengths_mask([MAX_LEN, 5], MAX_LEN)
    for msk in (None, mask):
        x_ = x.clone().requires_grad_(True)
        y = m(x_, msk)
        assert torch.isfinite(y).all()
        y.sum().backward()
        assert torch.isfinite(x_.grad).all()


@pytest.mark.parametrize("q_act,k_act,se_k,causal", [
    (True, True, True, False), (False, True, True, False), (True, False, True, False),
    (True, True, False, True), (False, False, False, False),
])
def test_bf16(q_act, k_act, se_k, causal):
    m32 = make(dtype=torch.float32, q_act=q_act, k_act=k_act, se_k=se_k, causal=causal)
    m16 = make(dtype=torch.bfloat16, q_act=q_act, k_act=k_act, se_k=se_k, causal=causal)
    torch.manual_seed(7)
    x = torch.empty(2, 10, DIM).uniform_(-10, 10)
    mask = lengths_mask([10, 4], 10)
    y16 = m16(x.bfloat16(), mask)
    assert y16.dtype == torch.bfloat16 and torch.isfinite(y16).all()
    if q_act and k_act:  # the positive-feature model is well conditioned: bf16 tracks float32
        y32 = m32(x, mask)
        assert (y16.float() - y32).abs().max() <= 0.1 * y32.abs().max() + 0.05


# ---- parameters and registry --------------------------------------------------------------------
@pytest.mark.parametrize("max_len,r", [(12, 4), (16, 3), (10, 1)])
def test_parameter_count(max_len, r):
    m = Kerformer(DIM, num_heads=HEADS, max_len=max_len, se_reduction=r)
    h = max_len // r
    expected = 4 * DIM * DIM + (max_len * h + h + h * max_len + max_len)
    assert sum(p.numel() for p in m.parameters()) == expected
    assert sum(p.numel() for p in Kerformer(DIM, se_k=False).parameters()) == 4 * DIM * DIM
    assert sum(p.numel() for p in Kerformer(DIM, se_k=False, bias=True).parameters()) == 4 * DIM * DIM + 4 * DIM


def test_registry_info():
    info = mixer_info("kerformer")
    assert info.causal and info.bidirectional and info.padding and info.needs_max_len
    assert info.complexity.startswith("O(N d^2 + L^2 / r) (SE-K: ") and "O(N d^2) with se_k=False" in info.complexity
    assert set(info.options) == {"bias", "q_act", "k_act", "se_k", "se_reduction", "sek_input", "chunk_size",
                                 "eps", "rotary"}
    assert "7-9" in info.paper and "3.5" in info.paper
