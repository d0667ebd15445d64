"""Properties every registered sequence mixer must have; new mechanisms get these tests for free."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tokenmix
from conftest import (
    MAX_LEN,
    assert_matches_reference,
    assert_padding_invisible,
    build,
    lengths_mask,
    mixer_cases,
    sequence_mixers,
)

CASES = mixer_cases()


def test_registry_lists_the_core_mechanisms():
    names = tokenmix.list_mixers(include_hidden=True)
    assert names == sorted(names)
    for name in ["softmax", "linear", "relation", "kerformer", "performer", "cosformer", "efficient", "mlp"]:
        assert name in names


@pytest.mark.parametrize("name", sequence_mixers())
def test_info_is_complete(name):
    info = tokenmix.mixer_info(name)
    assert info.name == name and info.paper and info.complexity.startswith("O(")
    assert info.causal or info.bidirectional
    with pytest.raises(Exception):
        info.name = "other"  # frozen


def test_unknown_name_lists_the_available_ones():
    with pytest.raises(ValueError, match="softmax"):
        tokenmix.create_mixer("no-such-mixer", 8)
    with pytest.raises(ValueError, match="linear"):
        tokenmix.mixer_info("no-such-mixer")


@pytest.mark.parametrize("name", sequence_mixers())
def test_unknown_option_is_rejected_by_name(name):
    with pytest.raises(ValueError, match=name):
        tokenmix.create_mixer(name, 8, max_len=MAX_LEN, no_such_option=1)


@pytest.mark.parametrize("name", [n for n in sequence_mixers() if not tokenmix.mixer_info(n).causal])
def test_causal_rejected_where_unsupported(name):
    with pytest.raises(ValueError, match=name):
        tokenmix.create_mixer(name, 8, causal=True, max_len=MAX_LEN)


@pytest.mark.parametrize("name", [n for n in sequence_mixers() if not tokenmix.mixer_info(n).bidirectional])
def test_bidirectional_rejected_where_unsupported(name):
    with pytest.raises(ValueError, match=name):
        tokenmix.create_mixer(name, 8, causal=False, max_len=MAX_LEN)


@pytest.mark.parametrize("name", [n for n in sequence_mixers() if not tokenmix.mixer_info(n).multihead])
def test_heads_rejected_where_meaningless(name):
    causal = not tokenmix.mixer_info(name).bidirectional
    with pytest.raises(ValueError, match=f"{name}.*num_heads"):
        tokenmix.create_mixer(name, 8, num_heads=2, causal=causal, max_len=MAX_LEN)


@pytest.mark.parametrize("name,causal", CASES)
def test_shape_dtype_and_every_parameter_gets_a_gradient(name, causal):
    torch.manual_seed(0)
    mixer = build(name, causal=causal, dtype=torch.float32)
    x = torch.randn(3, 11, 16, requires_grad=True)
    mask = lengths_mask([11, 7, 3], 11)
    y = mixer(x, mask)
    assert y.shape == x.shape and y.dtype == x.dtype
    y.square().sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    for pname, p in mixer.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, f"{name}: no gradient reaches {pname}"


@pytest.mark.parametrize("name", [n for n in sequence_mixers() if tokenmix.mixer_info(n).causal])
@settings(max_examples=4, deadline=None)
@given(batch=st.integers(1, 2), n=st.integers(2, 12), heads=st.sampled_from([1, 2]),
       head_dim=st.integers(2, 5), seed=st.integers(0, 2**16))
def test_no_causal_leak(name, batch, n, heads, head_dim, seed):
    """d y_i / d x_j is exactly zero for every j > i (and across batch rows)."""
    torch.manual_seed(seed)
    mixer = build(name, dim=heads * head_dim, causal=True, heads=heads)
    x = torch.randn(batch, n, heads * head_dim, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda t: mixer(t), x)  # (B, N, D, B, N, D)
    for b in range(batch):
        for b2 in range(batch):
            for i in range(n):
                future = jac[b, i, :, b2, i + 1:, :] if b == b2 else jac[b, i, :, b2]
                assert torch.count_nonzero(future) == 0, f"{name}: output {i} depends on a later input"


@pytest.mark.parametrize("name,causal", CASES)
def test_padding_never_reaches_real_positions(name, causal):
    torch.manual_seed(1)
    mixer = build(name, causal=causal)
    lengths, n = [13, 9, 4], 13
    mask = lengths_mask(lengths, n)
    assert_padding_invisible(mixer, torch.randn(3, n, 16, dtype=torch.float64), mask, atol=1e-5)


@pytest.mark.parametrize("name,causal", CASES)
def test_all_padding_row_gives_zeros(name, causal):
    torch.manual_seed(2)
    mixer = build(name, causal=causal)
    x = torch.randn(2, 6, 16, dtype=torch.float64, requires_grad=True)
    mask = lengths_mask([6, 0], 6)
    y = mixer(x, mask)
    assert torch.count_nonzero(y[1]) == 0 and torch.isfinite(y).all()
    y.sum().backward()
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("name,causal", CASES)
@pytest.mark.parametrize("padded", [False, True], ids=["dense", "padded"])
def test_fast_path_matches_reference(name, causal, padded):
    torch.manual_seed(3)
    mixer = build(name, causal=causal)
    n = 19
    mask = lengths_mask([19, 12, 5], n) if padded else None
    assert_matches_reference(mixer, torch.randn(3, n, 16, dtype=torch.float64), mask)


@pytest.mark.parametrize("name,causal", CASES)
def test_finite_for_large_inputs(name, causal):
    """001 Tables 2-3 value ranges: inputs uniform in [-10, 10], head dim 64."""
    torch.manual_seed(4)
    mixer = build(name, dim=64, causal=causal, heads=1, dtype=torch.float32)
    x = torch.empty(2, MAX_LEN, 64).uniform_(-10, 10)
    for mask in (None, lengths_mask([MAX_LEN, 5], MAX_LEN)):
        x_ = x.clone().requires_grad_(True)
        y = mixer(x_, mask)
        assert torch.isfinite(y).all()
        y.sum().backward()
        assert torch.isfinite(x_.grad).all()


@pytest.mark.parametrize("name,causal", CASES)
def test_bfloat16_is_finite_and_tracks_float32(name, causal):
    torch.manual_seed(5)
    mixer = build(name, causal=causal, dtype=torch.float32)
    x, mask = torch.randn(2, 10, 16), lengths_mask([10, 6], 10)
    y32 = mixer(x, mask)
    y16 = mixer.to(torch.bfloat16)(x.bfloat16(), mask)
    assert y16.dtype == torch.bfloat16 and torch.isfinite(y16).all()
    assert (y16.float() - y32).abs().max() <= 0.05 * y32.abs().max() + 0.02


@pytest.mark.parametrize("name", sequence_mixers())
def test_bad_input_raises(name):
    mixer = build(name)
    good = torch.randn(2, 5, 16, dtype=torch.float64)
    with pytest.raises(ValueError, match=name):
        mixer(good[0])  # rank 2
    with pytest.raises(ValueError, match=name):
        mixer(torch.randn(2, 5, 8, dtype=torch.float64))  # wrong width
    with pytest.raises(TypeError, match=name):
        mixer(torch.ones(2, 5, 16, dtype=torch.long))  # not floating
    with pytest.raises(TypeError, match=name):
        mixer(good.float())  # dtype differs from the parameters
    with pytest.raises(ValueError, match=name):
        mixer(good, torch.ones(2, 4, dtype=torch.bool))  # mask shape
    with pytest.raises(TypeError, match=name):
        mixer(good, torch.ones(2, 5))  # mask not bool
    with pytest.raises(ValueError, match=rf"{name}: x has an empty batch \(B = 0\)"):
        mixer(good[:0])
    with pytest.raises(ValueError, match=rf"{name}: x has an empty sequence \(N = 0\)"):
        mixer(good[:, :0])
    longer = torch.randn(1, MAX_LEN + 1, 16, dtype=torch.float64)
    if tokenmix.mixer_info(name).sliding_window:  # max_len is a window: any length works
        assert mixer(longer).shape == longer.shape
    else:
        with pytest.raises(ValueError, match=name):
            mixer(longer)


@pytest.mark.parametrize("name", ["softmax", "linear", "relation", "mlp"])
def test_parameter_counts_without_bias(name):
    """004 Table 7: self-attention has 65,536 parameters at d = 128; the others match that budget."""
    mixer = tokenmix.create_mixer(name, 128, bias=False)
    assert sum(p.numel() for p in mixer.parameters()) == 65_536


@pytest.mark.parametrize("name", sequence_mixers())
def test_recurrent_flag_means_step_is_implemented(name):
    from tokenmix.mixers.base import Mixer
    from tokenmix.mixers.heads import QKVMixer

    mixer = build(name, causal=tokenmix.mixer_info(name).causal)
    if isinstance(mixer, QKVMixer):  # a Q/K/V rule steps on its heads; QKVMixer's _step projects around that
        implemented = type(mixer)._step_heads is not QKVMixer._step_heads or type(mixer)._step is not QKVMixer._step
    else:
        implemented = type(mixer)._step is not Mixer._step
    assert tokenmix.mixer_info(name).recurrent == implemented
    if not implemented:
        with pytest.raises(NotImplementedError, match=name):
            mixer.init_state(2)


@pytest.mark.parametrize("name", [n for n in sequence_mixers() if tokenmix.mixer_info(n).recurrent])
def test_step_by_step_equals_parallel_causal_forward(name):
    torch.manual_seed(6)
    mixer = build(name, causal=True, dtype=torch.float32)
    x = torch.randn(2, MAX_LEN, 16)
    parallel = mixer(x)
    state = mixer.init_state(2)
    steps = []
    for t in range(MAX_LEN):
        y_t, state = mixer.step(x[:, t], state)
        steps.append(y_t)
    torch.testing.assert_close(torch.stack(steps, dim=1), parallel, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", [n for n in sequence_mixers() if tokenmix.mixer_info(n).recurrent])
def test_prefill_then_steps_equal_the_parallel_causal_forward(name, monkeypatch):
    """A prompt in one prefill (chunked where the mechanism has a chunked form), a second block prefilled from its
    state, then single steps: the same outputs as the whole sequence's forward."""
    torch.manual_seed(7)
    mixer = build(name, causal=True, dtype=torch.float32)
    x = torch.randn(2, MAX_LEN, 16)
    parallel = mixer(x)
    first, state = mixer.prefill(x[:, :9], mixer.init_state(2))
    second, state = mixer.prefill(x[:, 9:20], state)
    steps = []
    for t in range(20, MAX_LEN):
        y_t, state = mixer.step(x[:, t], state)
        steps.append(y_t)
    got = torch.cat([first, second, torch.stack(steps, dim=1)], dim=1)
    torch.testing.assert_close(got, parallel, rtol=1e-5, atol=1e-5)
    if name == "baseconv" or name.startswith("extractor_"):  # their prompts take one pass of the convolution
        monkeypatch.setattr(type(mixer), "_step", lambda *a: pytest.fail(f"{name}: the prompt went step by step"))
        again, _ = mixer.prefill(x[:, 9:20], mixer.prefill(x[:, :9], mixer.init_state(2))[1])
        torch.testing.assert_close(again, second)
    with pytest.raises(ValueError, match=f"{name}: prefill input must have shape"):
        mixer.prefill(x[:, 0], mixer.init_state(2))


