"""Sparse Transformer attention (sparse_strided, sparse_fixed): pattern, block-wise fast path, decoding."""

from __future__ import annotations

import math

import pytest
import torch

import tokenmix
from conftest import assert_matches_reference, assert_padding_invisible, build, lengths_mask
from tokenmix.mixers.sparse import fast_score_shape, sparse_pattern

NAMES = {"strided": "sparse_strided", "fixed": "sparse_fixed"}


# (N, stride, summary): multiple of the stride, not a multiple, N < stride, stride 1, summary = stride.
SHAPES = [(12, 4, 1), (13, 4, 2), (5, 8, 1), (9, 1, 1), (10, 3, 3), (17, 5, 2), (7, 7, 7)]


def brute_force_sets(n: int, kind: str, ell: int, c: int, causal: bool) -> list[set[int]]:
    """S_i = A_i^(1) ∪ A_i^(2) straight from the definitions (Child et al. 2019 §4.2-4.3; 002 §4.1)."""
    sets = []
    for i in range(n):
        keys = range(i + 1) if causal else range(n)
        if kind == "strided":
            a1 = {j for j in keys if (i - ell < j <= i if causal else abs(i - j) < ell)}
            a2 = {j for j in keys if (i - j) % ell == 0}
        else:
            a1 = {j for j in keys if j // ell == i // ell}
            a2 = {j for j in keys if j % ell in range(ell - c, ell)}
        sets.append(a1 | a2)
    return sets


def make(kind: str, causal: bool, stride: int | None, summary: int = 1, **kw) -> torch.nn.Module:
    opts = {"stride": stride} | ({"summary": summary} if kind == "fixed" else {})
    return build(NAMES[kind], causal=causal, **(kw | opts))


@pytest.mark.parametrize("kind", ["strided", "fixed"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
@pytest.mark.parametrize("n,stride,summary", SHAPES + [(16, 4, 4), (6, 2, 1), (1, 3, 1)])
def test_pattern_matches_brute_force_sets(kind, causal, n, stride, summary):
    summary = summary if kind == "fixed" else 1
    expected = torch.zeros(n, n, dtype=torch.bool)
    for i, keys in enumerate(brute_force_sets(n, kind, stride, summary, causal)):
        expected[i, sorted(keys)] = True
    assert torch.equal(sparse_pattern(n, kind, stride, summary, causal), expected)
    # ... and it is the pattern the mixer's reference path uses
    mixer = make(kind, causal, stride, summary, max_len=None)
    assert torch.equal(mixer.pattern(n), expected)


def test_paper_window_with_i_minus_l_gives_the_same_union():
    """002/Child et al. write A(1) = {max(0, i - l), ..., i}; i - l is in A(2), so the union is unchanged."""
    n, ell = 20, 4
    for i, keys in enumerate(brute_force_sets(n, "strided", ell, 1, True)):
        paper = set(range(max(0, i - ell), i + 1)) | {j for j in range(i + 1) if (i - j) % ell == 0}
        assert keys == paper


def test_degenerate_patterns_are_full_attention():
    n = 11
    full = torch.ones(n, n, dtype=torch.bool)
    assert torch.equal(sparse_pattern(n, "fixed", 4, 4, True), full.tril())  # every position is a summary
    assert torch.equal(sparse_pattern(n, "strided", 1, 1, True), full.tril())
    assert torch.equal(sparse_pattern(n, "strided", n, 1, False), full)  # window covers everything


@pytest.mark.parametrize("kind", ["strided", "fixed"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
@pytest.mark.parametrize("padded", [False, True], ids=["dense", "padded"])
@pytest.mark.parametrize("n,stride,summary", SHAPES)
def test_blockwise_matches_dense_reference(kind, causal, padded, n, stride, summary):
    torch.manual_seed(n * 31 + stride)
    mixer = make(kind, causal, stride, summary, dim=8, heads=2, max_len=None)
    mask = lengths_mask([n, max(1, n // 2), 1], n) if padded else None
    assert_matches_reference(mixer, torch.randn(3, n, 8, dtype=torch.float64), mask)


@pytest.mark.parametrize("kind", ["strided", "fixed"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
def test_reference_is_one_softmax_over_the_union(kind, causal):
    """The reference equals a per-query loop: softmax(q_i K_S^T / sqrt(d)) V_S over S_i from the sets."""
    torch.manual_seed(7)
    n, ell, c = 10, 3, 2
    mixer = make(kind, causal, ell, c, dim=4, heads=1, max_len=None)
    x = torch.randn(1, n, 4, dtype=torch.float64)
    q, k, v = (t[0, 0] for t in mixer.qkv_heads(x))
    rows = []
    for i, keys in enumerate(brute_force_sets(n, kind, ell, c if kind == "fixed" else 1, causal)):
        s = sorted(keys)
        w = torch.softmax(q[i] @ k[s].T / math.sqrt(4), dim=-1)
        rows.append(w @ v[s])
    expected = mixer.proj(torch.stack(rows)[None])
    torch.testing.assert_close(mixer.forward_reference(x), expected, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(mixer(x), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["strided", "fixed"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
def test_padding_invisible_and_all_padding_row_finite(kind, causal):
    torch.manual_seed(8)
    mixer = make(kind, causal, 3, 2, max_len=None)
    n = 14
    mask = lengths_mask([14, 8, 2], n)
    assert_padding_invisible(mixer, torch.randn(3, n, 16, dtype=torch.float64), mask, atol=1e-9)
    x = torch.randn(2, n, 16, dtype=torch.float64, requires_grad=True)
    y = mixer(x, lengths_mask([n, 0], n))
    assert torch.count_nonzero(y[1]) == 0 and torch.isfinite(y).all()
    y.sum().backward()
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("kind", ["strided", "fixed"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
def test_scores_evaluated_grow_like_n_times_l_plus_n_over_l(kind, causal):
    n, ell = 4096, 64
    shape = fast_score_shape(n, kind, ell, 1, causal)
    assert math.prod(shape) < 0.1 * n * n
    assert math.prod(shape) <= n * ((3 if kind == "strided" else 1) * ell + n // ell)
    # the fast path really evaluates a score tensor of that shape (per batch row and head)
    mixer = make(kind, causal, ell, 1, dim=2, heads=1, max_len=None, dtype=torch.float32)
    with torch.no_grad():
        mixer(torch.randn(1, n, 2))
    assert mixer.last_score_shape == (1, 1, *shape)
    # and at a length that is not a multiple of the stride
    with torch.no_grad():
        mixer(torch.randn(1, 1000, 2))
    assert mixer.last_score_shape == (1, 1, *fast_score_shape(1000, kind, ell, 1, causal))
    assert math.prod(mixer.last_score_shape) < 0.25 * 1000 * 1000


def test_auto_stride():
    free = tokenmix.create_mixer("sparse_strided", 8)
    assert free.score_shape(100)[1] == 10 and free.score_shape(30)[1] == 5  # round(sqrt(N)) per call
    capped = tokenmix.create_mixer("sparse_fixed", 8, max_len=24)
    assert capped.score_shape(24)[1] == 5 and capped.score_shape(9)[1] == 5  # round(sqrt(max_len))
    assert tokenmix.create_mixer("sparse_fixed", 8, summary=3).score_shape(4)[1] == 2  # summary capped


@pytest.mark.parametrize("kind,stride,summary", [("strided", 3, 1), ("strided", 5, 1), ("fixed", 4, 2),
                                                 ("fixed", 3, 1), ("fixed", 2, 2)])
def test_step_by_step_equals_causal_forward(kind, stride, summary):
    torch.manual_seed(9)
    mixer = make(kind, True, stride, summary, heads=2, max_len=None, dtype=torch.float32)
    n = 13
    x = torch.randn(2, n, 16)
    parallel = mixer(x)
    state = mixer.init_state(2)
    steps = []
    for t in range(n):
        y_t, state = mixer.step(x[:, t], state)
        steps.append(y_t)
    assert int(state["t"]) == n and state["k"].shape == (2, 2, n, 8)
    torch.testing.assert_close(torch.stack(steps, dim=1), parallel, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["strided", "fixed"])
def test_decoding_needs_a_fixed_stride_and_respects_max_len(kind):
    name = NAMES[kind]
    with pytest.raises(ValueError, match=f"{name}.*stride"):
        tokenmix.create_mixer(name, 8, causal=True).init_state(1)
    mixer = make(kind, True, 2, 1, dim=8, max_len=3)
    state = mixer.init_state(1)
    for _ in range(3):
        _, state = mixer.step(torch.randn(1, 8, dtype=torch.float64), state)
    with pytest.raises(ValueError, match=name):
        mixer.step(torch.randn(1, 8, dtype=torch.float64), state)


@pytest.mark.parametrize("name", ["sparse_strided", "sparse_fixed"])
@pytest.mark.parametrize("stride", [0, -2, 2.5, True, "4"])
def test_bad_stride_is_rejected_by_name(name, stride):
    with pytest.raises(ValueError, match=f"{name}.*stride"):
        tokenmix.create_mixer(name, 8, stride=stride)


@pytest.mark.parametrize("options", [{"summary": 0}, {"summary": 1.0}, {"summary": 5, "stride": 4},
                                     {"summary": 6, "max_len": 24}])
def test_bad_summary_is_rejected_by_name(options):
    with pytest.raises(ValueError, match="sparse_fixed.*summary"):
        tokenmix.create_mixer("sparse_fixed", 8, **options)


def test_strided_has_no_summary_option():
    with pytest.raises(ValueError, match="sparse_strided"):
        tokenmix.create_mixer("sparse_strided", 8, summary=2)


@pytest.mark.parametrize("name", ["sparse_strided", "sparse_fixed"])
def test_parameter_count_and_info(name):
    mixer = tokenmix.create_mixer(name, 128)
    assert sum(p.numel() for p in mixer.parameters()) == 4 * 128 * 128
    info = tokenmix.mixer_info(name)
    assert info.complexity == "O(N sqrt(N) d)" and info.causal and info.bidirectional and info.padding
    assert info.recurrent and info.multihead and "Child" in info.paper
