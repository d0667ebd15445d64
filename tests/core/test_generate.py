"""CausalLM.generate: incremental decoding and prefix recomputation give the same tokens."""

from __future__ import annotations

import pytest
import torch

import tokenmix
from conftest import sequence_mixers
from tokenmix.mixers.base import Mixer
from tokenmix.models import CausalLM

VOCAB, DIM, MAX_LEN = 40, 16, 48
CAUSAL = [n for n in sequence_mixers() if tokenmix.mixer_info(n).causal]

if "_test_causal_no_step" not in tokenmix.list_mixers(include_hidden=True):
    @tokenmix.register_mixer("_test_causal_no_step", paper="test", complexity="O(N d)", causal=True)
    class _CausalNoStep(Mixer):
        def __init__(self, dim, *, num_heads=1, causal=False, max_len=None):
            super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len)
            self.proj = torch.nn.Linear(dim, dim)

        def _mix(self, x, mask):
            return self.proj(x.cumsum(dim=1))


def make(mixer: str) -> CausalLM:
    torch.manual_seed(0)
    return CausalLM(VOCAB, mixer, DIM, 2, MAX_LEN, init_std=0.2)



@pytest.mark.parametrize("mixer", CAUSAL)
def test_step_and_recompute_give_the_same_tokens(mixer):
    model = make(mixer)
    prompt = torch.randint(0, VOCAB, (2, 4), generator=torch.Generator().manual_seed(1))
    stepped = model.generate(prompt, 20, seed=7, top_p=0.9)
    recomputed = model.generate(prompt, 20, seed=7, top_p=0.9, use_step=False)
    assert stepped.shape == (2, 24) and torch.equal(stepped[:, :4], prompt)
    assert torch.equal(stepped, recomputed)
    assert model.can_step == tokenmix.mixer_info(mixer).recurrent


def test_greedy_follows_the_argmax_of_forward():
    model = make("linear").eval()
    prompt = torch.randint(0, VOCAB, (3, 5), generator=torch.Generator().manual_seed(2))
    out = model.generate(prompt, 10, temperature=0)
    for t in range(5, 15):
        assert torch.equal(out[:, t], model(out[:, :t])[:, -1].argmax(dim=-1))


def test_a_tiny_nucleus_is_greedy_and_seeds_matter():
    model = make("average")
    prompt = torch.randint(0, VOCAB, (2, 3), generator=torch.Generator().manual_seed(3))
    greedy = model.generate(prompt, 12, temperature=0)
    assert torch.equal(model.generate(prompt, 12, top_p=1e-6, seed=5), greedy)
    assert torch.equal(model.generate(prompt, 12, seed=5), model.generate(prompt, 12, seed=5))
    samples = {tuple(model.generate(prompt, 12, seed=s)[0].tolist()) for s in range(5)}
    assert len(samples) > 1


def test_without_step_it_recomputes_and_keeps_the_mode():
    model = make("_test_causal_no_step").train()
    assert not model.can_step
    out = model.generate(torch.zeros(1, 2, dtype=torch.long), 5, seed=0)
    assert out.shape == (1, 7) and model.training
    with pytest.raises(ValueError, match="_test_causal_no_step"):
        model.generate(torch.zeros(1, 2, dtype=torch.long), 5, use_step=True)


@pytest.mark.parametrize("kwargs", [{"max_new_tokens": MAX_LEN}, {"max_new_tokens": -1},
                                    {"max_new_tokens": 2, "temperature": -1.0},
                                    {"max_new_tokens": 2, "top_p": 0.0}])
def test_bad_arguments_raise(kwargs):
    with pytest.raises(ValueError, match="generate"):
        make("linear").generate(torch.zeros(1, 2, dtype=torch.long), **kwargs)


def test_sampling_follows_the_distribution_and_respects_top_p():
    from tokenmix.models.lm import _sample

    probs = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0])
    logits = probs.clamp_min(1e-30).log().expand(20000, -1)
    generator = torch.Generator().manual_seed(0)
    counts = torch.bincount(_sample(logits, 1.0, None, generator), minlength=5).float() / 20000
    assert torch.allclose(counts, probs, atol=0.015)
    assert counts[4] == 0
    nucleus = torch.bincount(_sample(logits, 1.0, 0.7, generator), minlength=5).float() / 20000
    assert nucleus[2:].sum() == 0  # 0.5 + 0.3 reaches 0.7: only the two most likely tokens remain
    assert torch.allclose(nucleus[:2], torch.tensor([0.625, 0.375]), atol=0.015)
