"""Learned feature maps of linear attention: T2R (Kasai et al., 2021) and Hedgehog (Zhang et al., 2024), as the
``feature_map`` option of ``linear``: the maps as their papers write them, fast path == reference, no causal leak,
padding invisible, step decoding == the causal forward, parameter counts, and what is refused."""

from __future__ import annotations

import pytest
import torch

import tokenmix
from conftest import assert_matches_reference, assert_padding_invisible, build, lengths_mask
from tokenmix.mixers.linear import HedgehogFeatureMap, T2RFeatureMap
from tokenmix.ops.init import normal_init_

MAPS = ["t2r", "hedgehog"]


def test_t2r_is_a_relu_mlp_per_head_shared_by_queries_and_keys():
    torch.manual_seed(0)
    phi = T2RFeatureMap(num_heads=3, head_dim=4, features=5).double()
    x = torch.randn(2, 3, 7, 4, dtype=torch.float64)
    for h in range(3):
        expected = torch.relu(x[:, h] @ phi.weight[h] + phi.bias[h])
        torch.testing.assert_close(phi(x)[:, h], expected)
    mixer = build("linear", feature_map="t2r", feature_dim=5)
    assert [n for n, _ in mixer.named_parameters() if n.startswith("phi")] == ["phi.weight", "phi.bias"]


def test_hedgehog_is_an_exp_mlp_normalised_over_features_and_starts_at_the_identity():
    phi = HedgehogFeatureMap(num_heads=2, head_dim=4, features=4).double()
    x = torch.randn(3, 2, 5, 4, dtype=torch.float64)
    plus, minus = torch.exp(x), torch.exp(-x)  # W = I, b = 0 at the start
    torch.testing.assert_close(phi(x), torch.cat([plus / plus.sum(-1, keepdim=True),
                                                  minus / minus.sum(-1, keepdim=True)], dim=-1))
    with torch.no_grad():
        phi.weight.normal_()
        phi.bias.normal_()
    u = torch.einsum("bhnd,hdf->bhnf", x, phi.weight) + phi.bias[:, None]
    torch.testing.assert_close(phi(x), torch.cat([u.exp() / u.exp().sum(-1, keepdim=True),
                                                  (-u).exp() / (-u).exp().sum(-1, keepdim=True)], dim=-1))
    mixer = build("linear", feature_map="hedgehog")
    normal_init_(mixer, 0.02)  # a model-wide initialisation keeps the identity start (its role is "keep")
    assert torch.equal(mixer.phi_q.weight[0], torch.eye(8, dtype=mixer.phi_q.weight.dtype))
    assert mixer.feature_dim == 16  # 2 x head_dim


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("feature_map", MAPS)
def test_fast_path_matches_the_reference_with_gradients(feature_map, causal):
    torch.manual_seed(1)
    mixer = build("linear", causal=causal, feature_map=feature_map, feature_dim=6)
    x = torch.randn(3, 11, 16, dtype=torch.float64)
    assert_matches_reference(mixer, x, lengths_mask([11, 7, 3], 11, left=causal))


@pytest.mark.parametrize("feature_map", MAPS)
def test_no_causal_leak(feature_map):
    torch.manual_seed(2)
    mixer = build("linear", causal=True, feature_map=feature_map)
    x = torch.randn(2, 12, 16, dtype=torch.float64, requires_grad=True)
    t = 5
    mixer(x)[:, t].sum().backward()
    assert x.grad[:, t + 1:].abs().max() == 0 and x.grad[:, :t + 1].abs().max() > 0


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("feature_map", MAPS)
def test_padding_is_invisible(feature_map, causal):
    torch.manual_seed(3)
    mixer = build("linear", causal=causal, feature_map=feature_map)
    x = torch.randn(3, 10, 16, dtype=torch.float64)
    assert_padding_invisible(mixer, x, lengths_mask([10, 6, 2], 10))