@pytest.mark.parametrize("name", [n for n in sequence_mixers() if tokenmix.mixer_info(n).recurrent])
def test_step_rejects_bad_use(name):
    info = tokenmix.mixer_info(name)
    if info.bidirectional:
        with pytest.raises(ValueError, match=name):
            build(name, causal=False).init_state(1)
    mixer = build(name, causal=True)
    state = mixer.init_state(2)
    with pytest.raises(ValueError, match=name):
        mixer.step(torch.randn(2, 3, 16, dtype=torch.float64), state)  # (B, N, dim) is not one step
    with pytest.raises(ValueError, match=name):
        mixer.step(torch.randn(2, 8, dtype=torch.float64), state)  # wrong width


@pytest.mark.parametrize("name", tokenmix.list_mixers())
def test_the_registry_says_which_mechanisms_take_q_k_v(name):
    """MixerInfo.qkv, read from the class at registration, is what an instance is: a QKVMixer or not."""
    from tokenmix.mixers.heads import QKVMixer

    info = tokenmix.mixer_info(name)
    if info.spatial:
        assert info.qkv == issubclass(type(tokenmix.create_mixer(name, 8, num_heads=1)), QKVMixer)
        return
    mixer = tokenmix.create_mixer(name, 8, num_heads=1, max_len=16, causal=not info.bidirectional)
    assert info.qkv == isinstance(mixer, QKVMixer)


