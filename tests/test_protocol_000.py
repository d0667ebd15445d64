"""Yamada, Baladram, Lin (2022)'s single-layer protocol, mixer side: a depth ``d = inner_dim`` separate from
the embedding width ``m = dim``, no output projection (eqs. 4, 5, 12), linear attention without its
denominator (eq. 5), and the §4.2 operation counts ``2 N d^2 + 3 N d m`` and ``N d^2 + 2 N d m + N d``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tokenmix
from conftest import assert_matches_reference, assert_padding_invisible, lengths_mask, sequence_mixers
from tokenmix.counting import (
    PAPER_000_MIXERS,
    count_mixer,
    count_ops,
    count_paper_000,
    count_step_ops,
    format_paper_000,
    paper_000_mults,
    paper_000_options,
)
from tokenmix.ops.kernel_attention import kernel_attention, kernel_attention_reference, kernel_attention_step

PAPER = {  # name -> options of the paper's mechanism at d = 6 (one head)
    "softmax": {"inner_dim": 6, "out_proj": False},
    "linear": {"inner_dim": 6, "out_proj": False, "normalize": False},
    "relation": {"inner_dim": 6, "out_proj": False},
}
M = 10  # embedding width: inner_dim = 6 != dim, so any mix-up of the two widths fails


def _paper_mixer(name: str, causal: bool, **extra: object) -> torch.nn.Module:
    options = {**PAPER[name], **extra}
    return tokenmix.create_mixer(name, M, causal=causal, max_len=24, **options).double().eval()


def _features(*shape: int, seed: int) -> torch.Tensor:
    """Positive features, as elu + 1 gives."""
    return F.elu(torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))) + 1


# -- kernel_attention(normalize=False): fast paths == quadratic reference == token-by-token step --------------

@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
@pytest.mark.parametrize("padded", [False, True], ids=["dense", "padded"])
def test_unnormalised_kernel_attention_matches_reference(causal: bool, padded: bool) -> None:
    b, h, n, f, d = 3, 2, 11, 4, 5
    q, k = _features(b, h, n, f, seed=0), _features(b, h, n, f, seed=1)
    v = torch.randn(b, h, n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    mask = lengths_mask([11, 6, 0], n) if padded else None
    inputs = [t.clone().requires_grad_(True) for t in (q, k, v)]
    cot = torch.randn(b, h, n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    fast = kernel_attention(*inputs, causal=causal, key_mask=mask, chunk_size=4 if causal else None,
                            normalize=False)  # 11 = 4 + 4 + 3: several chunks and a padded last one
    ref = kernel_attention_reference(*inputs, causal=causal, key_mask=mask, normalize=False)
    torch.testing.assert_close(fast, ref, rtol=1e-10, atol=1e-10)
    for a, r in zip(torch.autograd.grad((fast * cot).sum(), inputs), torch.autograd.grad((ref * cot).sum(), inputs)):
        torch.testing.assert_close(a, r, rtol=1e-10, atol=1e-10)
    # eq. 5 without a denominator: phi(Q) (phi(K)^T V) over the allowed keys, written out
    allowed = torch.ones(n, n, dtype=torch.bool).tril() if causal else torch.ones(n, n, dtype=torch.bool)
    if mask is not None:
        allowed = allowed & mask[:, None, None, :]
    expected = ((q @ k.transpose(-2, -1)) * allowed) @ v
    torch.testing.assert_close(fast.detach(), expected, rtol=1e-10, atol=1e-10)
    if padded:  # a row with no real key gets zeros
        assert torch.count_nonzero(fast[2]) == 0
    # the normalised form is a different function (the rows of w do not sum to 1)
    normalised = kernel_attention(q, k, v, causal=causal, key_mask=mask)
    assert (normalised - fast.detach()).abs().max() > 1e-3


def test_unnormalised_step_equals_causal_forward() -> None:
    b, h, n, f, d = 2, 2, 9, 3, 4
    q, k = _features(b, h, n, f, seed=4), _features(b, h, n, f, seed=5)
    v = torch.randn(b, h, n, d, dtype=torch.float64)
    whole = kernel_attention(q, k, v, causal=True, chunk_size=4, normalize=False)
    state, steps = None, []
    for t in range(n):
        y, state = kernel_attention_step(q[:, :, t], k[:, :, t], v[:, :, t], state, normalize=False)
        steps.append(y)
    assert state.shape == (b, h, f, d)  # no denominator column
    torch.testing.assert_close(torch.stack(steps, dim=2), whole, rtol=1e-10, atol=1e-10)


def test_unnormalised_kernel_attention_rejects_log_scales_and_non_bools() -> None:
    q = k = _features(1, 1, 4, 2, seed=6)
    v = torch.randn(1, 1, 4, 3, dtype=torch.float64)
    scale = torch.zeros(1, 1, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match="normalize=True"):
        kernel_attention(q, k, v, causal=True, key_log_scale=scale, normalize=False)
    with pytest.raises(ValueError, match="normalize=True"):
        kernel_attention_reference(q, k, v, causal=True, key_log_scale=scale, normalize=False)
    with pytest.raises(ValueError, match="normalize=True"):
        kernel_attention_step(q[:, :, 0], k[:, :, 0], v[:, :, 0], None, log_scale=scale[..., 0], normalize=False)
    with pytest.raises(ValueError, match="normalize must be a bool"):
        kernel_attention(q, k, v, causal=False, normalize=1)


def test_unnormalised_linear_attention_has_no_causal_leak() -> None:
    torch.manual_seed(7)
    mixer = tokenmix.create_mixer("linear", 6, num_heads=2, causal=True, chunk_size=3, normalize=False,
                                  inner_dim=4, out_proj=False).double()
    b, n = 2, 8
    x = torch.randn(b, n, 6, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda t: mixer(t), x)  # (B, N, 4, B, N, 6)
    for i in range(n):
        assert torch.count_nonzero(jac[0, i, :, 0, i + 1:]) == 0, f"output {i} depends on a later input"
        assert torch.count_nonzero(jac[0, i, :, 1]) == 0, "batch rows mix"
        assert torch.count_nonzero(jac[0, i, :, 0, : i + 1]) > 0


# -- the mixers with inner_dim != dim and no output projection ------------------------------------------------

@pytest.mark.parametrize("name", PAPER_000_MIXERS)
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
def test_paper_mechanism_is_inner_dim_wide_and_matches_reference(name: str, causal: bool) -> None:
    torch.manual_seed(8)
    mixer = _paper_mixer(name, causal)
    assert mixer.out_dim == 6 and mixer.inner_dim == 6 and mixer.dim == M and mixer.proj is None
    x = torch.randn(3, 13, M, dtype=torch.float64)
    mask = lengths_mask([13, 8, 3], 13)
    y = mixer(x, mask)
    assert y.shape == (3, 13, 6)
    assert_matches_reference(mixer, x, mask)
    assert_matches_reference(mixer, x, None)
    assert_padding_invisible(mixer, x, mask)


@pytest.mark.parametrize("name", PAPER_000_MIXERS)
def test_paper_mechanism_steps_like_the_causal_forward_and_counts_add_up(name: str) -> None:
    torch.manual_seed(9)
    mixer = _paper_mixer(name, causal=True)
    x = torch.randn(2, 10, M, dtype=torch.float64)
    state, steps = mixer.init_state(2), []
    for t in range(10):
        y_t, state = mixer.step(x[:, t], state)
        assert y_t.shape == (2, 6)
        steps.append(y_t)
    torch.testing.assert_close(torch.stack(steps, dim=1), mixer(x), rtol=1e-9, atol=1e-9)
    total = count_step_ops(mixer, 1)
    for t in range(2, 11):
        total = total + count_step_ops(mixer, t)
    assert total == count_ops(mixer, 10)


def test_eq4_and_eq5_written_out() -> None:
    """One head, no W_out: softmax(Q K^T / sqrt(d)) V and tau(Q) (tau(K)^T V) with Q, K, V = x W (eqs. 1-6)."""
    torch.manual_seed(10)
    x = torch.randn(2, 7, M, dtype=torch.float64)
    att, lin = _paper_mixer("softmax", False), _paper_mixer("linear", False)
    q, k, v = (p(x) for p in (att.q_proj, att.k_proj, att.v_proj))
    torch.testing.assert_close(att(x), ((q @ k.transpose(1, 2)) / 6 ** 0.5).softmax(-1) @ v)
    q, k, v = (p(x) for p in (lin.q_proj, lin.k_proj, lin.v_proj))
    tau = lambda t: torch.where(t > 0, t + 1, t.exp())  # noqa: E731 (eq. 6)
    torch.testing.assert_close(lin(x), tau(q) @ (tau(k).transpose(1, 2) @ v))


def test_relation_eq12_written_out() -> None:
    torch.manual_seed(11)
    rel = _paper_mixer("relation", False)
    x = torch.randn(2, 7, M, dtype=torch.float64)
    g, h = rel.g_proj(x), rel.h_proj(x)
    torch.testing.assert_close(rel(x), torch.relu((g * h.mean(dim=1, keepdim=True)) @ rel.w.weight.T + rel.w.bias))


@pytest.mark.parametrize("name", PAPER_000_MIXERS)
def test_out_proj_true_maps_back_to_dim(name: str) -> None:
    mixer = tokenmix.create_mixer(name, M, inner_dim=6, bias=False)
    assert mixer.out_dim == M and mixer.proj.in_features == 6 and mixer.proj.out_features == M
    assert mixer(torch.randn(1, 5, M)).shape == (1, 5, M)


def test_heads_split_inner_dim() -> None:
    mixer = tokenmix.create_mixer("softmax", 10, num_heads=3, inner_dim=12, out_proj=False)  # 10 % 3 != 0: fine
    assert mixer.head_dim == 4 and mixer(torch.randn(2, 5, 10)).shape == (2, 5, 12)
    mixer = tokenmix.create_mixer("linear", 10, num_heads=2, inner_dim=12, causal=True)
    assert mixer.head_dim == 6 and mixer.out_dim == 10


@pytest.mark.parametrize("name", sequence_mixers())
def test_every_mixer_has_out_dim_equal_to_dim_by_default(name: str) -> None:
    info = tokenmix.mixer_info(name)
    mixer = tokenmix.create_mixer(name, 8, causal=not info.bidirectional, max_len=6)
    assert mixer.out_dim == 8
    assert mixer(torch.randn(1, 6, 8)).shape[-1] == mixer.out_dim


@pytest.mark.parametrize("name,options,pattern", [
    ("softmax", {"inner_dim": 6, "num_heads": 4}, "softmax.*inner_dim=6 is not divisible by num_heads=4"),
    ("linear", {"inner_dim": 0}, "linear.*inner_dim must be a positive int"),
    ("softmax", {"inner_dim": True}, "softmax.*inner_dim must be a positive int"),
    ("relation", {"inner_dim": "8"}, "relation.*inner_dim must be a positive int"),
    ("softmax", {"out_proj": "no"}, "softmax.*out_proj must be a bool"),
    ("linear", {"out_proj": 0}, "linear.*out_proj must be a bool"),
    ("relation", {"out_proj": None}, "relation.*out_proj must be a bool"),
    ("relation", {"bias": 1}, "relation.*bias must be a bool"),
    ("linear", {"normalize": "yes"}, "linear.*normalize must be a bool"),
    ("linear", {"normalize": False, "eps": 1e-6}, "linear.*eps.*normalize"),
    ("linear", {"eps": 0.0}, "linear.*eps must be a positive number"),
])
def test_bad_options_are_rejected_by_name(name: str, options: dict, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        tokenmix.create_mixer(name, 8, **options)


def test_options_are_listed_by_the_registry() -> None:
    assert {"inner_dim", "out_proj"} <= set(tokenmix.mixer_info("softmax").options)
    assert {"inner_dim", "out_proj", "normalize"} <= set(tokenmix.mixer_info("linear").options)
    assert {"inner_dim", "out_proj"} <= set(tokenmix.mixer_info("relation").options)


# -- parameters: W_Q, W_K, W_V in R^{m x d} (eqs. 1-3); W_G, W_H in R^{m x d}, W in R^{d x d} (eqs. 7-12) --------

@pytest.mark.parametrize("m,d", [(128, 64), (100, 256), (16, 16)])
def test_parameter_counts_are_the_papers(m: int, d: int) -> None:
    for name in PAPER_000_MIXERS:
        mixer = tokenmix.create_mixer(name, m, **paper_000_options(name, d))
        count = sum(p.numel() for p in mixer.parameters())
        assert count == (2 * m * d + d * d if name == "relation" else 3 * m * d), name
        shapes = sorted(tuple(p.shape) for p in mixer.parameters())
        expected = [(d, m), (d, m), (d, d)] if name == "relation" else [(d, m)] * 3
        assert shapes == sorted(expected), name  # nn.Linear stores W^T: (d, m) is W in R^{m x d}


# -- §4.2's counts --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n,m,d", [(512, 128, 64), (467, 100, 128), (2494, 100, 256), (7, 3, 5)])
def test_section_4_2_counts_are_the_multiplications(n: int, m: int, d: int) -> None:
    results = {r.name: r for r in count_paper_000(dim=m, inner_dim=d, length=n, measure_flops=False)}
    lin, rel, att = results["linear"], results["relation"], results["softmax"]
    assert lin.train.mults == 2 * n * d * d + 3 * n * d * m == paper_000_mults("linear", n, m, d)
    assert rel.train.mults == n * d * d + 2 * n * d * m + n * d == paper_000_mults("relation", n, m, d)
    # "Linear Attention calculation requires N d^2 + N d (m - 1) more computations than Relation"
    assert lin.train.mults - rel.train.mults == n * d * d + n * d * (m - 1)
    # tau's exps (one per entry of Q and K, eq. 6) are counted apart from the multiplications
    assert lin.train.exps == 2 * n * d and lin.train.divs == 0
    assert rel.train.divs == d and rel.train.exps == 0  # the mean of eq. 10, not in the paper's count
    assert att.train.mults == 2 * n * n * d + 3 * n * d * m and paper_000_mults("softmax", n, m, d) is None
    assert all(not r.causal and r.heads == 1 and r.params > 0 for r in results.values())


def test_the_denominator_costs_n_d_multiplications_per_head() -> None:
    n, m, d = 9, 5, 4
    plain = count_ops(tokenmix.create_mixer("linear", m, **paper_000_options("linear", d)), n)
    normalised = count_ops(tokenmix.create_mixer("linear", m, inner_dim=d, out_proj=False), n)
    assert normalised.mults - plain.mults == n * d  # tau(q_i) . z
    assert normalised.divs - plain.divs == n * d
    assert normalised.adds - plain.adds == (n - 1) * d + n * d  # z's running sum; tau(q_i) . z and eps


def test_flop_counter_measures_exactly_the_matrix_products() -> None:
    n, m, d = 32, 12, 8
    results = {r.name: r for r in count_paper_000(dim=m, inner_dim=d, length=n)}
    assert results["linear"].measured_flops == 2 * results["linear"].train.mults  # no ones column without z
    assert results["softmax"].measured_flops == 2 * results["softmax"].train.mults
    assert results["relation"].measured_flops == 2 * (results["relation"].train.mults - n * d)  # all but G * H'


def test_format_paper_000_says_equal() -> None:
    results = count_paper_000(dim=16, inner_dim=8, length=10, measure_flops=False)
    text = format_paper_000(results, 8)
    assert text.count("(equal)") == 2 and "no count in the paper" in text


def test_paper_000_helpers_reject_bad_arguments() -> None:
    with pytest.raises(ValueError, match="inner_dim"):
        count_paper_000(dim=8, inner_dim=0, length=4)
    with pytest.raises(ValueError, match="performer"):
        paper_000_options("performer", 8)
    with pytest.raises(ValueError, match="length"):
        paper_000_mults("linear", -1, 8, 8)
    assert count_mixer("linear", dim=8, max_len=None, length=4, causal=False, measure_flops=False,
                       options=paper_000_options("linear", 8)).train.mults == paper_000_mults("linear", 4, 8, 8)


def test_relationnet_mixers_follow_the_equations_without_biases() -> None:
    """Yamada et al. (2022) eqs. 1-12 have no biases: at m = 100, d = 64 attention and linear attention hold
    3md = 19,200 mixer parameters and Relation 2md + d² = 16,896 (with biases Relation had 17,088); the
    point-wise Baseline keeps the biases of its dense layers."""
    from tokenmix.models import RelationNet

    counts = {name: sum(p.numel() for p in RelationNet(50, 2, name, 100, inner_dim=64).mixer.parameters())
              for name in ("softmax", "linear", "relation")}
    assert counts == {"softmax": 19_200, "linear": 19_200, "relation": 16_896}
    baseline = RelationNet(50, 2, "mlp", 100, inner_dim=64).mixer
    assert any(name.endswith("bias") for name, _ in baseline.named_parameters())