@pytest.mark.parametrize("feature_map", MAPS)
def test_step_decoding_equals_the_causal_forward(feature_map):
    torch.manual_seed(4)
    mixer = build("linear", causal=True, feature_map=feature_map, feature_dim=5)
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    state = mixer.init_state(2)
    steps = []
    for t in range(9):
        y, state = mixer.step(x[:, t], state)
        steps.append(y)
    torch.testing.assert_close(torch.stack(steps, dim=1), mixer(x))


@pytest.mark.parametrize("feature_map", MAPS)
def test_attention_weights_reproduce_the_forward(feature_map):
    torch.manual_seed(5)
    mixer = build("linear", causal=True, feature_map=feature_map)
    x = torch.randn(2, 8, 16, dtype=torch.float64)
    weights = mixer.attention_weights(x)  # (B, H, N, N): the weights whose product with V is the output
    assert (weights >= 0).all() and (weights.sum(-1) <= 1 + 1e-12).all()  # below one by the eps guard only
    assert torch.count_nonzero(weights.triu(1)) == 0
    _, _, v = mixer.qkv_heads(x)
    heads = (weights @ v).transpose(1, 2).reshape(2, 8, 16)
    torch.testing.assert_close(mixer.proj(heads), mixer(x))


def test_parameter_counts():
    dim, heads, features = 32, 4, 6
    base = 4 * dim * dim  # Q, K, V and the output projection, no biases
    per_map = heads * (dim // heads) * features + heads * features  # W and b per head
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(tokenmix.create_mixer("linear", dim, num_heads=heads)) == base
    assert count(tokenmix.create_mixer("linear", dim, num_heads=heads, feature_map="t2r",
                                       feature_dim=features)) == base + per_map
    assert count(tokenmix.create_mixer("linear", dim, num_heads=heads, feature_map="hedgehog",
                                       feature_dim=features)) == base + 2 * per_map


def test_bad_options_are_refused_by_name():
    with pytest.raises(ValueError, match="linear.*feature_map must be one of"):
        tokenmix.create_mixer("linear", 16, feature_map="relu")
    with pytest.raises(ValueError, match="linear.*elu \\+ 1 has none"):
        tokenmix.create_mixer("linear", 16, feature_dim=8)
    with pytest.raises(ValueError, match="linear.*feature_dim must be a positive int"):
        tokenmix.create_mixer("linear", 16, feature_map="t2r", feature_dim=0)


def test_learned_maps_train_in_a_model():
    torch.manual_seed(6)
    for feature_map in MAPS:
        mixer = tokenmix.create_mixer("linear", 16, num_heads=2, causal=True, feature_map=feature_map)
        x, target = torch.randn(4, 10, 16), torch.randn(4, 10, 16)
        optimizer = torch.optim.Adam(mixer.parameters(), lr=1e-2)
        before = mixer.phi.weight.detach().clone() if feature_map == "t2r" else mixer.phi_q.weight.detach().clone()
        losses = []
        for _ in range(20):
            loss = (mixer(x) - target).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        after = mixer.phi.weight if feature_map == "t2r" else mixer.phi_q.weight
        assert losses[-1] < losses[0] and not torch.equal(before, after)


def test_based_taylor_map_gives_the_exponentials_second_order_polynomial():
    """phi(q) . phi(k) = 1 + z + z^2 / 2 with z = q . k / sqrt(r) (Arora et al. 2024 §4.1): positive for every z."""
    from tokenmix.mixers.based import taylor_feature_map

    q, k = torch.randn(5, 16, dtype=torch.float64), torch.randn(5, 16, dtype=torch.float64)
    z = (q * k).sum(-1) / 4.0
    got = (taylor_feature_map(q) * taylor_feature_map(k)).sum(-1)
    torch.testing.assert_close(got, 1 + z + z ** 2 / 2)
    assert taylor_feature_map(q).shape[-1] == 1 + 16 + 256 and (got > 0).all()
    mixer = tokenmix.create_mixer("based", 32, num_heads=2, causal=True, feature_dim=4)
    assert mixer.feature_dim == 1 + 4 + 16 and mixer.reduce.shape == (2, 16, 4)
