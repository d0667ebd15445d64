"""Operation counts of the vision mixers (``count_ops(mixer, length, hw=...)``; issue 7, ``tokenmix count``):
"swin" (W-MSA and SW-MSA), "pvt", "twins_lsa", "twins_gsa", "scalable_ssa", "scalable_iwsa".

1. The matrix-product/convolution part of each count, times 2, equals the FLOPs that
   ``torch.utils.flop_counter.FlopCounterMode`` measures around the forward pass exactly (it counts 2 per
   multiply-add of mm/bmm/addmm/conv and nothing element-wise), measured by ``tokenmix.counting.flop_count``
   (which gives the counter the formula of CPU's fused attention kernel, missing from its registry).
   Overall, measured / (mults + adds) stays within ``RATIO_BOUNDS``: a dot product of length k is k mults
   and k - 1 adds against the counter's 2k, and biases, softmax sums, LayerNorm and GELU add what the
   counter ignores; these are all lower order in the width, so the ratio is 1 up to a few percent.
2. The closed forms written in the mixers' docstrings, and the bidirectional form of 004 Table 3.
3. The complexity claims of 002: window mixers linear in N at a fixed window, reduction mixers
   ``N^2 / R^2``.
4. ``count_ops`` with a missing or mismatched grid raises ValueError naming the mixer.
"""

from __future__ import annotations

import math

import pytest
import torch

import tokenmix
from tokenmix.counting import OpCounts, count_ops, flop_count, gemm_mults, grid_parts, total

DIM = 16
# measured FLOPs / (mults + adds), for dim >= 16 (see the module docstring; observed 0.97-1.04).
RATIO_BOUNDS = (0.9, 1.1)

CASES = [
    pytest.param("swin", {}, id="swin"),
    pytest.param("swin", {"shift": True}, id="swin-shift"),
    pytest.param("swin", {"window_size": 4, "shift": True, "bias": False}, id="swin-w4-shift-nobias"),
    pytest.param("pvt", {}, id="pvt"),
    pytest.param("pvt", {"sr_ratio": 3}, id="pvt-r3"),
    pytest.param("pvt", {"sr_ratio": 1}, id="pvt-r1"),
    pytest.param("twins_lsa", {}, id="twins_lsa"),
    pytest.param("twins_lsa", {"window_size": (3, 5)}, id="twins_lsa-3x5"),
    pytest.param("twins_gsa", {}, id="twins_gsa"),
    pytest.param("scalable_ssa", {}, id="scalable_ssa"),
    pytest.param("scalable_ssa", {"r_n": 3, "r_c": 0.5, "bias": False}, id="scalable_ssa-r3-rc05-nobias"),
    pytest.param("scalable_ssa", {"r_n": 1}, id="scalable_ssa-r1"),
    pytest.param("scalable_iwsa", {}, id="scalable_iwsa"),
    pytest.param("scalable_iwsa", {"window_size": 4}, id="scalable_iwsa-w4"),
]
# 14x14 fits the default window 7; 10x10 pads it to 14x14; 3x5 clips it; every grid but 14x14 pads R = 3.
GRIDS = [(14, 14), (10, 10), (3, 5)]


def make(name: str, heads: int = 2, dim: int = DIM, **options) -> torch.nn.Module:
    return tokenmix.create_mixer(name, dim, num_heads=heads, **options).eval()


def measured_flops(mixer: torch.nn.Module, hw: tuple[int, int]) -> int:
    return flop_count(mixer, hw[0] * hw[1], mixer.dim, hw)


def count(name: str, hw: tuple[int, int], heads: int = 2, dim: int = DIM, **options) -> OpCounts:
    return count_ops(make(name, heads, dim, **options), hw[0] * hw[1], hw=hw)


def sdpa_padding_mults(mixer: torch.nn.Module, parts) -> int:
    """The products SDPA does on zero columns: tokenmix.ops.spatial.attend pads q/k and v to one width (for
    the fused kernel) when they differ, as in ScalableViT's SSA (q/k width scaled by r_c). The count is the
    mechanism's; the measured FLOPs include the padding."""
    qk_width = getattr(mixer, "qk_dim", mixer.dim) // mixer.num_heads
    v_width = mixer.dim // mixer.num_heads
    if qk_width == v_width:
        return 0
    scores = next(p for p in parts if p.label.startswith("scores"))
    pairs = scores.ops.mults // qk_width  # heads x queries x keys
    return pairs * abs(qk_width - v_width)  # on the narrower side's product


