"""Operation counts (``tokenmix count``, issue 7): 004 Tables 3-7 reproduced, every sequence mixer's counts
cross-checked against ``torch.utils.flop_counter.FlopCounterMode``, the complexity claims, and bad arguments.

The spatial (vision) mixers are checked in tests/test_counting_vision.py.
"""

from __future__ import annotations

import csv
import functools
import operator

import pytest
import torch

import tokenmix
from conftest import modes, sequence_mixers
from tokenmix.counting import (
    CountResult,
    OpCounts,
    count_mixer,
    count_ops,
    count_step_ops,
    count_table,
    format_counts,
    write_counts_csv,
)
from tokenmix.counting.kernel import se_k_ops
from tokenmix.counting.opcounts import attention_pairs_ops, softmax_attention_ops
from tokenmix.ops.spatial import square_grid

# -- (1) 004 Table 7: d = l = 128, pure arithmetic ---------------------------------------------------------

TABLE7 = {  # (mixer, heads): (mults, adds, divs, exps, params, total)
    ("softmax", 1): (10_502_144, 10_420_096, 16_512, 8_256, 65_536, 20_947_008),
    ("softmax", 32): (10_502_144, 10_416_128, 528_384, 264_192, 65_536, 21_710_848),
    ("extractor_she", 1): (139_476_992, 139_411_456, 0, 0, 2_129_920, 278_888_448),
    ("extractor_he", 1): (7_364_608, 7_282_688, 0, 0, 65_536, 14_647_296),
    ("extractor_we", 1): (5_267_456, 5_201_920, 0, 0, 49_152, 10_469_376),
    ("extractor_me", 1): (1_056_768, 1_040_384, 0, 0, 128, 2_097_152),
}


@pytest.mark.parametrize("name,heads", list(TABLE7), ids=[f"{n}-{h}h" for n, h in TABLE7])
def test_table7_reproduced_exactly(name: str, heads: int) -> None:
    mults, adds, divs, exps, params, total = TABLE7[name, heads]
    r = count_mixer(name, dim=128, max_len=128, heads=heads, measure_flops=False)
    assert r.causal and r.length == 128
    assert (r.train.mults, r.train.adds, r.train.divs, r.train.exps) == (mults, adds, divs, exps)
    assert r.params == params
    assert r.train.total == total
    assert r.measured_flops is None and r.flop_ratio is None


