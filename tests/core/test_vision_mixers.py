"""Tests of the vision mixers (002 §3): "swin", "pvt", "twins_lsa", "twins_gsa", "scalable_ssa",
"scalable_iwsa", and the grid helpers of tokenmix.ops.spatial. Every reference here is built independently
of the package's own reference paths (the registry-wide properties are in test_spatial_contract.py)."""

from __future__ import annotations

import math
import types

import pytest
import torch
import torch.nn.functional as F

import tokenmix
from tokenmix.ops import spatial

DIM, HEADS = 8, 2


def make(name: str, seed: int = 0, dim: int = DIM, heads: int = HEADS, **options) -> torch.nn.Module:
    torch.manual_seed(seed)
    mixer = tokenmix.create_mixer(name, dim, num_heads=heads, **options).double().eval()
    with torch.no_grad():  # non-trivial biases and bias table, so that every term is exercised
        for p in mixer.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return mixer


def rand(b: int, hw: tuple[int, int], dim: int = DIM, seed: int = 1) -> torch.Tensor:
    return torch.randn(b, hw[0] * hw[1], dim, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def heads(t: torch.Tensor, h: int = HEADS) -> torch.Tensor:
    b, n, c = t.shape
    return t.reshape(b, n, h, c // h).transpose(1, 2)


def explicit_attention(q, k, v, allowed=None, bias=None):
    """Plain multi-head softmax attention on (B, N, C) projections; allowed (N, M) bool, bias (h, N, M)."""
    qh, kh, vh = heads(q), heads(k), heads(v)
    scores = qh @ kh.transpose(-2, -1) / math.sqrt(qh.shape[-1])
    if bias is not None:
        scores = scores + bias
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    out = scores.softmax(-1) @ vh
    return out.transpose(1, 2).reshape(q.shape)


def swin_bias(table: torch.Tensor, pr: torch.Tensor, pc: torch.Tensor, m: int) -> torch.Tensor:
    """(h, T, T) from in-window positions, Swin's index formula written out."""
    index = (pr[:, None] - pr[None, :] + m - 1) * (2 * m - 1) + (pc[:, None] - pc[None, :] + m - 1)
    return table[index].permute(2, 0, 1)


def per_window_loop(mixer, x, hw, window, table=None, table_m=None):
    """Window attention as a literal loop over the (clipped) windows of the original grid, then proj."""
    (h, w), (mh, mw) = hw, window
    b, _, c = x.shape
    q, k, v = (p(x).reshape(b, h, w, c) for p in (mixer.q_proj, mixer.k_proj, mixer.v_proj))
    out = torch.zeros(b, h, w, c, dtype=x.dtype)
    for r0 in range(0, h, mh):
        for c0 in range(0, w, mw):
            r1, c1 = min(r0 + mh, h), min(c0 + mw, w)
            qw, kw, vw = (t[:, r0:r1, c0:c1].reshape(b, -1, c) for t in (q, k, v))
            bias = None
            if table is not None:
                pos = torch.arange((r1 - r0) * (c1 - c0))
                bias = swin_bias(table, pos // (c1 - c0), pos % (c1 - c0), table_m)
            out[:, r0:r1, c0:c1] = explicit_attention(qw, kw, vw, bias=bias).reshape(b, r1 - r0, c1 - c0, c)
    return out.reshape(b, h * w, c)


# -- relative position bias ---------------------------------------------------------------------------
def test_relative_position_table_and_index_match_swin_construction():
    m = 3
    mixer = make("swin", window_size=m)
    assert mixer.relative_position_bias_table.shape == ((2 * m - 1) ** 2, HEADS)
    # Swin's own construction (Liu et al. 2021, WindowAttention.__init__)
    coords = torch.stack(torch.meshgrid(torch.arange(m), torch.arange(m), indexing="ij")).flatten(1)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0).contiguous()
    rel[:, :, 0] += m - 1
    rel[:, :, 1] += m - 1
    rel[:, :, 0] *= 2 * m - 1
    expected = rel.sum(-1)
    pos = torch.arange(m * m)
    index = spatial.relative_position_index(pos // m, pos % m, m)
    assert torch.equal(index, expected)
    assert index.min() == 0 and index.max() == (2 * m - 1) ** 2 - 1
    assert index.unique().numel() == (2 * m - 1) ** 2  # every offset of an M x M window is used
    assert torch.equal(index.diagonal(), torch.full((m * m,), (2 * m - 1) * (m - 1) + m - 1))
    # a clipped 2 x 3 window uses the same entries as the corresponding offsets of the 3 x 3 window
    pos = torch.arange(6)
    small = spatial.relative_position_index(pos // 3, pos % 3, m)
    assert torch.equal(small, expected[:6, :6])


def test_window_geometry():
    g = spatial.window_grid((3, 5), 7, shifted=True)
    assert (g.window, g.shift, g.padded) == ((3, 5), (0, 0), (3, 5))
    g = spatial.window_grid((9, 7), 7, shifted=True)
    assert (g.window, g.shift, g.padded, g.num_windows) == ((7, 7), (3, 0), (14, 7), 2)
    g = spatial.window_grid((9, 7), 4)
    assert (g.window, g.shift, g.padded, g.num_windows) == ((4, 4), (0, 0), (12, 8), 6)
    g = spatial.window_grid((9, 7), (3, 2))
    assert (g.window, g.padded) == ((3, 2), (9, 8))
    x = rand(2, (9, 7), seed=3)
    for grid in [spatial.window_grid((9, 7), 4, True), spatial.window_grid((9, 7), (2, 3), False)]:
        assert torch.equal(spatial.window_merge(spatial.window_partition(x, grid), grid), x)


# -- Swin -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("hw", [(8, 8), (9, 7), (3, 5)], ids=lambda hw: f"{hw[0]}x{hw[1]}")
def test_wmsa_equals_dense_block_diagonal_attention(hw):
    m = 4
    mixer = make("swin", window_size=m)
    x = rand(2, hw)
    h, w = hw
    mh, mw = min(m, h), min(m, w)
    r = torch.arange(h * w) // w
    c = torch.arange(h * w) % w
    window = (r // mh) * 100 + c // mw
    allowed = window[:, None] == window[None, :]
    bias = swin_bias(mixer.relative_position_bias_table, r % mh, c % mw, m)
    q, k, v = mixer.q_proj(x), mixer.k_proj(x), mixer.v_proj(x)
    expected = mixer.proj(explicit_attention(q, k, v, allowed, bias))
    torch.testing.assert_close(mixer(x, hw=hw), expected, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(mixer.forward_reference(x, hw=hw), expected, rtol=1e-9, atol=1e-11)
    # and a literal loop over the clipped windows
    loop = mixer.proj(per_window_loop(mixer, x, hw, (mh, mw), mixer.relative_position_bias_table, m))
    torch.testing.assert_close(mixer(x, hw=hw), loop, rtol=1e-9, atol=1e-11)


def swin_shifted_literal(mixer, x, hw, m):
    """Swin's SW-MSA on a grid padded to a multiple of M: pad, roll by -M//2, dense attention with Swin's
    img_mask regions (and padded keys masked out), roll back, crop."""
    (h, w), s = hw, m // 2
    b, _, c = x.shape
    hp, wp = math.ceil(h / m) * m, math.ceil(w / m) * m
    grid = torch.zeros(b, hp, wp, c, dtype=x.dtype)
    grid[:, :h, :w] = x.reshape(b, h, w, c)
    real = torch.zeros(hp, wp, dtype=torch.bool)
    real[:h, :w] = True
    grid, real = torch.roll(grid, (-s, -s), (1, 2)), torch.roll(real, (-s, -s), (0, 1))
    img_mask = torch.zeros(hp, wp, dtype=torch.long)
    cnt = 0
    for hs in (slice(0, -m), slice(-m, -s), slice(-s, None)):
        for ws in (slice(0, -m), slice(-m, -s), slice(-s, None)):
            img_mask[hs, ws] = cnt
            cnt += 1
    r, cc = torch.arange(hp * wp) // wp, torch.arange(hp * wp) % wp
    window = (r // m) * 1000 + cc // m
    region = img_mask.reshape(-1)
    allowed = (window[:, None] == window[None, :]) & (region[:, None] == region[None, :])
    allowed = (allowed & real.reshape(-1)[None, :]) | torch.eye(hp * wp, dtype=torch.bool)
    bias = swin_bias(mixer.relative_position_bias_table, r % m, cc % m, m)
    flat = grid.reshape(b, hp * wp, c)
    out = explicit_attention(mixer.q_proj(flat), mixer.k_proj(flat), mixer.v_proj(flat), allowed, bias)
    out = torch.roll(out.reshape(b, hp, wp, c), (s, s), (1, 2))[:, :h, :w]
    return mixer.proj(out.reshape(b, h * w, c))


# 8x8: no padding; 11x11 / 11x7: less padding than the shift, so real cells fall in Swin's middle region
# (with padding >= M/2 that region is all padding and the padded-key mask alone would separate it)
@pytest.mark.parametrize("hw", [(8, 8), (11, 11), (11, 7)], ids=lambda hw: f"{hw[0]}x{hw[1]}")
def test_swmsa_equals_roll_masked_dense_roll_back(hw):
    m = 4
    mixer = make("swin", window_size=m, shift=True)
    x = rand(2, hw)
    expected = swin_shifted_literal(mixer, x, hw, m)
    torch.testing.assert_close(mixer(x, hw=hw), expected, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(mixer.forward_reference(x, hw=hw), expected, rtol=1e-9, atol=1e-11)
    unshifted = make("swin", window_size=m)
    assert (unshifted(x, hw=hw) - mixer(x, hw=hw)).abs().max() > 1e-3  # the shift changes something


def test_shift_mask_keeps_wrapped_cells_apart():
    """On an 8x8 grid with M=4, cell (0, 0) is rolled to (6, 6): its window holds original rows/cols
    {6, 7, 0, 1}; it may only see the wrapped-in cells (0|1, 0|1)."""
    g = spatial.window_grid((8, 8), 4, shifted=True)
    allowed = spatial.dense_window_mask(g)
    seen = allowed[0].nonzero().flatten().tolist()
    assert sorted(seen) == [0, 1, 8, 9]


class _GarbagePad(types.SimpleNamespace):
    """Stands in for torch.nn.functional inside tokenmix.ops.spatial: F.pad fills with large values."""

    def __getattr__(self, name):
        return getattr(F, name)

    @staticmethod
    def pad(t, pad, mode="constant", value=None):
        return F.pad(t, pad, value=1e3)


@pytest.mark.parametrize("name,options", [("swin", {"window_size": 4}), ("swin", {"window_size": 4, "shift": True}),
                                          ("twins_lsa", {"window_size": 4}), ("scalable_iwsa", {"window_size": 4})])
def test_padded_window_cells_have_no_influence(monkeypatch, name, options):
    mixer = make(name, **options)
    x = rand(2, (9, 7))
    before = mixer(x, hw=(9, 7))
    monkeypatch.setattr(spatial, "F", _GarbagePad())
    after = mixer(x, hw=(9, 7))
    assert torch.isfinite(after).all()
    torch.testing.assert_close(after, before, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name,options,hw", [
    ("swin", {"window_size": 4, "shift": True}, (11, 7)), ("swin", {"window_size": 3, "shift": True}, (9, 7)),
    ("swin", {"window_size": 2, "shift": True}, (5, 4)), ("twins_lsa", {"window_size": (3, 2)}, (9, 7)),
    ("scalable_iwsa", {"window_size": 4}, (9, 7)), ("pvt", {"sr_ratio": 3}, (7, 8)),
    ("twins_gsa", {"sr_ratio": 4}, (9, 7)), ("scalable_ssa", {"r_n": 3, "r_c": 0.5}, (7, 8)),
    ("scalable_ssa", {"r_n": 1, "r_c": 2.0}, (3, 5)),
])
def test_fast_path_matches_reference_for_other_options(name, options, hw):
    """The registry-wide test covers the default options only; outputs and all gradients here."""
    mixer = make(name, **options)
    x = rand(2, hw).requires_grad_(True)
    inputs = [x, *mixer.parameters()]
    fast, ref = mixer(x, hw=hw), mixer.forward_reference(x, hw=hw)
    torch.testing.assert_close(fast, ref, rtol=1e-9, atol=1e-11)
    cot = torch.randn(fast.shape, dtype=fast.dtype, generator=torch.Generator().manual_seed(7))
    for a, b in zip(torch.autograd.grad((fast * cot).sum(), inputs), torch.autograd.grad((ref * cot).sum(), inputs)):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)


# -- Twins LSA and ScalableViT IWSA ----------------------------------------------------------------------
@pytest.mark.parametrize("window", [4, (3, 2)])
def test_lsa_equals_per_window_loop(window):
    mixer = make("twins_lsa", window_size=window)
    x = rand(2, (9, 7))
    mh, mw = spatial.to_pair(window)
    expected = mixer.proj(per_window_loop(mixer, x, (9, 7), (mh, mw)))
    torch.testing.assert_close(mixer(x, hw=(9, 7)), expected, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(mixer.forward_reference(x, hw=(9, 7)), expected, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("hw", [(8, 8), (9, 7)], ids=lambda hw: f"{hw[0]}x{hw[1]}")
def test_iwsa_equals_window_attention_plus_depthwise_conv_of_values(hw):
    iwsa = make("scalable_iwsa", window_size=4)
    lsa = tokenmix.create_mixer("twins_lsa", DIM, num_heads=HEADS, window_size=4).double()
    lsa.load_state_dict({k: v for k, v in iwsa.state_dict().items() if not k.startswith("lim.")})
    x = rand(2, hw)
    h, w = hw
    v = iwsa.v_proj(x).transpose(1, 2).reshape(2, DIM, h, w)
    conv = F.conv2d(v, iwsa.lim.weight, iwsa.lim.bias, padding=1, groups=DIM).flatten(2).transpose(1, 2)
    expected = lsa(x, hw=hw) + conv @ iwsa.proj.weight.T  # proj(Z + F(V)) = proj(Z) + W_O F(V)
    torch.testing.assert_close(iwsa(x, hw=hw), expected, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(iwsa.forward_reference(x, hw=hw), expected, rtol=1e-9, atol=1e-11)
    loop = iwsa.proj(per_window_loop(iwsa, x, hw, (4, 4)) + conv)
    torch.testing.assert_close(iwsa(x, hw=hw), loop, rtol=1e-9, atol=1e-11)


# -- reductions: PVT SRA, Twins GSA, ScalableViT SSA -------------------------------------------------------
@pytest.mark.parametrize("name,options", [("pvt", {"sr_ratio": 1}), ("twins_gsa", {"sr_ratio": 1}),
                                          ("scalable_ssa", {"r_n": 1, "r_c": 1.0})])
def test_no_reduction_is_plain_multihead_attention(name, options):
    mixer = make(name, **options)
    softmax = tokenmix.create_mixer("softmax", DIM, num_heads=HEADS, bias=True).double()
    softmax.load_state_dict(mixer.state_dict())  # the same q/k/v/proj weights, and nothing else
    x = rand(2, (5, 3))
    torch.testing.assert_close(mixer(x, hw=(5, 3)), softmax(x), rtol=1e-9, atol=1e-11)
    q, k, v = mixer.q_proj(x), mixer.k_proj(x), mixer.v_proj(x)
    torch.testing.assert_close(mixer(x, hw=(5, 3)), mixer.proj(explicit_attention(q, k, v)), rtol=1e-9, atol=1e-11)


def block_conv_loop(x, hw, r, weight, bias, depthwise):
    """Kernel = stride = r conv over the real cells of each clipped r x r block, a literal loop."""
    (h, w), (b, _, c) = hw, x.shape
    grid = x.reshape(b, h, w, c)
    rows = []
    for r0 in range(0, h, r):
        for c0 in range(0, w, r):
            acc = bias.expand(b, -1).clone()
            for i in range(r0, min(r0 + r, h)):
                for j in range(c0, min(c0 + r, w)):
                    kernel = weight[:, :, i - r0, j - c0]  # (C_out, C_in or 1)
                    acc = acc + (grid[:, i, j] * kernel[:, 0] if depthwise else grid[:, i, j] @ kernel.T)
            rows.append(acc)
    return torch.stack(rows, dim=1)


@pytest.mark.parametrize("hw,r", [((9, 7), 2), ((8, 8), 4), ((3, 5), 4), ((7, 9), 3)])
@pytest.mark.parametrize("depthwise", [False, True])
def test_reduce_grid_is_the_conv_over_real_cells_of_each_block(hw, r, depthwise):
    torch.manual_seed(4)
    conv = torch.nn.Conv2d(DIM, DIM, r, r, groups=DIM if depthwise else 1).double()
    x = rand(2, hw)
    expected = block_conv_loop(x, hw, r, conv.weight, conv.bias, depthwise)
    for reduce in (spatial.reduce_grid, spatial.reduce_grid_reference):
        y, reduced_hw = reduce(x, hw, conv)
        assert reduced_hw == (math.ceil(hw[0] / r), math.ceil(hw[1] / r))
        torch.testing.assert_close(y, expected, rtol=1e-9, atol=1e-11)


# -- each fast op against the *_reference beside it, outputs and gradients --------------------------------
def assert_same_function(fast, reference, inputs: list[torch.Tensor]) -> None:
    """``fast(*inputs)`` equals ``reference(*inputs)``, and so do their gradients for one cotangent."""
    inputs = [t.detach().clone().requires_grad_(True) for t in inputs]
    out_fast, out_ref = fast(*inputs), reference(*inputs)
    torch.testing.assert_close(out_fast, out_ref, rtol=1e-9, atol=1e-11)
    cot = torch.randn(out_fast.shape, dtype=out_fast.dtype, generator=torch.Generator().manual_seed(9))
    grads = [torch.autograd.grad((out * cot).sum(), inputs) for out in (out_fast, out_ref)]
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("mask_kind", [None, "bool", "additive"])
def test_attend_matches_attend_reference(mask_kind):
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, HEADS, 6, 4, dtype=torch.float64, generator=g) for _ in range(3))
    mask = None
    if mask_kind is not None:
        allowed = torch.rand(6, 6, generator=g) < 0.6
        allowed |= torch.eye(6, dtype=torch.bool)  # no empty row
        mask = allowed if mask_kind == "bool" else torch.randn(6, 6, dtype=torch.float64,
                                                              generator=g).masked_fill(~allowed, float("-inf"))
    assert_same_function(lambda *t: spatial.attend(*t, mask), lambda *t: spatial.attend_reference(*t, mask),
                         [q, k, v])


@pytest.mark.parametrize("qk_width,value_width", [(5, 4), (3, 4)])
def test_attend_with_unequal_query_and_value_widths(qk_width, value_width):
    # ScalableViT's SSA: q/k wider or narrower than v; the fast path pads to one width for SDPA's fused kernel
    g = torch.Generator().manual_seed(3)
    q, k = (torch.randn(2, HEADS, 6, qk_width, dtype=torch.float64, generator=g) for _ in range(2))
    v = torch.randn(2, HEADS, 6, value_width, dtype=torch.float64, generator=g)
    assert spatial.attend(q, k, v).shape == (2, HEADS, 6, value_width)
    assert_same_function(spatial.attend, spatial.attend_reference, [q, k, v])


@pytest.mark.parametrize("hw,window,shifted", [((8, 8), 4, False), ((9, 7), 4, False), ((9, 7), 3, True),
                                                ((5, 4), 2, True), ((3, 5), 7, False)])
@pytest.mark.parametrize("with_bias", [False, True], ids=["plain", "bias"])
def test_window_attention_matches_window_attention_reference(hw, window, shifted, with_bias):
    grid = spatial.window_grid(hw, window, shifted)
    table = torch.randn((2 * window - 1) ** 2, HEADS, dtype=torch.float64) if with_bias else None
    options = {"bias_table": table, "table_window": window if with_bias else None}
    assert_same_function(lambda *t: spatial.window_attention(*t, grid, HEADS, **options),
                         lambda *t: spatial.window_attention_reference(*t, grid, HEADS, **options),
                         [rand(2, hw, seed=s) for s in (1, 2, 3)])


@pytest.mark.parametrize("name,options", [("pvt", {"sr_ratio": 3}), ("scalable_ssa", {"r_n": 2}),
                                          ("pvt", {"sr_ratio": 1})])
def test_reduce_matches_reduce_reference(name, options):
    mixer = make(name, **options)
    assert_same_function(lambda x: mixer.reduce(x, (7, 8)), lambda x: mixer.reduce_reference(x, (7, 8)),
                         [rand(2, (7, 8))])


def test_local_interaction_matches_local_interaction_reference():
    mixer = make("scalable_iwsa", window_size=4)
    assert_same_function(lambda v: mixer.local_interaction(v, (9, 7)),
                         lambda v: mixer.local_interaction_reference(v, (9, 7)), [rand(2, (9, 7))])


@pytest.mark.parametrize("name", ["pvt", "twins_gsa"])
@pytest.mark.parametrize("hw", [(8, 8), (9, 7)], ids=lambda hw: f"{hw[0]}x{hw[1]}")
def test_sra_equals_attention_over_explicitly_reduced_keys(name, hw):
    mixer = make(name, sr_ratio=2)
    x = rand(2, hw)
    reduced = block_conv_loop(x, hw, 2, mixer.sr.weight, mixer.sr.bias, depthwise=False)
    reduced = F.layer_norm(reduced, (DIM,), mixer.norm.weight, mixer.norm.bias, mixer.norm.eps)
    assert reduced.shape[1] == math.ceil(hw[0] / 2) * math.ceil(hw[1] / 2)
    out = explicit_attention(mixer.q_proj(x), mixer.k_proj(reduced), mixer.v_proj(reduced))
    torch.testing.assert_close(mixer(x, hw=hw), mixer.proj(out), rtol=1e-9, atol=1e-11)


def test_gsa_is_sra_with_the_same_weights():
    gsa, pvt = make("twins_gsa", sr_ratio=3), make("pvt", sr_ratio=3, seed=5)
    pvt.load_state_dict(gsa.state_dict())
    x = rand(1, (7, 8))
    torch.testing.assert_close(gsa(x, hw=(7, 8)), pvt(x, hw=(7, 8)))


@pytest.mark.parametrize("hw", [(8, 8), (9, 7)], ids=lambda hw: f"{hw[0]}x{hw[1]}")
def test_ssa_equals_explicit_scaled_attention(hw):
    mixer = make("scalable_ssa", r_n=2, r_c=1.25)
    qk = mixer.qk_dim
    assert qk == 10 and mixer.q_proj.out_features == qk and mixer.k_proj.out_features == qk
    assert mixer.v_proj.out_features == DIM
    x = rand(2, hw)
    h, w = hw
    grid = torch.zeros(2, DIM, math.ceil(h / 2) * 2, math.ceil(w / 2) * 2, dtype=x.dtype)
    grid[:, :, :h, :w] = x.transpose(1, 2).reshape(2, DIM, h, w)
    reduced = F.conv2d(grid, mixer.reduce_conv.weight, mixer.reduce_conv.bias, stride=2, groups=DIM)
    reduced = reduced.flatten(2).transpose(1, 2) @ mixer.reduce_pointwise.weight.T + mixer.reduce_pointwise.bias
    reduced = F.gelu(F.layer_norm(reduced, (qk,), mixer.norm.weight, mixer.norm.bias, mixer.norm.eps))
    q, k, v = heads(mixer.q_proj(x)), heads(mixer.k_proj(reduced)), heads(mixer.v_proj(reduced))
    attn = (q @ k.transpose(-2, -1) / math.sqrt(qk / HEADS)).softmax(-1)  # d'_k = per-head width C r_c / h
    expected = mixer.proj((attn @ v).transpose(1, 2).reshape(2, h * w, DIM))
    torch.testing.assert_close(mixer(x, hw=hw), expected, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(mixer.forward_reference(x, hw=hw), expected, rtol=1e-9, atol=1e-11)


def test_ssa_channel_width_splits_over_heads():
    mixer = tokenmix.create_mixer("scalable_ssa", 12, num_heads=4, r_c=1.25)  # head_dim 3 -> round(3.75) = 4
    assert mixer.qk_dim == 16
    assert mixer(torch.randn(1, 15, 12), hw=(3, 5)).shape == (1, 15, 12)
    narrow = tokenmix.create_mixer("scalable_ssa", 16, num_heads=2, r_c=0.5, r_n=1)
    assert narrow.qk_dim == 8 and narrow(torch.randn(1, 6, 16), hw=(2, 3)).shape == (1, 6, 16)


# -- options and registry ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name,options", [
    ("swin", {"window_size": 0}), ("swin", {"shift": "yes"}), ("pvt", {"sr_ratio": 0}),
    ("twins_lsa", {"window_size": (3, 0)}), ("twins_gsa", {"sr_ratio": 1.5}), ("scalable_ssa", {"r_n": 0}),
    ("scalable_ssa", {"r_c": -1.0}), ("scalable_iwsa", {"window_size": -2}),
])
def test_bad_options_raise_naming_the_mixer(name, options):
    with pytest.raises(ValueError, match=name):
        tokenmix.create_mixer(name, DIM, num_heads=HEADS, **options)


@pytest.mark.parametrize("name", ["swin", "pvt", "twins_lsa", "twins_gsa", "scalable_ssa", "scalable_iwsa"])
def test_registry_entries(name):
    info = tokenmix.mixer_info(name)
    assert info.spatial and not info.padding and not info.causal and info.bidirectional and info.multihead
    assert "Ruggeri (2022) §3" in info.paper and info.complexity.startswith("O(")
    assert "bias" in info.options
    assert dict(info.alternate) == ({"shift": True} if name == "swin" else {})
    with pytest.raises(NotImplementedError, match=name):  # vision inputs carry no padding mask
        mixer = make(name)
        mask = torch.ones(1, 12, dtype=torch.bool)
        mask[0, -1] = False
        mixer(rand(1, (3, 4)), mask, hw=(3, 4))
    with pytest.raises(ValueError, match=name):
        tokenmix.create_mixer(name, DIM, num_heads=HEADS, causal=True)


def test_sssa_ties_the_gsa_sub_sampling_to_the_lsa_window():
    """Twins' SSSA: GSA takes one representative per LSA window (Ruggeri 2022 §3.3) at any window size, not
    only at the defaults; an explicit sr_ratio is kept, and windows that cannot be tied raise."""
    from tokenmix.models.patterns import layer_mixers

    def gsa_ratio(pattern, options=None):
        layers = layer_mixers(pattern, 2, options)
        return dict(layers[1].options).get("sr_ratio")

    assert gsa_ratio(["twins_lsa:window_size=4", "twins_gsa"]) == 4
    assert gsa_ratio([{"name": "twins_lsa", "window_size": [3, 3]}, "twins_gsa"]) == 3
    assert gsa_ratio(["twins_lsa:window_size=4", "twins_gsa:sr_ratio=2"]) == 2
    assert gsa_ratio(["twins_lsa", "twins_gsa"]) is None  # defaults: both 7 already
    with pytest.raises(ValueError, match="must be square"):
        layer_mixers([{"name": "twins_lsa", "window_size": [2, 4]}, "twins_gsa"], 2)
    with pytest.raises(ValueError, match="different window sizes"):
        layer_mixers(["twins_lsa:window_size=2", "twins_gsa", "twins_lsa:window_size=4", "twins_gsa"], 4)