# -- 1. against FlopCounterMode ----------------------------------------------------------------------------
@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("hw", GRIDS, ids=lambda hw: f"{hw[0]}x{hw[1]}")
@pytest.mark.parametrize(("name", "options"), CASES)
def test_gemm_part_equals_measured_flops(name, options, hw, heads):
    torch.manual_seed(0)
    mixer = make(name, heads, **options)
    parts = grid_parts(mixer, hw)
    counts = count_ops(mixer, hw[0] * hw[1], hw=hw)
    assert counts == total(parts)
    assert all(isinstance(v, int) and v >= 0 for v in counts.as_dict().values())
    assert counts.exps > 0 and counts.divs > 0
    flops = measured_flops(mixer, hw)
    padding = 2 * sdpa_padding_mults(mixer, parts)
    assert flops == 2 * gemm_mults(parts) + padding, [(p.label, p.ops.mults) for p in parts if p.gemm]
    ratio = (flops - padding) / (counts.mults + counts.adds)
    assert RATIO_BOUNDS[0] <= ratio <= RATIO_BOUNDS[1], ratio


# -- 2. closed forms -----------------------------------------------------------------------------------------
def padded_cells(hw: tuple[int, int], window: tuple[int, int]) -> tuple[int, int]:
    """(N_p, T): cells of the grid padded to a multiple of the clipped window, cells per window."""
    mh, mw = min(window[0], hw[0]), min(window[1], hw[1])
    return math.ceil(hw[0] / mh) * mh * math.ceil(hw[1] / mw) * mw, mh * mw


@pytest.mark.parametrize("hw", [(14, 14), (10, 10), (3, 5), (9, 16)], ids=lambda hw: f"{hw[0]}x{hw[1]}")
@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("bias", [True, False])
def test_window_closed_forms(hw, heads, bias):
    n, c, h, b = hw[0] * hw[1], 32, heads, int(bias)
    n_p, t = padded_cells(hw, (7, 7))
    lsa = OpCounts(mults=4 * n * c * c + 2 * n_p * t * c,
                   adds=4 * n * c * (c - 1) + 4 * b * n * c + 2 * n_p * t * c - n_p * c - h * n_p,
                   divs=2 * h * n_p * t, exps=h * n_p * t)
    assert count("twins_lsa", hw, heads, c, bias=bias) == lsa
    swin = lsa + OpCounts(adds=h * n_p * t)
    assert count("swin", hw, heads, c, bias=bias) == swin
    assert count("swin", hw, heads, c, bias=bias, shift=True) == swin
    assert count("scalable_iwsa", hw, heads, c, bias=bias) == lsa + OpCounts(mults=9 * n * c, adds=10 * n * c)


