"""Properties every registered spatial (vision) mixer must have; new ones get these tests for free."""

from __future__ import annotations

import pytest
import torch

import tokenmix

SPATIAL = [n for n in tokenmix.list_mixers(include_hidden=True)
           if tokenmix.mixer_info(n).spatial and not n.startswith("_")]
SIZES = [(9, 7), (8, 8), (3, 5), (1, 1)]
DIM = 16


def build(name: str, dtype: torch.dtype = torch.float64, dim: int = DIM, **options) -> torch.nn.Module:
    heads = 2 if tokenmix.mixer_info(name).multihead else 1
    return tokenmix.create_mixer(name, dim, num_heads=heads, **options).to(dtype).eval()


def test_the_vision_family_is_registered():
    for name in ["swin", "pvt", "twins_lsa", "twins_gsa", "scalable_ssa", "scalable_iwsa"]:
        assert name in SPATIAL


@pytest.mark.parametrize("name", SPATIAL)
@pytest.mark.parametrize("hw", SIZES, ids=lambda hw: f"{hw[0]}x{hw[1]}")
def test_shape_dtype_and_every_parameter_gets_a_gradient(name, hw):
    torch.manual_seed(0)
    mixer = build(name, torch.float32)
    x = torch.randn(2, hw[0] * hw[1], DIM, requires_grad=True)
    y = mixer(x, hw=hw)
    assert y.shape == x.shape and y.dtype == x.dtype and torch.isfinite(y).all()
    y.square().sum().backward()
    if hw != (1, 1):  # a single cell can leave e.g. a relative-position entry unused
        for pname, p in mixer.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, f"{name}: no gradient reaches {pname}"


@pytest.mark.parametrize("name", SPATIAL)
@pytest.mark.parametrize("hw", SIZES[:3], ids=lambda hw: f"{hw[0]}x{hw[1]}")
def test_fast_path_matches_reference(name, hw):
    torch.manual_seed(1)
    mixer = build(name)
    x = torch.randn(2, hw[0] * hw[1], DIM, dtype=torch.float64, requires_grad=True)
    inputs = [x, *mixer.parameters()]
    fast = mixer(x, hw=hw)
    cotangent = torch.randn_like(fast)
    grads_fast = torch.autograd.grad((fast * cotangent).sum(), inputs, allow_unused=True)
    ref = mixer.forward_reference(x, hw=hw)
    grads_ref = torch.autograd.grad((ref * cotangent).sum(), inputs, allow_unused=True)
    torch.testing.assert_close(fast, ref, rtol=1e-7, atol=1e-9)
    for a, b in zip(grads_fast, grads_ref):
        if a is None or b is None:
            assert a is None and b is None
            continue
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", SPATIAL)
def test_rows_of_a_batch_are_independent(name):
    torch.manual_seed(2)
    mixer = build(name)
    x = torch.randn(3, 63, DIM, dtype=torch.float64)
    together = mixer(x, hw=(9, 7))
    for b in range(3):
        torch.testing.assert_close(together[b:b + 1], mixer(x[b:b + 1], hw=(9, 7)))


@pytest.mark.parametrize("name", SPATIAL)
def test_finite_for_large_inputs_and_bfloat16_tracks_float32(name):
    torch.manual_seed(3)
    mixer = build(name, torch.float32, dim=64)
    x = torch.empty(2, 63, 64).uniform_(-10, 10)
    assert torch.isfinite(mixer(x, hw=(9, 7))).all()
    x = torch.randn(2, 63, 64)
    y32 = mixer(x, hw=(9, 7))
    y16 = mixer.to(torch.bfloat16)(x.bfloat16(), hw=(9, 7))
    assert y16.dtype == torch.bfloat16 and torch.isfinite(y16).all()
    assert (y16.float() - y32).abs().max() <= 0.05 * y32.abs().max() + 0.02


@pytest.mark.parametrize("name", SPATIAL)
def test_grid_errors_name_the_mixer(name):
    mixer = build(name)
    x = torch.randn(1, 12, DIM, dtype=torch.float64)
    with pytest.raises(ValueError, match=name):
        mixer(x)  # no hw
    with pytest.raises(ValueError, match=name):
        mixer(x, hw=(5, 3))  # 15 cells for 12 tokens
    with pytest.raises(ValueError, match=name):
        mixer(x, hw=(12,))
    with pytest.raises(ValueError, match=name):
        mixer(x[0], hw=(3, 4))  # rank 2
    with pytest.raises(ValueError, match=name):
        mixer(torch.randn(1, 12, DIM + 1, dtype=torch.float64), hw=(3, 4))


@pytest.mark.parametrize("name", SPATIAL)
def test_info_and_alternate_options(name):
    info = tokenmix.mixer_info(name)
    assert info.spatial and info.paper and info.complexity.startswith("O(")
    mixer = build(name, **dict(info.alternate))
    assert mixer(torch.randn(1, 63, DIM, dtype=torch.float64), hw=(9, 7)).shape == (1, 63, DIM)


@pytest.mark.parametrize("name", SPATIAL)
def test_an_empty_batch_is_a_clear_error(name):
    mixer = tokenmix.create_mixer(name, 16, num_heads=2)
    with pytest.raises(ValueError, match=rf"{name}: x has an empty batch \(B = 0\)"):
        mixer(torch.randn(0, 12, 16), hw=(3, 4))
