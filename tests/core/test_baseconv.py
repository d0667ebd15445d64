"""BaseConv's long filter (Arora et al. 2023, Zoology §5: one tap per position, ``kernel_size=None``): the FFT path
equals the tap-by-tap reference, no causal leak, padding invisible, decoding equals the forward pass, and it reaches
the first token where a short filter cannot. The short filter's properties are the mixer contract's."""

from __future__ import annotations

import pytest
import torch

import tokenmix
from conftest import assert_matches_reference, assert_padding_invisible, lengths_mask
from tokenmix.ops.causal_conv import choose_path

DIM, TAPS = 8, 96


def long_conv(max_len: int = TAPS) -> torch.nn.Module:
    torch.manual_seed(0)
    return tokenmix.create_mixer("baseconv", DIM, causal=True, max_len=max_len, kernel_size=None).double()


def test_a_long_filter_has_one_tap_per_position_and_the_papers_parameters():
    mixer = long_conv()
    assert mixer.kernel_size == TAPS and mixer.conv.weight.shape == (DIM, 1, TAPS)
    # the gate's projection (d x d + d) and one filter of max_len taps per channel with its bias
    assert sum(p.numel() for p in mixer.parameters()) == DIM * DIM + DIM + DIM * TAPS + DIM
    assert choose_path("auto", 80, TAPS, "vector") == "fft"  # what the test below exercises


def test_the_fft_path_equals_the_tap_by_tap_reference_forward_and_gradients():
    mixer = long_conv()
    x = torch.randn(2, 80, DIM, dtype=torch.float64)
    assert_matches_reference(mixer, x, None, rtol=1e-9, atol=1e-10)
    assert_matches_reference(mixer, x, lengths_mask([80, 37], 80), rtol=1e-9, atol=1e-10)


def test_no_causal_leak_and_the_first_token_reaches_the_last():
    mixer, short = long_conv(), tokenmix.create_mixer("baseconv", DIM, causal=True, max_len=TAPS).double()
    x = torch.randn(1, 80, DIM, dtype=torch.float64)
    later = x.clone()
    later[:, 50:] = 1e3 * torch.randn(1, 30, DIM, dtype=torch.float64)
    # the FFT spreads rounding over every position (1e-13 here); a leak of the later inputs would be ~1e3
    torch.testing.assert_close(mixer(later)[:, :50], mixer(x)[:, :50], rtol=0, atol=1e-9)
    for m, reaches in ((mixer, True), (short, False)):
        x0 = x.clone().requires_grad_(True)
        m(x0)[0, -1].sum().backward()
        assert bool(x0.grad[0, 0].abs().sum() > 1e-6) == reaches  # 3 taps see 2 tokens back, the long filter 79


def test_padding_is_invisible():
    mixer = long_conv()
    x = torch.randn(3, 70, DIM, dtype=torch.float64)
    assert_padding_invisible(mixer, x, lengths_mask([70, 41, 5], 70), atol=1e-9)


def test_decoding_and_a_prompt_continue_the_forward_pass():
    mixer = long_conv()
    x = torch.randn(2, 75, DIM, dtype=torch.float64)
    full = mixer(x)
    state = mixer.init_state(2, dtype=torch.float64)
    assert state["window"].shape == (2, TAPS - 1, DIM)  # a fixed state: the last max_len - 1 inputs
    y, state = mixer.prefill(x[:, :70], state)
    steps = [y]
    for t in range(70, 75):
        y_t, state = mixer.step(x[:, t], state)
        steps.append(y_t[:, None])
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("kwargs,message", [
    ({"causal": False, "max_len": TAPS}, "causal only"),
    ({"causal": True, "max_len": None}, "needs max_len"),
])
def test_a_long_filter_without_its_conditions_is_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=f"baseconv.*{message}"):
        tokenmix.create_mixer("baseconv", DIM, kernel_size=None, **kwargs)
    with pytest.raises(ValueError, match="baseconv.*kernel_size must be a positive int or None"):
        tokenmix.create_mixer("baseconv", DIM, causal=True, max_len=TAPS, kernel_size=0)
