"""Sparse Transformer attention with its key/value cache as functions (tokenmix.ops.sparse_attn): the three forms
agree for both patterns and every factorization, with and without a cache; a sequence cut anywhere with its cache
carried is the whole; each head reads exactly its pattern's keys; float64 gradients; bad input refused by name."""

from __future__ import annotations

import pytest
import torch

from tokenmix.ops.sparse_attn import fused_recurrent_sparse_attn, naive_sparse_attn, parallel_sparse_attn
from tokenmix.ops.sparse_patterns import sparse_sets


def _inputs(t=14, h=4, seed=0, b=2, dk=5, dv=3):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, t, h, dk, generator=g, dtype=torch.float64),
            torch.randn(b, t, h, dk, generator=g, dtype=torch.float64),
            torch.randn(b, t, h, dv, generator=g, dtype=torch.float64))


@pytest.mark.parametrize("kind, summary", [("strided", 1), ("fixed", 1), ("fixed", 2)])
@pytest.mark.parametrize("factorization", ["merged", "split", "A1", "A2"])
@pytest.mark.parametrize("cached", [0, 5])
def test_the_three_forms_agree(kind, summary, factorization, cached):
    q, k, v = _inputs()
    init = tuple(x[:, :cached] for x in _inputs(t=cached, seed=1)[1:]) if cached else None
    args = (kind, 3, summary, factorization)
    want, want_cache = naive_sparse_attn(q, k, v, *args, initial_state=init, output_final_state=True)
    for form in (fused_recurrent_sparse_attn, parallel_sparse_attn):
        o, cache = form(q, k, v, *args, initial_state=init, output_final_state=True)
        torch.testing.assert_close(o, want, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(cache[0], want_cache[0], rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["strided", "fixed"])
def test_each_query_reads_its_patterns_keys(kind):
    """The union of A(1) and A(2) (Child et al. 2019 §4.2-4.3) written out per query with sparse_sets."""
    q, k, v = _inputs(t=10, h=1)
    o, _ = parallel_sparse_attn(q, k, v, kind, 3, scale=0.4)
    a1, a2 = sparse_sets(10, kind, 3, 1, causal=True)
    for i in range(10):
        keys = torch.nonzero(a1[i] | a2[i])[:, 0]
        w = ((q[:, i, 0, None] * k[:, keys, 0]).sum(-1) * 0.4).softmax(-1)
        torch.testing.assert_close(o[:, i, 0], (w[..., None] * v[:, keys, 0]).sum(1))


@pytest.mark.parametrize("cut", [1, 3, 8, 13])
def test_a_sequence_cut_anywhere_with_its_cache_carried_is_the_whole(cut):
    q, k, v = _inputs()
    args = ("fixed", 4, 2, "split")
    whole, _ = parallel_sparse_attn(q, k, v, *args)
    first, cache = parallel_sparse_attn(q[:, :cut], k[:, :cut], v[:, :cut], *args, output_final_state=True)
    second, cache = fused_recurrent_sparse_attn(q[:, cut:cut + 1], k[:, cut:cut + 1], v[:, cut:cut + 1], *args,
                                                initial_state=cache, output_final_state=True)
    third, _ = parallel_sparse_attn(q[:, cut + 1:], k[:, cut + 1:], v[:, cut + 1:], *args, initial_state=cache)
    torch.testing.assert_close(torch.cat([first, second, third], dim=1), whole, rtol=1e-10, atol=1e-10)


def test_bidirectional_and_float64_gradients():
    q, k, v = _inputs(t=9)
    torch.testing.assert_close(parallel_sparse_attn(q, k, v, "strided", 3, causal=False)[0],
                               naive_sparse_attn(q, k, v, "strided", 3, causal=False)[0], rtol=1e-10, atol=1e-10)
    xs = [x[:1, :7, :2].clone().requires_grad_() for x in (q, k, v)]
    cache = tuple(x[:1, :2, :2].clone().requires_grad_() for x in _inputs(seed=3)[1:])
    assert torch.autograd.gradcheck(
        lambda *a: parallel_sparse_attn(*a[:3], "fixed", 3, 1, "merged", initial_state=a[3:])[0], (*xs, *cache))


def test_bad_input_is_refused_by_name():
    q, k, v = _inputs(h=3)
    where = "tokenmix.ops.sparse_attn.parallel_sparse_attn"
    with pytest.raises(ValueError, match=f"{where}: factorization='split' needs an even number of heads"):
        parallel_sparse_attn(q, k, v, "strided", 3, factorization="split")
    with pytest.raises(ValueError, match=f"{where}: kind must be"):
        parallel_sparse_attn(q, k, v, "dense", 3)
    with pytest.raises(ValueError, match=f"{where}: summary=4 exceeds the stride"):
        parallel_sparse_attn(q, k, v, "fixed", 3, 4)
    with pytest.raises(ValueError, match="naive_sparse_attn: the cache must be"):
        naive_sparse_attn(q, k, v, "fixed", 3, initial_state=(k[:, :2, :2], v[:, :2]))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_computes_in_float32_and_returns_its_dtype(dtype):
    q, k, v = (x.float().to(dtype) for x in _inputs())
    want, _ = naive_sparse_attn(q.float(), k.float(), v.float(), "strided", 3)
    for form in (naive_sparse_attn, fused_recurrent_sparse_attn, parallel_sparse_attn):
        o, _ = form(q, k, v, "strided", 3)
        assert o.dtype == dtype
        torch.testing.assert_close(o.float(), want, rtol=2 * torch.finfo(dtype).eps, atol=2 * torch.finfo(dtype).eps)