def test_table3_closed_forms() -> None:
    """Table 3's simplified training formulas for attention at other sizes (n heads, causal, bias=False)."""
    for d, length, n in ((16, 24, 1), (32, 20, 4), (64, 9, 8)):
        c = count_ops(tokenmix.create_mixer("softmax", d, num_heads=n, causal=True, max_len=length), length)
        assert c == OpCounts(mults=length**2 * d + 4 * length * d**2 + length * d,
                             adds=length**2 * d + 4 * length * d**2 - 4 * length * d - length * n,
                             divs=n * length**2 + n * length, exps=(n * length**2 + n * length) // 2)


# -- (2) 004 Tables 5-6: one inference step at length t --------------------------------------------------

STEP_CASES = [(1, 16), (7, 32), (50, 64), (128, 128)]


@pytest.mark.parametrize("t,d", STEP_CASES)
def test_table5_attention_step(t: int, d: int) -> None:
    one = count_step_ops(tokenmix.create_mixer("softmax", d, num_heads=1, causal=True, max_len=128), t)
    # Table 5 as printed (its simplification holds for n = 1)
    assert one == OpCounts(mults=2 * t * d + 4 * d * d, adds=2 * t * d - t + t + 4 * d * d - 5 * d - 1,
                           divs=2 * t, exps=t)
    # n heads: Table 5's unsimplified sum (3 (d-1) d/n + t (d/n - 1) + (t-1) d/n + (t-1)) n + (d-1) d, which
    # is 2td + 4d^2 - 5d - n; the printed simplification 2td - tn + t + 4d^2 - 5d - 1 is only right for n = 1.
    for n in (2, d // 4, 32):
        if d % n:
            continue
        e = d // n
        step = count_step_ops(tokenmix.create_mixer("softmax", d, num_heads=n, causal=True, max_len=128), t)
        table5_sum = (3 * (d - 1) * e + t * (e - 1) + (t - 1) * e + (t - 1)) * n + (d - 1) * d
        assert step == OpCounts(mults=(3 * d * e + 2 * t * e) * n + d * d, adds=table5_sum, divs=2 * t * n,
                                exps=t * n)
        assert step.adds == 2 * t * d + 4 * d * d - 5 * d - n


@pytest.mark.parametrize("t,d", STEP_CASES)
def test_table5_6_extractor_steps(t: int, d: int) -> None:
    expected = {
        "extractor_she": (t * d * d + 2 * d * d + d, t * d * d + 2 * d * d - 3 * d),
        "extractor_he": (t * d + 3 * d * d + d, t * d + 3 * d * d - 4 * d),
        "extractor_we": (t * d + 2 * d * d + d, t * d + 2 * d * d - 3 * d),
        "extractor_me": (t * d, t * d - d),
    }
    for name, (mults, adds) in expected.items():
        step = count_step_ops(tokenmix.create_mixer(name, d, causal=True, max_len=128), t)
        assert step == OpCounts(mults=mults, adds=adds), name


def test_extractor_step_beyond_the_taps_uses_l_taps() -> None:
    """The sliding window: past l = max_len tokens a step sums exactly l taps."""
    me = tokenmix.create_mixer("extractor_me", 8, causal=True, max_len=16)
    assert count_step_ops(me, 100) == count_step_ops(me, 16) == OpCounts(mults=16 * 8, adds=15 * 8)


def test_opcount_helpers() -> None:
    assert softmax_attention_ops(3, 5, 4) == attention_pairs_ops(15, 3, 4)
    assert attention_pairs_ops(1, 1, 1) == OpCounts(mults=2, adds=0, divs=2, exps=1)


# -- (3) every sequence mixer: positive counts, steps, FlopCounterMode -----------------------------------

DIM, LENGTH = 32, 64


def _cases() -> list:
    return [pytest.param(n, c, id=f"{n}-{'causal' if c else 'bidir'}") for n in sequence_mixers() for c in modes(n)]


def _heads(name: str) -> int:
    return 2 if tokenmix.mixer_info(name).multihead else 1


@pytest.mark.parametrize("name,causal", _cases())
def test_counts_positive_and_steps_sum_to_training(name: str, causal: bool) -> None:
    mixer = tokenmix.create_mixer(name, 16, num_heads=_heads(name), causal=causal, max_len=24)
    c = count_ops(mixer, 24)
    for value in c.as_dict().values():
        assert isinstance(value, int) and not isinstance(value, bool) and value >= 0
    assert c.mults > 0 and c.adds > 0
    if not causal:
        with pytest.raises(ValueError, match=name):
            count_step_ops(mixer, 3)
        return
    steps = [count_step_ops(mixer, t) for t in range(1, 25)]
    for s in steps:
        assert all(isinstance(v, int) and v >= 0 for v in s.as_dict().values()) and s.mults > 0
    # Causal training is token t's incremental work summed over t (KV cache / prefix state / shift register).
    assert functools.reduce(operator.add, steps) == c


# measured / (mults + adds) at DIM = 32, LENGTH = 64 (two heads where the mixer has heads): per-mixer bounds.
# FlopCounterMode counts 2 FLOPs per multiply-add of mm/bmm/addmm/conv/sdpa and nothing element-wise, so a
# mechanism whose work is matrix products and whose implementation does what the formula counts gives ~1.
_GEMM = (0.95, 1.05)  # projections/FFN/state products dominate; the element-wise softmaxes, feature maps,
#                       means, gates and normalisations the formula adds (or the ones column of kernel
#                       attention's [V, 1], which FlopCounterMode adds) move it by a few percent.
_CHUNKED = (1.0, 2.5)  # causal kernel attention: counted in the recurrent prefix-sum form, computed in chunks
#                        of C whose C x C score blocks and C x C x D products are extra work (performer: F = 256
#                        features per head, so C = 64 = l and the whole causal l x l product is computed).
_SPARSE = (1.0, 1.6)  # the block-wise path scores whole bands/blocks, masked-out keys included.
_DIRECT_CONV = (1.0, 2.0 + 1e-9)  # extractors on path="direct": conv1d runs every tap over the zero left padding
#                                   (l K products per channel instead of sum_i min(i, K)): up to 2x on the taps.
FLOP_BOUNDS: dict[tuple[str, bool], tuple[float, float]] = {
    **{(n, False): _GEMM for n in ("average", "based", "contextualizer", "cosformer", "efficient", "kerformer",
                                   "linear", "mlp", "performer", "relation", "softmax")},
    **{(n, True): _GEMM for n in ("average", "mlp", "relation")},
    **{("baseconv", c): _GEMM for c in (False, True)},  # the projection and the depthwise filter (k = 3 taps)
    **{(n, True): _CHUNKED for n in ("based", "cosformer", "kerformer", "linear", "performer")},
    # the delta rule, counted in the recurrent form and computed in chunks (here one chunk of 64 = l): the C x C
    # products (k k^T, q k^T, the scores times the writes) and both triangular solves' right-hand sides
    **{(n, True): _CHUNKED for n in ("deltanet", "gated_deltanet")},
    # linear attention with decay and Mamba-2's SSD, counted in the recurrent form, computed in chunks (one of 64 = l;
    # GLA: chunks of 16, its per-dimension decays kept pairwise inside each)
    **{(n, True): _CHUNKED for n in ("retention", "gla", "mamba2")},
    ("softmax", True): (1.0, 2.0),  # the fused causal attention is measured as the full l x l product
    # LoLCATs' window (w = 64 = l: one block of 64 queries against 2 x 64 keys, half of them before the sequence)
    # and the linear part in chunks over keys delayed by w (all zero here): 4x the window's pairs, measured 2.8
    ("window_linear", True): (1.0, 3.0),
    **{(n, c): _SPARSE for n in ("sparse_fixed", "sparse_strided") for c in (False, True)},
    **{(n, True): _DIRECT_CONV for n in ("extractor_she", "extractor_he", "extractor_we", "extractor_me")},
}


def _exact_flops(r: CountResult, mixer: torch.nn.Module) -> int | None:
    """Where the measured FLOPs are known exactly: 2 x the multiplications of the matrix products."""
    d, length, name = r.dim, r.length, r.name
    if name == "mlp" or name == "efficient" or (name == "softmax" and not r.causal):
        return 2 * r.train.mults  # every multiplication is in a matmul
    if name == "softmax":
        return 2 * (4 * length * d * d + 2 * length * length * d)  # the full l x l causal product
    if name == "relation":
        return 2 * (r.train.mults - length * mixer.inner_dim)  # all but G * H'
    if name == "linear" and not r.causal:  # phi(K)^T [V, 1] and phi(Q) (.): the ones column is measured
        e = mixer.head_dim
        return 2 * (4 * length * d * d + r.heads * 2 * length * e * (e + 1))
    if name == "contextualizer":  # all but U x * V c and alpha * x
        return 2 * (r.train.mults - mixer.steps * (length * mixer.rank + length * d))
    if name == "baseconv":  # the projection and conv1d's k taps per channel at every position
        return 2 * length * d * (d + mixer.kernel_size)
    if name == "extractor_me":
        return 2 * length * min(length, mixer.taps) * d  # conv1d over the zero-padded input
    return None


@pytest.mark.parametrize("name,causal", _cases())
def test_flop_counter_cross_check(name: str, causal: bool) -> None:
    r = count_mixer(name, dim=DIM, max_len=LENGTH, heads=_heads(name), causal=causal)
    assert r.measured_flops is not None and r.measured_flops > 0
    assert r.flop_ratio == pytest.approx(r.measured_flops / (r.train.mults + r.train.adds))
    low, high = FLOP_BOUNDS[name, causal]
    assert low <= r.flop_ratio <= high, f"{name}: FLOPs / (mults + adds) = {r.flop_ratio:.3f} not in [{low}, {high}]"
    options = {"path": "direct"} if "path" in tokenmix.mixer_info(name).options else {}
    mixer = tokenmix.create_mixer(name, DIM, num_heads=r.heads, causal=causal, max_len=LENGTH, **options)
    exact = _exact_flops(r, mixer)
    if exact is not None:
        assert r.measured_flops == exact
    assert (r.step is not None) == causal and (r.step_t == LENGTH if causal else r.step_t is None)


def test_every_sequence_mixer_has_flop_bounds() -> None:
    assert {(n, c) for n in sequence_mixers() for c in modes(n)} <= set(FLOP_BOUNDS)


def test_options_change_counts() -> None:
    base = count_mixer("softmax", dim=16, max_len=8, measure_flops=False).train
    biased = count_mixer("softmax", dim=16, max_len=8, options={"bias": True}, measure_flops=False).train
    assert biased.adds - base.adds == 4 * 8 * 16  # one addition per output of each of the 4 projections
    few = count_mixer("performer", dim=16, max_len=8, options={"nb_features": 8}, measure_flops=False).train
    many = count_mixer("performer", dim=16, max_len=8, options={"nb_features": 64}, measure_flops=False).train
    assert many.exps == 8 * few.exps
    no_out = count_mixer("extractor_we", dim=16, max_len=8, options={"out_proj": False}, measure_flops=False)
    with_out = count_mixer("extractor_we", dim=16, max_len=8, measure_flops=False)
    assert with_out.train.mults - no_out.train.mults == 8 * 16 * 16
    se = count_mixer("kerformer", dim=16, max_len=8, causal=False, measure_flops=False).train
    no_se = count_mixer("kerformer", dim=16, max_len=8, causal=False, options={"se_k": False},
                        measure_flops=False).train
    assert se.exps - no_se.exps == 8  # the SE-K sigmoid over max_len entries


def test_se_k_is_quadratic_in_max_len() -> None:
    """SE-K's two linear layers act on the max_len positions: 2 L (L / r) multiplications (and as many
    parameters), so with max_len = N, as a model built for N has it, the count grows toward x4 per doubling."""
    for length, r in ((64, 4), (96, 3)):
        mixer = tokenmix.create_mixer("kerformer", 16, causal=False, max_len=length, se_reduction=r)
        assert se_k_ops(mixer, length).mults == 2 * length * (length // r) + length * 16
    ops = [count_ops(tokenmix.create_mixer("kerformer", 4, causal=False, max_len=n), n).total for n in (2048, 4096)]
    assert 3.7 < ops[1] / ops[0] < 4.0  # linear attention's count: x2


# -- (4) complexity claims ---------------------------------------------------------------------------------

def _growth(name: str, causal: bool, length: int, dim: int = 16, **options: object) -> float:
    """count(2 l) / count(l) at fixed d (max_len fixed above both, so SE-K/taps/strides do not move)."""
    max_len = options.pop("max_len", 4 * length)
    mixer = tokenmix.create_mixer(name, dim, causal=causal, max_len=max_len, **options)
    return count_ops(mixer, 2 * length).total / count_ops(mixer, length).total


@pytest.mark.parametrize("name,causal", _cases())
def test_complexity_in_length(name: str, causal: bool) -> None:
    if name == "softmax":  # O(l^2 d): the l^2 term dominates once l >> 4 d
        assert 3.8 < _growth(name, causal, 2048) <= 4.0
    elif name.startswith("sparse"):  # O(l sqrt(l) d) at the automatic stride round(sqrt(l)) (max_len None)
        assert 2.2 < _growth(name, causal, 1024, dim=8, max_len=None) < 2 ** 1.5 + 0.05
    elif name.startswith("extractor"):  # sliding window of l = max_len taps: O(N l d), linear in N past l
        assert 1.95 < _growth(name, causal, 2048, max_len=32) < 2.05
        if name == "extractor_she":  # within the window, 004's O(l^2 d^2)
            assert 3.5 < _growth(name, causal, 512, dim=8, max_len=1024) <= 4.0
    elif name == "window_linear":  # O(N w d + N d^2): linear once N >> w (the first w queries see fewer keys)
        assert 1.99 < _growth(name, causal, 8192) < 2.01
    elif name == "kerformer" and not causal:  # O(N d^2); SE-K is O(max_len^2 / r), fixed by max_len
        assert 1.99 < _growth(name, causal, 2048, se_k=False) < 2.01
    else:  # O(N d^2) (or O(N m d), O(K N d u)): linear in N
        assert 1.99 < _growth(name, causal, 2048) < 2.01


def test_step_cost_growth() -> None:
    """Inference: attention's step grows with t (KV cache), kernel/recurrent mixers' does not."""
    attn = tokenmix.create_mixer("softmax", 16, causal=True, max_len=4096)
    assert count_step_ops(attn, 4096).total > 10 * count_step_ops(attn, 16).total
    for name in ("linear", "performer", "cosformer", "relation", "average", "mlp"):
        m = tokenmix.create_mixer(name, 16, causal=True, max_len=4096)
        assert count_step_ops(m, 4096) == count_step_ops(m, 2), name


# -- (5) bad arguments -------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [
    {"dim": 0}, {"dim": 8.0}, {"heads": 0}, {"length": 0}, {"length": True}, {"max_len": -1},
    {"step_t": 0}, {"causal": "yes"}, {"length": 9, "max_len": 8},
])
def test_count_mixer_bad_arguments(kwargs: dict) -> None:
    args = {"dim": 8, "max_len": 8, "measure_flops": False, **kwargs}
    with pytest.raises(ValueError, match="softmax"):
        count_mixer("softmax", **args)


def test_bad_arguments_name_the_mixer() -> None:
    with pytest.raises(ValueError, match="efficient"):
        count_mixer("efficient", causal=True, measure_flops=False)
    with pytest.raises(ValueError, match="efficient"):
        count_mixer("efficient", step_t=4, measure_flops=False)
    with pytest.raises(ValueError, match="mlp"):
        count_mixer("mlp", heads=2, measure_flops=False)
    with pytest.raises(ValueError, match="no_such_mixer"):
        count_mixer("no_such_mixer")
    with pytest.raises(ValueError, match="extractor_me"):
        count_mixer("extractor_me", max_len=None, length=8, measure_flops=False)
    mixer = tokenmix.create_mixer("relation", 8, causal=True, max_len=8)
    for bad in (0, -3, 2.0, True):
        with pytest.raises(ValueError, match="relation"):
            count_ops(mixer, bad)
        with pytest.raises(ValueError, match="relation"):
            count_step_ops(mixer, bad)
    with pytest.raises(ValueError, match="relation"):
        count_ops(mixer, 9)  # beyond max_len
    with pytest.raises(ValueError, match="relation"):
        count_ops(mixer, 4, hw=(2, 2))  # hw is for spatial mixers
    sparse = tokenmix.create_mixer("sparse_strided", 8, causal=True)  # no stride, no max_len
    assert count_ops(sparse, 16).mults > 0
    with pytest.raises(ValueError, match="sparse_strided"):
        count_step_ops(sparse, 4)
    with pytest.raises(ValueError, match="count_table"):
        count_table("softmax")


# -- the table, the CSV, grids -----------------------------------------------------------------------------

def test_format_and_csv(tmp_path) -> None:
    results = count_table(["softmax", "mlp", "efficient", "extractor_me"], dim=16, max_len=16, heads=2)
    assert [r.heads for r in results] == [2, 1, 2, 1]  # heads apply to the multi-head mixers only
    assert [r.causal for r in results] == [True, True, False, True]  # causal where possible
    text = format_counts(results)
    lines = text.splitlines()
    assert "mixer" in lines[0] and "FLOPs" in lines[0] and "step mults" in lines[0]
    assert any(line.startswith("efficient") and " bidir " in line for line in lines)
    big = format_counts([count_mixer("softmax", heads=32, measure_flops=False)])
    assert "10,502,144" in big and "21,710,848" in big and "528,384" in big
    path = tmp_path / "counts.csv"
    write_counts_csv(results, path)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["mixer"] for r in rows] == ["softmax", "mlp", "efficient", "extractor_me"]
    assert int(rows[0]["mults"]) == results[0].train.mults and int(rows[0]["step_t"]) == 16
    assert rows[2]["step_mults"] == "" and float(rows[2]["flop_ratio"]) == pytest.approx(results[2].flop_ratio)


