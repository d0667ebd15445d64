"""Linear attention and Based as functions in flash-linear-attention's conventions (tokenmix.ops.linear_attn), and the
causal kernel attention under them with a state passed in and out (tokenmix.ops.kernel_attention): the three forms
agree, a sequence cut anywhere with its state carried is the whole sequence, low precision within stated bounds,
gradients checked in float64."""

from __future__ import annotations

import pytest
import torch

from tokenmix.ops.kernel_attention import causal_kernel_attention, kernel_attention_step
from tokenmix.ops.linear_attn import (
    chunk_linear_attn,
    fused_chunk_based,
    fused_recurrent_based,
    fused_recurrent_linear_attn,
    naive_recurrent_based,
    naive_recurrent_linear_attn,
    taylor_feature_map,
)

LINEAR_FORMS = [naive_recurrent_linear_attn, fused_recurrent_linear_attn, chunk_linear_attn]
BASED_FORMS = [naive_recurrent_based, fused_recurrent_based, fused_chunk_based]


def _inputs(seed=0, b=2, t=29, h=3, dk=5, dv=4, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.rand(b, t, h, dk, generator=g, dtype=dtype) for _ in range(2))  # non-negative: feature-mapped
    v = torch.randn(b, t, h, dv, generator=g, dtype=dtype)
    return q, k, v, g


def _state(g, normalize, b=2, h=3, dk=5, dv=4, dtype=torch.float64):
    s = torch.randn(b, h, dk, dv, generator=g, dtype=dtype)
    return (s, torch.rand(b, 1, h, dk, generator=g, dtype=dtype) + 0.5) if normalize else s


def _close(a, b, **tol):
    if isinstance(a, tuple):
        for x, y in zip(a, b, strict=True):
            torch.testing.assert_close(x, y, **tol)
    else:
        torch.testing.assert_close(a, b, **tol)