QKV_RECURRENT = [n for n in sequence_mixers() if tokenmix.mixer_info(n).recurrent and tokenmix.mixer_info(n).qkv]


@pytest.mark.parametrize("name", QKV_RECURRENT)
def test_prefill_heads_gives_the_steps_outputs_and_state(name, monkeypatch):
    """A prompt's heads into a fresh state, then a continuation from the state it left: the outputs and the state of
    one step per token, in float64; the kernel mechanisms take one chunked pass each (no step at all)."""
    torch.manual_seed(8)
    mixer = build(name, causal=True, dtype=torch.float64)
    g = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(2, mixer.num_heads, 13, mixer.head_dim, generator=g, dtype=torch.float64)
               for _ in range(3))
    state, stepped = mixer.init_state(2, dtype=torch.float64), []
    for t in range(13):
        out, state = mixer.step_heads(q[:, :, t], k[:, :, t], v[:, :, t], state)
        stepped.append(out)
    calls = []
    original = type(mixer)._step_heads
    monkeypatch.setattr(type(mixer), "_step_heads", lambda self, *a: calls.append(1) or original(self, *a))
    prompt, prefilled = mixer.prefill_heads(q[:, :, :5], k[:, :, :5], v[:, :, :5],
                                            mixer.init_state(2, dtype=torch.float64))
    rest, prefilled = mixer.prefill_heads(q[:, :, 5:], k[:, :, 5:], v[:, :, 5:], prefilled)
    torch.testing.assert_close(torch.cat([prompt, rest], dim=2), torch.stack(stepped, dim=2), rtol=1e-9, atol=1e-10)
    assert prefilled.keys() == state.keys()
    for key in state:
        torch.testing.assert_close(prefilled[key], state[key], rtol=1e-9, atol=1e-10)
    if name in ("linear", "performer", "cosformer", "kerformer", "based", "window_linear", "softmax", "sparse_fixed",
                "sparse_strided"):
        assert not calls, f"{name}: the prompt or its continuation went step by step"


