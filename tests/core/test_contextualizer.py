"""The Contextualizer (003: Maupomé & Meurs 2021, §2) and its classifier (003 §3)."""

from __future__ import annotations

import pytest
import torch

import tokenmix
from conftest import assert_matches_reference, assert_padding_invisible, build, lengths_mask
from tokenmix.models import ContextualizerClassifier, sinusoidal_positions

NAME = "contextualizer"
CONTEXTS = ["ones", "learned", "random"]



def hand_contextualizer(x: torch.Tensor, params: list[tuple], c0: torch.Tensor) -> torch.Tensor:
    """003 §2 written out for one unpadded sequence x (N, d): for each step's (U, V, W[, b_U, b_V, b_W])
    alpha~_i = W (U x_i * V c) [2a]; alpha_ij = exp(alpha~_ij) / sum_l exp(alpha~_lj) [2b];
    c = sum_i alpha_i * x_i [2c] (the context is replaced). Returns c^(K) (d,)."""
    c = c0
    for p in params:
        u, v, w = p[:3]
        b_u, b_v, b_w = p[3:] if len(p) == 6 else (0.0, 0.0, 0.0)
        scores = torch.stack([w @ ((u @ x[i] + b_u) * (v @ c + b_v)) + b_w for i in range(x.shape[0])])
        e = torch.exp(scores)
        alpha = e / e.sum(dim=0, keepdim=True)
        c = (alpha * x).sum(dim=0)
    return c


def step_params(mixer, k: int) -> tuple:
    s = 0 if mixer.recurrent else k
    ps = (mixer.U, mixer.V, mixer.W) + ((mixer.b_U, mixer.b_V, mixer.b_W) if mixer.bias else ())
    return tuple(p[s].detach() for p in ps)


# -- registration -------------------------------------------------------------------------------------
def test_registered_with_the_right_flags():
    info = tokenmix.mixer_info(NAME)
    assert (info.causal, info.bidirectional, info.padding, info.recurrent, info.multihead) == (
        False, True, True, False, False)
    assert info.complexity == "O(K N d u)" and "Maupom" in info.paper
    assert set(info.options) == {"steps", "rank", "recurrent", "context", "bias"}


@pytest.mark.parametrize("options", [{"steps": 0}, {"rank": -1}, {"steps": 2.0}, {"context": "zeros"},
                                     {"recurrent": "yes"}, {"bias": 1}])
def test_bad_options_raise(options):
    with pytest.raises(ValueError, match=NAME):
        tokenmix.create_mixer(NAME, 8, **options)


def test_c0_shape_is_checked():
    mixer = build(NAME, dim=8, steps=1, rank=4)
    with pytest.raises(ValueError, match="c0"):
        mixer.context(torch.randn(2, 3, 8, dtype=torch.float64), c0=torch.ones(3, 8, dtype=torch.float64))


# -- the equations ------------------------------------------------------------------------------------
@pytest.mark.parametrize("bias", [False, True])
def test_single_step_constant_context_matches_the_paper(bias):
    torch.manual_seed(0)
    d, u, n = 6, 4, 5
    mixer = build(NAME, dim=d, steps=1, rank=u, context="ones", bias=bias)
    x = torch.randn(2, n, d, dtype=torch.float64)
    y = mixer(x)
    u_, v_, w_ = step_params(mixer, 0)[:3]
    for b in range(2):
        expected = hand_contextualizer(x[b], [step_params(mixer, 0)], torch.ones(d, dtype=torch.float64))
        # every position receives c^(1)
        torch.testing.assert_close(y[b], expected.expand(n, d))
        if not bias:  # the rank-u factorisation of the 3-way tensor T_jab = sum_r W_jr U_ra V_rb
            tensor = torch.einsum("jr,ra,rb->jab", w_, u_, v_)
            scores = torch.einsum("jab,ia,b->ij", tensor, x[b], torch.ones(d, dtype=torch.float64))
            torch.testing.assert_close(expected, (torch.softmax(scores, dim=0) * x[b]).sum(0))
    torch.testing.assert_close(mixer.context(x), y[:, 0])


@pytest.mark.parametrize("recurrent", [True, False])
def test_several_steps_replace_the_context(recurrent):
    torch.manual_seed(1)
    d, steps = 5, 3
    mixer = build(NAME, dim=d, steps=steps, rank=3, recurrent=recurrent, context="learned")
    with torch.no_grad():
        mixer.default_context.uniform_(-1, 1)
    x = torch.randn(2, 4, d, dtype=torch.float64)
    params = [step_params(mixer, k) for k in range(steps)]
    expected = torch.stack([hand_contextualizer(x[b], params, mixer.default_context.detach()) for b in range(2)])
    torch.testing.assert_close(mixer.context(x), expected)