@pytest.mark.parametrize("hw", [(14, 14), (10, 10), (3, 5), (9, 16)], ids=lambda hw: f"{hw[0]}x{hw[1]}")
@pytest.mark.parametrize("r", [1, 2, 3])
@pytest.mark.parametrize("bias", [True, False])
def test_reduction_closed_forms(hw, r, bias):
    n, c, h, b = hw[0] * hw[1], 32, 2, int(bias)
    nr = math.ceil(hw[0] / r) * math.ceil(hw[1] / r)
    red = r > 1
    pvt = OpCounts(
        mults=2 * n * c * c + 2 * nr * c * c + 2 * n * nr * c + red * (nr * c * c * r * r + 2 * c * nr),
        adds=2 * (n + nr) * c * (c - 1 + b) + 2 * n * nr * c - n * c - h * n
        + red * (nr * c * c * r * r + (4 * c - 2) * nr),
        divs=2 * h * n * nr + red * (c + 2) * nr, exps=h * n * nr)
    assert count("pvt", hw, h, c, sr_ratio=r, bias=bias) == pvt
    assert count("twins_gsa", hw, h, c, sr_ratio=r, bias=bias) == pvt

    q = h * round(c // h * 1.25)
    if red:
        ssa = OpCounts(
            mults=n * c * q + nr * q * q + nr * q * c + n * c * c + n * nr * (q + c) + nr * c * r * r + nr * q * c
            + 4 * nr * q,
            adds=n * q * (c - 1) + nr * q * (q - 1) + nr * c * (q - 1) + n * c * (c - 1)
            + b * (n * q + nr * q + nr * c + n * c) + n * nr * (q + c) - n * c - h * n + nr * c * r * r
            + nr * q * c + (4 * q - 2) * nr + nr * q,
            divs=2 * h * n * nr + (q + 2) * nr + nr * q, exps=h * n * nr)
    else:
        ssa = OpCounts(
            mults=2 * n * c * q + 2 * n * c * c + n * n * (q + c),
            adds=n * q * (c - 1) * 2 + 2 * n * c * (c - 1) + b * 2 * (n * q + n * c) + n * n * (q + c) - n * c - h * n,
            divs=2 * h * n * n, exps=h * n * n)
    assert count("scalable_ssa", hw, h, c, r_n=r, bias=bias) == ssa


@pytest.mark.parametrize("heads", [1, 2, 4])
def test_plain_attention_is_004_table_3_bidirectional(heads):
    """pvt with R = 1 and no biases is multi-head self-attention: 004 Table 3's counts with every one of the
    l tokens seeing all l keys (the causal sum over t replaced by l terms of l), d = dim, n = heads."""
    hw, d, n = (6, 7), 32, heads
    l = hw[0] * hw[1]  # noqa: E741 (the paper's symbol)
    expected = OpCounts(mults=4 * l * d * d + 2 * l * l * d, adds=4 * l * d * d + 2 * l * l * d - 5 * l * d - l * n,
                        divs=2 * n * l * l, exps=n * l * l)
    assert count("pvt", hw, heads, d, sr_ratio=1, bias=False) == expected
    assert count("scalable_ssa", hw, heads, d, r_n=1, r_c=1.0, bias=False) == expected


def test_attention_core_agrees_with_the_shared_softmax_helper():
    """The vision mixers' attention parts agree with the shared per-head softmax attention count of
    tokenmix.counting.opcounts (window: per window; reduction: N queries over N' keys)."""
    from tokenmix.counting import opcounts

    c, heads, hw = 32, 2, (10, 10)
    n = hw[0] * hw[1]
    projections = opcounts.linear_ops(n, c, c, True) * 4
    n_p, t = padded_cells(hw, (7, 7))
    windows = opcounts.softmax_attention_ops(t, t, c // heads) * (heads * n_p // t)
    assert count("twins_lsa", hw, heads, c) == projections + windows
    conv_norm = OpCounts(mults=25 * c * c * 4 + 25 * 2 * c, adds=25 * c * c * 4 + 25 * (4 * c - 2), divs=25 * (c + 2))
    reduced = opcounts.linear_ops(n, c, c, True) * 2 + opcounts.linear_ops(25, c, c, True) * 2 + conv_norm
    assert count("pvt", hw, heads, c) == reduced + opcounts.softmax_attention_ops(n, 25, c // heads) * heads


def test_padding_and_shift_are_counted_as_computed():
    """The window attention runs on the padded grid: 10x10 with window 7 scores as many pairs as 14x14
    (4 windows of 49); the shift changes nothing; the projections see only the real cells."""
    padded, full = count("swin", (10, 10)), count("swin", (14, 14))
    assert padded.exps == full.exps == 2 * 4 * 49 * 49 and padded.divs == full.divs
    assert count("swin", (10, 10), shift=True) == padded
    assert full.mults - padded.mults == 4 * (196 - 100) * DIM * DIM


# -- 3. complexity scaling -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "options"), [
    ("swin", {}), ("swin", {"shift": True}), ("twins_lsa", {}), ("scalable_iwsa", {}),
])
def test_window_mixers_are_linear_in_n(name, options):
    """002 §3.1/3.3/3.4: O(M^2 N d) at a fixed window M. On grids that are multiples of the window every
    term is proportional to N; on others the padding adds less than a window per row/column."""
    for small, large in [((7, 7), (14, 14)), ((28, 28), (56, 56)), ((56, 56), (112, 112))]:
        a, b = count(name, small, **options), count(name, large, **options)
        for field, va in a.as_dict().items():
            assert getattr(b, field) == 4 * va, (field, small, large)
    for small, large in [((50, 50), (100, 100)), ((100, 100), (200, 200))]:  # padded to 56, 105, 203
        assert 3.4 <= count(name, large, **options).total / count(name, small, **options).total <= 4.0


@pytest.mark.parametrize(("name", "option"), [("pvt", "sr_ratio"), ("twins_gsa", "sr_ratio"),
                                              ("scalable_ssa", "r_n")])
@pytest.mark.parametrize("r", [2, 4])
def test_reduction_mixers_are_quadratic_with_a_reduced_constant(name, option, r):
    """002 §3.2-3.4: O(N^2 d / R^2). The scores are exactly N N' = N^2 / R^2 (grid divisible by R); the
    total tends to 16x for 4N as the quadratic part dominates, and to 1/R^2 of plain attention (R = 1)."""
    small, large = (112, 112), (224, 224)
    a, b = count(name, small, **{option: r}), count(name, large, **{option: r})
    n = small[0] * small[1]
    assert a.exps == 2 * n * (n // (r * r)) and b.exps == 16 * a.exps
    assert 15.0 <= b.total / a.total <= 16.0
    plain = count(name, large, **{option: 1})
    assert b.exps * r * r == plain.exps
    assert abs(b.total / plain.total - 1 / (r * r)) <= 0.01 / r


# -- 4. errors -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["swin", "pvt", "twins_lsa", "twins_gsa", "scalable_ssa", "scalable_iwsa"])
def test_count_ops_needs_the_right_grid(name):
    mixer = make(name)
    with pytest.raises(ValueError, match=rf"^{name}: .*hw=\(H, W\)"):
        count_ops(mixer, 196)
    with pytest.raises(ValueError, match=rf"^{name}: hw=\(14, 13\) has 182 cells but length=196"):
        count_ops(mixer, 196, hw=(14, 13))
    with pytest.raises(ValueError, match=rf"^{name}: hw must be a pair"):
        count_ops(mixer, 196, hw=(196,))
    with pytest.raises(ValueError, match=rf"^{name}: length must be a positive int"):
        count_ops(mixer, 0, hw=(1, 1))