QKV_SEQUENCE = [n for n in sequence_mixers() if tokenmix.mixer_info(n).qkv]
PROJECTIONS = ("q_proj.", "k_proj.", "v_proj.", "proj.")


@pytest.mark.parametrize("name", QKV_SEQUENCE)
def test_create_heads_is_the_mechanism_without_its_projections(name):
    """create_heads builds no projection at all; its state is the whole mixer's minus the projections' (key for
    key), and with the same rule parameters it computes what the mixer computes between its projections."""
    info = tokenmix.mixer_info(name)
    causal = not info.bidirectional
    torch.manual_seed(11)
    full = build(name, causal=causal)
    heads = tokenmix.create_heads(name, num_heads=full.num_heads, head_dim=full.head_dim, causal=causal,
                                  max_len=MAX_LEN).to(torch.float64).eval()
    assert not heads.has_projections and full.has_projections
    assert not any(key.startswith(PROJECTIONS) for key in heads.state_dict())
    rule = {key: value for key, value in full.state_dict().items() if not key.startswith(PROJECTIONS)}
    heads.load_state_dict(rule, strict=True)  # the same keys, no projection among them
    g = torch.Generator().manual_seed(12)
    q, k, v = (torch.randn(2, full.num_heads, 10, full.head_dim, generator=g, dtype=torch.float64) for _ in range(3))
    mask = lengths_mask([10, 6], 10)
    torch.testing.assert_close(heads.attend_heads(q, k, v, mask), full.attend_heads(q, k, v, mask))
    with pytest.raises(TypeError, match=f"{name}: built without projections"):
        heads(torch.randn(2, 10, heads.dim, dtype=torch.float64))


def test_create_heads_refuses_a_mechanism_without_q_k_v():
    with pytest.raises(ValueError, match="create_heads: mixer 'mlp' does not compute on a host's Q, K and V"):
        tokenmix.create_heads("mlp", num_heads=1, head_dim=8)
    full = tokenmix.create_mixer("linear", 8, num_heads=2)  # a later build has its projections again
    assert full.has_projections and full.q_proj is not None


def test_substituted_attention_replaces_the_rule_inside_and_only_inside():
    torch.manual_seed(13)
    mixer = build("linear", causal=True)
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    before = mixer(x)
    with mixer.substituted_attention(lambda q, k, v, mask: v):  # attention that passes the values on
        passed = mixer(x)
        with pytest.raises(RuntimeError, match="linear: substituted_attention: a substitute is already in place"):
            with mixer.substituted_attention(lambda q, k, v, mask: v):
                pass
    _, _, v = mixer.qkv_heads(x)
    torch.testing.assert_close(passed, mixer.proj(v.transpose(1, 2).reshape(2, 7, 16)))
    torch.testing.assert_close(mixer(x), before)