# -- fast == reference --------------------------------------------------------------------------------
def assert_fast_matches_reference_seeded(mixer, x, mask, seed=7):
    """As conftest's helper, but the RNG is reseeded before each path so that "random" draws the same c^(0)."""
    x = x.detach().clone().requires_grad_(True)
    inputs = [x, *mixer.parameters()]
    torch.manual_seed(seed)
    fast = mixer(x, mask)
    cot = torch.randn(fast.shape, generator=torch.Generator().manual_seed(123), dtype=fast.dtype)
    grads_fast = torch.autograd.grad((fast * cot).sum(), inputs)
    torch.manual_seed(seed)
    ref = mixer.forward_reference(x, mask)
    grads_ref = torch.autograd.grad((ref * cot).sum(), inputs)
    torch.testing.assert_close(fast, ref, rtol=1e-7, atol=1e-9)
    for a, b in zip(grads_fast, grads_ref):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("recurrent", [True, False], ids=["recurrent", "regular"])
@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("padded", [False, True], ids=["dense", "padded"])
def test_fast_matches_reference(recurrent, context, padded):
    torch.manual_seed(3)
    mixer = build(NAME, dim=8, steps=3, rank=5, recurrent=recurrent, context=context, bias=not recurrent)
    x = torch.randn(3, 9, 8, dtype=torch.float64)
    mask = lengths_mask([9, 5, 0], 9) if padded else None
    if context == "random":
        assert_fast_matches_reference_seeded(mixer, x, mask)
    else:
        assert_matches_reference(mixer, x, mask)
    torch.manual_seed(0)
    w_fast = mixer.attention_weights(x, mask)
    torch.manual_seed(0)
    torch.testing.assert_close(w_fast, mixer.attention_weights_reference(x, mask))


# -- attention weights --------------------------------------------------------------------------------
@pytest.mark.parametrize("recurrent", [True, False])
def test_softmax_is_over_tokens_per_feature(recurrent):
    torch.manual_seed(4)
    d, n, steps = 7, 8, 3
    mixer = build(NAME, dim=d, steps=steps, rank=6, recurrent=recurrent)
    x = torch.randn(3, n, d, dtype=torch.float64)
    mask = lengths_mask([8, 3, 0], n)
    weights = mixer.attention_weights(x, mask)
    assert weights.shape == (3, steps, n, d)
    assert (weights >= 0).all()
    sums = weights.sum(dim=2)  # over tokens: (B, K, d)
    torch.testing.assert_close(sums[:2], torch.ones(2, steps, d, dtype=torch.float64))
    assert torch.count_nonzero(weights[:, :, :, :].masked_select(~mask[:, None, :, None])) == 0
    assert torch.count_nonzero(sums[2]) == 0  # no real token: no weight anywhere
    # per-feature weights really differ across features (a vector per token, not a scalar)
    assert (weights[0, 0].std(dim=1) > 1e-6).any()
    # the context is the weighted sum of the last step (2), [2c]
    torch.testing.assert_close(mixer.context(x, mask), (weights[:, -1] * x.masked_fill(~mask[..., None], 0)).sum(1))


# -- padding ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("recurrent", [True, False])
@pytest.mark.parametrize("context", ["ones", "learned"])
def test_padding_is_invisible(recurrent, context):
    torch.manual_seed(5)
    mixer = build(NAME, dim=8, steps=3, rank=5, recurrent=recurrent, context=context)
    mask = lengths_mask([10, 6, 2], 10)
    assert_padding_invisible(mixer, torch.randn(3, 10, 8, dtype=torch.float64), mask, atol=1e-9)
    left = lengths_mask([10, 6, 2], 10, left=True)
    assert_padding_invisible(mixer, torch.randn(3, 10, 8, dtype=torch.float64), left, atol=1e-9)


def test_random_context_with_given_c0_is_padding_invariant():
    torch.manual_seed(6)
    mixer = build(NAME, dim=8, steps=3, rank=5, context="random")
    x, mask = torch.randn(2, 7, 8, dtype=torch.float64), lengths_mask([7, 4], 7)
    c0 = torch.empty(2, 8, dtype=torch.float64).uniform_(-1, 1)
    c = mixer.context(x, mask, c0=c0)
    torch.testing.assert_close(c[1], mixer.context(x[1:, :4], c0=c0[1])[0])


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("reference", [False, True])
def test_all_padding_row_has_zero_context_and_finite_grads(context, reference):
    torch.manual_seed(7)
    mixer = build(NAME, dim=8, steps=3, rank=5, context=context, bias=True)
    x = torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True)
    mask = lengths_mask([5, 0], 5)
    c = (mixer.context_reference if reference else mixer.context)(x, mask)
    y = mixer.forward_reference(x, mask) if reference else mixer(x, mask)
    assert torch.count_nonzero(c[1]) == 0 and torch.count_nonzero(y[1]) == 0
    assert torch.isfinite(c).all() and torch.isfinite(y).all()
    (c.sum() + y.square().sum()).backward()
    assert torch.isfinite(x.grad).all() and torch.count_nonzero(x.grad[1]) == 0
    for name, p in mixer.named_parameters():
        assert torch.isfinite(p.grad).all(), name


