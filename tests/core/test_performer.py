"""Tests of the "performer" mixer (FAVOR+, Choromanski et al. 2021; 002 sec. 4.2)."""

from __future__ import annotations

import math

import pytest
import torch

import tokenmix
from conftest import assert_matches_reference, assert_padding_invisible, lengths_mask
from tokenmix.mixers.performer import Performer, iid_gaussian_projection, orthogonal_gaussian_projection


def make(dim=8, num_heads=2, causal=False, nb_features=16, chunk_size=None, seed=0, dtype=torch.float64, **kw):
    torch.manual_seed(seed)
    m = tokenmix.create_mixer("performer", dim, num_heads=num_heads, causal=causal, nb_features=nb_features,
                              chunk_size=chunk_size, **kw)
    return m.to(dtype)


MASKS = {
    "none": None,
    "right": lambda n: lengths_mask([n, 7, 1], n),
    "left": lambda n: lengths_mask([n, 5, 2], n, left=True),
}

CASES = [(False, None)] + [(True, c) for c in (None, 1, 5, 16)]


# 1. fast == reference, forward and gradients ------------------------------------------------------
@pytest.mark.parametrize("causal,chunk", CASES)
@pytest.mark.parametrize("mask_kind", list(MASKS))
def test_fast_matches_reference(causal, chunk, mask_kind):
    n = 13
    mixer = make(causal=causal, chunk_size=chunk, bias=True)
    torch.manual_seed(1)
    x = torch.randn(3, n, 8, dtype=torch.float64)
    mask = None if MASKS[mask_kind] is None else MASKS[mask_kind](n)
    assert_matches_reference(mixer, x, mask, rtol=1e-8, atol=1e-9)


# 2. no causal leak through the computation ----------------------------------------------------------
@pytest.mark.parametrize("chunk", [None, 1, 5, 16])
def test_no_causal_leak_jacobian(chunk):
    n = 12
    mixer = make(causal=True, chunk_size=chunk, num_heads=2)
    torch.manual_seed(2)
    x = torch.randn(1, n, 8, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda t: mixer(t), x)  # (1, n, 8, 1, n, 8)
    for i in range(n):
        for j in range(i + 1, n):
            assert (jac[0, i, :, 0, j, :] == 0).all(), (i, j)
    assert jac[0, n - 1, :, 0, 0, :].abs().sum() > 0  # and the past does matter


# 3. the causal stabiliser does not leak future keys ---------------------------------------------------
@pytest.mark.parametrize("chunk", [None, 1, 5, 16])
def test_causal_stabiliser_no_leak_large_future_key(chunk):
    n = 12
    mixer = make(causal=True, chunk_size=chunk, num_heads=2)
    torch.manual_seed(3)
    x = torch.randn(2, n, 8, dtype=torch.float64)
    x2 = x.clone()
    x2[:, -1] *= 50.0
    y, y2 = mixer(x), mixer(x2)
    assert torch.isfinite(y2).all()
    assert (y2[:, :-1] - y[:, :-1]).abs().max() <= 1e-12


@pytest.mark.parametrize("chunk", [None, 1, 5, 16])
def test_causal_stabiliser_no_leak_max_raising_key(chunk):
    """A future key built to raise the running max of the key exponents far above every earlier one."""
    n, d = 12, 8
    mixer = make(dim=d, num_heads=1, causal=True, chunk_size=chunk, nb_features=32)
    torch.manual_seed(4)
    x = 0.3 * torch.randn(1, n, d, dtype=torch.float64)
    w = mixer.projection
    r = w.norm(dim=1).argmax()
    k_target = 1.2 * w[r] * d ** 0.25  # maximises w_r^T k' - |k'|^2/2 (near k' = w_r), after the d^-1/4 scaling
    w_k = mixer.k_proj.weight
    x2 = x.clone()
    x2[0, -1] = torch.linalg.solve(w_k, k_target)

    with torch.no_grad():
        k = mixer.qkv_heads(x2)[1]
        a = mixer._exponents(k).amax(dim=-1)[0, 0]
    assert a[-1] > a[:-1].max() + 5.0  # the test is meaningful: the last key dominates the stabiliser

    y, y2 = mixer(x), mixer(x2)
    assert torch.isfinite(y2).all()
    assert (y2[:, :-1] - y[:, :-1]).abs().max() <= 1e-12
    y2_ref = mixer.forward_reference(x2)
    torch.testing.assert_close(y2, y2_ref, rtol=1e-8, atol=1e-8)


