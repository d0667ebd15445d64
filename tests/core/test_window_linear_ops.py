"""LoLCATs' sliding window + linear attention as functions (tokenmix.ops.window_linear): the three forms agree with
and without a state, a sequence cut anywhere with its state carried is the whole, the state is what its docstring
says (the last w tokens, the linear sums of the older ones), the mechanism's own formula, low precision within a
stated bound, float64 gradients, bad input refused by name."""

from __future__ import annotations

import pytest
import torch

from tokenmix.ops.window_linear import (
    WindowLinearState,
    chunk_window_linear_attn,
    fused_recurrent_window_linear_attn,
    naive_window_linear_attn,
)

FORMS = [naive_window_linear_attn, fused_recurrent_window_linear_attn, chunk_window_linear_attn]

def _inputs(seed=0, b=2, t=19, h=3, dk=5, f=4, dv=6, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(b, t, h, dk, generator=g, dtype=dtype) for _ in range(2))
    phi_q, phi_k = (torch.rand(b, t, h, f, generator=g, dtype=dtype) for _ in range(2))  # feature-mapped: >= 0
    v = torch.randn(b, t, h, dv, generator=g, dtype=dtype)
    weights = torch.rand(h, generator=g, dtype=dtype), torch.rand(h, generator=g, dtype=dtype) + 0.5
    return (q, k, v, phi_q, phi_k), weights

def _a_state(seed, length, b=2, h=3, dk=5, f=4, dv=6):
    (q, k, v, phi_q, phi_k), _ = _inputs(seed, b=b, t=length, h=h, dk=dk, f=f, dv=dv)
    g = torch.Generator().manual_seed(seed + 100)
    return WindowLinearState(k, phi_k, v, torch.randn(b, h, f, dv, generator=g, dtype=torch.float64),
                             torch.rand(b, 1, h, f, generator=g, dtype=torch.float64) + 0.5)

def _close_states(a, b, **tol):
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, **tol)

@pytest.mark.parametrize("window", [1, 3, 8, 40])
@pytest.mark.parametrize("state_tokens", [None, 0, 2, 3])
def test_the_three_forms_agree(window, state_tokens):
    args, (g, lin) = _inputs()
    init = None if state_tokens is None else _a_state(5, min(state_tokens, window))
    want, want_state = naive_window_linear_attn(*args, window, g, lin, initial_state=init, output_final_state=True)
    for form, options in ((fused_recurrent_window_linear_attn, {}), (chunk_window_linear_attn, {"chunk_size": 4}),
                          (chunk_window_linear_attn, {})):
        o, state = form(*args, window, g, lin, initial_state=init, output_final_state=True, **options)
        torch.testing.assert_close(o, want, rtol=1e-10, atol=1e-10)
        _close_states(state, want_state, rtol=1e-10, atol=1e-10)

@pytest.mark.parametrize("cut", [1, 3, 4, 10, 18])
def test_a_sequence_cut_anywhere_with_its_state_carried_is_the_whole(cut):
    args, (g, lin) = _inputs(1)
    window = 4
    whole, whole_state = chunk_window_linear_attn(*args, window, g, lin, output_final_state=True)
    head = [x[:, :cut] for x in args]
    one = [x[:, cut:cut + 1] for x in args]
    rest = [x[:, cut + 1:] for x in args]
    first, state = chunk_window_linear_attn(*head, window, g, lin, output_final_state=True)
    second, state = fused_recurrent_window_linear_attn(*one, window, g, lin, initial_state=state,
                                                       output_final_state=True)
    third, state = chunk_window_linear_attn(*rest, window, g, lin, initial_state=state, output_final_state=True,
                                            chunk_size=3)
    torch.testing.assert_close(torch.cat([first, second, third], dim=1), whole, rtol=1e-10, atol=1e-10)
    _close_states(state, whole_state, rtol=1e-10, atol=1e-10)

def test_the_state_is_the_last_w_tokens_and_the_linear_sums_of_the_older_ones():
    (q, k, v, phi_q, phi_k), (g, lin) = _inputs(2)
    _, state = chunk_window_linear_attn(q, k, v, phi_q, phi_k, 5, g, lin, output_final_state=True)
    torch.testing.assert_close(state.keys, k[:, -5:])
    torch.testing.assert_close(state.key_features, phi_k[:, -5:])
    torch.testing.assert_close(state.values, v[:, -5:])
    torch.testing.assert_close(state.s, torch.einsum("bthf,bthv->bhfv", phi_k[:, :-5], v[:, :-5]))
    torch.testing.assert_close(state.z, phi_k[:, :-5].sum(1, keepdim=True))
    _, short = chunk_window_linear_attn(q[:, :3], k[:, :3], v[:, :3], phi_q[:, :3], phi_k[:, :3], 5, g, lin,
                                        output_final_state=True)
    assert short.keys.shape[1] == 3 and float(short.s.abs().max()) == 0.0  # nothing has left the window yet

