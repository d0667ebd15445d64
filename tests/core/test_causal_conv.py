"""The causal convolution behind the Extractors and BaseConv as functions (tokenmix.ops.causal_conv): the three forms
agree for scalar, per-channel and matrix taps, with and without a state, on both paths; a sequence cut anywhere with
its state carried is the whole; the state is the last K - 1 inputs; float64 gradients; bad input refused by name
(the two mechanisms decoding and prefilling in one pass through them: tests/core/test_mixer_contract.py)."""

from __future__ import annotations

import pytest
import torch

from tokenmix.ops.causal_conv import chunk_causal_conv, fused_recurrent_causal_conv, naive_causal_conv

D = 4


def _taps(kind, k, seed=0):
    g = torch.Generator().manual_seed(seed)
    shape = {"scalar": (k,), "vector": (k, D), "matrix": (k, D, D)}[kind]
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def _x(t, seed=1, b=2):
    return torch.randn(b, t, D, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("kind", ["scalar", "vector", "matrix"])
@pytest.mark.parametrize("k", [1, 3, 9])
@pytest.mark.parametrize("with_state", [False, True])
def test_the_three_forms_agree(kind, k, with_state):
    x, w = _x(13), _taps(kind, k)
    bias = torch.randn(D, dtype=torch.float64)
    init = _x(k - 1, seed=2) if with_state else None
    want, want_state = naive_causal_conv(x, w, bias, initial_state=init, output_final_state=True)
    for form, options in ((fused_recurrent_causal_conv, {}), (chunk_causal_conv, {"path": "direct"}),
                          (chunk_causal_conv, {"path": "fft"}), (chunk_causal_conv, {})):
        y, state = form(x, w, bias, initial_state=init, output_final_state=True, **options)
        torch.testing.assert_close(y, want, rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(state, want_state, rtol=0, atol=0)


def test_the_sum_is_the_extractors_equation_and_the_state_the_last_inputs():
    """e_i = sum_{k=0}^{K-1} u_{i-k} w_k (inputs before the first are zero); the state holds u_{T-K+1..T-1}."""
    x, w = _x(7), _taps("vector", 3)
    y, state = chunk_causal_conv(x, w, output_final_state=True)
    for i in range(7):
        want = sum(x[:, i - j] * w[j] for j in range(3) if i - j >= 0)
        torch.testing.assert_close(y[:, i], want)
    torch.testing.assert_close(state, x[:, -2:])
    _, short = chunk_causal_conv(x[:, :1], w, output_final_state=True)
    torch.testing.assert_close(short, torch.cat([torch.zeros_like(x[:, :1]), x[:, :1]], dim=1))


@pytest.mark.parametrize("cut", [1, 2, 5, 11])
def test_a_sequence_cut_anywhere_with_its_state_carried_is_the_whole(cut):
    x, w = _x(12), _taps("matrix", 4)
    whole, whole_state = chunk_causal_conv(x, w, output_final_state=True)
    first, state = chunk_causal_conv(x[:, :cut], w, output_final_state=True, path="fft")
    second, state = fused_recurrent_causal_conv(x[:, cut:cut + 1], w, initial_state=state, output_final_state=True)
    third, state = chunk_causal_conv(x[:, cut + 1:], w, initial_state=state, output_final_state=True)
    torch.testing.assert_close(torch.cat([first, second, third], dim=1), whole, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(state, whole_state)


def test_float64_gradients_with_a_state():
    x, w, init = _x(6, b=1).requires_grad_(), _taps("vector", 3).requires_grad_(), _x(2, seed=3, b=1)
    init.requires_grad_()
    bias = torch.randn(D, dtype=torch.float64, requires_grad=True)
    for path in ("direct", "fft"):
        assert torch.autograd.gradcheck(lambda *a: chunk_causal_conv(*a[:3], initial_state=a[3], path=path)[0],
                                        (x, w, bias, init))


def test_low_precision_keeps_its_dtype_and_the_float32_result():
    x, w = _x(10).float(), _taps("vector", 3).float()
    for dtype in (torch.bfloat16, torch.float16):
        y, state = chunk_causal_conv(x.to(dtype), w.to(dtype), output_final_state=True)
        want, _ = chunk_causal_conv(x.to(dtype).float(), w.to(dtype).float())
        assert y.dtype == dtype and state.dtype == dtype
        torch.testing.assert_close(y.float(), want, rtol=2 * torch.finfo(dtype).eps, atol=2 * torch.finfo(dtype).eps)


def test_bad_input_is_refused_by_name():
    x = _x(5)
    where = "tokenmix.ops.causal_conv.chunk_causal_conv"
    with pytest.raises(ValueError, match=f"{where}: weight must be"):
        chunk_causal_conv(x, torch.randn(3, D + 1, dtype=torch.float64))
    with pytest.raises(ValueError, match=rf"{where}: initial_state must be the last K - 1 inputs, \(B, K - 1, D\)"):
        chunk_causal_conv(x, _taps("vector", 3), initial_state=_x(3))
    with pytest.raises(ValueError, match=f"{where}: path must be"):
        chunk_causal_conv(x, _taps("vector", 3), path="fast")
    with pytest.raises(ValueError, match="fused_recurrent_causal_conv: x must be"):
        fused_recurrent_causal_conv(x[0], _taps("vector", 3))