# 4. padding ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("causal,chunk", [(False, None), (True, None), (True, 3)])
@pytest.mark.parametrize("left", [False, True])
def test_padding_is_invisible(causal, chunk, left):
    n = 10
    mixer = make(causal=causal, chunk_size=chunk)
    torch.manual_seed(5)
    x = torch.randn(3, n, 8, dtype=torch.float64)
    assert_padding_invisible(mixer, x, lengths_mask([n, 6, 3], n, left=left))


def test_all_padding_row_is_zero_and_finite():
    for causal in (False, True):
        mixer = make(causal=causal)
        x = torch.randn(2, 6, 8, dtype=torch.float64, requires_grad=True)
        mask = torch.tensor([[True] * 6, [False] * 6])
        y = mixer(x, mask)
        assert torch.isfinite(y).all() and (y[1] == 0).all()
        (grad,) = torch.autograd.grad(y.sum(), x)
        assert torch.isfinite(grad).all()


# 5. approximation quality ---------------------------------------------------------------------------
def _softmax_attention(q, k, v, causal):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


@pytest.mark.parametrize("causal", [False, True])
def test_error_shrinks_with_more_features(causal):
    d, n = 16, 24
    torch.manual_seed(6)
    x = 0.5 * torch.randn(2, n, d, dtype=torch.float64)
    reference_mixer = make(dim=d, num_heads=2, causal=causal, nb_features=16, seed=99)
    errors = {}
    for m in (16, 1024):
        errs = []
        for seed in range(4):
            mixer = make(dim=d, num_heads=2, causal=causal, nb_features=m, seed=100 + seed)
            with torch.no_grad():
                q, k, v = reference_mixer.qkv_heads(x)  # same q, k, v for every m and seed
                exact = _softmax_attention(q, k, v, causal)
                approx = mixer._attend(q, k, v, None)
            errs.append((approx - exact).abs().mean().item())
        errors[m] = sum(errs) / len(errs)
    assert errors[1024] < 0.4 * errors[16], errors
    assert errors[1024] < 0.02, errors


def test_feature_kernel_is_unbiased_estimate_of_softmax_kernel():
    """phi(q) . phi(k) * exp(stabilisers) ~ exp(q.k / sqrt(d)), checked at the feature level."""
    d = 8
    mixer = make(dim=d, num_heads=1, nb_features=4096, seed=7)
    torch.manual_seed(8)
    q = 0.4 * torch.randn(1, 1, 5, d, dtype=torch.float64)
    k = 0.4 * torch.randn(1, 1, 5, d, dtype=torch.float64)
    uq, uk = mixer._exponents(q), mixer._exponents(k)
    est = torch.exp(uq) @ torch.exp(uk).transpose(-2, -1) / mixer.nb_features
    exact = torch.exp(q @ k.transpose(-2, -1) / math.sqrt(d))
    assert ((est - exact).abs() / exact).max() < 0.05


