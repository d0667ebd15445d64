"""Linear attention with decay (tokenmix.ops.gla): GLA, its scalar-gated case and retention agree across their
three forms (forward, gradients, split with the state carried, token-by-token decoding, bf16), and with the
papers' parallel forms written out as masked matrices."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tokenmix.ops.gla import (
    chunk_gla,
    chunk_retention,
    chunk_simple_gla,
    fused_recurrent_gla,
    fused_recurrent_retention,
    fused_recurrent_simple_gla,
    naive_recurrent_gla,
    retention_decays,
)


def inputs(b=2, t=23, h=3, dk=6, dv=5, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(b, t, h, dk, generator=g, dtype=dtype) for _ in range(2))
    v = torch.randn(b, t, h, dv, generator=g, dtype=dtype)
    gk = F.logsigmoid(torch.randn(b, t, h, dk, generator=g, dtype=dtype))  # GLA's gates: log of a sigmoid
    state = torch.randn(b, h, dk, dv, generator=g, dtype=dtype)
    return q, k, v, gk, state


GLA_FORMS = [fused_recurrent_gla, lambda *a, **o: chunk_gla(*a, **o, chunk_size=8),
             lambda *a, **o: chunk_gla(*a, **o, chunk_size=5)]
SIMPLE_FORMS = [fused_recurrent_simple_gla, lambda *a, **o: chunk_simple_gla(*a, **o, chunk_size=8),
                lambda *a, **o: chunk_simple_gla(*a, **o, chunk_size=64)]


def test_gla_three_forms_give_the_same_outputs_and_final_state():
    q, k, v, gk, s0 = inputs()
    want, want_state = naive_recurrent_gla(q, k, v, gk, initial_state=s0, output_final_state=True)
    for form in GLA_FORMS:
        o, state = form(q, k, v, gk, initial_state=s0, output_final_state=True)
        torch.testing.assert_close(o, want, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(state, want_state, rtol=1e-10, atol=1e-10)


def test_simple_gla_is_gla_with_one_decay_for_every_key_dimension():
    q, k, v, gk, s0 = inputs()
    g = gk[..., 0]
    want, want_state = naive_recurrent_gla(q, k, v, g[..., None].expand_as(gk), initial_state=s0,
                                           output_final_state=True)
    for form in SIMPLE_FORMS:
        o, state = form(q, k, v, g, initial_state=s0, output_final_state=True)
        torch.testing.assert_close(o, want, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(state, want_state, rtol=1e-10, atol=1e-10)


def test_the_scalar_gated_form_is_the_masked_quadratic_form():
    """The dual (parallel) form of Mamba-2 (Dao & Gu 2024, eq. 16) and of retention (Sun et al. 2023, eq. 5):
    O = ((scale Q K^T) * L) V with L_ij = exp(g_{j+1} + ... + g_i) for j <= i, 0 above."""
    q, k, v, gk, _ = inputs(b=1, h=2)
    g = gk[..., 0]
    cum = g.transpose(1, 2).cumsum(-1)  # (B, H, T)
    mask = torch.ones(q.shape[1], q.shape[1], dtype=torch.bool).tril()
    decay = torch.exp((cum[..., :, None] - cum[..., None, :]).masked_fill(~mask, float("-inf")))
    scores = (q.transpose(1, 2) @ k.transpose(1, 2).transpose(-1, -2)) / math.sqrt(q.shape[-1])
    want = ((scores * decay) @ v.transpose(1, 2)).transpose(1, 2)
    torch.testing.assert_close(chunk_simple_gla(q, k, v, g, chunk_size=4)[0], want, rtol=1e-10, atol=1e-10)


def test_retention_uses_retnets_decays_and_is_its_parallel_form():
    q, k, v, _, _ = inputs(b=1, h=4)
    gammas = retention_decays(4).exp()
    torch.testing.assert_close(gammas, torch.tensor([1 - 2.0 ** (-5 - h) for h in range(4)], dtype=gammas.dtype))
    t = q.shape[1]
    n, m = torch.arange(t)[:, None], torch.arange(t)[None, :]
    decay = torch.where(n >= m, gammas[:, None, None].double() ** (n - m).clamp(min=0), 0.0)  # D_nm = gamma^(n-m)
    scores = q.transpose(1, 2) @ k.transpose(1, 2).transpose(-1, -2) / math.sqrt(q.shape[-1])
    want = ((scores * decay) @ v.transpose(1, 2)).transpose(1, 2)
    torch.testing.assert_close(chunk_retention(q, k, v, chunk_size=8)[0], want, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(fused_recurrent_retention(q, k, v)[0], want, rtol=1e-10, atol=1e-10)


def test_the_chunked_forms_have_the_reference_gradients():
    q, k, v, gk, s0 = (x.requires_grad_() for x in inputs(b=1, t=11, h=2, dk=4, dv=3))

    def loss(form, gate):
        o, state = form(q, k, v, gate, initial_state=s0, output_final_state=True)
        return (o * torch.linspace(-1, 1, o.numel(), dtype=o.dtype).view_as(o)).sum() + state.square().sum()

    want = torch.autograd.grad(loss(naive_recurrent_gla, gk), (q, k, v, gk, s0))
    got = torch.autograd.grad(loss(GLA_FORMS[2], gk), (q, k, v, gk, s0))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
    g = gk[..., 0].detach().requires_grad_()
    assert torch.autograd.gradcheck(lambda *x: chunk_simple_gla(*x, chunk_size=4)[0], (q, k, v, g))


@pytest.mark.parametrize("split", [1, 9, 16, 22])
def test_a_sequence_split_anywhere_with_its_state_carried_is_the_whole(split):
    q, k, v, gk, s0 = inputs()
    for form, gate in ((GLA_FORMS[1], gk), (SIMPLE_FORMS[1], gk[..., 0])):
        whole, final = form(q, k, v, gate, initial_state=s0, output_final_state=True)
        first, state = form(*(x[:, :split] for x in (q, k, v, gate)), initial_state=s0, output_final_state=True)
        rest, state = form(*(x[:, split:] for x in (q, k, v, gate)), initial_state=state, output_final_state=True)
        torch.testing.assert_close(torch.cat([first, rest], dim=1), whole, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(state, final, rtol=1e-10, atol=1e-10)


def test_decoding_one_token_at_a_time_is_the_whole_sequence():
    q, k, v, gk, _ = inputs()
    whole, final = chunk_gla(q, k, v, gk, output_final_state=True)
    state, outputs = None, []
    for t in range(q.shape[1]):
        o, state = fused_recurrent_gla(*(x[:, t:t + 1] for x in (q, k, v, gk)), initial_state=state,
                                       output_final_state=True)
        outputs.append(o)
    torch.testing.assert_close(torch.cat(outputs, dim=1), whole, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(state, final, rtol=1e-10, atol=1e-10)


def test_float32_tight_and_bfloat16_within_its_precision():
    q, k, v, gk, s0 = inputs(t=64, dk=16, dv=16)
    want, _ = naive_recurrent_gla(q, k, v, gk, initial_state=s0)
    low = [x.float() for x in (q, k, v, gk)]
    o32, state = chunk_gla(*low, initial_state=s0.float(), output_final_state=True)
    assert o32.dtype == state.dtype == torch.float32
    torch.testing.assert_close(o32.double(), want, rtol=1e-4, atol=1e-4)
    o16, _ = chunk_gla(*(x.bfloat16() for x in low), initial_state=s0.float())
    assert o16.dtype == torch.bfloat16
    assert (o16.double() - want).abs().max() < 0.05 * want.abs().max()


def test_bad_input_raises_naming_the_function_and_the_argument():
    q, k, v, gk, s0 = inputs()
    with pytest.raises(ValueError, match=r"tokenmix.ops.gla.chunk_gla: the log decay must be \(B, T, H, K\)"):
        chunk_gla(q, k, v, gk[..., 0])
    with pytest.raises(ValueError, match="give g .* or g_gamma .*, not both"):
        chunk_simple_gla(q, k, v, gk[..., 0], g_gamma=retention_decays(3))
    with pytest.raises(ValueError, match="gv .* is not supported"):
        fused_recurrent_gla(q, k, v, gk, gv=torch.zeros_like(v))
    with pytest.raises(ValueError, match="initial_state must be"):
        fused_recurrent_simple_gla(q, k, v, initial_state=s0[:, :1])
