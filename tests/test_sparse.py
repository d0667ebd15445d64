"""Sparse Transformer attention (sparse_strided, sparse_fixed): pattern, block-wise fast path, decoding."""

from __future__ import annotations

import math

import pytest
import torch
from torch.overrides import TorchFunctionMode

import tokenmix
from conftest import assert_matches_reference, assert_padding_invisible, build, lengths_mask
from tokenmix.counting import OpCounts, count_mixer, count_ops, count_step_ops
from tokenmix.mixers.base import merge_heads
from tokenmix.mixers.sparse import causal_keys, fast_score_shape, sparse_pattern, sparse_sets

NAMES = {"strided": "sparse_strided", "fixed": "sparse_fixed"}


# (N, stride, summary): multiple of the stride, not a multiple, N < stride, stride 1, summary = stride.
SHAPES = [(12, 4, 1), (13, 4, 2), (5, 8, 1), (9, 1, 1), (10, 3, 3), (17, 5, 2), (7, 7, 7)]


def brute_force_parts(n: int, kind: str, ell: int, c: int, causal: bool) -> list[tuple[set[int], set[int]]]:
    """(A_i^(1), A_i^(2)) straight from the definitions (Child et al. 2019 §4.2-4.3; 002 §4.1)."""
    parts = []
    for i in range(n):
        keys = range(i + 1) if causal else range(n)
        if kind == "strided":
            a1 = {j for j in keys if (max(0, i - ell) <= j <= i if causal else abs(i - j) <= ell)}
            a2 = {j for j in keys if (i - j) % ell == 0}
        else:
            a1 = {j for j in keys if j // ell == i // ell}
            a2 = {j for j in keys if j % ell in range(ell - c, ell)}
        parts.append((a1, a2))
    return parts


def brute_force_sets(n: int, kind: str, ell: int, c: int, causal: bool) -> list[set[int]]:
    """S_i = A_i^(1) ∪ A_i^(2)."""
    return [a1 | a2 for a1, a2 in brute_force_parts(n, kind, ell, c, causal)]


def dense(sets: list[set[int]], n: int) -> torch.Tensor:
    out = torch.zeros(n, n, dtype=torch.bool)
    for i, keys in enumerate(sets):
        out[i, sorted(keys)] = True
    return out


def make(kind: str, causal: bool, stride: int | None, summary: int = 1, **kw) -> torch.nn.Module:
    opts = {"stride": stride} | ({"summary": summary} if kind == "fixed" else {})
    return build(NAMES[kind], causal=causal, **(kw | opts))


@pytest.mark.parametrize("kind", ["strided", "fixed"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
@pytest.mark.parametrize("n,stride,summary", SHAPES + [(16, 4, 4), (6, 2, 1), (1, 3, 1)])
def test_pattern_matches_brute_force_sets(kind, causal, n, stride, summary):
    summary = summary if kind == "fixed" else 1
    parts = brute_force_parts(n, kind, stride, summary, causal)
    expected = {"union": dense([a1 | a2 for a1, a2 in parts], n), "A1": dense([a1 for a1, _ in parts], n),
                "A2": dense([a2 for _, a2 in parts], n)}
    for part, pattern in expected.items():
        assert torch.equal(sparse_pattern(n, kind, stride, summary, causal, part=part), pattern), part
    assert torch.equal(torch.stack(sparse_sets(n, kind, stride, summary, causal)), torch.stack(
        [expected["A1"], expected["A2"]]))
    # ... and they are the patterns the mixer's reference path uses, head by head
    mixer = make(kind, causal, stride, summary, max_len=None)
    assert torch.equal(mixer.pattern(n), expected["union"])
    assert torch.equal(mixer.head_patterns(n), expected["union"].expand(2, n, n))
    split = make(kind, causal, stride, summary, heads=4, max_len=None, factorization="split")
    assert torch.equal(split.head_patterns(n), torch.stack([expected["A1"]] * 2 + [expected["A2"]] * 2))
    if causal and n > 1:  # decoding reads the same sets
        for part in expected:
            for t in range(n):
                keys = causal_keys(kind, stride, summary, t, part)
                assert sorted(keys.tolist()) == torch.nonzero(expected[part][t]).flatten().tolist()


def test_union_is_the_same_without_i_minus_l_in_a1():
    """Child et al. write A(1) = {max(0, i - l), ..., i}; their released code's local window has l positions
    (no i - l). i - l is in A(2), so the union, all that the merged form uses, is the same either way."""
    n, ell = 20, 4
    for i, keys in enumerate(brute_force_sets(n, "strided", ell, 1, True)):
        window = set(range(max(0, i - ell + 1), i + 1)) | {j for j in range(i + 1) if (i - j) % ell == 0}
        assert keys == window


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
@pytest.mark.parametrize("factorization", ["merged", "split", "A1", "A2"])
def test_blockwise_matches_dense_reference(kind, causal, padded, n, stride, summary, factorization):
    torch.manual_seed(n * 31 + stride)
    heads = 2 if factorization == "merged" else 4
    mixer = make(kind, causal, stride, summary, dim=8, heads=heads, max_len=None, factorization=factorization)
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
def test_split_is_one_softmax_per_head_over_its_own_set(kind, causal):
    """factorization="split": heads 0..H/2-1 give softmax(q_i K_A1^T / sqrt(d)) V_A1, heads H/2..H-1 the same
    over A2, from the brute-force sets; an empty set (fixed, causal, before the first summary) gives 0."""
    torch.manual_seed(17)
    n, ell, c, heads = 10, 3, 1, 4
    mixer = make(kind, causal, ell, c, dim=8, heads=heads, max_len=None, factorization="split")
    x = torch.randn(1, n, 8, dtype=torch.float64)
    q, k, v = (t[0] for t in mixer.qkv_heads(x))
    parts = brute_force_parts(n, kind, ell, c, causal)
    out = torch.zeros(heads, n, 2, dtype=torch.float64)
    for h in range(heads):
        for i, sets in enumerate(parts):
            s = sorted(sets[0] if h < heads // 2 else sets[1])
            if s:
                out[h, i] = torch.softmax(q[h, i] @ k[h, s].T / math.sqrt(2), dim=-1) @ v[h, s]
    assert (kind == "fixed" and causal) == any(not a2 for _, a2 in parts)  # the empty case is exercised
    expected = mixer.proj(merge_heads(out[None]))
    torch.testing.assert_close(mixer.forward_reference(x), expected, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(mixer(x), expected, rtol=1e-10, atol=1e-12)


def attention_support(mixer: torch.nn.Module, n: int, mask: torch.Tensor | None, reference: bool) -> torch.Tensor:
    """(B, H, N, N) bool: d out[b, h, i] / d v[b, h, j] != 0, i.e. which keys each head's query weights."""
    torch.manual_seed(5)
    b, h, e = (1 if mask is None else mask.shape[0]), mixer.num_heads, mixer.head_dim
    q, k, v = (torch.randn(b, h, n, e, dtype=torch.float64) for _ in range(3))
    attend = mixer._attend_reference if reference else mixer._attend
    jac = torch.autograd.functional.jacobian(lambda vv: attend(q, k, vv, mask), v)
    return torch.stack([torch.stack([jac[bb, hh, :, 0, bb, hh, :, 0] != 0 for hh in range(h)]) for bb in range(b)])


@pytest.mark.parametrize("kind", ["strided", "fixed"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
@pytest.mark.parametrize("reference", [False, True], ids=["fast", "reference"])
def test_each_half_of_the_heads_sees_exactly_its_own_set(kind, causal, reference):
    """The weights each head puts on each key are nonzero exactly on its set: A1 for the first half of the
    heads, A2 for the second (and the union for every head when merged), minus padded keys."""
    n, ell, c = 11, 3, 2
    mask = lengths_mask([n, 7], n)
    parts = brute_force_parts(n, kind, ell, c if kind == "fixed" else 1, causal)
    a1, a2 = dense([p[0] for p in parts], n), dense([p[1] for p in parts], n)
    for factorization, sets in (("split", [a1, a1, a2, a2]), ("merged", [a1 | a2] * 4), ("A1", [a1] * 4),
                                ("A2", [a2] * 4)):
        mixer = make(kind, causal, ell, c, dim=8, heads=4, max_len=None, factorization=factorization)
        for msk in (None, mask):
            support = attention_support(mixer, n, msk, reference)
            keys = torch.ones(support.shape[0], n, dtype=torch.bool) if msk is None else msk
            for b in range(support.shape[0]):
                real = keys[b]
                for h, pattern in enumerate(sets):
                    assert torch.equal(support[b, h][real], (pattern & real[None, :])[real]), (factorization, b, h)


@pytest.mark.parametrize("kind", ["strided", "fixed"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
def test_split_heads_ignore_inputs_outside_their_set(kind, causal):
    """Perturbing input j changes, at query i, the A(1)-heads' output iff j in A_i^(1) and the A(2)-heads'
    iff j in A_i^(2) (read before the output projection that mixes the heads); j = i also moves the query."""
    torch.manual_seed(11)
    n, ell, c = 12, 3, 1
    mixer = make(kind, causal, ell, c, dim=8, heads=2, max_len=None, factorization="split")
    seen: list[torch.Tensor] = []
    mixer.proj.register_forward_hook(lambda module, args, out: seen.append(args[0]))
    x = torch.randn(1, n, 8, dtype=torch.float64)
    mixer(x)
    base = seen.pop()[0]  # (N, dim): heads concatenated, first half of the columns = the A(1) head
    only_a1 = only_a2 = 0
    for j in range(n):
        bumped = x.clone()
        bumped[0, j] += 1.0
        mixer(bumped)
        delta = (seen.pop()[0] - base).abs()
        for i, (a1, a2) in enumerate(brute_force_parts(n, kind, ell, c, causal)):
            if i == j:
                continue
            assert bool(delta[i, :4].any()) == (j in a1), (i, j)
            assert bool(delta[i, 4:].any()) == (j in a2), (i, j)
            only_a1 += j in (a1 - a2)
            only_a2 += j in (a2 - a1)
    assert only_a1 > 0 and only_a2 > 0  # keys of one set only were perturbed, for both halves


@pytest.mark.parametrize("kind", ["strided", "fixed"])
@pytest.mark.parametrize("reference", [False, True], ids=["fast", "reference"])
def test_split_no_causal_leak(kind, reference):
    torch.manual_seed(12)
    n = 10
    mixer = make(kind, True, 3, 2, dim=8, heads=2, max_len=None, factorization="split")
    run = mixer.forward_reference if reference else mixer
    x = torch.randn(2, n, 8, dtype=torch.float64)
    mask = lengths_mask([n, 6], n)
    jac = torch.autograd.functional.jacobian(lambda t: run(t, mask), x)  # (B, N, D, B, N, D)
    for b in range(2):
        for i in range(n):
            assert torch.count_nonzero(jac[b, i, :, b, i + 1:]) == 0, f"output {i} depends on a later input"
            assert torch.count_nonzero(jac[b, i, :, 1 - b]) == 0
            assert bool(mask[b, i]) == bool(jac[b, i, :, b, i].any())


@pytest.mark.parametrize("kind", ["strided", "fixed"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
@pytest.mark.parametrize("factorization", ["merged", "split", "A1", "A2"])
def test_padding_invisible_and_all_padding_row_finite(kind, causal, factorization):
    torch.manual_seed(8)
    mixer = make(kind, causal, 3, 2, max_len=None, factorization=factorization)
    n = 14
    mask = lengths_mask([14, 8, 2], n)
    assert_padding_invisible(mixer, torch.randn(3, n, 16, dtype=torch.float64), mask, atol=1e-9)
    x = torch.randn(2, n, 16, dtype=torch.float64, requires_grad=True)
    y = mixer(x, lengths_mask([n, 0], n))
    assert torch.count_nonzero(y[1]) == 0 and torch.isfinite(y).all()
    y.sum().backward()
    assert torch.isfinite(x.grad).all()


class SoftmaxInputs(TorchFunctionMode):
    """Records the shape of every tensor a softmax is taken of: in the sparse fast path, its score tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.Tensor.softmax, torch.softmax, torch.nn.functional.softmax):
            self.shapes.append(tuple(args[0].shape))
        return func(*args, **(kwargs or {}))


def evaluated_score_shapes(mixer: torch.nn.Module, x: torch.Tensor) -> list[tuple[int, ...]]:
    """The shapes of the score tensors one forward pass of ``mixer`` evaluates, in order."""
    with torch.no_grad(), SoftmaxInputs() as recorder:
        mixer(x)
    return recorder.shapes


@pytest.mark.parametrize("kind", ["strided", "fixed"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
def test_scores_evaluated_grow_like_n_times_l_plus_n_over_l(kind, causal):
    n, ell = 4096, 64
    shape = fast_score_shape(n, kind, ell, 1, causal)
    assert math.prod(shape) < 0.1 * n * n
    assert math.prod(shape) <= n * ((3 if kind == "strided" else 1) * ell + n // ell)
    # the fast path really evaluates a score tensor of that shape (per batch row and head)
    mixer = make(kind, causal, ell, 1, dim=2, heads=1, max_len=None, dtype=torch.float32)
    assert evaluated_score_shapes(mixer, torch.randn(1, n, 2)) == [(1, 1, *shape)]
    assert mixer.score_shapes(n) == {"union": shape}
    # and at a length that is not a multiple of the stride
    shape = fast_score_shape(1000, kind, ell, 1, causal)
    assert evaluated_score_shapes(mixer, torch.randn(1, 1000, 2)) == [(1, 1, *shape)]
    assert math.prod(shape) < 0.25 * 1000 * 1000


def test_auto_stride():
    free = tokenmix.create_mixer("sparse_strided", 8)
    assert free.score_shapes(100)["union"][1] == 10 and free.score_shapes(30)["union"][1] == 5  # per call
    capped = tokenmix.create_mixer("sparse_fixed", 8, max_len=24)
    assert capped.score_shapes(24)["union"][1] == 5 and capped.score_shapes(9)["union"][1] == 5  # sqrt(max_len)
    assert tokenmix.create_mixer("sparse_fixed", 8, summary=3).score_shapes(4)["union"][1] == 2  # summary capped


@pytest.mark.parametrize("kind,stride,summary", [("strided", 3, 1), ("strided", 5, 1), ("fixed", 4, 2),
                                                 ("fixed", 3, 1), ("fixed", 2, 2)])
@pytest.mark.parametrize("factorization", ["merged", "split", "A1", "A2"])
def test_step_by_step_equals_causal_forward(kind, stride, summary, factorization):
    torch.manual_seed(9)
    mixer = make(kind, True, stride, summary, heads=2, max_len=None, dtype=torch.float32,
                 factorization=factorization)
    n = 13
    x = torch.randn(2, n, 16)
    parallel = mixer(x)
    state = mixer.init_state(2)
    steps = []
    for t in range(n):
        y_t, state = mixer.step(x[:, t], state)
        steps.append(y_t)
    assert state["k"].shape == (2, n, 2, 8)  # the cache, tokenmix.ops.sparse_attn's (B, L, H, D)
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


@pytest.mark.parametrize("name", ["sparse_strided", "sparse_fixed"])
@pytest.mark.parametrize("options,match", [
    ({"factorization": "union"}, "factorization"), ({"factorization": None}, "factorization"),
    ({"factorization": "Split"}, "factorization"), ({"factorization": True}, "factorization"),
    ({"factorization": "split", "num_heads": 1}, r"factorization='split'.*even num_heads.*num_heads=1"),
    ({"factorization": "split", "num_heads": 3}, r"factorization='split'.*even num_heads.*num_heads=3"),
])
def test_bad_factorization_is_rejected_by_name(name, options, match):
    dim = 12
    with pytest.raises(ValueError, match=f"{name}.*{match}"):
        tokenmix.create_mixer(name, dim, **options)
    assert "factorization" in tokenmix.mixer_info(name).options


@pytest.mark.parametrize("kind", ["strided", "fixed"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
def test_split_scores_each_half_on_its_own_part_only(kind, causal):
    """Split, the A(1) heads evaluate only the local band and the A(2) heads only the column keys: a pair
    of heads scores what one merged head scores, O(N (l + N / l))."""
    n, ell = 1000, 32
    mixer = make(kind, causal, ell, 1, dim=4, heads=2, max_len=None, dtype=torch.float32, factorization="split")
    shapes = {part: fast_score_shape(n, kind, ell, 1, causal, part) for part in ("union", "A1", "A2")}
    assert evaluated_score_shapes(mixer, torch.randn(1, n, 4)) == [(1, 1, *shapes["A1"]), (1, 1, *shapes["A2"])]
    assert mixer.score_shapes(n) == {"A1": shapes["A1"], "A2": shapes["A2"]}
    assert shapes["A1"][2] + shapes["A2"][2] == shapes["union"][2]  # the union's keys, divided between heads
    assert math.prod(shapes["A1"]) + math.prod(shapes["A2"]) == math.prod(shapes["union"]) < 0.25 * n * n


def projection_ops(mixer: torch.nn.Module, rows: int) -> OpCounts:
    d = mixer.dim
    return OpCounts(mults=4 * rows * d * d, adds=4 * rows * d * (d - 1))


def pairs_ops(pattern: torch.Tensor, e: int) -> OpCounts:
    """One head over a dense pattern, as tokenmix.counting.attention.sparse_pairs documents: queries with no key
    cost nothing."""
    pairs, queries = int(pattern.sum()), int(pattern.any(dim=-1).sum())
    return OpCounts(mults=2 * pairs * e, adds=2 * pairs * e - queries * (e + 1), divs=pairs + queries * e,
                    exps=pairs)


@pytest.mark.parametrize("kind", ["strided", "fixed"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
def test_split_counts_each_head_on_its_own_set(kind, causal):
    """count_ops: projections + H/2 heads over A(1) + H/2 heads over A(2) (brute-force sets); fewer
    operations than merged, where every head scores the union; causal steps sum to the training count."""
    n, ell, c, heads, dim = 20, 4, 2, 4, 16
    parts = brute_force_parts(n, kind, ell, c if kind == "fixed" else 1, causal)
    a1, a2 = dense([p[0] for p in parts], n), dense([p[1] for p in parts], n)
    split = make(kind, causal, ell, c, dim=dim, heads=heads, max_len=24, factorization="split")
    merged = make(kind, causal, ell, c, dim=dim, heads=heads, max_len=24)
    e = dim // heads
    assert count_ops(split, n) == projection_ops(split, n) + 2 * pairs_ops(a1, e) + 2 * pairs_ops(a2, e)
    assert count_ops(merged, n) == projection_ops(merged, n) + 4 * pairs_ops(a1 | a2, e)
    assert count_ops(split, n).exps == 2 * int(a1.sum() + a2.sum()) < count_ops(merged, n).exps
    if causal:
        steps = [count_step_ops(split, t) for t in range(1, n + 1)]
        assert sum(steps, OpCounts()) == count_ops(split, n)
        assert count_step_ops(split, n) == projection_ops(split, 1) + 2 * pairs_ops(a1[-1:], e) + 2 * pairs_ops(
            a2[-1:], e)


@pytest.mark.parametrize("name", ["sparse_strided", "sparse_fixed"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
def test_split_counts_against_flop_counter_and_growth(name, causal):
    """As tests/test_counting.py does for the merged form: FlopCounterMode's FLOPs over (mults + adds) in
    [1, 1.6] (the blocks score some masked-out keys), and O(l sqrt(l) d) growth at the automatic stride."""
    r = count_mixer(name, dim=32, max_len=64, heads=2, causal=causal, options={"factorization": "split"})
    assert 1.0 <= r.flop_ratio <= 1.6
    merged = count_mixer(name, dim=32, max_len=64, heads=2, causal=causal, measure_flops=False)
    assert r.train.total < merged.train.total
    mixer = tokenmix.create_mixer(name, 8, num_heads=2, causal=causal, factorization="split")
    growth = count_ops(mixer, 2048).total / count_ops(mixer, 1024).total
    assert 2.2 < growth < 2 ** 1.5 + 0.05


@pytest.mark.parametrize("kind", ["sparse_strided", "sparse_fixed"])
def test_interleaved_layers_alternate_the_two_sets(kind):
    """Child et al. (2019) §4.3's interleaved form: a layer pattern whose layers attend to A(1), then A(2)."""
    from tokenmix.models import CausalLM

    torch.manual_seed(0)
    lm = CausalLM(20, [f"{kind}:factorization=A1", f"{kind}:factorization=A2"], 16, 4, 12, num_heads=2)
    assert [b.mixer.head_parts() for b in lm.blocks] == [(("A1", 2),), (("A2", 2),)] * 2
    ids = torch.randint(0, 20, (2, 9))
    assert torch.equal(lm.generate(ids[:, :3], 5, seed=0), lm.generate(ids[:, :3], 5, seed=0, use_step=False))


@pytest.mark.parametrize("name", ["sparse_strided", "sparse_fixed"])
@pytest.mark.parametrize("factorization", ["merged", "split", "A1", "A2"])
def test_a_prompt_continuing_a_cache_takes_one_block_wise_pass_and_gives_the_steps(name, factorization, monkeypatch):
    """Prefill from a state already holding tokens: the block-wise forward over the cache and the new keys, with the
    pattern counted from the cache's start, equals one step per token (outputs and cache), with no step taken."""
    torch.manual_seed(3)
    mixer = tokenmix.create_mixer(name, 16, num_heads=4, causal=True, stride=3, factorization=factorization).double()
    x = torch.randn(2, 17, 16, dtype=torch.float64)
    state, steps = mixer.init_state(2), []
    for t in range(17):
        y, state = mixer.step(x[:, t], state)
        steps.append(y)
    monkeypatch.setattr(type(mixer), "_step_heads", lambda *a: pytest.fail("the prompt went step by step"))
    first, cache = mixer.prefill(x[:, :5], mixer.init_state(2))
    rest, cache = mixer.prefill(x[:, 5:], cache)
    torch.testing.assert_close(torch.cat([first, rest], 1), torch.stack(steps, 1), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(cache["k"], state["k"])
