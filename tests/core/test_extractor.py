"""Tests of the Extractors (Chen 2023, 004 section 5): SHE, HE, WE and ME."""

from __future__ import annotations

import pytest
import torch

import tokenmix
from conftest import assert_matches_reference, assert_padding_invisible, lengths_mask
from tokenmix.mixers import extractor
from tokenmix.ops import causal_conv
from tokenmix.mixers.extractor import FFT_MIN_TAPS, choose_path, fft_size

NAMES = ["extractor_she", "extractor_he", "extractor_we", "extractor_me"]
DIM, L = 6, 16  # small width; max_len = l = 16 taps
LENGTHS = [5, 16, 40]  # below, at and above max_len


def make(name: str, *, dim: int = DIM, max_len: int = L, dtype: torch.dtype = torch.float64, seed: int = 0,
         scale: float | None = 0.4, **options) -> extractor.Extractor:
    """An Extractor with O(1) random weights (the paper's N(0, 0.01) init makes every output tiny)."""
    torch.manual_seed(seed)
    mixer = tokenmix.create_mixer(name, dim, causal=True, max_len=max_len, **options)
    if scale is not None:
        with torch.no_grad():
            for p in mixer.parameters():
                p.normal_(0.0, scale)
    return mixer.to(dtype)


def outputs_and_grads(mixer: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor | None = None):
    x = x.detach().clone().requires_grad_(True)
    y = mixer(x, mask)
    cotangent = torch.randn(y.shape, generator=torch.Generator().manual_seed(7), dtype=y.dtype)
    grads = torch.autograd.grad((y * cotangent).sum(), [x, *mixer.parameters()])
    names = ["y", "grad x", *(f"grad {n}" for n, _ in mixer.named_parameters())]
    return dict(zip(names, [y.detach(), *grads]))


def max_rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


# -- parameter counts (004 Tables 3, 4 and 7) ---------------------------------------------------------
@pytest.mark.parametrize("name,count", [("extractor_she", 2_129_920), ("extractor_he", 65_536),
                                        ("extractor_we", 49_152), ("extractor_me", 128)])
def test_parameter_counts_match_table_7(name, count):
    mixer = tokenmix.create_mixer(name, 128, causal=True, max_len=128, bias=False)
    assert sum(p.numel() for p in mixer.parameters()) == count


def test_softmax_parameter_count_of_table_7():
    mixer = tokenmix.create_mixer("softmax", 128, bias=False)
    assert sum(p.numel() for p in mixer.parameters()) == 65_536


@pytest.mark.parametrize("name,formula", [
    ("extractor_she", lambda taps, d: taps * d * d + d * d),
    ("extractor_he", lambda taps, d: taps * d + 2 * d * d),
    ("extractor_we", lambda taps, d: taps * d + d * d),
])
def test_parameter_counts_without_out_proj(name, formula):
    mixer = tokenmix.create_mixer(name, 12, causal=True, max_len=7, out_proj=False)
    assert sum(p.numel() for p in mixer.parameters()) == formula(7, 12)


def test_registry_flags():
    for name in NAMES:
        info = tokenmix.mixer_info(name)
        assert info.causal and not info.bidirectional and info.padding and info.recurrent
        assert not info.multihead and info.needs_max_len and not info.spatial
        assert info.sliding_window  # max_len is the number of taps, not a cap on N
        assert "path" in info.options


# -- the two fast paths and the literal reference ------------------------------------------------------
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("name", NAMES)
def test_fft_matches_direct_float32(name, n):
    """Outputs and gradients w.r.t. x and every parameter agree within 1e-4 relative error."""
    mixer = make(name, dtype=torch.float32, bias=name != "extractor_me")
    x = torch.randn(2, n, DIM)
    mixer.path = "direct"
    direct = outputs_and_grads(mixer, x)
    mixer.path = "fft"
    fft = outputs_and_grads(mixer, x)
    for key in direct:
        if key.startswith("grad w_ext") and n < L:
            # taps beyond position n are never used: zero gradient on both paths
            assert torch.count_nonzero(direct[key][n:]) == 0 and torch.count_nonzero(fft[key][n:]) == 0
            assert max_rel_err(fft[key][:n], direct[key][:n]) <= 1e-4, key
        else:
            assert max_rel_err(fft[key], direct[key]) <= 1e-4, key