# -- random default context ---------------------------------------------------------------------------
def test_random_context_is_drawn_per_call_from_the_global_rng():
    mixer = build(NAME, dim=8, steps=2, rank=5, context="random")
    x = torch.randn(3, 6, 8, dtype=torch.float64)
    torch.manual_seed(11)
    c = mixer.context(x)
    torch.manual_seed(11)
    c0 = (2 * torch.rand(3, 8) - 1).double()  # U(-1, 1) per sequence, drawn in float32
    torch.testing.assert_close(c, mixer.context(x, c0=c0))
    assert not torch.allclose(mixer.context(x), mixer.context(x))  # redrawn every call, eval too


# -- parameters ---------------------------------------------------------------------------------------
def n_params(module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_default_parameter_count():
    """Defaults (K = 5, u = 100, recurrent, no bias, context 1): exactly U, V, W = 3 u d."""
    mixer = tokenmix.create_mixer(NAME, 64)
    assert (mixer.steps, mixer.rank, mixer.recurrent, mixer.context_kind, mixer.bias) == (5, 100, True, "ones", False)
    assert n_params(mixer) == 3 * 100 * 64 == 19_200
    assert sorted(name for name, _ in mixer.named_parameters()) == ["U", "V", "W"]


def test_recurrent_shares_one_set_and_regular_has_one_per_step():
    d, u = 12, 7
    one = 3 * u * d
    for steps in (1, 4):
        assert n_params(tokenmix.create_mixer(NAME, d, steps=steps, rank=u)) == one
        assert n_params(tokenmix.create_mixer(NAME, d, steps=steps, rank=u, recurrent=False)) == steps * one
    assert n_params(tokenmix.create_mixer(NAME, d, steps=4, rank=u, bias=True)) == one + 2 * u + d
    assert n_params(tokenmix.create_mixer(NAME, d, steps=4, rank=u, recurrent=False, bias=True)) == 4 * (
        one + 2 * u + d)
    assert n_params(tokenmix.create_mixer(NAME, d, steps=4, rank=u, context="learned")) == one + d


def test_regular_steps_use_their_own_parameters():
    torch.manual_seed(8)
    mixer = build(NAME, dim=6, steps=3, rank=4, recurrent=False)
    x = torch.randn(2, 5, 6, dtype=torch.float64)
    mixer.context(x).sum().backward()
    for p in (mixer.U, mixer.V, mixer.W):
        assert all(p.grad[k].abs().sum() > 0 for k in range(3))


def test_bfloat16_random_context_is_finite():
    torch.manual_seed(9)
    mixer = build(NAME, dim=16, context="random", dtype=torch.bfloat16)
    y = mixer(torch.randn(2, 10, 16, dtype=torch.bfloat16), lengths_mask([10, 4], 10))
    assert y.dtype == torch.bfloat16 and torch.isfinite(y).all()


# -- the classifier of 003 §3 ------------------------------------------------------------------------
def test_classifier_word_vectors_are_fixed_and_uniform():
    torch.manual_seed(0)
    model = ContextualizerClassifier(50, 2, 16, pos_dim=4, max_len=12, steps=2, rank=8)
    assert model.word_vectors.shape == (50, 16) and not model.word_vectors.requires_grad
    assert all(p is not model.word_vectors for p in model.parameters())
    assert model.word_vectors.min() >= -1 and model.word_vectors.max() <= 1
    assert model.word_vectors.min() < -0.9 and model.word_vectors.max() > 0.9
    assert "word_vectors" in model.state_dict()
    ids = torch.randint(0, 50, (3, 7))
    x = model.encode(ids)  # eq. (1): [word ; sinusoidal position]
    torch.testing.assert_close(x[..., :16], model.word_vectors[ids])
    torch.testing.assert_close(x[..., 16:], sinusoidal_positions(12, 4)[:7].expand(3, 7, 4))
    model(ids).sum().backward()
    assert model.word_vectors.grad is None
    assert all(p.grad is not None for p in model.parameters())


def test_classifier_paper_parameter_counts():
    """003 §3.1: v = 500, p = 20 -> 157k (recurrent), ~3M (regular, K = 20); §3.2: trained, v = 250."""
    assert n_params(ContextualizerClassifier(5700, 2, 500)) == 3 * 100 * 520 + 520 * 2 + 2 == 157_042
    assert n_params(ContextualizerClassifier(5700, 2, 500, recurrent=False, steps=20)) == 3_121_042
    trained = ContextualizerClassifier(1700, 2, 250, embeddings="trained", context="random")
    assert n_params(trained) == 1700 * 250 + 3 * 100 * 270 + 270 * 2 + 2  # "about half a million"


def test_classifier_is_deterministic_under_manual_seed():
    ids = torch.randint(0, 30, (4, 9), generator=torch.Generator().manual_seed(0))
    outs = []
    for seed in (3, 3, 4):
        torch.manual_seed(seed)
        model = ContextualizerClassifier(30, 3, 8, pos_dim=4, max_len=16, steps=2, rank=6).eval()
        outs.append((model.word_vectors.clone(), model(ids)))
    torch.testing.assert_close(outs[0][0], outs[1][0])
    torch.testing.assert_close(outs[0][1], outs[1][1])
    assert not torch.equal(outs[0][0], outs[2][0])


def test_classifier_padding_and_empty_rows():
    torch.manual_seed(1)
    model = ContextualizerClassifier(30, 3, 8, pos_dim=4, max_len=16, steps=3, rank=6, context="learned").eval()
    ids = torch.randint(0, 30, (3, 9))
    mask = lengths_mask([9, 4, 0], 9)
    logits = model(ids, mask)
    assert logits.shape == (3, 3) and torch.isfinite(logits).all()
    torch.testing.assert_close(model(torch.where(mask, ids, 0), mask), logits)
    torch.testing.assert_close(logits[1:2], model(ids[1:2, :4]))
    torch.testing.assert_close(logits[2], model.head.bias.detach())


def test_classifier_options_reach_the_mixer():
    model = ContextualizerClassifier(10, 2, 8, steps=3, rank=4, recurrent=False, context="random",
                                     embeddings="trained", mixer_options={"bias": True})
    mixer = model.contextualizer
    assert (mixer.steps, mixer.rank, mixer.recurrent, mixer.context_kind, mixer.bias) == (3, 4, False, "random", True)
    assert mixer.dim == 8 + 20 and model.embedding.weight.requires_grad
    assert model.embedding.weight.abs().max() <= 1
    with pytest.raises(ValueError, match=NAME):
        ContextualizerClassifier(10, 2, 8, mixer_options={"no_such_option": 1})
    for bad in ({"embeddings": "glove"}, {"pos_dim": -1}, {"dropout": 1.0}, {"context": "zeros"}):
        with pytest.raises(ValueError):
            ContextualizerClassifier(10, 2, 8, **bad)
    assert ContextualizerClassifier(10, 2, 8, pos_dim=0).contextualizer.dim == 8


def test_classifier_bad_ids_raise():
    model = ContextualizerClassifier(10, 2, 8, pos_dim=4, max_len=6, steps=1, rank=4)
    good = torch.randint(0, 10, (2, 5))
    for bad in (good.float(), good[0], torch.full((2, 5), 10), torch.full((2, 5), -1), torch.zeros(2, 7).long(),
                torch.zeros(2, 0).long(), good.tolist()):
        with pytest.raises(ValueError, match="ContextualizerClassifier"):
            model(bad)
    with pytest.raises(ValueError, match="ContextualizerClassifier"):
        model(good, torch.ones(2, 5))
    with pytest.raises(ValueError, match="ContextualizerClassifier"):
        model(good, torch.ones(2, 4, dtype=torch.bool))


def _token_three_task(n: int, gen: torch.Generator, length: int = 10, vocab: int = 12):
    """Label 1 iff token 3 occurs among the real tokens; balanced; right padding (lengths 4..length)."""
    ids = torch.randint(0, vocab - 1, (n, length), generator=gen)
    ids = ids + (ids >= 3).long()  # every token but 3
    lengths = torch.randint(4, length + 1, (n,), generator=gen)
    mask = torch.arange(length)[None, :] < lengths[:, None]
    labels = torch.randint(0, 2, (n,), generator=gen)
    where = (torch.rand(n, generator=gen) * lengths).long()
    rows = labels.nonzero().squeeze(1)
    ids[rows, where[rows]] = 3
    return ids, mask, labels


def test_classifier_learns_whether_token_three_occurs():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = ContextualizerClassifier(12, 2, 16, pos_dim=4, max_len=10, steps=2, rank=16)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(150):
        ids, mask, labels = _token_three_task(64, gen)
        loss = torch.nn.functional.cross_entropy(model(ids, mask), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    ids, mask, labels = _token_three_task(1000, torch.Generator().manual_seed(99))
    with torch.no_grad():
        accuracy = (model.eval()(ids, mask).argmax(dim=1) == labels).float().mean().item()
    assert accuracy > 0.85
