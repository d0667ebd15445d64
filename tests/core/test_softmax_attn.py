"""Softmax attention with its key/value cache as functions (tokenmix.ops.softmax_attn): the three forms agree with
and without a cache and with grouped key/value heads, a sequence cut anywhere with its cache carried is the whole,
the definition, float64 gradients, bad input refused by name (the softmax mixer prefilling in one pass through them:
tests/core/test_mixer_contract.py)."""

from __future__ import annotations

import pytest
import torch

from tokenmix.ops.softmax_attn import fused_recurrent_softmax_attn, naive_softmax_attn, parallel_softmax_attn


def _inputs(t=11, h=4, hkv=4, seed=0, b=2, dk=5, dv=3):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, t, h, dk, generator=g, dtype=torch.float64),
            torch.randn(b, t, hkv, dk, generator=g, dtype=torch.float64),
            torch.randn(b, t, hkv, dv, generator=g, dtype=torch.float64))


@pytest.mark.parametrize("hkv", [4, 2, 1])
@pytest.mark.parametrize("cached", [0, 3])
def test_the_three_forms_agree(hkv, cached):
    q, k, v = _inputs(hkv=hkv)
    init = tuple(x[:, :cached] for x in _inputs(t=cached, hkv=hkv, seed=1)[1:]) if cached else None
    want, want_cache = naive_softmax_attn(q, k, v, initial_state=init, output_final_state=True)
    for form in (fused_recurrent_softmax_attn, parallel_softmax_attn):
        o, cache = form(q, k, v, initial_state=init, output_final_state=True)
        torch.testing.assert_close(o, want, rtol=1e-10, atol=1e-10)
        for a, b in zip(cache, want_cache, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert want_cache[0].shape[1] == cached + 11


def test_the_definition_with_grouped_heads():
    q, k, v = _inputs(t=6, h=4, hkv=2)
    o, _ = parallel_softmax_attn(q, k, v, scale=0.3)
    for i in range(6):
        for head in range(4):
            s = (q[:, i, head, None] * k[:, : i + 1, head // 2]).sum(-1) * 0.3  # (B, i + 1)
            torch.testing.assert_close(o[:, i, head], (s.softmax(-1)[..., None] * v[:, : i + 1, head // 2]).sum(1))
    bidirectional, _ = naive_softmax_attn(q, k, v, causal=False)
    torch.testing.assert_close(parallel_softmax_attn(q, k, v, causal=False)[0], bidirectional)


@pytest.mark.parametrize("cut", [1, 4, 10])
def test_a_sequence_cut_anywhere_with_its_cache_carried_is_the_whole(cut):
    q, k, v = _inputs(hkv=2)
    whole, _ = parallel_softmax_attn(q, k, v)
    first, cache = parallel_softmax_attn(q[:, :cut], k[:, :cut], v[:, :cut], output_final_state=True)
    second, cache = fused_recurrent_softmax_attn(q[:, cut:cut + 1], k[:, cut:cut + 1], v[:, cut:cut + 1],
                                                 initial_state=cache, output_final_state=True)
    third, cache = parallel_softmax_attn(q[:, cut + 1:], k[:, cut + 1:], v[:, cut + 1:], initial_state=cache,
                                         output_final_state=True)
    torch.testing.assert_close(torch.cat([first, second, third], dim=1), whole, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(cache[0], k)


def test_float64_gradients_through_a_cache():
    q, k, v = (x[:1, :4, :2].clone().requires_grad_() for x in _inputs())
    cache = tuple(x[:1, :3, :2].clone().requires_grad_() for x in _inputs(seed=2)[1:])
    assert torch.autograd.gradcheck(lambda *a: parallel_softmax_attn(*a[:3], initial_state=a[3:])[0], (q, k, v, *cache))


def test_bad_input_is_refused_by_name():
    q, k, v = _inputs(hkv=3, h=4)
    with pytest.raises(ValueError, match="parallel_softmax_attn: the query heads .4. must be a multiple"):
        parallel_softmax_attn(q, k, v)
    q, k, v = _inputs()
    with pytest.raises(ValueError, match="naive_softmax_attn: the cache must be"):
        naive_softmax_attn(q, k, v, initial_state=(k[:, :2, :2], v[:, :2]))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_within_a_few_units_in_the_last_place_of_the_float32_result(dtype):
    q, k, v = (x.float().to(dtype) for x in _inputs(hkv=2))
    cache = tuple(x.float().to(dtype) for x in _inputs(t=4, hkv=2, seed=5)[1:])
    want, _ = naive_softmax_attn(q.float(), k.float(), v.float(), initial_state=tuple(c.float() for c in cache))
    for form in (fused_recurrent_softmax_attn, parallel_softmax_attn):
        o, kept = form(q, k, v, initial_state=cache, output_final_state=True)
        assert o.dtype == dtype and kept[0].dtype == dtype
        eps = torch.finfo(dtype).eps
        torch.testing.assert_close(o.float(), want, rtol=4 * eps, atol=4 * eps)