@pytest.mark.parametrize("padded", [False, True], ids=["dense", "padded"])
@pytest.mark.parametrize("path", ["direct", "fft"])
@pytest.mark.parametrize("n", [7, 37])
@pytest.mark.parametrize("name", NAMES)
def test_paths_match_reference_float64(name, n, path, padded):
    mixer = make(name, path=path, bias=name != "extractor_me")
    mask = lengths_mask([n, n - 4, 3], n) if padded else None
    assert_matches_reference(mixer, torch.randn(3, n, DIM, dtype=torch.float64), mask)


@pytest.mark.parametrize("n", [1, 5, 16, 40])
def test_she_direct_tiling_matches_reference(n, monkeypatch):
    """The SHE's direct path tiles positions and taps (for long inputs); tiny tiles give the same result."""
    monkeypatch.setattr(causal_conv, "_MATRIX_TILE", 3)
    mixer = make("extractor_she", path="direct")
    mask = lengths_mask([n, max(1, n - 7)], n)
    assert_matches_reference(mixer, torch.randn(2, n, DIM, dtype=torch.float64), mask)


# -- one position by hand, straight from the paper's equations ----------------------------------------
def _hand(name: str, m: extractor.Extractor, x: torch.Tensor, i: int) -> torch.Tensor:
    """x (N, d); the output at 1-based position i, as 004 eqs. 23-29 write it (row vectors, x W)."""
    taps = m.max_len
    js = range(max(1, i - taps + 1), i + 1)  # the paper's j = 1..i, limited to the last l inputs
    if name == "extractor_me":  # eq. 29: scalar taps
        return sum(x[j - 1] * m.w_ext[i - j] for j in js)
    if name == "extractor_she":  # eq. 23: matrix taps
        ext = sum(x[j - 1] @ m.w_ext[i - j] for j in js)
    elif name == "extractor_we":  # eq. 26: vector taps
        ext = sum(x[j - 1] * m.w_ext[i - j] for j in js)
    else:  # eqs. 27-28: shared W^in_ext, then vector taps
        w_in, b_in = m.in_ext.weight.T, m.in_ext.bias
        x_ext = [x[j - 1] @ w_in + (b_in if b_in is not None else 0) for j in range(1, i + 1)]
        ext = sum(x_ext[j - 1] * m.w_ext[i - j] for j in js)
    adj_b = m.adj.bias if m.adj.bias is not None else 0
    adjusted = (x[i - 1] @ m.adj.weight.T + adj_b) * ext  # eq. 24
    out_b = m.out.bias if m.out.bias is not None else 0
    return adjusted @ m.out.weight.T + out_b  # eq. 25


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_one_position_by_hand(name, bias):
    if name == "extractor_me" and bias:
        pytest.skip("the ME has no bias")
    mixer = make(name, dim=3, max_len=4, bias=bias)
    x = torch.randn(1, 7, 3, dtype=torch.float64)
    with torch.no_grad():
        for path in ["direct", "fft"]:
            mixer.path = path
            y = mixer(x)
            for i in [3, 7]:  # i <= l (the paper's case) and i > l (the sliding window)
                torch.testing.assert_close(y[0, i - 1], _hand(name, mixer, x[0], i), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(mixer.forward_reference(x)[0, 6], _hand(name, mixer, x[0], 7))


@pytest.mark.parametrize("name", NAMES)
def test_long_input_sees_only_the_last_l_tokens(name):
    """Beyond max_len the output at i is that of the window x[i-l+1..i] run alone (004 with t = l)."""
    mixer = make(name, max_len=5)
    x = torch.randn(2, 13, DIM, dtype=torch.float64)
    y = mixer(x)
    for i in [4, 8, 12]:
        alone = mixer(x[:, i - 4:i + 1])
        torch.testing.assert_close(y[:, i], alone[:, -1])


# -- causality and padding beyond max_len ----------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_no_causal_leak_beyond_max_len(name):
    """direct: d y_i / d x_j is exactly zero for j > i; fft: zero up to round-off."""
    mixer = make(name, dim=3, max_len=4, path="direct")
    x = torch.randn(2, 11, 3, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda t: mixer(t), x)  # (B, N, D, B, N, D)
    assert jac.abs().max() > 0
    for b in range(2):
        for i in range(11):
            assert torch.count_nonzero(jac[b, i, :, b, i + 1:]) == 0, f"output {i} sees a later input"
            assert torch.count_nonzero(jac[b, i, :, 1 - b]) == 0, "batch rows mix"
            assert torch.count_nonzero(jac[b, i, :, b, : max(0, i - 3)]) == 0, "input older than l taps"
    mixer.path = "fft"
    jac_fft = torch.autograd.functional.jacobian(lambda t: mixer(t), x)
    future = torch.ones(11, 11, dtype=torch.bool).triu(1)[None, :, None, None, :, None]
    assert (jac_fft.abs() * future).max() <= 1e-12 * jac_fft.abs().max()


@pytest.mark.parametrize("path", ["direct", "fft"])
@pytest.mark.parametrize("name", NAMES)
def test_padding_invisible_beyond_max_len(name, path):
    mixer = make(name, path=path, bias=name != "extractor_me")
    n = 40
    assert_padding_invisible(mixer, torch.randn(3, n, DIM, dtype=torch.float64), lengths_mask([40, 23, 9], n),
                             atol=1e-9)


# -- incremental decoding ------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["direct", "fft"])
@pytest.mark.parametrize("name", NAMES)
def test_step_matches_parallel_float32(name, path):
    mixer = make(name, dtype=torch.float32, path=path, bias=name != "extractor_me")
    n = 2 * L + 3
    x = torch.randn(2, n, DIM)
    with torch.no_grad():
        y = mixer(x)
        state = mixer.init_state(2)
        steps = []
        for t in range(n):
            y_t, state = mixer.step(x[:, t], state)
            steps.append(y_t)
    stepped = torch.stack(steps, dim=1)
    assert stepped.dtype == torch.float32 and int(state["pos"]) == n
    assert (stepped - y).abs().max() <= 1e-5 * max(1.0, float(y.abs().max()))


def test_step_rejects_a_foreign_state():
    mixer = make("extractor_we")
    with pytest.raises(ValueError, match="extractor_we"):
        mixer.step(torch.randn(2, DIM, dtype=torch.float64), mixer.init_state(3))


# -- path selection ------------------------------------------------------------------------------------
def test_auto_path_selection():
    for kind, threshold in FFT_MIN_TAPS.items():
        assert choose_path("auto", 8, 4096, kind) == "direct"  # short input
        assert choose_path("auto", 4096, 8, kind) == "direct"  # few taps: the direct cost is O(N l d)
        assert choose_path("auto", threshold - 1, 4096, kind) == "direct"
        assert choose_path("auto", threshold, threshold, kind) == "fft"
        assert choose_path("auto", 4096, 4096, kind) == "fft"
        assert choose_path("direct", 4096, 4096, kind) == "direct"
        assert choose_path("fft", 3, 4096, kind) == "fft"


@pytest.mark.parametrize("name", NAMES)
def test_auto_forward_calls_the_selected_path(name, monkeypatch):
    mixer = make(name, dim=4, max_len=128, scale=None)
    calls = []
    for fn in ["conv_direct", "conv_fft"]:
        original = getattr(extractor, fn)
        monkeypatch.setattr(extractor, fn, lambda *a, _f=original, _n=fn: calls.append(_n) or _f(*a))
    short, long = FFT_MIN_TAPS[mixer.kind] - 1, FFT_MIN_TAPS[mixer.kind]
    for n, expected in [(short, "conv_direct"), (long, "conv_fft"), (300, "conv_fft")]:
        calls.clear()
        mixer(torch.randn(1, n, 4, dtype=torch.float64))
        assert calls == [expected] and mixer.resolved_path(n) == expected[len("conv_"):]


def test_fft_size_is_smooth_and_large_enough():
    for n in [1, 2, 7, 97, 128, 129, 1000, 8191]:
        m = fft_size(n)
        assert m >= n and m < 2 * n + 1
        for p in (2, 3, 5):
            while m % p == 0:
                m //= p
        assert m == 1


# -- dtypes and options --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", NAMES)
def test_cpu_half_precision_convolves_in_float32(name, dtype, monkeypatch):
    """CPU conv1d in bfloat16 is wrong for some shapes on AMX CPUs (PyTorch 2.13) and float16 is very slow: the
    direct path convolves in float32 there, whatever the CPU, and returns the input's dtype."""
    seen = []
    real = causal_conv.F.conv1d
    monkeypatch.setattr(causal_conv.F, "conv1d",
                        lambda x, w, *a, **k: seen.append((x.dtype, w.dtype)) or real(x, w, *a, **k))
    mixer = make(name, dtype=dtype, path="direct")
    y = mixer(torch.randn(2, 40, DIM, dtype=dtype), lengths_mask([40, 21], 40))
    assert y.dtype == dtype and seen and set(seen) == {(torch.float32, torch.float32)}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("path", ["direct", "fft"])
@pytest.mark.parametrize("name", NAMES)
def test_low_precision_tracks_float32(name, path, dtype):
    mixer = make(name, dtype=torch.float32, path=path)
    x, mask = torch.randn(2, 40, DIM), lengths_mask([40, 21], 40)
    y32 = mixer(x, mask)
    y16 = mixer.to(dtype)(x.to(dtype), mask)
    assert y16.dtype == dtype and torch.isfinite(y16).all()
    assert (y16.float() - y32).abs().max() <= 0.05 * y32.abs().max() + 0.02


@pytest.mark.parametrize("name", NAMES)
def test_options_are_validated(name):
    with pytest.raises(ValueError, match=name):
        tokenmix.create_mixer(name, 8, causal=True, max_len=8, path="bogus")
    with pytest.raises(ValueError, match=f"{name}.*max_len"):
        tokenmix.create_mixer(name, 8, causal=True)
    with pytest.raises(ValueError, match=f"{name}.*causal"):
        tokenmix.create_mixer(name, 8, causal=False, max_len=8)
    with pytest.raises(ValueError, match=name):
        tokenmix.create_mixer(name, 8, causal=True, max_len=8, num_heads=2)
    with pytest.raises(ValueError, match=f"{name}.*bias"):
        tokenmix.create_mixer(name, 8, causal=True, max_len=8, bias=1)
    if name == "extractor_me":
        with pytest.raises(ValueError, match=f"{name}.*bias"):
            tokenmix.create_mixer(name, 8, causal=True, max_len=8, bias=True)
    else:
        with pytest.raises(ValueError, match=f"{name}.*out_proj"):
            tokenmix.create_mixer(name, 8, causal=True, max_len=8, out_proj="yes")


@pytest.mark.parametrize("name", NAMES)
def test_paper_initialisation(name):
    """004 section 6: weights N(0, 0.01^2), biases zero."""
    torch.manual_seed(0)
    mixer = tokenmix.create_mixer(name, 64, causal=True, max_len=64, bias=name != "extractor_me")
    for pname, p in mixer.named_parameters():
        if pname.endswith("bias"):
            assert torch.count_nonzero(p) == 0
        else:
            assert abs(float(p.detach().std()) - 0.01) < 0.003, pname