@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("with_state", [False, True])
def test_the_three_linear_attention_forms_agree(normalize, with_state):
    q, k, v, g = _inputs()
    init = _state(g, normalize) if with_state else None
    want, want_state = naive_recurrent_linear_attn(q, k, v, initial_state=init, output_final_state=True,
                                                   normalize=normalize)
    for form, options in ((fused_recurrent_linear_attn, {}), (chunk_linear_attn, {"chunk_size": 8}),
                          (chunk_linear_attn, {"chunk_size": 64})):
        o, state = form(q, k, v, initial_state=init, output_final_state=True, normalize=normalize, **options)
        torch.testing.assert_close(o, want, rtol=1e-10, atol=1e-10)
        _close(state, want_state, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("cut", [1, 7, 8, 16, 28])
def test_a_sequence_cut_anywhere_with_its_state_carried_is_the_whole(normalize, cut):
    q, k, v, _ = _inputs(1)
    whole, whole_state = chunk_linear_attn(q, k, v, output_final_state=True, normalize=normalize, chunk_size=8)
    first, state = chunk_linear_attn(q[:, :cut], k[:, :cut], v[:, :cut], output_final_state=True,
                                     normalize=normalize, chunk_size=8)
    second, state = fused_recurrent_linear_attn(q[:, cut:cut + 1], k[:, cut:cut + 1], v[:, cut:cut + 1],
                                                initial_state=state, output_final_state=True, normalize=normalize)
    third, state = chunk_linear_attn(q[:, cut + 1:], k[:, cut + 1:], v[:, cut + 1:], initial_state=state,
                                     output_final_state=True, normalize=normalize, chunk_size=5)
    torch.testing.assert_close(torch.cat([first, second, third], dim=1), whole, rtol=1e-10, atol=1e-10)
    _close(state, whole_state, rtol=1e-10, atol=1e-10)


def test_the_state_is_the_running_sums_flash_linear_attention_names():
    """normalize=True: (S, z) with z (B, 1, H, K) the keys' sum; False: S alone; the scale multiplies the query
    only (default K ** -0.5)."""
    q, k, v, _ = _inputs(2)
    _, (s, z) = chunk_linear_attn(q, k, v, output_final_state=True, normalize=True)
    torch.testing.assert_close(s, torch.einsum("bthk,bthv->bhkv", k, v))
    torch.testing.assert_close(z, k.sum(dim=1, keepdim=True))
    o, _ = chunk_linear_attn(q, k, v, normalize=False, scale=1.0)
    want = torch.stack([torch.einsum("bhk,bjhk,bjhv->bhv", q[:, i], k[:, :i + 1], v[:, :i + 1])
                        for i in range(q.shape[1])], dim=1)
    torch.testing.assert_close(o, want)
    o_default, _ = chunk_linear_attn(q, k, v, normalize=False)
    torch.testing.assert_close(o_default, want * q.shape[-1] ** -0.5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_within_stated_bounds(dtype):
    """Computed in float32, rounded once to the inputs' dtype: within two units in the last place of the float32
    result (bf16: 2^-7 relative) on values of order one; the state comes back in float32."""
    q, k, v, _ = _inputs(3, t=200, dtype=torch.float32)
    want, want_state = naive_recurrent_linear_attn(q, k, v, output_final_state=True, normalize=True)
    lq, lk, lv = (x.to(dtype) for x in (q, k, v))
    want_low, _ = naive_recurrent_linear_attn(lq.float(), lk.float(), lv.float(), normalize=True)
    o, state = chunk_linear_attn(lq, lk, lv, output_final_state=True, normalize=True)
    assert o.dtype == dtype and state[0].dtype == torch.float32
    ulp = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10
    torch.testing.assert_close(o.float(), want_low, rtol=2 * ulp, atol=2 * ulp)
    assert (o.float() - want).abs().max() < 0.05  # the inputs' own rounding, order one values


@pytest.mark.parametrize("normalize", [False, True])
def test_gradients_of_the_chunked_form_in_float64(normalize):
    q, k, v, g = _inputs(4, b=1, t=11, h=2, dk=3, dv=2)
    init = _state(g, normalize, b=1, h=2, dk=3, dv=2)
    leaves = [q, k, v] + (list(init) if normalize else [init])
    for x in leaves:
        x.requires_grad_(True)

    def run(q, k, v, *state):
        o, final = chunk_linear_attn(q, k, v, initial_state=state if normalize else state[0],
                                     output_final_state=True, normalize=normalize, chunk_size=4)
        return (o,) + (final if normalize else (final,))

    assert torch.autograd.gradcheck(run, tuple(leaves))


def test_log_scaled_keys_with_a_state_are_the_steps_and_differentiable():
    """The Performer's form: per-key log-scales, the state relative to the newest; cut with the state and its
    log-scale carried, the whole; equal to kernel_attention_step token by token; gradcheck in float64."""
    g = torch.Generator().manual_seed(5)
    b, h, n, f, d = 2, 2, 19, 4, 3
    q, k = (torch.rand(b, h, n, f, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(b, h, n, d, generator=g, dtype=torch.float64)
    s = torch.cummax(torch.randn(b, h, n, generator=g, dtype=torch.float64), dim=-1).values
    whole, whole_state = causal_kernel_attention(q, k, v, key_log_scale=s, output_final_state=True, chunk_size=4)
    state, stepped = None, []
    for t in range(n):
        out, state = kernel_attention_step(q[:, :, t], k[:, :, t], v[:, :, t], state, log_scale=s[..., t],
                                           prev_log_scale=None if t == 0 else s[..., t - 1])
        stepped.append(out)
    torch.testing.assert_close(torch.stack(stepped, dim=2), whole, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(state, whole_state, rtol=1e-10, atol=1e-10)
    first, mid = causal_kernel_attention(q[:, :, :9], k[:, :, :9], v[:, :, :9], key_log_scale=s[..., :9],
                                         output_final_state=True, chunk_size=4)
    second, last = causal_kernel_attention(q[:, :, 9:], k[:, :, 9:], v[:, :, 9:], key_log_scale=s[..., 9:],
                                           initial_state=mid, initial_log_scale=s[..., 8], output_final_state=True,
                                           chunk_size=3)
    torch.testing.assert_close(torch.cat([first, second], dim=2), whole, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(last, whole_state, rtol=1e-10, atol=1e-10)

    def run(q, k, v, mid, start):
        return causal_kernel_attention(q, k, v, key_log_scale=s[..., 9:], initial_state=mid, initial_log_scale=start,
                                       output_final_state=True, chunk_size=3)

    leaves = tuple(x.detach().clone().requires_grad_(True)
                   for x in (q[:, :, 9:], k[:, :, 9:], v[:, :, 9:], mid, s[..., 8] - 0.1))
    assert torch.autograd.gradcheck(run, leaves)


def test_bad_states_are_refused_by_name():
    q, k, v, g = _inputs(6)
    with pytest.raises(ValueError, match=r"chunk_linear_attn: with normalize=True the state is the pair \(S, z\)"):
        chunk_linear_attn(q, k, v, initial_state=_state(g, False), normalize=True)
    with pytest.raises(ValueError, match=r"fused_recurrent_linear_attn: with normalize=False the state is S"):
        fused_recurrent_linear_attn(q, k, v, initial_state=_state(g, True), normalize=False)
    with pytest.raises(ValueError, match=r"naive_recurrent_linear_attn: the state's z must be \(B, 1, H, K\)"):
        naive_recurrent_linear_attn(q, k, v, initial_state=(_state(g, False), torch.ones(2, 3, 5)), normalize=True)
    with pytest.raises(ValueError, match=r"chunk_linear_attn: q and k must be \(B, T, H, K\)"):
        chunk_linear_attn(q, k[:, :3], v)
    with pytest.raises(ValueError, match="initial_log_scale goes with an initial_state and key_log_scale"):
        heads = q.transpose(1, 2)  # (B, H, N, F)
        causal_kernel_attention(heads, heads, heads, initial_log_scale=torch.zeros(2, 3))


def test_the_taylor_features_give_the_second_order_polynomial_of_exp():
    g = torch.Generator().manual_seed(7)
    q, k = (torch.randn(4, 6, generator=g, dtype=torch.float64) for _ in range(2))
    for scale in (None, 0.3):
        a = (q * k).sum(-1) * (6 ** -0.5 if scale is None else scale)
        phi = (taylor_feature_map(q, scale) * taylor_feature_map(k, scale)).sum(-1)
        torch.testing.assert_close(phi, 1 + a + a * a / 2)
    assert taylor_feature_map(q).shape[-1] == 1 + 6 + 36


@pytest.mark.parametrize("use_norm", [True, False])
def test_the_three_based_forms_agree_and_carry_their_state(use_norm):
    g = torch.Generator().manual_seed(8)
    q, k = (torch.randn(2, 21, 2, 4, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(2, 21, 2, 3, generator=g, dtype=torch.float64)
    want, want_state = naive_recurrent_based(q, k, v, use_norm=use_norm, output_final_state=True)
    weights = 1 + (a := torch.einsum("bihk,bjhk->bhij", q, k) / 2) + a * a / 2  # scale 4 ** -0.5
    weights = weights.tril()
    plain = weights @ v.transpose(1, 2)
    if use_norm:
        plain = plain / (weights.sum(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(want, plain.transpose(1, 2), rtol=1e-10, atol=1e-10)
    for form in BASED_FORMS[1:]:
        o, state = form(q, k, v, use_norm=use_norm, output_final_state=True)
        torch.testing.assert_close(o, want, rtol=1e-10, atol=1e-10)
        _close(state, want_state, rtol=1e-10, atol=1e-10)
    first, state = fused_chunk_based(q[:, :10], k[:, :10], v[:, :10], use_norm=use_norm, output_final_state=True)
    second, _ = fused_chunk_based(q[:, 10:], k[:, 10:], v[:, 10:], use_norm=use_norm, initial_state=state)
    torch.testing.assert_close(torch.cat([first, second], dim=1), want, rtol=1e-10, atol=1e-10)


def test_the_running_mean_in_three_forms_is_linear_attention_with_a_constant_feature_map():
    """Relation's and Average Attention's causal context: the three forms agree, a state carried across a cut gives
    the whole, per-row counts work, and the mean is chunk_linear_attn with phi = 1 (K = 1, scale 1)."""
    from tokenmix.ops.averaging import chunk_mean, fused_recurrent_mean, naive_recurrent_mean

    g = torch.Generator().manual_seed(9)
    v = torch.randn(2, 13, 5, generator=g, dtype=torch.float64)
    start = (torch.randn(2, 5, generator=g, dtype=torch.float64), torch.tensor([3.0, 1.0], dtype=torch.float64))
    want, want_state = naive_recurrent_mean(v, start, output_final_state=True)
    for form in (fused_recurrent_mean, chunk_mean):
        out, state = form(v, start, output_final_state=True)
        torch.testing.assert_close(out, want)
        _close(state, want_state)
    first, state = chunk_mean(v[:, :6], start, output_final_state=True)
    second, state = fused_recurrent_mean(v[:, 6:], state, output_final_state=True)
    torch.testing.assert_close(torch.cat([first, second], dim=1), want)
    ones = torch.ones(2, 13, 1, 1, dtype=torch.float64)
    as_linear, _ = chunk_linear_attn(ones, ones, v[:, :, None], scale=1.0, normalize=True, eps=0.0)
    plain, _ = chunk_mean(v)
    torch.testing.assert_close(as_linear[:, :, 0], plain)
    with pytest.raises(ValueError, match=r"chunk_mean: the state's sum must be \(B, \.\.\.\)"):
        chunk_mean(v, (torch.zeros(2, 4), torch.tensor(1.0)))
