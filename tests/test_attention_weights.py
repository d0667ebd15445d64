"""The attention matrix a mechanism shows (``attention_weights``) is the one its fast path applies: the heads'
output computed as ``weights @ V`` equals ``forward`` (bidirectional and causal, with padding), every row of real
queries sums to 1, padded keys and (causal) later keys get exactly zero, and a mechanism without an attention
matrix says so by name."""

from __future__ import annotations

import pytest
import torch

import tokenmix
from conftest import lengths_mask
from tokenmix.mixers.base import merge_heads

CASES = [("softmax", {}), ("linear", {}), ("performer", {"nb_features": 32}), ("cosformer", {"max_len": 12}),
         ("kerformer", {"max_len": 12}), ("kerformer", {"max_len": 12, "se_k": False})]


def _through_weights(mixer, x, mask):
    weights = mixer.attention_weights(x, mask)
    _, _, v = mixer.qkv_heads(x)
    out = mixer._output(merge_heads(weights @ v))
    return out if mask is None else out * mask[..., None]


@pytest.mark.parametrize("name, options", CASES)
@pytest.mark.parametrize("causal", [False, True])
def test_weights_reproduce_the_forward_pass(name, options, causal):
    if causal and not tokenmix.mixer_info(name).causal:
        pytest.skip(f"{name} has no causal mode")
    if causal and options.get("se_k", True) and name == "kerformer":
        options = {**options, "se_k": False}
    torch.manual_seed(0)
    mixer = tokenmix.create_mixer(name, 16, num_heads=2, causal=causal, **options).double().eval()
    x = torch.randn(2, 12, 16, dtype=torch.float64)
    mask = lengths_mask([12, 7], 12)
    for m in (None, mask):
        torch.testing.assert_close(_through_weights(mixer, x, m), mixer(x, m), rtol=1e-9, atol=1e-9)
    weights = mixer.attention_weights(x, mask)
    assert weights.shape == (2, 2, 12, 12)
    # atol: the eps over small denominators
    torch.testing.assert_close(weights[1, :, :7].sum(-1), torch.ones(2, 7, dtype=torch.float64), rtol=0, atol=1e-3)
    assert torch.equal(weights[1, :, :, 7:], torch.zeros_like(weights[1, :, :, 7:]))  # padded keys
    assert torch.equal(weights[1, :, 7:], torch.zeros_like(weights[1, :, 7:]))  # padded queries' rows
    if causal:
        assert torch.equal(weights.triu(1), torch.zeros_like(weights))  # no later key


def test_a_mechanism_without_an_attention_matrix_says_so():
    mixer = tokenmix.create_mixer("efficient", 16, num_heads=2)
    with pytest.raises(NotImplementedError, match="efficient: attention_weights"):
        mixer.attention_weights(torch.randn(1, 5, 16))


# -- locality (Gan et al. (2023) Fig. 5) ---------------------------------------------------------------------
def test_local_mass_counts_the_band_around_each_query():
    from tokenmix.training.locality import local_mass

    n = 9
    eye = torch.eye(n)[None, None]
    assert torch.equal(local_mass(eye, 0), torch.ones(1, 1, n))
    uniform = torch.full((1, 1, n, n), 1 / n)
    got = local_mass(uniform, 2)[0, 0]
    assert torch.allclose(got[4], torch.tensor(5 / n)) and torch.allclose(got[0], torch.tensor(3 / n))
    far = torch.zeros(1, 1, n, n)
    far[..., 0, n - 1] = 1.0  # the first query looks only at the last key
    assert local_mass(far, n - 2)[0, 0, 0] == 0 and local_mass(far, n - 1)[0, 0, 0] == 1


def test_a_trained_models_locality_is_measured_on_its_test_split():
    from tokenmix.tasks import create_task
    from tokenmix.training.config import TrainConfig
    from tokenmix.training.locality import attention_locality
    from tokenmix.training.loop import train

    task = create_task("recall", seed=2, num_pairs=4, num_keys=8, num_values=2, train_size=64, val_size=32,
                       test_size=32)
    torch.manual_seed(0)
    model = task.build_model("softmax", dim=16, depth=2, num_heads=2)
    config = TrainConfig.preset("quick", max_steps=4, eval_every=4, batch_size=16, locality_window=1, progress=False)
    evaluated = []
    evaluate = task.evaluate
    task.evaluate = lambda m, split, batch: evaluated.append(split) or evaluate(m, split, batch)
    result = train(task, model, config)
    assert evaluated.count("test") == 1  # measured in the test pass itself, not in a second one
    task.evaluate = evaluate
    again = attention_locality(model, task, "test", 1, 16)
    assert result.locality is not None and 0 < result.locality < 1 and result.locality == pytest.approx(again)
    assert attention_locality(model, task, "test", task.max_len, 16) == pytest.approx(1.0)  # the whole row
    assert train(task, model, TrainConfig.preset("quick", max_steps=1, batch_size=16, progress=False)).locality is None
    no_matrix = task.build_model("efficient", dim=16, depth=1, num_heads=2)
    assert attention_locality(no_matrix, task, "test", 1, 16) is None
    with pytest.raises(ValueError, match="locality_window"):
        TrainConfig(locality_window=-1)