def test_square_grid() -> None:
    assert square_grid(64) == (8, 8)
    assert square_grid(128) == (8, 16)
    assert square_grid(7) == (1, 7)
    assert square_grid(12) == (3, 4)
    assert [square_grid(n) for n in (16, 64, 12, 13, 1024)] == [(4, 4), (8, 8), (3, 4), (1, 13), (32, 32)]


def test_counting_leaves_the_global_rng_alone() -> None:
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    count_mixer("performer", dim=8, max_len=8)
    assert torch.equal(torch.rand(3), expected)


# A mechanism counted by a registered parent's function would be counted as that parent: only GSA is, by design.
COUNTED_AS_PARENT = {  # name: why its parent's count is its own
    "twins_gsa": "PVT's spatial-reduction attention (Chu et al. 2021 §3.2: GSA is SRA over the windows' summaries)",
}


def test_no_mechanism_is_counted_as_another_registered_one() -> None:
    from tokenmix.counting.registry import _GRID, _STEP, _TRAINING
    from tokenmix.registry import _REGISTRY

    registered = {cls for _, cls in _REGISTRY.values()}
    for name, (info, cls) in _REGISTRY.items():
        for table in (_TRAINING, _GRID) + ((_STEP,) if info.recurrent else ()):
            owner = next((c for c in cls.__mro__ if c in table), None)
            if owner is None or owner is cls or name in COUNTED_AS_PARENT:
                continue
            assert owner not in registered, f"{name} is counted by {owner.__name__}'s function"


