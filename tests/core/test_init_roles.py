"""Model-wide initialisation by role (tokenmix.ops.init): every parameter of every registered mixer has a
role, biases are zero whatever their name, weights are N(0, std), and a parameter declared ``keep`` keeps the
value its paper starts from."""

import pytest
import torch

from tokenmix.models import SequenceClassifier
from tokenmix.ops.init import ROLES, init_roles, normal_init_
from tokenmix.registry import create_mixer, list_mixers, mixer_info

STD = 0.01


def _mixer(name: str) -> torch.nn.Module:
    info = mixer_info(name)
    options = {"bias": True} if "bias" in info.options and name != "extractor_me" else {}  # ME has no layer
    if name == "contextualizer":
        options["context"] = "learned"
    causal = not info.bidirectional
    return create_mixer(name, 32, num_heads=2 if info.multihead else 1, causal=causal, max_len=64, **options)


@pytest.mark.parametrize("name", list_mixers())
def test_every_parameter_of_every_mixer_gets_the_rule_of_its_role(name):
    torch.manual_seed(0)
    mixer = _mixer(name)
    before = {k: p.detach().clone() for k, p in mixer.named_parameters()}
    roles = init_roles(mixer)
    assert set(roles) == set(before), "every parameter has exactly one role"
    assert set(roles.values()) <= set(ROLES)
    normal_init_(mixer, STD)
    for key, param in mixer.named_parameters():
        role = roles[key]
        if role in ("bias", "norm_shift"):
            assert torch.count_nonzero(param) == 0, f"{name}.{key} ({role}) is not zero"
        elif role == "norm_gain":
            assert torch.all(param == 1), f"{name}.{key} is not one"
        elif role == "keep":
            assert torch.equal(param, before[key]), f"{name}.{key} was redrawn"
        else:
            assert torch.all(param.abs() < 10 * STD), f"{name}.{key}: not drawn from N(0, {STD})"
            if param.numel() >= 64:
                assert abs(param.std().item() - STD) < 0.3 * STD, f"{name}.{key}: std {param.std().item()}"


def test_the_contextualizers_roles_are_its_papers():
    """Its biases b_U, b_V, b_W do not end in "bias" but are biases (zero under a model-wide rule), and the
    learned default context keeps its start at ones (c^(0) = 1, Maupomé & Meurs (2021) §2), not redrawn
    near zero as a name-based rule did."""
    mixer = create_mixer("contextualizer", 16, rank=8, bias=True, context="learned")
    assert init_roles(mixer) == {"U": "weight", "V": "weight", "W": "weight", "b_U": "bias", "b_V": "bias",
                                 "b_W": "bias", "default_context": "keep"}
    normal_init_(mixer, STD)
    for b in (mixer.b_U, mixer.b_V, mixer.b_W):
        assert torch.count_nonzero(b) == 0
    assert torch.all(mixer.default_context == 1)


def test_a_whole_model_lists_its_roles_with_norms_and_embeddings():
    model = SequenceClassifier(50, 3, "contextualizer", 16, 1, max_len=32, init_std=STD,
                               mixer_options={"bias": True, "rank": 8, "context": "learned"})
    roles = init_roles(model)
    assert roles["embedding.weight"] == "weight"
    assert roles["blocks.0.mixer.b_W"] == "bias"
    assert roles["blocks.0.mixer.default_context"] == "keep"
    assert any(role == "norm_gain" for role in roles.values())
    assert torch.count_nonzero(model.blocks[0].mixer.b_U) == 0
    assert torch.all(model.blocks[0].mixer.default_context == 1)


def test_an_unknown_role_is_refused():
    class Odd(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.Parameter(torch.zeros(2))

        def parameter_roles(self):
            return {"p": "gain"}

    with pytest.raises(ValueError, match="unknown role 'gain'"):
        normal_init_(Odd(), STD)