def test_the_forms_compute_the_mechanism_formula():
    """o_i = (g sum_{i-w<j<=i} e^{s_ij - m_i} v_j + l sum_{j<=i-w} phi_q_i . phi_k_j v_j) / (the same with 1)."""
    (q, k, v, phi_q, phi_k), (g, lin) = _inputs(3, t=9)
    window, scale = 3, 0.7
    o, _ = chunk_window_linear_attn(q, k, v, phi_q, phi_k, window, g, lin, scale=scale)
    for i in range(9):
        near = list(range(max(0, i - window + 1), i + 1))
        s = torch.einsum("bhk,bjhk->bhj", q[:, i] * scale, k[:, near])
        e = torch.exp(s - s.amax(-1, keepdim=True))
        a = torch.einsum("bhf,bjhf->bhj", phi_q[:, i], phi_k[:, :max(i - window + 1, 0)])
        num = (g[:, None] * torch.einsum("bhj,bjhv->bhv", e, v[:, near])
               + lin[:, None] * torch.einsum("bhj,bjhv->bhv", a, v[:, :max(i - window + 1, 0)]))
        den = g * e.sum(-1) + lin * a.sum(-1)
        torch.testing.assert_close(o[:, i], num / (den[..., None] + 1e-6), rtol=1e-10, atol=1e-10)

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_within_two_units_in_the_last_place_of_the_float32_result(dtype):
    args, (g, lin) = _inputs(4, dtype=torch.float32)
    low = [x.to(dtype) for x in args]
    want, _ = chunk_window_linear_attn(*[x.float() for x in low], 4, g, lin)
    o, state = chunk_window_linear_attn(*low, 4, g, lin, output_final_state=True)
    assert o.dtype == dtype and state.s.dtype == torch.float32
    torch.testing.assert_close(o.float(), want, rtol=2 * torch.finfo(dtype).eps, atol=2 * torch.finfo(dtype).eps)

def test_float64_gradients_of_the_chunked_form_with_a_state():
    args, (g, lin) = _inputs(5, b=1, t=7, h=2, dk=3, f=2, dv=2)
    init = _a_state(6, 2, b=1, h=2, dk=3, f=2, dv=2)
    inputs = [x.clone().requires_grad_() for x in (*args, g, lin, *init)]

    def run(q, k, v, phi_q, phi_k, g, lin, *state):
        o, final = chunk_window_linear_attn(q, k, v, phi_q, phi_k, 3, g, lin, initial_state=WindowLinearState(*state),
                                            output_final_state=True, chunk_size=2)
        return o, final.s, final.z, final.keys

    assert torch.autograd.gradcheck(run, inputs)

def test_a_window_of_one_with_no_linear_weight_returns_the_values():
    (q, k, v, phi_q, phi_k), _ = _inputs(7)
    o, _ = chunk_window_linear_attn(q, k, v, phi_q, phi_k, 1, 1.0, 0.0)
    torch.testing.assert_close(o, v / (1 + 1e-6))

def test_bad_input_is_refused_by_name():
    (q, k, v, phi_q, phi_k), (g, lin) = _inputs(8)
    where = "tokenmix.ops.window_linear.chunk_window_linear_attn"
    with pytest.raises(ValueError, match=f"{where}: window must be a positive int"):
        chunk_window_linear_attn(q, k, v, phi_q, phi_k, 0, g, lin)
    with pytest.raises(ValueError, match=f"{where}: q_features and k_features"):
        chunk_window_linear_attn(q, k, v, phi_q, phi_k[..., :2], 3, g, lin)
    with pytest.raises(ValueError, match=f"{where}: window_weight must be a float or an .H,. = .3,. tensor"):
        chunk_window_linear_attn(q, k, v, phi_q, phi_k, 3, torch.ones(2), lin)
    with pytest.raises(ValueError, match=f"{where}: the state holds 4 window tokens, more than window=3"):
        chunk_window_linear_attn(q, k, v, phi_q, phi_k, 3, g, lin, initial_state=_a_state(9, 4))
    state = _a_state(9, 2)
    with pytest.raises(ValueError, match=r"the state's z must be \(2, 1, 3, 4\)"):
        chunk_window_linear_attn(q, k, v, phi_q, phi_k, 3, g, lin, initial_state=state._replace(z=state.z[:, 0]))

def test_an_empty_prompt_leaves_the_state_as_it_was():
    args, (g, lin) = _inputs(9)
    state = _a_state(10, 3)
    for form in FORMS:
        o, after = form(*[x[:, :0] for x in args], 3, g, lin, initial_state=state, output_final_state=True)
        assert o.shape[1] == 0
        _close_states(after, state)