def test_count_takes_inline_options_and_says_when_an_fft_goes_unmeasured(capsys):
    from tokenmix.cli import main

    main(["count", "--mixers", "baseconv,baseconv:kernel_size=none", "--dim", "16", "--max-len", "64"])
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("baseconv")}
    short, long = rows["baseconv"], rows["baseconv:kernel_size=none"]
    # the long filter: 64 taps a channel where the short one has 3 (parameters d^2 + d + d k + d)
    assert short[4] == f"{16 * 16 + 16 + 16 * 3 + 16:,}" and long[4] == f"{16 * 16 + 16 + 16 * 64 + 16:,}"
    assert "baseconv:kernel_size=none (causal): a long filter is computed by FFT" in out
    with pytest.raises(SystemExit, match="kernel_size=None .* causal only"):
        main(["count", "--mixers", "baseconv:kernel_size=none", "--mode", "bidir", "--max-len", "64"])


@pytest.mark.parametrize("name", ["deltanet", "gated_deltanet", "mamba2"])
def test_the_short_convolution_is_counted_and_measured_alike(name) -> None:
    """``conv_size=k`` adds per token and channel a dot product over k taps (and Mamba-2's bias and SiLU). conv1d
    runs every tap at every position, 2 k FLOPs a channel, as counted, and at the k - 1 positions of the state's
    zeros before the sequence as well (the outputs it discards there)."""
    length, taps = 16, 4
    bare = count_mixer(name, dim=DIM, max_len=length, heads=2)
    conv = count_mixer(name, dim=DIM, max_len=length, heads=2, options={"conv_size": taps})
    mixer = tokenmix.create_mixer(name, DIM, num_heads=2, causal=True, max_len=length, conv_size=taps)
    channels = mixer.short_conv.conv.in_channels
    silu = name == "mamba2"  # the delta rule's SiLU on q, k, v is there with or without the filter
    assert conv.train.mults - bare.train.mults == length * channels * taps
    assert conv.train.adds - bare.train.adds == length * channels * (taps - 1 + silu + silu)  # Mamba-2: + bias
    assert conv.train.exps - bare.train.exps == conv.train.divs - bare.train.divs == length * channels * silu
    assert conv.measured_flops - bare.measured_flops == 2 * (length + taps - 1) * channels * taps
    assert conv.step.mults - bare.step.mults == channels * taps
