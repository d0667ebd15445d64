"""Tests of tokenmix.models: shapes, gradients, mask plumbing, causality, initialisation, the 000 protocol."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
from torch import Tensor

import tokenmix
from conftest import sequence_mixers
from tokenmix.mixers.base import Mixer
from tokenmix.models import Block, CausalLM, FeedForward, RelationNet, SequenceClassifier, sinusoidal_positions

MIXERS = ["softmax", "linear", "relation", "mlp"]
VOCAB = 23



def require(name: str) -> None:
    if name not in tokenmix.list_mixers(include_hidden=True):
        pytest.skip(f"mixer {name!r} is not registered yet")


def heads_for(name: str) -> int | None:
    """Two heads where the mechanism has heads, else leave num_heads out."""
    return 2 if tokenmix.mixer_info(name).multihead else None


def ids_(b: int, n: int, seed: int = 0, vocab: int = VOCAB) -> Tensor:
    return torch.randint(0, vocab, (b, n), generator=torch.Generator().manual_seed(seed))


def assert_all_grads(model: nn.Module, unused: tuple[str, ...] = ()) -> None:
    for name, p in model.named_parameters():
        if name in unused:
            continue
        assert p.grad is not None, f"{name} got no gradient"
        assert torch.isfinite(p.grad).all(), f"{name} has a non-finite gradient"
        assert p.grad.abs().sum() > 0, f"{name} has an all-zero gradient"


# -- fake mechanisms, registered once under unique names -------------------------------------------
class _FakeBase(Mixer):
    def __init__(self, dim: int, *, num_heads: int = 1, causal: bool = False, max_len: int | None = None) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len)
        self.lin = nn.Linear(dim, dim)

    def _mix(self, x: Tensor, mask: Tensor | None) -> Tensor:
        return self.lin(x)


def _register(name: str, **flags: object) -> None:
    if name in tokenmix.list_mixers(include_hidden=True):
        return
    cls = type(f"Fake_{name.strip('_')}", (_FakeBase,), {})
    tokenmix.register_mixer(name, paper="test fake", complexity="O(N d^2)", **flags)(cls)


_register("_test_noncausal", causal=False)
_register("_test_nopadding", causal=True, padding=False)
_register("_test_fixedlen", causal=True, needs_max_len=True)
_register("_test_noheads", causal=True, multihead=False)


# -- building blocks --------------------------------------------------------------------------------
def test_sinusoidal_positions_values() -> None:
    pe = sinusoidal_positions(7, 6)
    assert pe.shape == (7, 6) and pe.dtype == torch.get_default_dtype()
    p = torch.arange(7.0)
    for i in range(3):
        freq = 10000 ** (-2 * i / 6)
        torch.testing.assert_close(pe[:, 2 * i], torch.sin(p * freq))
        torch.testing.assert_close(pe[:, 2 * i + 1], torch.cos(p * freq))
    odd = sinusoidal_positions(5, 5)
    assert odd.shape == (5, 5) and torch.isfinite(odd).all()
    for i in range(3):  # dim 5: sines at columns 0, 2, 4; cosines at 1, 3
        freq = 10000 ** (-2 * i / 5)
        torch.testing.assert_close(odd[:, 2 * i], torch.sin(torch.arange(5.0) * freq))
        if 2 * i + 1 < 5:
            torch.testing.assert_close(odd[:, 2 * i + 1], torch.cos(torch.arange(5.0) * freq))


def test_feedforward_is_eq19() -> None:
    ffn = FeedForward(8, 12, 0.0, "relu")
    x = torch.randn(2, 3, 8)
    expected = torch.relu(x @ ffn.fc1.weight.T + ffn.fc1.bias) @ ffn.fc2.weight.T + ffn.fc2.bias
    torch.testing.assert_close(ffn(x), expected)
    assert ffn.fc1.bias is not None and ffn.fc2.bias is not None
    FeedForward(8, 12, activation="gelu")(x)
    with pytest.raises(ValueError, match="activation"):
        FeedForward(8, 12, activation="tanh")


def test_block_is_pre_ln() -> None:
    torch.manual_seed(0)
    block = Block(8, "softmax", num_heads=2, dropout=0.0).eval()
    assert block.ffn.fc1.out_features == 32 and block.mixer.num_heads == 2
    x = torch.randn(2, 5, 8)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    h = x + block.mixer(block.ln1(x), mask)
    torch.testing.assert_close(block(x, mask), h + block.ffn(block.ln2(h)))


def test_block_mixer_arguments_come_from_mixer_info() -> None:
    # max_len reaches the mechanism when given; one flagged needs_max_len cannot do without it
    assert Block(8, "_test_fixedlen", max_len=9).mixer.max_len == 9
    assert Block(8, "softmax", max_len=9).mixer.max_len == 9
    assert Block(8, "softmax").mixer.max_len is None
    with pytest.raises(ValueError, match="_test_fixedlen"):
        Block(8, "_test_fixedlen")
    clf = SequenceClassifier(VOCAB, 2, "_test_fixedlen", 8, 1, max_len=6, pooling="cls")
    assert clf.blocks[0].mixer.max_len == 7  # max_len counts input tokens; the CLS slot is extra
    clf = SequenceClassifier(VOCAB, 2, "_test_fixedlen", 8, 1, max_len=6, pooling="mean")
    assert clf.blocks[0].mixer.max_len == 6
    clf(ids_(2, 6))
    # options go through the registry, which validates them
    with pytest.raises(ValueError, match="no option"):
        Block(8, "softmax", mixer_options={"not_an_option": 1})
    assert Block(8, "softmax", mixer_options={"bias": True}).mixer.q_proj.bias is not None


def test_num_heads_passed_through() -> None:
    clf = SequenceClassifier(VOCAB, 2, "softmax", 8, 1, num_heads=4, max_len=6)
    assert clf.blocks[0].mixer.num_heads == 4
    # A model-level head count goes to the mixers with heads only: a head-less one runs with its single head
    # in every model, so one config serves a whole sweep (MixerInfo.heads).
    noheads = SequenceClassifier(VOCAB, 2, "_test_noheads", 8, 1, num_heads=2, max_len=6)
    assert noheads.blocks[0].mixer.num_heads == 1
    noheads(ids_(1, 6))
    with pytest.raises(ValueError, match="_test_noheads"):  # the registry itself still rejects them
        tokenmix.create_mixer("_test_noheads", 8, num_heads=2)
    with pytest.raises(ValueError, match="divisible"):
        Block(8, "softmax", num_heads=3)
    for name in ("relation", "mlp"):
        assert SequenceClassifier(VOCAB, 2, name, 8, 1, num_heads=2, max_len=6).blocks[0].mixer.num_heads == 1
        assert CausalLM(VOCAB, name, 8, 1, 6, num_heads=2).blocks[0].mixer.num_heads == 1
    mixed = CausalLM(VOCAB, ["softmax", "relation"], 8, 2, 6, num_heads=2)
    assert [b.mixer.num_heads for b in mixed.blocks] == [2, 1]


# -- forward / backward across models and mixers ----------------------------------------------------
@pytest.mark.parametrize("mixer", MIXERS)
@pytest.mark.parametrize("pooling,positional", [("cls", "sinusoidal"), ("mean", "learned"), ("first", "none")])
def test_classifier_forward_backward(mixer: str, pooling: str, positional: str) -> None:
    require(mixer)
    torch.manual_seed(0)
    model = SequenceClassifier(VOCAB, 3, mixer, 8, 2, num_heads=heads_for(mixer), max_len=10,
                               pooling=pooling, positional=positional)
    ids = ids_(3, 7)
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[1, 5:] = False
    logits = model(ids, mask)
    assert logits.shape == (3, 3) and torch.isfinite(logits).all()
    logits.square().sum().backward()
    # a mechanism that mixes nothing leaves the CLS token blind to the input tokens
    contextual = mixer != "mlp"
    assert_all_grads(model, unused=() if contextual or pooling != "cls" else ("embedding.weight",))
    assert hasattr(model, "cls_token") == (pooling == "cls")


@pytest.mark.parametrize("mixer", MIXERS)
def test_causal_lm_forward_backward(mixer: str) -> None:
    require(mixer)
    torch.manual_seed(0)
    model = CausalLM(VOCAB, mixer, 8, 2, 12, num_heads=heads_for(mixer), init_std=0.02)
    ids = ids_(2, 9)
    logits = model(ids)
    assert logits.shape == (2, 9, VOCAB) and torch.isfinite(logits).all()
    loss = model.loss(ids)
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert abs(loss.item() - math.log(VOCAB)) < 0.5  # near-uniform predictions at small init
    loss.backward()
    assert_all_grads(model)


@pytest.mark.parametrize("mixer", MIXERS)
def test_relation_net_forward_backward(mixer: str) -> None:
    require(mixer)
    torch.manual_seed(0)
    model = RelationNet(VOCAB, 4, mixer, 8, max_len=10, num_heads=heads_for(mixer))
    ids = ids_(3, 6)
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[0, 4:] = False
    logits = model(ids, mask)
    assert logits.shape == (3, 4) and torch.isfinite(logits).all()
    logits.square().sum().backward()
    assert_all_grads(model)


def test_causal_lm_tied_weights() -> None:
    model = CausalLM(VOCAB, "softmax", 8, 1, 6, tie_weights=True, init_std=0.01)
    assert model.head.weight is model.token_embedding.weight
    model.loss(ids_(2, 5)).backward()
    assert_all_grads(model)


# -- mask plumbing -------------------------------------------------------------------------------
@pytest.mark.parametrize("mixer", ["softmax", "linear", "relation"])
@pytest.mark.parametrize("pooling", ["cls", "mean", "first"])
@pytest.mark.parametrize("positional", ["learned", "sinusoidal"])
def test_classifier_padding_is_invisible(mixer: str, pooling: str, positional: str) -> None:
    require(mixer)
    torch.manual_seed(1)
    model = SequenceClassifier(VOCAB, 3, mixer, 8, 2, max_len=9, pooling=pooling, positional=positional).eval()
    ids = ids_(3, 9, seed=1)
    lengths = [9, 5, 2]
    mask = torch.arange(9)[None, :] < torch.tensor(lengths)[:, None]  # right padding
    logits = model(ids, mask)
    # 1. ids at padded positions do not matter
    other = torch.where(mask, ids, ids_(3, 9, seed=2))
    assert not torch.equal(other, ids)
    torch.testing.assert_close(model(other, mask), logits, rtol=1e-5, atol=1e-5)
    # 2. a padded row equals the same sequence alone, unpadded
    for row, n in enumerate(lengths):
        alone = model(ids[row:row + 1, :n])
        torch.testing.assert_close(logits[row:row + 1], alone, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pooling", ["cls", "mean", "first"])
def test_all_padding_row_is_finite(pooling: str) -> None:
    torch.manual_seed(0)
    for mixer in ("softmax", "linear"):
        model = SequenceClassifier(VOCAB, 3, mixer, 8, 2, max_len=6, pooling=pooling).eval()
        mask = torch.zeros(2, 6, dtype=torch.bool)
        mask[1, :3] = True
        logits = model(ids_(2, 6), mask)
        assert torch.isfinite(logits).all()
        if pooling in ("mean", "first"):  # defined as the zero vector: the head's bias
            torch.testing.assert_close(logits[0], model.head.bias)
        logits.sum().backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_pad_id_builds_the_mask() -> None:
    torch.manual_seed(0)
    model = SequenceClassifier(VOCAB, 3, "softmax", 8, 1, max_len=6, pooling="mean", pad_id=0).eval()
    ids = ids_(2, 6).clamp(min=1)
    ids[1, 4:] = 0
    mask = ids != 0
    torch.testing.assert_close(model(ids), model(ids, mask))
    torch.testing.assert_close(model(ids)[1], model(ids[1:, :4])[0], rtol=1e-5, atol=1e-5)


def test_mechanism_without_padding_support() -> None:
    model = SequenceClassifier(VOCAB, 2, "_test_nopadding", 8, 1, max_len=6, pooling="mean")
    ids = ids_(2, 6)
    model(ids, torch.ones(2, 6, dtype=torch.bool))  # nothing padded: fine
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[0, 3:] = False
    with pytest.raises(ValueError, match="_test_nopadding"):
        model(ids, mask)


def test_relation_net_padding_is_invisible() -> None:
    torch.manual_seed(0)
    model = RelationNet(VOCAB, 3, "softmax", 8, max_len=8).eval()
    ids = ids_(2, 8)
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[1, 3:] = False
    logits = model(ids, mask)
    torch.testing.assert_close(model(torch.where(mask, ids, 0), mask), logits)
    torch.testing.assert_close(logits[1:], model(ids[1:, :3]), rtol=1e-5, atol=1e-5)


# -- every registered 1-D mechanism drops into the models --------------------------------------------
@pytest.mark.parametrize("mixer", sequence_mixers())
def test_every_mixer_in_classifier_and_relation_net(mixer: str) -> None:
    torch.manual_seed(0)
    info = tokenmix.mixer_info(mixer)
    if not info.bidirectional:
        pytest.skip(f"{mixer!r} is causal only")
    ids = ids_(2, 7)
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[1, 4:] = False
    for model in (SequenceClassifier(VOCAB, 3, mixer, 8, 1, num_heads=heads_for(mixer), max_len=8, pooling="cls"),
                  RelationNet(VOCAB, 3, mixer, 8, num_heads=heads_for(mixer), max_len=8)):
        model.eval()
        if not info.padding:
            logits = model(ids)
            assert logits.shape == (2, 3) and torch.isfinite(logits).all()
            continue
        logits = model(ids, mask)
        assert logits.shape == (2, 3) and torch.isfinite(logits).all()
        torch.testing.assert_close(logits[1:], model(ids[1:, :4]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mixer", sequence_mixers())
def test_every_causal_mixer_in_causal_lm(mixer: str) -> None:
    torch.manual_seed(0)
    if not tokenmix.mixer_info(mixer).causal:
        with pytest.raises(ValueError, match=mixer):
            CausalLM(VOCAB, mixer, 8, 1, 8, num_heads=heads_for(mixer))
        return
    model = CausalLM(VOCAB, mixer, 8, 1, 8, num_heads=heads_for(mixer), init_std=0.05).eval()
    ids = ids_(2, 8)
    changed = ids.clone()
    changed[:, 5:] = (ids[:, 5:] + 1) % VOCAB
    logits = model(ids)
    assert logits.shape == (2, 8, VOCAB) and torch.isfinite(logits).all()
    torch.testing.assert_close(model(changed)[:, :5], logits[:, :5], rtol=1e-5, atol=1e-5)


# -- CausalLM ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("mixer,options", [("softmax", None), ("linear", None), ("linear", {"chunk_size": 3}),
                                           ("relation", None), ("mlp", None)])
def test_causal_lm_has_no_leak(mixer: str, options: dict | None) -> None:
    require(mixer)
    torch.manual_seed(0)
    n = 10
    model = CausalLM(VOCAB, mixer, 8, 2, n, num_heads=heads_for(mixer), mixer_options=options).eval()
    ids = ids_(2, n)
    logits = model(ids)
    for i in range(n - 1):
        changed = ids.clone()
        changed[:, i + 1:] = (ids[:, i + 1:] + 1 + torch.randint(0, VOCAB - 1, (2, n - i - 1))) % VOCAB
        after = model(changed)
        torch.testing.assert_close(after[:, :i + 1], logits[:, :i + 1], rtol=1e-5, atol=1e-5)
        if mixer != "mlp":  # the last position sees the change (contextual mechanisms only)
            assert not torch.allclose(after[:, -1], logits[:, -1])


def test_causal_lm_init_std() -> None:
    torch.manual_seed(0)
    std = 0.01
    model = CausalLM(200, "softmax", 32, 2, 64, init_std=std, mixer_options={"bias": True})
    checked = 0
    for name, module in model.named_modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            assert abs(module.weight.std().item() - std) < 0.1 * std, name
            assert abs(module.weight.mean().item()) < 0.1 * std, name
            if getattr(module, "bias", None) is not None:
                assert torch.count_nonzero(module.bias) == 0, name
            checked += 1
        elif isinstance(module, nn.LayerNorm):
            assert torch.all(module.weight == 1) and torch.all(module.bias == 0), name
    assert checked == 2 + 2 * 6 + 1  # embeddings, (q, k, v, proj, fc1, fc2) per block, head
    assert torch.count_nonzero(model.head.bias) == 0 and model.head.bias.shape == (200,)


def test_causal_lm_embedding_scaling() -> None:
    torch.manual_seed(0)
    scaled = CausalLM(VOCAB, "softmax", 16, 1, 8, scale_embedding=True)
    plain = CausalLM(VOCAB, "softmax", 16, 1, 8, scale_embedding=False)
    plain.load_state_dict(scaled.state_dict())
    ids = ids_(2, 8)
    torch.testing.assert_close(scaled.embed(ids), plain.embed(ids) * 4.0)
    expected = scaled.token_embedding(ids) + scaled.position_embedding(torch.arange(8))
    torch.testing.assert_close(plain.embed(ids), expected)


def test_non_causal_mixer_in_causal_lm_is_rejected() -> None:
    with pytest.raises(ValueError, match="_test_noncausal"):
        CausalLM(VOCAB, "_test_noncausal", 8, 1, 8)
    SequenceClassifier(VOCAB, 2, "_test_noncausal", 8, 1, max_len=8)(ids_(1, 8))  # fine bidirectionally


def test_unknown_mixer() -> None:
    with pytest.raises(ValueError, match="unknown mixer"):
        CausalLM(VOCAB, "no_such_mixer", 8, 1, 8)


def test_causal_lm_loss_is_next_token_cross_entropy() -> None:
    torch.manual_seed(0)
    model = CausalLM(VOCAB, "linear", 8, 1, 8, dropout=0.0)
    ids = ids_(2, 6)
    logits = model(ids)
    expected = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
    torch.testing.assert_close(model.loss(ids), expected)
    with pytest.raises(ValueError):
        model.loss(ids[:, :1])


# -- RelationNet: the 000 protocol ------------------------------------------------------------------
def test_relation_net_mixer_parameter_budgets_match() -> None:
    dim = 12
    counts = {}
    for name in MIXERS:
        if name in tokenmix.list_mixers(include_hidden=True):
            model = RelationNet(VOCAB, 2, name, dim, max_len=8, mixer_options={"bias": False})
            counts[name] = sum(p.numel() for p in model.mixer.parameters())
    if len(counts) < 2:
        pytest.skip("fewer than two of the compared mixers are registered")
    assert set(counts.values()) == {4 * dim * dim}, counts


def test_relation_net_glorot_init() -> None:
    torch.manual_seed(0)
    model = RelationNet(VOCAB, 3, "softmax", 16, max_len=8, mixer_options={"bias": True})
    for name, module in model.named_modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            fan_out, fan_in = module.weight.shape
            bound = math.sqrt(6.0 / (fan_in + fan_out))
            assert module.weight.abs().max() <= bound, name
            assert module.weight.abs().max() > 0.8 * bound, name
            if getattr(module, "bias", None) is not None:
                assert torch.count_nonzero(module.bias) == 0, name


def test_relation_net_first_token_drives_logits() -> None:
    torch.manual_seed(0)
    ids = ids_(4, 7)
    changed = ids.clone()
    changed[:, -1] = (ids[:, -1] + 1) % VOCAB
    softmax = RelationNet(VOCAB, 3, "softmax", 16, max_len=8).eval()
    assert not torch.allclose(softmax(changed), softmax(ids))
    changed_first = ids.clone()
    changed_first[:, 0] = (ids[:, 0] + 1) % VOCAB
    if "mlp" in tokenmix.list_mixers(include_hidden=True):
        baseline = RelationNet(VOCAB, 3, "mlp", 16, max_len=8).eval()
        torch.testing.assert_close(baseline(changed), baseline(ids))  # the Baseline sees no context
        assert not torch.allclose(baseline(changed_first), baseline(ids))


def test_relation_net_dropout_only_in_training() -> None:
    torch.manual_seed(0)
    model = RelationNet(VOCAB, 3, "softmax", 16, max_len=8)
    ids = ids_(4, 7)
    assert not torch.equal(model(ids), model(ids))  # dropout 0.5 in training
    model.eval()
    torch.testing.assert_close(model(ids), model(ids))


# -- bad input ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["classifier", "lm", "relation"])
def test_bad_ids(kind: str) -> None:
    model: nn.Module
    if kind == "classifier":
        model = SequenceClassifier(VOCAB, 2, "softmax", 8, 1, max_len=6)
    elif kind == "lm":
        model = CausalLM(VOCAB, "softmax", 8, 1, 6)
    else:
        model = RelationNet(VOCAB, 2, "softmax", 8, max_len=6)
    good = ids_(2, 6)
    model(good)
    for bad, match in [(good.float(), "integer"), (good[0], r"\(B, N\)"), (ids_(2, 7), "max_len"),
                       (good.bool(), "integer"), (good + VOCAB, "token ids"), (good - VOCAB, "token ids"),
                       (good[:, :0], "non-empty"), ([[1, 2]], "Tensor")]:
        with pytest.raises(ValueError, match=match):
            model(bad)


@pytest.mark.parametrize("kind", ["classifier", "relation"])
def test_bad_mask(kind: str) -> None:
    model: nn.Module
    if kind == "classifier":
        model = SequenceClassifier(VOCAB, 2, "softmax", 8, 1, max_len=6)
    else:
        model = RelationNet(VOCAB, 2, "softmax", 8, max_len=6)
    ids = ids_(2, 5)
    for bad in [torch.ones(2, 5), torch.ones(2, 5, dtype=torch.long), torch.ones(2, 4, dtype=torch.bool),
                torch.ones(5, dtype=torch.bool)]:
        with pytest.raises(ValueError, match="mask"):
            model(ids, bad)


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError, match="pooling"):
        SequenceClassifier(VOCAB, 2, "softmax", 8, 1, pooling="max")
    with pytest.raises(ValueError, match="positional"):
        SequenceClassifier(VOCAB, 2, "softmax", 8, 1, positional="rotary")
    with pytest.raises(ValueError, match="depth"):
        SequenceClassifier(VOCAB, 2, "softmax", 8, 0)
    with pytest.raises(ValueError, match="pad_id"):
        SequenceClassifier(VOCAB, 2, "softmax", 8, 1, pad_id=VOCAB)
    with pytest.raises(ValueError, match="dropout"):
        CausalLM(VOCAB, "softmax", 8, 1, 8, dropout=1.0)
    with pytest.raises(ValueError, match="init_std"):
        CausalLM(VOCAB, "softmax", 8, 1, 8, init_std=0.0)
    with pytest.raises(ValueError, match="init"):
        RelationNet(VOCAB, 2, "softmax", 8, init="he")
    with pytest.raises(ValueError, match="mixer_options"):
        RelationNet(VOCAB, 2, "softmax", 8, mixer_options=[("bias", False)])  # type: ignore[arg-type]


# -- a tiny training sanity check -------------------------------------------------------------------
def _contains_three(b: int, n: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    """Balanced task: label = 1 iff token 3 occurs anywhere in the row."""
    ids = torch.randint(0, 9, (b, n), generator=g)
    ids = ids + (ids >= 3).long()  # tokens from {0..9} minus {3}
    label = torch.randint(0, 2, (b,), generator=g)
    where = torch.randint(0, n, (b,), generator=g)
    ids[label.bool(), where[label.bool()]] = 3
    return ids, label


def test_classifier_learns_token_presence() -> None:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = SequenceClassifier(10, 2, "softmax", 16, 1, max_len=12, dropout=0.0, pooling="cls")
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(150):
        ids, label = _contains_three(64, 12, g)
        loss = nn.functional.cross_entropy(model(ids), label)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    ids, label = _contains_three(1000, 12, torch.Generator().manual_seed(123))
    with torch.no_grad():
        accuracy = (model(ids).argmax(-1) == label).float().mean().item()
    assert accuracy > 0.9, accuracy


@pytest.mark.parametrize("mixer", ["softmax", "linear"])
def test_token_pooling_gives_each_position_its_logits_and_padding_stays_invisible(mixer: str) -> None:
    torch.manual_seed(3)
    model = SequenceClassifier(VOCAB, 5, mixer, 8, 2, max_len=9, pooling="tokens").eval()
    ids = ids_(3, 9, seed=4)
    lengths = [9, 6, 2]
    mask = torch.arange(9)[None, :] < torch.tensor(lengths)[:, None]
    logits = model(ids, mask)
    assert logits.shape == (3, 9, 5) and torch.count_nonzero(logits[~mask]) == 0
    torch.testing.assert_close(logits, model.head(model.encode(ids, mask)) * mask[..., None], rtol=0, atol=0)
    other = torch.where(mask, ids, ids_(3, 9, seed=5))
    torch.testing.assert_close(model(other, mask), logits, rtol=1e-5, atol=1e-5)
    for row, n in enumerate(lengths):
        torch.testing.assert_close(logits[row:row + 1, :n], model(ids[row:row + 1, :n]), rtol=1e-5, atol=1e-5)
    # the encoder's weights are the mean-pooling classifier's, name for name; only the head's shape differs
    classifier = SequenceClassifier(VOCAB, 2, mixer, 8, 2, max_len=9, pooling="mean")
    tokens, pooled = model.state_dict(), classifier.state_dict()
    assert tokens.keys() == pooled.keys()
    assert [k for k in tokens if tokens[k].shape != pooled[k].shape] == ["head.weight", "head.bias"]


def test_the_two_tower_classifier_refuses_token_pooling() -> None:
    from tokenmix.models import DualEncoderClassifier

    with pytest.raises(ValueError, match="DualEncoderClassifier: pooling must be one of"):
        DualEncoderClassifier(VOCAB, 2, "softmax", 8, 1, max_len=6, pooling="tokens")


def test_a_sequence_classification_task_refuses_token_pooling() -> None:
    from tokenmix.tasks import create_task

    task = create_task("listops", preset="quick", train_size=8, val_size=4, test_size=4, min_length=5, max_length=20)
    with pytest.raises(ValueError, match="task 'listops': pooling 'tokens' gives logits per position"):
        task.build_model("softmax", dim=8, depth=1, model_options={"pooling": "tokens"})
