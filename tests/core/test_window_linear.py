"""LoLCATs' sliding window + linear attention (``window_linear``): the formula written out per query (window and
linear part), its two limits (the window alone is sliding-window softmax attention; without the window it is linear
attention over the keys w tokens back), every length against every window, padding, decoding, the Hugging Face
path (Mistral keeps its window) and linearize to it."""

from __future__ import annotations

import copy
import math

import pytest
import torch

import tokenmix
from tokenmix.conversion import linearize
from tokenmix.conversion.transfer import feature_map_parameters
from tokenmix.mixers.linear import elu_feature_map


def make(window, *, dim=12, heads=2, affine=False, logit=None, seed=0, **options):
    torch.manual_seed(seed)
    mixer = tokenmix.create_mixer("window_linear", dim, num_heads=heads, causal=True, window=window, affine=affine,
                                  **options).double()
    with torch.no_grad():
        mixer.window_logit.copy_(torch.randn(heads) if logit is None else torch.full((heads,), float(logit)))
    return mixer


def heads(n, d=6, b=2, h=2, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, n, d, generator=g, dtype=torch.float64) for _ in range(3)]


def by_the_formula(mixer, q, k, v):
    """y_i = (g sum_{i-w<j<=i} e^{s_ij - m_i} v_j + l sum_{j<=i-w} phi(q_i).phi(k_j) v_j) / (the same with 1), one
    query at a time."""
    n, w = q.shape[2], mixer.window
    g = torch.sigmoid(mixer.window_logit)[None, :, None]
    lin = 1 - g if mixer.affine else torch.ones_like(g)
    out = torch.zeros_like(v)
    for i in range(n):
        near = range(max(0, i - w + 1), i + 1)
        s = torch.stack([(q[:, :, i] * k[:, :, j]).sum(-1) / math.sqrt(q.shape[-1]) for j in near], -1)
        e = torch.exp(s - s.amax(-1, keepdim=True))
        num = g * (e[..., None] * v[:, :, list(near)]).sum(2)
        den = g * e.sum(-1, keepdim=True)
        for j in range(0, i - w + 1):
            a = (elu_feature_map(q[:, :, i]) * elu_feature_map(k[:, :, j])).sum(-1, keepdim=True)
            num, den = num + lin * a * v[:, :, j], den + lin * a
        out[:, :, i] = num / (den + mixer.eps)
    return out


@pytest.mark.parametrize("window", [1, 2, 5, 9, 20])
@pytest.mark.parametrize("affine", [False, True])
def test_the_fast_path_and_the_reference_compute_the_formula(window, affine):
    mixer = make(window, affine=affine)
    q, k, v = heads(13)
    expected = by_the_formula(mixer, q, k, v)
    torch.testing.assert_close(mixer._attend(q, k, v, None), expected, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(mixer._attend_reference(q, k, v, None), expected, rtol=1e-9, atol=1e-10)


def test_the_window_alone_is_sliding_window_softmax_attention():
    """g -> 1 with affine=True leaves no weight on the linear part: softmax over the last w keys."""
    mixer = make(4, affine=True, logit=60.0)
    q, k, v = heads(11)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    lag = torch.arange(11)[:, None] - torch.arange(11)[None, :]
    expected = scores.masked_fill(~((lag >= 0) & (lag < 4)), float("-inf")).softmax(-1) @ v
    torch.testing.assert_close(mixer._attend(q, k, v, None), expected, rtol=1e-5, atol=1e-7)  # eps = 1e-6


def test_without_the_window_it_is_linear_attention_w_tokens_back():
    """g -> 0: query i reads only linear attention over keys j <= i - w (nothing before i = w)."""
    mixer = make(3, logit=-60.0)
    q, k, v = heads(10)
    out = mixer._attend(q, k, v, None)
    phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)
    for i in range(3, 10):
        a = (phi_q[:, :, i, None] * phi_k[:, :, : i - 2]).sum(-1)
        torch.testing.assert_close(out[:, :, i], (a[..., None] * v[:, :, : i - 2]).sum(2) / a.sum(-1, keepdim=True),
                                   rtol=1e-5, atol=1e-7)  # eps = 1e-6 in the denominator


