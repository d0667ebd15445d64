"""tokenmix.study.growth: local log-log slopes, the weighted quadratic fit and the per-round growth summary."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tokenmix.study.growth import GrowthSummary, QuadraticFit, growth_summary, local_slopes, quadratic_fit

LENGTHS = [256 * 2 ** i for i in range(9)]  # 256 .. 65,536


def noisy(cost, lengths: list[int], rounds: int = 10, noise: float = 0.02, seed: int = 0) -> dict[int, list[float]]:
    """Per-round times ``cost(N)`` with independent multiplicative noise of relative sd ``noise``."""
    rng = np.random.default_rng(seed)
    return {n: [cost(n) * float(1 + noise * rng.standard_normal()) for _ in range(rounds)] for n in lengths}


def test_local_slopes_of_exact_powers():
    assert local_slopes([4, 1, 2], [16.0, 1.0, 4.0]) == [(1, 2, 2.0), (2, 4, 2.0)]  # any order, N^2: slope 2
    (n1, n2, slope), = local_slopes([100, 300], [5.0, 15.0])  # not a doubling: the log-log slope
    assert (n1, n2) == (100, 300) and slope == pytest.approx(1.0)


def test_pure_quadratic():
    summary = growth_summary(noisy(lambda n: 3e-9 * n * n, LENGTHS))
    assert isinstance(summary, GrowthSummary) and summary.last_pair == (32768, 65536)
    assert summary.last_slope == pytest.approx(2.0, abs=0.05)
    assert summary.last_low <= summary.last_slope <= summary.last_high
    assert summary.last_coverage == pytest.approx(1 - 2 ** -9)
    assert all(slope == pytest.approx(2.0, abs=0.05) for _, _, slope in summary.slopes)
    fit = summary.fit
    assert isinstance(fit, QuadraticFit) and fit.dof == len(LENGTHS) - 3
    assert 0 < fit.b_low < fit.b < fit.b_high and fit.b == pytest.approx(3e-9, rel=0.05)


def test_linear_plus_small_quadratic_rises_toward_two_and_crosses_at_a_over_b():
    a, b = 1e-6, 1e-6 / 4096  # the quadratic term overtakes the linear one at N = 4,096
    summary = growth_summary(noisy(lambda n: a * n + b * n * n, LENGTHS, noise=0.005))
    slopes = [slope for _, _, slope in summary.slopes]
    assert slopes == sorted(slopes) and slopes[0] < 1.15 and 1.85 < slopes[-1] < 2.0
    assert summary.last_slope == pytest.approx(slopes[-1], abs=0.05)
    fit = summary.fit
    assert fit is not None and fit.b_low > 0
    assert fit.a == pytest.approx(a, rel=0.1) and fit.b == pytest.approx(b, rel=0.1)
    assert fit.crossover == pytest.approx(4096, rel=0.15)


def test_pure_linear_has_no_quadratic_term():
    summary = growth_summary(noisy(lambda n: 2e-4 + 1e-7 * n, LENGTHS))
    fit = summary.fit
    assert fit is not None and fit.b_low < 0 < fit.b_high and fit.crossover is None
    assert fit.a == pytest.approx(1e-7, rel=0.1)
    assert summary.last_slope == pytest.approx(1.0, abs=0.1)  # the constant still shows a little at 65,536


def test_a_wider_level_gives_a_wider_interval_and_three_lengths_none():
    lengths, times = LENGTHS[:5], [1e-6 * n + 1e-10 * n * n for n in LENGTHS[:5]]
    times = [t * (1 + 0.01 * (-1) ** i) for i, t in enumerate(times)]
    narrow, wide = quadratic_fit(lengths, times, 0.8), quadratic_fit(lengths, times, 0.99)
    assert wide.b_low < narrow.b_low < narrow.b < narrow.b_high < wide.b_high
    exact = quadratic_fit([1, 2, 3], [1.0, 4.0, 9.0])  # three points: an exact fit, no error to size
    assert exact.b == pytest.approx(1.0) and exact.dof == 0
    assert (exact.b_low, exact.b_high, exact.crossover) == (-math.inf, math.inf, None)
    two = growth_summary({1: [1.0, 1.1], 2: [2.0, 2.1]})
    assert two.fit is None and two.last_slope == pytest.approx(1.0, abs=0.05) and two.last_coverage == 0.5


@pytest.mark.parametrize("call,match", [
    (lambda: local_slopes([1], [1.0]), "two distinct lengths"),
    (lambda: local_slopes([1, 1], [1.0, 2.0]), "two distinct lengths"),
    (lambda: local_slopes([1, 2], [1.0]), "2 lengths but 1 times"),
    (lambda: local_slopes([1, 2], [1.0, 0.0]), "finite numbers > 0"),
    (lambda: local_slopes([0, 2], [1.0, 2.0]), "ints > 0"),
    (lambda: quadratic_fit([1, 2, 2, 1], [1.0, 2.0, 2.0, 1.0]), "three distinct lengths"),
    (lambda: quadratic_fit([1, 2, 3, 4], [1.0, 2.0, 3.0, 4.0], level=1.0), "level"),
    (lambda: quadratic_fit([1, 2, 3], [1.0, float("nan"), 3.0]), "finite numbers > 0"),
    (lambda: growth_summary({1: [1.0]}), "two lengths"),
    (lambda: growth_summary({1: [1.0], 2: []}), "length 2"),
])
def test_bad_input_is_a_clear_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_the_reports_growth_table(tmp_path):
    """The report's table under an experiment: per label the local slopes, the last doubling's range, the
    crossover where b·N² overtakes a·N, and peak memory at the largest N with its last slope; the note that
    asks for longer lengths goes once the harness reaches 16,384 tokens."""
    pytest.importorskip("scipy")
    from tokenmix.report.measures import load_data
    from tokenmix.report.notes import growth_table

    def write(lengths: list[int]) -> list[str]:
        rows = ["experiment,label,kind,length,batch,round,step_s,threads,peak_mb"]
        for r in (1, 2, 3):
            wobble = 1 + 0.01 * r
            rows += [f"x,quad,scaling,{n},1,{r},{(1e-4 * n + 1e-7 * n * n) * wobble:.9g},1,{n / 64:g}" for n in lengths]
            rows += [f"x,lin,scaling,{n},1,{r},{1e-4 * n * wobble:.9g},1,{10 + n / 1024:g}" for n in lengths]
        (tmp_path / "x-scaling.csv").write_text("\n".join(rows) + "\n")
        return growth_table(load_data(tmp_path, "x"))

    short = write([256, 512, 1024, 2048, 4096])
    assert "lengths up to 16,384 tokens need" in short[0]
    quad = next(line for line in short if line.startswith("| quad |"))
    assert "| 256-4,096 |" in quad and "| 1,000 |" in quad  # a / b = 1e-4 / 1e-7
    assert "| 64 (1.00) |" in quad  # 4,096 / 64 MB, doubling with N
    lin = next(line for line in short if line.startswith("| lin |"))
    assert "| 1.00 [1.00, 1.00] |" in lin and "| — |" in lin  # no quadratic term, no crossover
    longer = write([4096, 8192, 16384])
    assert "lengths up to 16,384 tokens need" not in longer[0]
    assert "| 4,096-16,384 |" in next(line for line in longer if line.startswith("| quad |"))