HIDDEN_SEQUENCE = [n for n in sequence_mixers() if tokenmix.mixer_info(n).hidden]


@pytest.mark.parametrize("name", HIDDEN_SEQUENCE)
def test_create_heads_keeps_a_gated_mechanisms_gates_and_computes_its_rule(name):
    """A mechanism whose gates read the hidden states: create_heads keeps the gates' projections and drops W_Q, W_K,
    W_V, W_out; on the full mixer's own projected heads and hidden states it gives the heads the mixer's W_out
    takes, and step by step (step_heads) the same as one pass; padded positions write nothing."""
    torch.manual_seed(14)
    full = build(name, causal=True)
    heads = tokenmix.create_heads(name, num_heads=full.num_heads, head_dim=full.dim // full.num_heads, causal=True,
                                  max_len=MAX_LEN).to(torch.float64).eval()
    rule = {key: value for key, value in full.state_dict().items() if not key.startswith(PROJECTIONS)}
    x = torch.randn(2, 9, full.dim, dtype=torch.float64)
    if name == "gla":  # its own keys are half the value width (§4.3); a host's keys are the host's: as wide
        assert set(heads.state_dict()) == set(rule) and heads.key_dim == 2 * full.key_dim
        full.key_dim = heads.key_dim
        full.q_proj, full.k_proj = (torch.nn.Linear(full.dim, full.key_dim, bias=False).double() for _ in range(2))
        full.gk_up = torch.nn.Linear(full.gate_rank, full.key_dim).double()
        rule = {key: value for key, value in full.state_dict().items() if not key.startswith(PROJECTIONS)}
    if name == "mamba2":  # its own B and C are shared by the heads, a host's keys and queries are per head: the
        # shared ones, repeated per head, are a case of those (with expand 1 and a state as wide as a head)
        full = build(name, causal=True, expand=1, state_size=full.dim // full.num_heads)
        weight, (_, z_rows, dt_rows) = full.in_proj.weight, full._rows()
        rule = {**{k: v for k, v in full.state_dict().items() if not k.startswith(("in_proj", "out_proj"))},
                "gate_proj.weight": torch.cat([weight[z_rows], weight[dt_rows]])}
        full.proj = full.out_proj
    assert rule and set(heads.state_dict()) == set(rule)
    heads.load_state_dict(rule)
    q, k, v = full._projected_heads(x)
    out = heads.attend_heads(q, k, v, hidden=x)
    torch.testing.assert_close(full.proj(out.transpose(1, 2).reshape(2, 9, full.dim)), full(x))
    state, steps = heads.init_state(2, dtype=torch.float64), []
    for t in range(9):
        y, state = heads.step_heads(q[:, :, t], k[:, :, t], v[:, :, t], state, hidden=x[:, t])
        steps.append(y)
    torch.testing.assert_close(torch.stack(steps, dim=2), out)
    mask = lengths_mask([9, 5], 9)
    padded = heads.attend_heads(q, k, v.masked_fill(~mask[:, None, :, None], 9.0), mask, hidden=x)
    torch.testing.assert_close(padded[1, :, :5], out[1, :, :5])
    with pytest.raises(ValueError, match=rf"{name}: hidden must be the host's hidden states"):
        heads.attend_heads(q, k, v, hidden=x[:, :4])


@pytest.mark.parametrize("name", [n for n in sequence_mixers() if tokenmix.mixer_info(n).recurrent])
def test_bfloat16_decoding_returns_bfloat16(name):
    """A bfloat16 mixer's prompt and steps come back in bfloat16, as its forward does (a host's next layer takes
    them as they are)."""
    torch.manual_seed(15)
    mixer = build(name, causal=True, dtype=torch.bfloat16)
    x = torch.randn(2, 6, 16, dtype=torch.bfloat16)
    state = mixer.init_state(2, dtype=torch.bfloat16)
    prompt, state = mixer.prefill(x[:, :5], state)
    step, state = mixer.step(x[:, 5], state)
    assert prompt.dtype == step.dtype == torch.bfloat16 and torch.isfinite(step).all()