@pytest.mark.parametrize("n", [1, 3, 8, 17, 40])
def test_every_length_against_every_window_with_padding(n):
    for window in (1, 4, 8, 64):
        mixer = make(window, feature_map="hedgehog", feature_dim=3)
        x = torch.randn(2, n, 12, dtype=torch.float64)
        mask = torch.ones(2, n, dtype=torch.bool)
        mask[1, : n // 2] = False  # left padding
        for m in (None, mask):
            torch.testing.assert_close(mixer(x, m), mixer.forward_reference(x, m), rtol=1e-9, atol=1e-10)
        changed = x.clone()
        changed[1, : n // 2] = 100.0
        torch.testing.assert_close(mixer(changed, mask)[1, n // 2:], mixer(x, mask)[1, n // 2:])


def test_decoding_keeps_a_bounded_state_and_equals_the_forward_pass():
    """The state grows while the window fills, then keeps one size: w (2 d + F) + F (d + 1) numbers per head (and
    the position counter)."""
    mixer = make(4)
    x = torch.randn(2, 15, 12, dtype=torch.float64)
    state, outputs, sizes = mixer.init_state(2, dtype=torch.float64), [], []
    for t in range(15):
        y, state = mixer.step(x[:, t], state)
        outputs.append(y)
        sizes.append(sum(s.numel() for s in state.values()))
    torch.testing.assert_close(torch.stack(outputs, 1), mixer(x), rtol=1e-9, atol=1e-10)
    d, f = mixer.head_dim, mixer.feature_dim
    assert set(sizes[3:]) == {2 * mixer.num_heads * (4 * (2 * d + f) + f * (d + 1)) + 1}
    assert sizes[:4] == sorted(sizes[:4]) and len(set(sizes[:4])) == 4
    with pytest.raises(ValueError, match="window must be a positive int"):
        tokenmix.create_mixer("window_linear", 12, causal=True, window=0)
    with pytest.raises(ValueError, match="causal"):
        tokenmix.create_mixer("window_linear", 12, causal=False)


@pytest.mark.parametrize("n", [3, 4, 9, 13])
def test_a_prompt_fills_the_window_and_the_linear_state_in_one_pass(n):
    """prefill_heads (no step taken) = one step per token: outputs, the window's ring and the linear state; the
    steps after it continue alike."""
    mixer = make(4, feature_map="hedgehog", feature_dim=3)
    q, k, v = heads(n + 3)
    state, stepped = mixer.init_state(2, dtype=torch.float64), []
    for t in range(n + 3):
        out, state = mixer.step_heads(q[:, :, t], k[:, :, t], v[:, :, t], state)
        stepped.append(out)
    out, filled = mixer.prefill_heads(q[:, :, :n], k[:, :, :n], v[:, :, :n], mixer.init_state(2, dtype=torch.float64))
    rest = []
    for t in range(n, n + 3):
        o, filled = mixer.step_heads(q[:, :, t], k[:, :, t], v[:, :, t], filled)
        rest.append(o)
    got = torch.cat([out, torch.stack(rest, 2)], 2)
    torch.testing.assert_close(got, torch.stack(stepped, 2), rtol=1e-9, atol=1e-10)
    for key in state:
        torch.testing.assert_close(filled[key], state[key], rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("cuts", [(1, 2, 5, 1, 4), (3, 1, 1, 8), (4, 4, 5), (6, 7), (2, 11)])
def test_a_continuation_of_any_length_from_any_state_takes_one_pass(cuts, monkeypatch):
    """Blocks of any length prefilled one after another (the ring partly full, full, wrapped; tokens leaving the
    window inside a block): the outputs and the state of one step per token, and not a step taken."""
    mixer = make(4, feature_map="hedgehog", feature_dim=3)
    total = sum(cuts)
    q, k, v = heads(total)
    state, stepped = mixer.init_state(2, dtype=torch.float64), []
    for t in range(total):
        out, state = mixer.step_heads(q[:, :, t], k[:, :, t], v[:, :, t], state)
        stepped.append(out)
    monkeypatch.setattr(type(mixer), "_step_heads", lambda *a: pytest.fail("a continuation went step by step"))
    filled, outputs, start = mixer.init_state(2, dtype=torch.float64), [], 0
    for n in cuts:
        out, filled = mixer.prefill_heads(q[:, :, start:start + n], k[:, :, start:start + n],
                                          v[:, :, start:start + n], filled)
        outputs.append(out)
        start += n
    torch.testing.assert_close(torch.cat(outputs, 2), torch.stack(stepped, 2), rtol=1e-9, atol=1e-10)
    for key in state:
        torch.testing.assert_close(filled[key], state[key], rtol=1e-9, atol=1e-10)


transformers = pytest.importorskip("transformers")


def _mistral(**extra):
    torch.manual_seed(0)
    config = transformers.MistralConfig(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, intermediate_size=40, max_position_embeddings=64,
                                        bos_token_id=0, eos_token_id=None, pad_token_id=0, **extra)
    model = transformers.MistralForCausalLM(config).eval()
    model.set_attn_implementation("eager")
    return model


def test_mistral_keeps_its_window():
    """The model's own window by default; with the window's weight at 1 it computes Mistral's sliding-window
    attention; it decodes and saves as a converted model."""
    original = _mistral(sliding_window=4)
    model = copy.deepcopy(original)
    assert tokenmix.replace_attention(model, "window_linear", affine=True) == 2
    assert model.model.layers[0].self_attn.tokenmix.mixer.window == 4
    for mechanism in tokenmix.conversion.swapped_mechanisms(model).values():
        mechanism.window_logit.data.fill_(60.0)
    ids = torch.randint(2, 40, (2, 12))
    torch.testing.assert_close(model(ids).logits, original(ids).logits, rtol=1e-4, atol=1e-5)
    for mechanism in tokenmix.conversion.swapped_mechanisms(model).values():
        mechanism.window_logit.data.fill_(0.0)  # the linear part weighs as much as the window
    prompt, real = ids[:, :5].clone(), torch.ones(2, 5, dtype=torch.long)
    real[1, :2] = 0
    for settings in ({}, {"attention_mask": real}):  # padded: a key/value cache (a window keeps pads' places)
        assert torch.equal(model.generate(prompt, max_new_tokens=8, do_sample=False, **settings),
                           model.generate(prompt, max_new_tokens=8, do_sample=False, use_cache=False, **settings))
    with pytest.raises(ValueError, match="sliding window of 4 tokens, narrower than window=8"):
        tokenmix.replace_attention(copy.deepcopy(original), "window_linear", window=8)
    with pytest.raises(ValueError, match="or use 'window_linear'"):
        tokenmix.replace_attention(copy.deepcopy(original), "linear")


def test_linearize_fits_the_maps_and_the_window_weights():
    model = _mistral(sliding_window=None)
    g = torch.Generator().manual_seed(3)
    data = [{"input_ids": torch.randint(2, 40, (2, 16), generator=g)} for _ in range(3)]
    report = linearize(model, "window_linear", method="lolcats", data=data, transfer_steps=30, window=4,
                       progress=False)
    assert all(layer.output_error_after < layer.output_error_before for layer in report.layers)
    fitted = {id(p) for p in feature_map_parameters(model)}
    windows = [m.window_logit for m in tokenmix.conversion.swapped_mechanisms(model).values()]
    assert all(id(w) in fitted and float(w.abs().max()) > 0 for w in windows)  # moved off 0 by the transfer
    with pytest.raises(ValueError, match="no learned feature map or gates to fit.*'window_linear'"):
        linearize(_mistral(sliding_window=None), "performer", data=data, progress=False)
