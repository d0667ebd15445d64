"""The papers' protocols in the models and the trainer: initialisation parity, layer patterns, 000's network,
training presets, the Contextualizer's paper context, Average Attention's single residual."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import tokenmix
from conftest import sequence_mixers
from tokenmix.models import (
    Block,
    CausalLM,
    ContextualizerClassifier,
    LayerMixer,
    RelationNet,
    SequenceClassifier,
    ViT,
    layer_mixers,
    parse_layer_mixer,
)
from tokenmix.ops.init import NORM_LAYERS, init_roles, is_bias, normal_init_
from tokenmix.protocols import TRAIN_PRESETS
from tokenmix.tasks import create_task
from tokenmix.training.config import TrainConfig
from tokenmix.training.loop import lr_factor, train

VOCAB = 50


def _weights_and_biases(module: nn.Module):
    """(name, parameter) of every non-norm weight with enough entries to estimate a std, and every bias; a
    parameter its module keeps at its paper's own starting value (role "keep") or declares a norm gain is
    neither."""
    norm = {id(p) for m in module.modules() if isinstance(m, NORM_LAYERS) for p in m.parameters(recurse=False)}
    roles = init_roles(module)
    weights, biases = [], []
    for name, p in module.named_parameters():
        if id(p) in norm or roles[name] in ("keep", "norm_gain"):
            continue
        (biases if is_bias(name) else weights).append((name, p))
    return weights, biases


def _assert_normal(module: nn.Module, std: float) -> None:
    weights, biases = _weights_and_biases(module)
    assert weights, "nothing to check"
    for name, p in weights:
        if p.numel() >= 400:  # enough draws for the sample std to sit within 15 % of the truth
            assert abs(p.detach().std().item() / std - 1) < 0.15, (name, p.std().item())
        assert p.abs().max().item() < 7 * std, name
    for name, p in biases:
        assert torch.count_nonzero(p) == 0, name
    for m in module.modules():
        if isinstance(m, NORM_LAYERS) and m.weight is not None:
            assert torch.all(m.weight == 1)
    gains = [p for name, p in module.named_parameters() if init_roles(module)[name] == "norm_gain"]
    assert all(torch.all(p == 1) for p in gains)


# -- 1. initialisation parity ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [n for n in sequence_mixers() if tokenmix.mixer_info(n).causal])
def test_init_std_reaches_every_parameter_of_every_causal_mixer(name):
    torch.manual_seed(0)
    model = CausalLM(VOCAB, name, 64, 1, 32, init_std=0.01)
    _assert_normal(model.blocks[0].mixer, 0.01)
    _assert_normal(model, 0.01)


@pytest.mark.parametrize("name", [n for n in sequence_mixers() if tokenmix.mixer_info(n).bidirectional])
def test_init_std_reaches_every_parameter_of_every_bidirectional_mixer(name):
    torch.manual_seed(0)
    model = SequenceClassifier(VOCAB, 3, name, 64, 1, max_len=32, init_std=0.01)
    _assert_normal(model.blocks[0].mixer, 0.01)


@pytest.mark.parametrize("name", [n for n in tokenmix.list_mixers() if tokenmix.mixer_info(n).spatial])
def test_init_std_reaches_every_parameter_of_every_spatial_mixer(name):
    torch.manual_seed(0)
    model = ViT(28, 2, 1, 10, name, 64, 1, init_std=0.02)
    _assert_normal(model, 0.02)


def test_mixers_keep_their_own_default_only_without_a_model_init():
    torch.manual_seed(0)
    plain = CausalLM(VOCAB, ["softmax", "extractor_he"], 128, 2, 32)
    # softmax keeps PyTorch's Linear default (U(-1/sqrt(d), 1/sqrt(d)): std 1/sqrt(3 d) ~ 0.051)
    assert plain.blocks[0].mixer.q_proj.weight.std().item() > 0.04
    # the Extractors' own default is 004's N(0, 0.01)
    assert abs(plain.blocks[1].mixer.adj.weight.std().item() - 0.01) < 0.002
    fair = CausalLM(VOCAB, ["softmax", "extractor_he"], 128, 2, 32, init_std=0.01)
    for block in fair.blocks:
        _assert_normal(block.mixer, 0.01)


def test_normal_init_rejects_a_bad_std():
    with pytest.raises(ValueError, match="std"):
        normal_init_(nn.Linear(2, 2), 0.0)
    with pytest.raises(ValueError, match="init_std"):
        CausalLM(VOCAB, "softmax", 8, 1, 8, init_std=-1.0)


# -- 2. layer patterns -----------------------------------------------------------------------------------------
def test_pattern_entries_parse():
    assert parse_layer_mixer("swin:shift=True,window_size=4") == LayerMixer("swin", (("shift", True),
                                                                                     ("window_size", 4)))
    assert parse_layer_mixer({"name": "performer", "num_features": 16}).options == (("num_features", 16),)
    assert parse_layer_mixer("swin:shift=true").label == "swin:shift=true"
    with pytest.raises(ValueError, match="no_such_mixer"):
        parse_layer_mixer("no_such_mixer")
    with pytest.raises(ValueError, match="option=value"):
        parse_layer_mixer("swin:shift")


def test_patterns_repeat_over_depth_and_options_layer():
    layers = layer_mixers(["softmax", "linear:normalize=false"], 4, {"bias": True})
    assert [layer.name for layer in layers] == ["softmax", "linear", "softmax", "linear"]
    assert dict(layers[1].options) == {"bias": True, "normalize": False}
    with pytest.raises(ValueError, match="multiple"):
        layer_mixers(["softmax", "linear"], 3)
    # a single plain name keeps its alternate options (Swin's shift on odd layers); a pattern does not
    assert [dict(x.options).get("shift") for x in layer_mixers("swin", 4)] == [None, True, None, True]
    assert [dict(x.options).get("shift") for x in layer_mixers(["swin"], 2)] == [None, None]


def test_causal_lm_and_classifier_take_patterns():
    torch.manual_seed(0)
    lm = CausalLM(VOCAB, ["softmax", "relation"], 16, 4, 12, num_heads=2)
    assert [type(b.mixer).__name__ for b in lm.blocks] == ["SoftmaxAttention", "Relation"] * 2
    assert lm.can_step  # both decode incrementally
    ids = torch.randint(0, VOCAB, (2, 8))
    assert torch.equal(lm.generate(ids[:, :3], 4, seed=1), lm.generate(ids[:, :3], 4, seed=1, use_step=False))
    lm_sparse = CausalLM(VOCAB, ["linear", "performer"], 16, 2, 12)
    assert lm_sparse.blocks[1].mixer.name == "performer"
    clf = SequenceClassifier(VOCAB, 2, ["linear", "softmax:bias=true"], 16, 2, max_len=12)
    assert clf.blocks[1].mixer.q_proj.bias is not None and clf.blocks[0].mixer.q_proj.bias is None
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[1, 5:] = False
    out = clf(ids, mask)
    changed = ids.clone()
    changed[1, 5:] = (changed[1, 5:] + 1) % VOCAB
    clf.eval()
    assert torch.allclose(clf(ids, mask), clf(changed, mask)) and out.shape == (2, 2)


def test_twins_sssa_and_scalablevit_patterns_in_vit():
    torch.manual_seed(0)
    model = ViT(28, 2, 1, 10, ["twins_lsa", "twins_gsa"], 16, 2, num_heads=2)
    lsa, gsa = (b.mixer for b in model.blocks)
    assert (lsa.name, gsa.name) == ("twins_lsa", "twins_gsa")
    # 002 §3.3: GSA takes one representative per LSA window, at the defaults too
    assert gsa.sr_ratio == lsa.window_size[0] == lsa.window_size[1]
    assert model(torch.randn(2, 1, 28, 28)).shape == (2, 10)
    svit = ViT(28, 2, 1, 10, ["scalable_iwsa", "scalable_ssa"], 16, 4)
    assert [b.mixer.name for b in svit.blocks] == ["scalable_iwsa", "scalable_ssa"] * 2
    swin = ViT(28, 2, 1, 10, ["swin", "swin:shift=True"], 16, 2)
    assert [b.mixer.shift for b in swin.blocks] == [False, True]
    with pytest.raises(ValueError, match="spatial and 1-D"):
        ViT(28, 2, 1, 10, ["swin", "softmax"], 16, 2, pooling="mean")


# -- 4. 000's protocol: RelationNet with a mixing depth separate from the embedding width ----------------------
@pytest.mark.parametrize("name", ["softmax", "linear", "relation"])
def test_relationnet_mixing_depth(name):
    m, d = 24, 8
    torch.manual_seed(0)
    net = RelationNet(VOCAB, 2, name, m, max_len=16, inner_dim=d)
    assert net.mixer.out_dim == d and net.pointwise.in_features == d
    mixer_params = sum(p.numel() for p in net.mixer.parameters() if p.ndim == 2)
    # 000 eqs. 1-3 (W_Q, W_K, W_V in R^{m x d}) and 7-8, 12 (W_G, W_H in R^{m x d}, W in R^{d x d}); no W_out
    assert mixer_params == (2 * m * d + d * d if name == "relation" else 3 * m * d)
    if name == "linear":
        assert net.mixer.normalize is False  # eq. 5 has no denominator
    ids = torch.randint(0, VOCAB, (3, 10))
    mask = torch.ones(3, 10, dtype=torch.bool)
    mask[2, 6:] = False
    net.eval()
    changed = ids.clone()
    changed[2, 6:] = 0
    assert torch.allclose(net(ids, mask), net(changed, mask))


def test_classification_task_builds_000s_network():
    task = create_task("listops", preset="quick", seed=0)
    net = task.build_model("linear", dim=20, depth=1, protocol="paper-000", model_options={"inner_dim": 12})
    assert isinstance(net, RelationNet) and net.mixer.out_dim == 12 and net.drop.p == 0.5
    with pytest.raises(ValueError, match="depth must be 1"):
        task.build_model("linear", dim=20, depth=2, protocol="paper-000")
    with pytest.raises(ValueError, match="no model option"):
        task.build_model("linear", dim=20, depth=1, protocol="paper-000", model_options={"bogus": 1})
    with pytest.raises(ValueError, match="language_model"):
        task.build_model("softmax", dim=20, protocol="paper-004")


# -- 5. per-paper training presets ---------------------------------------------------------------------------------
def test_training_presets_are_the_papers_settings():
    p4 = TrainConfig.preset("paper-004")
    assert (p4.optimizer, p4.lr, tuple(p4.betas), p4.schedule, p4.batch_size, p4.grad_clip) == \
        ("adamw", 1e-3, (0.9, 0.999), "constant", 64, None)
    p0 = TrainConfig.preset("paper-000", max_steps=5)
    assert (p0.optimizer, p0.weight_decay, p0.batch_size, p0.target, p0.target_k, p0.patience) == \
        ("adam", 0.0, 256, 0.8, 10, None)
    with pytest.raises(ValueError, match=r"patience \(5\) < TrainConfig.target_k \(10\)"):
        TrainConfig.preset("paper-000", max_steps=5, patience=5)  # could stop before its own target
    quick = TrainConfig.preset("quick")
    assert (quick.optimizer, quick.schedule, quick.lr, quick.grad_clip, quick.batch_size) == \
        ("adamw", "cosine", 3e-3, 1.0, 32)
    assert set(TRAIN_PRESETS) >= {"quick", "paper-000", "paper-003", "paper-004"}
    with pytest.raises(ValueError, match="unknown training preset"):
        TrainConfig.preset("paper-999")
    with pytest.raises(ValueError, match="no field"):
        TrainConfig.preset("quick", lrr=1.0)


def test_constant_schedule_and_optimizer_choice(monkeypatch):
    assert [lr_factor(s, 2, 10, "constant") for s in (0, 1, 2, 9)] == [0.5, 1.0, 1.0, 1.0]
    assert lr_factor(9, 0, 10, "cosine") < 0.05
    built = []
    for cls in (torch.optim.Adam, torch.optim.AdamW):
        monkeypatch.setattr(torch.optim, cls.__name__,
                            type(cls.__name__, (cls,), {"__init__": lambda self, *a, _c=cls, **k: (
                                built.append(_c.__name__), _c.__init__(self, *a, **k))[1]}))
    task = create_task("listops", preset="quick", seed=0)
    model = task.build_model("mlp", dim=8, depth=1)
    result = train(task, model, TrainConfig.preset("paper-000", max_steps=3, batch_size=8, eval_every=3,
                                                   progress=False))
    assert built == ["Adam"] and result.steps == 3
    with pytest.raises(ValueError, match="weight decay"):
        train(task, model, TrainConfig(optimizer="adam", weight_decay=0.01, max_steps=1))
    with pytest.raises(ValueError, match="schedule"):
        train(task, model, TrainConfig(schedule="linear", max_steps=1))


# -- 6. the Contextualizer's paper context -----------------------------------------------------------------------------
def test_paper_003_uses_a_random_default_context():
    task = create_task("listops", preset="quick", seed=0)
    paper = task.build_model("contextualizer", dim=16, depth=1, protocol="paper-003",
                             mixer_options={"rank": 4, "steps": 2})
    assert isinstance(paper, ContextualizerClassifier) and paper.contextualizer.context_kind == "random"
    library = ContextualizerClassifier(VOCAB, 2, 16, rank=4, steps=2)
    assert library.contextualizer.context_kind == "ones"
    explicit = task.build_model("contextualizer", dim=16, depth=1, protocol="paper-003",
                                mixer_options={"rank": 4, "context": "learned"})
    assert explicit.contextualizer.context_kind == "learned"
    with pytest.raises(ValueError, match="Contextualizer's own network"):
        task.build_model("softmax", dim=16, depth=1, protocol="paper-003")


# -- 7. Average Attention inside a block: one residual -------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
def test_average_attention_block_has_one_residual(causal):
    torch.manual_seed(0)
    block = Block(16, "average", causal=causal, dropout=0.0).eval()
    x = torch.randn(2, 7, 16)
    h = block.mixer(x)  # LayerNorm(i * x + f * g + x): the mixer's own residual on the layer input
    assert torch.allclose(block(x), h + block.ffn(block.ln2(h)), atol=1e-6)
    doubled = x + block.mixer(x)
    assert not torch.allclose(block(x), doubled + block.ffn(block.ln2(doubled)), atol=1e-3)
    if causal:
        state = block.mixer.init_state(2)
        steps = []
        for t in range(7):
            y, state = block.step(x[:, t], state)
            steps.append(y)
        assert torch.allclose(torch.stack(steps, 1), block(x), atol=1e-5)


def test_average_attention_standalone_formula_unchanged():
    torch.manual_seed(0)
    mixer = tokenmix.create_mixer("average", 8)
    x = torch.randn(2, 5, 8)
    g = mixer.ffn(x.mean(dim=1, keepdim=True).expand_as(x))
    i, f = torch.sigmoid(mixer.gates(torch.cat([x, g], -1))).chunk(2, -1)
    assert torch.allclose(mixer(x), mixer.norm(i * x + f * g + x), atol=1e-6)