# 6. determinism, redraw and orthogonality -----------------------------------------------------------
def test_determinism_and_redraw():
    a = make(causal=True, seed=11, dtype=torch.float32)
    b = make(causal=True, seed=11, dtype=torch.float32)
    assert torch.equal(a.projection, b.projection)
    x = torch.randn(2, 9, 8)
    ya = a(x)
    assert torch.equal(ya, b(x))
    assert torch.equal(ya, a(x))  # no redraw in forward
    a.train()
    assert torch.equal(ya, a(x))

    before = a.projection.clone()
    a.redraw_features()
    assert a.projection.shape == before.shape and not torch.equal(a.projection, before)
    assert not torch.equal(a(x), ya)

    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    a.redraw_features(g1)
    b.redraw_features(g2)
    assert torch.equal(a.projection, b.projection)

    sd = a.state_dict()
    assert "projection" in sd
    c = make(causal=True, seed=12, dtype=torch.float32)
    assert not torch.equal(c.projection, a.projection)
    c.load_state_dict(sd)
    assert torch.equal(c(x), a(x))


@pytest.mark.parametrize("m,d", [(16, 8), (20, 8), (5, 8), (256, 16)])
def test_projection_blocks_are_orthogonal(m, d):
    torch.manual_seed(13)
    mixer = Performer(d * 2, num_heads=2, nb_features=m)
    w = mixer.projection
    assert w.shape == (m, d) and w.dtype == torch.get_default_dtype()
    for start in range(0, m, d):
        block = w[start:start + d].double()
        unit = block / block.norm(dim=1, keepdim=True)
        gram = unit @ unit.T
        torch.testing.assert_close(gram, torch.eye(len(block), dtype=torch.float64), rtol=0, atol=1e-5)
    # chi-distributed row norms, not all equal (regular FAVOR+ scaling)
    assert w.norm(dim=1).std() > 0.01


def test_projection_rows_are_marginally_standard_gaussian():
    w = orthogonal_gaussian_projection(4000, 4, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(w.mean(dim=0), torch.zeros(4, dtype=torch.float64), rtol=0, atol=0.06)
    torch.testing.assert_close(w.T @ w / len(w), torch.eye(4, dtype=torch.float64), rtol=0, atol=0.08)


def test_iid_features_are_independent_rows_and_stay_so_when_redrawn():
    mixer = Performer(16, num_heads=2, nb_features=8, features="iid")
    for redraw in (False, True):
        if redraw:
            mixer.redraw_features(torch.Generator().manual_seed(1))
        unit = mixer.projection.double() / mixer.projection.double().norm(dim=1, keepdim=True)
        off_diagonal = (unit @ unit.T - torch.eye(8, dtype=torch.float64)).abs().max()
        assert off_diagonal > 0.1  # 8 independent directions in 8 dimensions are far from orthogonal
    assert "features='iid'" in repr(mixer)
    x = torch.randn(2, 12, 16)
    assert torch.isfinite(mixer(x)).all()


def test_orthogonal_features_estimate_the_softmax_kernel_with_less_error_than_iid():
    """Choromanski et al. (2021) sec. 2.4, Theorem 2: for the positive random features, orthogonal rows give a
    smaller mean squared error of the estimate of exp(x . y) than independent ones. Per pair of unit vectors,
    the MSE over 2,000 draws of m = d = 16 features; orthogonal below i.i.d. on most of 64 pairs (one-sided
    Wilcoxon signed-rank), and both unbiased."""
    from scipy import stats

    g = torch.Generator().manual_seed(0)
    d, pairs, draws = 16, 64, 2000
    x, y = (torch.nn.functional.normalize(torch.randn(pairs, d, generator=g, dtype=torch.float64), dim=1)
            for _ in range(2))
    kernel = torch.exp((x * y).sum(dim=1))

    def estimates(draw) -> torch.Tensor:  # (draws, pairs)
        rows = []
        for _ in range(draws):
            w = draw(d, d, generator=g)
            rows.append((torch.exp(x @ w.T - 0.5) * torch.exp(y @ w.T - 0.5)).mean(dim=1))  # |x| = |y| = 1
        return torch.stack(rows)

    orthogonal, iid = estimates(orthogonal_gaussian_projection), estimates(iid_gaussian_projection)
    for got in (orthogonal, iid):
        assert (got.mean(dim=0) / kernel - 1).abs().median() < 0.05  # unbiased
    mse_orthogonal, mse_iid = ((orthogonal - kernel) ** 2).mean(dim=0), ((iid - kernel) ** 2).mean(dim=0)
    assert mse_orthogonal.mean() < mse_iid.mean()
    assert stats.wilcoxon(mse_orthogonal.numpy(), mse_iid.numpy(), alternative="less").pvalue < 1e-3


# 7. finite outputs -------------------------------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_finite_for_large_inputs(causal, dtype):
    torch.manual_seed(14)
    mixer = tokenmix.create_mixer("performer", 64, num_heads=4, causal=causal).to(dtype)
    x = (torch.rand(2, 256, 64) * 20 - 10).to(dtype).requires_grad_(True)
    mask = lengths_mask([256, 100], 256)
    for msk in (None, mask):
        y = mixer(x, msk)
        assert y.dtype == dtype and y.shape == x.shape
        assert torch.isfinite(y).all()
        (grad,) = torch.autograd.grad(y.float().square().mean(), x)
        assert torch.isfinite(grad).all()


@pytest.mark.parametrize("causal", [False, True])
def test_bfloat16_close_to_float32(causal):
    torch.manual_seed(15)
    mixer = tokenmix.create_mixer("performer", 32, num_heads=2, causal=causal, nb_features=64)
    x = torch.randn(2, 40, 32)
    y32 = mixer(x)
    y16 = mixer.to(torch.bfloat16)(x.bfloat16())
    assert y16.dtype == torch.bfloat16
    assert (y16.float() - y32).abs().max() < 0.05


# 8. options ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs", [
    {"nb_features": 0}, {"nb_features": -3}, {"nb_features": 2.5}, {"nb_features": True},
    {"eps": 0.0}, {"chunk_size": 0, "causal": True}, {"chunk_size": 4, "causal": False},
    {"features": "gaussian"}, {"features": None},
])
def test_bad_options_raise(kwargs):
    with pytest.raises(ValueError, match="performer"):
        tokenmix.create_mixer("performer", 16, num_heads=2, **kwargs)


