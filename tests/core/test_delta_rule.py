"""The (gated) delta rule's three forms agree (tokenmix.ops.delta_rule): forward and gradients, a sequence split
anywhere with its state carried, decoding one token at a time, bf16 within tolerance, and transformers' own
pure-PyTorch gated delta rule (Qwen3-Next) as the peer."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tokenmix.ops.delta_rule import (
    chunk_delta_rule,
    chunk_gated_delta_rule,
    fused_recurrent_delta_rule,
    fused_recurrent_gated_delta_rule,
    naive_recurrent_delta_rule,
    naive_recurrent_gated_delta_rule,
)

FORMS = [naive_recurrent_gated_delta_rule, fused_recurrent_gated_delta_rule,
         lambda *a, **o: chunk_gated_delta_rule(*a, **o, chunk_size=8),
         lambda *a, **o: chunk_gated_delta_rule(*a, **o, chunk_size=5)]


def inputs(b=2, t=23, h=2, hv=2, dk=6, dv=5, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, t, h, dk, generator=g, dtype=dtype)
    k = F.normalize(torch.randn(b, t, h, dk, generator=g, dtype=dtype), dim=-1)
    v = torch.randn(b, t, hv, dv, generator=g, dtype=dtype)
    decay = -torch.rand(b, t, hv, generator=g, dtype=dtype)  # log decay in (-1, 0]
    beta = torch.rand(b, t, hv, generator=g, dtype=dtype)
    state = torch.randn(b, hv, dk, dv, generator=g, dtype=dtype)
    return q, k, v, decay, beta, state


@pytest.mark.parametrize("hv", [2, 4])
def test_the_three_forms_give_the_same_outputs_and_final_state(hv):
    q, k, v, g, beta, s0 = inputs(hv=hv)
    want, want_state = naive_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=s0, output_final_state=True)
    for form in FORMS[1:]:
        o, state = form(q, k, v, g, beta, initial_state=s0, output_final_state=True)
        torch.testing.assert_close(o, want, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(state, want_state, rtol=1e-10, atol=1e-10)
    assert want.shape == v.shape and want_state.shape == s0.shape


def test_the_chunked_form_has_the_reference_gradients():
    q, k, v, g, beta, s0 = (x.requires_grad_() for x in inputs(b=1, t=11, dk=4, dv=3))

    def loss(form):
        o, state = form(q, k, v, g, beta, initial_state=s0, output_final_state=True)
        return (o * torch.linspace(-1, 1, o.numel(), dtype=o.dtype).view_as(o)).sum() + state.square().sum()

    want = torch.autograd.grad(loss(naive_recurrent_gated_delta_rule), (q, k, v, g, beta, s0))
    got = torch.autograd.grad(loss(FORMS[3]), (q, k, v, g, beta, s0))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
    assert torch.autograd.gradcheck(lambda *x: FORMS[2](*x, initial_state=None)[0], (q, k, v, g, beta))


@pytest.mark.parametrize("split", [1, 7, 16, 22])
def test_a_sequence_split_anywhere_with_its_state_carried_is_the_whole(split):
    q, k, v, g, beta, s0 = inputs()
    whole, final = chunk_gated_delta_rule(q, k, v, g, beta, initial_state=s0, output_final_state=True, chunk_size=8)
    first, state = chunk_gated_delta_rule(*(x[:, :split] for x in (q, k, v, g, beta)), initial_state=s0,
                                          output_final_state=True, chunk_size=8)
    rest, state = chunk_gated_delta_rule(*(x[:, split:] for x in (q, k, v, g, beta)), initial_state=state,
                                         output_final_state=True, chunk_size=8)
    torch.testing.assert_close(torch.cat([first, rest], dim=1), whole, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(state, final, rtol=1e-10, atol=1e-10)


def test_decoding_one_token_at_a_time_is_the_whole_sequence():
    q, k, v, g, beta, _ = inputs()
    whole, final = chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True)
    state, outputs = None, []
    for t in range(q.shape[1]):
        o, state = fused_recurrent_gated_delta_rule(*(x[:, t:t + 1] for x in (q, k, v, g, beta)),
                                                    initial_state=state, output_final_state=True)
        outputs.append(o)
    torch.testing.assert_close(torch.cat(outputs, dim=1), whole, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(state, final, rtol=1e-10, atol=1e-10)


def test_float32_tight_and_bfloat16_within_its_precision():
    q, k, v, g, beta, s0 = inputs(t=64, dk=16, dv=16)
    want, _ = naive_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=s0)
    low = [x.float() for x in (q, k, v, g, beta)]
    o32, state32 = chunk_gated_delta_rule(*low, initial_state=s0.float(), output_final_state=True)
    assert o32.dtype == torch.float32 and state32.dtype == torch.float32
    torch.testing.assert_close(o32.double(), want, rtol=1e-4, atol=1e-4)
    o16, _ = chunk_gated_delta_rule(*(x.bfloat16() for x in low), initial_state=s0.float())
    assert o16.dtype == torch.bfloat16
    # bf16 inputs carry 8 bits of mantissa (about 4e-3 relative): the error is the inputs' rounding, not growth
    assert (o16.double() - want).abs().max() < 0.05 * want.abs().max()


def test_the_delta_rule_is_the_gated_one_without_decay():
    q, k, v, _, beta, s0 = inputs()
    zero = torch.zeros_like(beta)
    want = naive_recurrent_gated_delta_rule(q, k, v, zero, beta, initial_state=s0, output_final_state=True)
    for form in (naive_recurrent_delta_rule, fused_recurrent_delta_rule, chunk_delta_rule):
        got = form(q, k, v, beta, initial_state=s0, output_final_state=True)
        torch.testing.assert_close(got[0], want[0], rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(got[1], want[1], rtol=1e-10, atol=1e-10)
    # one key written with beta = 1 is recalled exactly: the delta rule's point (the state holds v for k)
    key = F.normalize(torch.randn(1, 1, 1, 4, dtype=torch.float64), dim=-1)
    value = torch.randn(1, 1, 1, 3, dtype=torch.float64)
    _, state = chunk_delta_rule(key, key, value, torch.ones(1, 1, 1, dtype=torch.float64), output_final_state=True)
    torch.testing.assert_close(state[0, 0].T @ key[0, 0, 0], value[0, 0, 0])


@pytest.mark.parametrize("hv,l2norm", [(2, False), (4, True)])
def test_equal_to_transformers_pure_pytorch_gated_delta_rule(hv, l2norm):
    peer = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
    q, k, v, g, beta, s0 = (x.float() for x in inputs(t=40, hv=hv, dk=8, dv=8))
    want, want_state = peer.torch_chunk_gated_delta_rule(q, k, v, g, beta, initial_state=s0, output_final_state=True,
                                                         use_qk_l2norm_in_kernel=l2norm)
    o, state = chunk_gated_delta_rule(q, k, v, g, beta, initial_state=s0, output_final_state=True,
                                      use_qk_l2norm_in_kernel=l2norm)
    torch.testing.assert_close(o, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(state, want_state, rtol=1e-4, atol=1e-4)


def test_bad_shapes_raise_naming_the_function_and_the_argument():
    q, k, v, g, beta, s0 = inputs()
    with pytest.raises(ValueError, match=r"tokenmix.ops.delta_rule.chunk_gated_delta_rule: beta must be \(B, T, HV\)"):
        chunk_gated_delta_rule(q, k, v, g, beta[:, :-1])
    with pytest.raises(ValueError, match="value heads \\(3\\) must be a multiple"):
        fused_recurrent_gated_delta_rule(q, k, torch.randn(2, 23, 3, 5, dtype=torch.float64), None,
                                         torch.rand(2, 23, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="initial_state must be"):
        naive_recurrent_delta_rule(q, k, v, beta, initial_state=s0[:, :, :-1])
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        chunk_delta_rule(q, k, v, beta, chunk_size=0)
