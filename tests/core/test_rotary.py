"""Rotary positions (Su et al., 2021) as the ``rotary`` option of softmax, linear and kerformer: the rotation as
eq. 15 writes it, softmax's scores on rotated Q and K, the kernel mechanisms in eq. 19's form (rotated numerator,
unrotated normaliser), each checked against an explicit computation, fast == reference, no causal leak, padding
invisible, step == forward."""

from __future__ import annotations

import pytest
import torch

import tokenmix
from conftest import assert_matches_reference, assert_padding_invisible, build, lengths_mask
from tokenmix.ops.rotary import rotary_angles, rotate, rotation_matrix

KERNEL = [("linear", {}), ("kerformer", {"se_k": False})]
ALL = [("softmax", {}), *KERNEL]


def _rotated(x: torch.Tensor) -> torch.Tensor:
    """x (B, H, N, D) with position m multiplied by R_m (eq. 15), the plain way."""
    n, d = x.shape[-2:]
    return torch.stack([x[..., m, :] @ rotation_matrix(m, d).T.to(x.dtype) for m in range(n)], dim=-2)


def test_rotate_is_the_block_diagonal_rotation_and_keeps_only_relative_positions():
    x = torch.randn(2, 3, 7, 8, dtype=torch.float64)
    cos, sin = rotary_angles(torch.arange(7), 8)
    torch.testing.assert_close(rotate(x, cos, sin), _rotated(x))
    q, k = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    dot = lambda m, n: (rotation_matrix(m, 8) @ q) @ (rotation_matrix(n, 8) @ k)  # noqa: E731
    assert dot(5, 2) == pytest.approx(dot(13, 10)) and dot(5, 2) != pytest.approx(dot(5, 3))
    with pytest.raises(ValueError, match="even"):
        rotary_angles(torch.arange(3), 5)


@pytest.mark.parametrize("causal", [False, True])
def test_softmax_scores_rotated_queries_and_keys(causal):
    torch.manual_seed(0)
    mixer = build("softmax", causal=causal, rotary=True)
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    q, k, _ = mixer.qkv_heads(x)
    scores = _rotated(q) @ _rotated(k).transpose(-2, -1) / 8 ** 0.5
    if causal:
        scores = scores.masked_fill(torch.ones(9, 9, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(mixer.attention_weights(x), scores.softmax(-1))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name,options", KERNEL)
def test_kernel_mechanisms_take_eq_19s_form(name, options, causal):
    torch.manual_seed(1)
    mixer = build(name, causal=causal, rotary=True, **options)
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    q, k, v = mixer.qkv_heads(x)
    phi_q, phi_k, _ = mixer._features(q, k, None)
    num = _rotated(phi_q) @ _rotated(phi_k).transpose(-2, -1)
    den = phi_q @ phi_k.transpose(-2, -1)
    if causal:
        future = torch.ones(9, 9, dtype=torch.bool).triu(1)
        num, den = num.masked_fill(future, 0), den.masked_fill(future, 0)
    heads = (num @ v) / (den.sum(-1, keepdim=True) + mixer.eps)
    expected = mixer.proj(heads.transpose(1, 2).reshape(2, 9, 16))
    torch.testing.assert_close(mixer(x), expected)
    torch.testing.assert_close(mixer.attention_weights(x), num / (den.sum(-1, keepdim=True) + mixer.eps))
    assert not torch.allclose(mixer(x), build(name, causal=causal, **options)(x))  # positions matter


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name,options", ALL)
def test_fast_path_matches_the_reference_and_padding_is_invisible(name, options, causal):
    torch.manual_seed(2)
    mixer = build(name, causal=causal, rotary=True, **options)
    x = torch.randn(3, 10, 16, dtype=torch.float64)
    mask = lengths_mask([10, 6, 3], 10)
    assert_matches_reference(mixer, x, mask)
    assert_padding_invisible(mixer, x, mask)


@pytest.mark.parametrize("name,options", ALL)
def test_no_causal_leak_and_step_decoding_equals_the_forward(name, options):
    torch.manual_seed(3)
    mixer = build(name, causal=True, rotary=True, **options)
    x = torch.randn(2, 11, 16, dtype=torch.float64, requires_grad=True)
    y = mixer(x)
    y[:, 4].sum().backward()
    assert x.grad[:, 5:].abs().max() == 0 and x.grad[:, :5].abs().max() > 0
    state, steps = mixer.init_state(2), []
    with torch.no_grad():
        for t in range(11):
            out, state = mixer.step(x[:, t], state)
            steps.append(out)
    torch.testing.assert_close(torch.stack(steps, dim=1), y.detach())


def test_what_rotary_cannot_take_is_refused_by_name():
    with pytest.raises(ValueError, match="softmax.*odd"):
        tokenmix.create_mixer("softmax", 6, num_heads=2, rotary=True)
    with pytest.raises(ValueError, match="linear.*normalize=True"):
        tokenmix.create_mixer("linear", 16, rotary=True, normalize=False)
    with pytest.raises(ValueError, match="linear.*odd"):
        tokenmix.create_mixer("linear", 16, rotary=True, feature_map="t2r", feature_dim=5)
    with pytest.raises(ValueError, match="performer.*rotary"):
        tokenmix.create_mixer("performer", 16, rotary=True)
    with pytest.raises(ValueError, match="rotary must be a bool"):
        tokenmix.create_mixer("kerformer", 16, rotary=1, se_k=False)