def test_unknown_option_raises():
    with pytest.raises(ValueError, match="performer"):
        tokenmix.create_mixer("performer", 16, num_features=8)


def test_registry_info():
    info = tokenmix.mixer_info("performer")
    assert info.causal and info.bidirectional and info.padding and info.multihead
    assert info.complexity == "O(N m d)"
    assert set(info.options) == {"bias", "nb_features", "chunk_size", "eps", "features"}
    mixer = tokenmix.create_mixer("performer", 64, num_heads=4, causal=True)
    assert mixer(torch.randn(2, 100, 64)).shape == (2, 100, 64)
    assert sum(p.numel() for p in mixer.parameters()) == 4 * 64 * 64


@pytest.mark.parametrize("chunks", [2, 3, 7])
def test_rescaled_prefix_states_match_the_plain_loop(chunks):
    # the causal stabiliser's chunk recurrence: hand-written backward == autograd through the plain loop
    from tokenmix.ops.kernel_attention import rescaled_prefix_states, rescaled_prefix_states_reference

    torch.manual_seed(chunks)
    kv = torch.randn(2, 3, chunks, 4, 5, dtype=torch.float64, requires_grad=True)
    rescale = torch.rand(2, 3, chunks - 1, dtype=torch.float64, requires_grad=True)
    fast, reference = rescaled_prefix_states(kv, rescale), rescaled_prefix_states_reference(kv, rescale)
    assert torch.allclose(fast, reference, rtol=1e-12, atol=1e-12)
    assert torch.equal(fast[:, :, 0], torch.zeros_like(fast[:, :, 0]))
    grad = torch.randn_like(fast)
    got = torch.autograd.grad(fast, (kv, rescale), grad)
    want = torch.autograd.grad(reference, (kv, rescale), grad, allow_unused=True)
    for g, w in zip(got, want):
        assert torch.allclose(g, torch.zeros_like(g) if w is None else w, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(rescaled_prefix_states, (kv, rescale))
