"""The short causal convolution of DeltaNet, Gated DeltaNet (on q, k, v) and Mamba-2 (on x, B, C), ``conv_size``:
the fast path equals the tap-by-tap reference (forward and gradients), no causal leak, padding on either side
invisible, decoding continues the forward pass with the filter's inputs in its state, the filter reaches exactly
``conv_size - 1`` tokens back, the papers' parameter counts, and the errors. Without it (the default) the layers
are the mixer contract's."""

from __future__ import annotations

import pytest
import torch

import tokenmix
from conftest import assert_matches_reference, assert_padding_invisible, lengths_mask

DIM, HEADS, TAPS, N = 16, 2, 4, 40
NAMES = ("deltanet", "gated_deltanet", "mamba2")


def with_conv(name: str, conv_size: int | None = TAPS) -> torch.nn.Module:
    torch.manual_seed(0)
    return tokenmix.create_mixer(name, DIM, num_heads=HEADS, causal=True, max_len=64, conv_size=conv_size).double()


def channels(mixer: torch.nn.Module) -> int:
    """The filtered width: q, k and v side by side, or Mamba-2's x, B and C."""
    return 3 * DIM if not hasattr(mixer, "state_size") else mixer.inner_dim + 2 * mixer.state_size


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("padding", [None, "right", "left"])
def test_the_fast_path_equals_the_reference_forward_and_gradients(name, padding):
    x = torch.randn(3, N, DIM, dtype=torch.float64)
    mask = None if padding is None else lengths_mask([N, 21, 7], N, left=padding == "left")
    assert_matches_reference(with_conv(name), x, mask)


@pytest.mark.parametrize("name", NAMES)
def test_no_causal_leak(name):
    mixer = with_conv(name)
    x = torch.randn(2, N, DIM, dtype=torch.float64)
    later = x.clone()
    later[:, 25:] = 1e3 * torch.randn(2, N - 25, DIM, dtype=torch.float64)
    torch.testing.assert_close(mixer(later)[:, :25], mixer(x)[:, :25], rtol=0, atol=0)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("left", [False, True], ids=["right", "left"])
def test_padding_on_either_side_is_invisible(name, left):
    x = torch.randn(3, N, DIM, dtype=torch.float64)
    assert_padding_invisible(with_conv(name), x, lengths_mask([N, 21, 7], N, left=left), atol=1e-9)


@pytest.mark.parametrize("name", NAMES)
def test_a_prompt_and_steps_continue_the_forward_pass_keeping_the_filters_inputs(name):
    mixer = with_conv(name)
    x = torch.randn(2, N, DIM, dtype=torch.float64)
    full = mixer(x)
    state = mixer.init_state(2, dtype=torch.float64)
    assert tuple(state["conv"].shape) == (2, TAPS - 1, channels(mixer))
    y, state = mixer.prefill(x[:, :33], state)
    outputs = [y]
    for t in range(33, N):
        y_t, state = mixer.step(x[:, t], state)
        outputs.append(y_t[:, None])
    torch.testing.assert_close(torch.cat(outputs, 1), full, rtol=1e-9, atol=1e-10)
    assert set(state) == {"S", "conv"}


@pytest.mark.parametrize("name", NAMES)
def test_the_filter_reaches_exactly_conv_size_minus_one_tokens_back(name):
    mixer = with_conv(name)
    x = torch.randn(1, 12, DIM, dtype=torch.float64, requires_grad=True)
    (q, k, v), _ = mixer._convolved_heads(x, None)
    k[0, :, 9].sum().backward()  # token 9's keys
    reached = x.grad[0].abs().sum(-1) > 0
    assert reached.tolist() == [t in range(9 - (TAPS - 1), 10) for t in range(12)]


@pytest.mark.parametrize("name", NAMES)
def test_the_filter_adds_the_papers_parameters_and_nothing_without_it(name):
    mixer, bare = with_conv(name), with_conv(name, None)
    assert bare.short_conv is None and "conv" not in bare.init_state(1)
    taps = channels(mixer) * TAPS
    bias = channels(mixer) if name == "mamba2" else 0  # Mamba-2's conv1d has a bias, the delta rule's none (fla)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(mixer) - count(bare) == taps + bias


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("bad", [0, -1, 2.0, "4", True])
def test_a_bad_conv_size_is_refused_by_name(name, bad):
    with pytest.raises(ValueError, match=f"{name}.*conv_size must be a positive int"):
        tokenmix.create_mixer(name, DIM, num_heads=HEADS, causal=True, conv_size=bad)


@pytest.mark.parametrize("name", NAMES)
def test_a_host_s_q_k_v_take_no_short_convolution(name):
    with pytest.raises(ValueError, match=f"{name}.*conv_size=4.*own projections"):
        tokenmix.create_heads(name, num_heads=HEADS, head_dim=DIM // HEADS, causal=True, conv_size=4)
