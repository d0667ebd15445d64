"""``tokenmix speed``: the sweep, its failure statuses, the crossover table and the outputs."""

from __future__ import annotations

import csv
import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

from tokenmix.cli import main
from tokenmix.speed import (
    CaseResult,
    CaseTimeout,
    SpeedCase,
    SpeedRecord,
    SpeedSettings,
    Status,
    classify,
    crossover_table,
    measure_case,
    run_speed,
    write_outputs,
)

REQUIRED = {"mixer", "length", "pass", "causal", "time_ms", "peak_mem_mb", "status", "value_range", "dim", "heads",
            "batch", "device", "dtype", "mem_method", "grid"}
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


def _rows(out: Path) -> list[dict[str, str]]:
    with open(out / "speed.csv", newline="") as f:
        reader = csv.DictReader(f)
        assert REQUIRED <= set(reader.fieldnames)
        return list(reader)


def _fake_runner(calls: list[SpeedCase], fail: dict[tuple[str, int], BaseException] | None = None):
    """A runner without measuring: softmax is quadratic, the others linear; ``fail`` raises at (mixer, length)."""
    def run(case: SpeedCase) -> CaseResult:
        calls.append(case)
        if (case.mixer, case.length) in (fail or {}):
            raise fail[(case.mixer, case.length)]
        scale = case.length**2 / 1e4 if case.mixer == "softmax" else case.length / 10
        return CaseResult(Status.OK, scale, scale / 2, "fake")
    return run


def test_cli_end_to_end_in_process(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    mixers = ["softmax", "linear", "extractor_me", "swin"]
    assert main(["speed", "--mixers", ",".join(mixers), "--lengths", "64,16", "--dim", "16", "--repeats", "1",
                 "--pass", "both", "--no-isolate", "--out", str(tmp_path)]) == 0
    rows = _rows(tmp_path)
    keys = [(r["mixer"], r["causal"], r["length"], r["pass"]) for r in rows]
    assert len(keys) == len(set(keys))
    for mixer in mixers:
        got = {(r["length"], r["pass"]) for r in rows if r["mixer"] == mixer}
        assert got == {(n, p) for n in ("16", "64") for p in ("fwd", "fwdbwd")}, mixer
    # the causal-only extractor runs causally, and softmax also runs causally as its reference
    assert {r["causal"] for r in rows if r["mixer"] == "extractor_me"} == {"True"}
    assert {r["causal"] for r in rows if r["mixer"] == "softmax"} == {"True", "False"}
    assert {r["grid"] for r in rows if r["mixer"] == "swin"} == {"4x4", "8x8"}
    for r in rows:
        assert r["status"] == "ok", r
        assert float(r["time_ms"]) > 0 and float(r["peak_mem_mb"]) >= 0 and r["mem_method"]
        assert float(r["time_min_ms"]) <= float(r["time_ms"]) <= float(r["time_max_ms"])
        assert (r["device"], r["dtype"], r["dim"], r["value_range"]) == ("cpu", "float32", "16", "2.0")
    report = (tmp_path / "speed.md").read_text()
    assert "crossover" in report and "| linear |" in report and "| extractor_me |" in report
    assert "time / softmax time: fwdbwd, causal" in report and "Machine" in report
    out = capsys.readouterr().out
    assert "| mixer | N=16 | N=64 | crossover |" in out and "memory method: `rss-hwm-reset (in-process)`" in out
    if HAS_MATPLOTLIB:
        assert (tmp_path / "time_vs_length.png").stat().st_size > 0
        assert (tmp_path / "memory_vs_length.png").stat().st_size > 0


def test_cli_isolated_case(tmp_path: Path) -> None:
    main(["speed", "--mixers", "linear", "--lengths", "16", "--dim", "16", "--repeats", "1", "--pass", "fwd",
          "--isolate", "--case-timeout", "60", "--out", str(tmp_path)])
    rows = _rows(tmp_path)
    assert [(r["mixer"], r["status"]) for r in rows] == [("softmax", "ok"), ("linear", "ok")]
    assert all(float(r["time_ms"]) > 0 and r["peak_mem_mb"] != "" for r in rows)
    if Path("/proc/self/clear_refs").exists():
        assert {r["mem_method"] for r in rows} == {"rss-hwm-reset"}


@pytest.mark.parametrize("error", [torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"),
                                   MemoryError(), RuntimeError("DefaultCPUAllocator: can't allocate memory")])
def test_out_of_memory_is_a_result_and_longer_lengths_are_skipped(error: BaseException) -> None:
    calls: list[SpeedCase] = []
    settings = SpeedSettings(mixers=["linear", "performer"], lengths=[16, 64, 256], passes=["fwd"])
    records = run_speed(settings, run_case=_fake_runner(calls, {("linear", 64): error}))
    status = {(r.mixer, r.length): r.result.status_text for r in records}
    assert status[("linear", 16)] == "ok"
    assert status[("linear", 64)] == "oom"
    assert status[("linear", 256)] == "skipped: oom at 64"
    assert all(status[(m, n)] == "ok" for m in ("softmax", "performer") for n in (16, 64, 256))
    assert ("linear", 256) not in {(c.mixer, c.length) for c in calls}
    oom = next(r for r in records if r.status is Status.OOM)
    assert oom.time_ms is None and oom.peak_mem_mb is None and not oom.ok


def test_isolated_timeout_is_a_result() -> None:
    settings = SpeedSettings(mixers=["softmax"], lengths=[16, 32], passes=["fwd"], dim=16, repeats=1,
                             case_timeout=0.01, isolate=True)
    records = run_speed(settings)
    assert [r.result.status_text for r in records] == ["timeout", "skipped: timeout at 16"]
    assert [(r.status, r.result.cause) for r in records] == [(Status.TIMEOUT, Status.TIMEOUT),
                                                             (Status.SKIPPED, Status.TIMEOUT)]


def test_in_process_timeout_stops_the_case() -> None:
    case = SpeedCase("linear", 16, "fwd", False, 2.0, dim=16, repeats=100, timeout=1e-9)
    with pytest.raises(CaseTimeout):
        measure_case(case)
    settings = SpeedSettings(mixers=["linear"], lengths=[16], passes=["fwd"], dim=16, repeats=1, case_timeout=1e-9,
                             isolate=False)
    assert {r.status for r in run_speed(settings)} == {Status.TIMEOUT}


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="--mem-limit-mb needs Linux /proc")
def test_mem_limit_gives_oom() -> None:
    # the 64 MB input alone is over the 8 MB the case may add
    settings = SpeedSettings(mixers=["softmax"], lengths=[4096], passes=["fwd"], batch=64, repeats=1,
                             mem_limit_mb=8, isolate=True, case_timeout=60)
    assert [r.status for r in run_speed(settings)] == [Status.OOM]


def test_unsupported_mode_is_recorded() -> None:
    calls: list[SpeedCase] = []
    records = run_speed(SpeedSettings(mixers=["swin", "linear"], lengths=[16, 64], passes=["fwd", "fwdbwd"],
                                      causal=True), run_case=_fake_runner(calls))
    swin = [r for r in records if r.mixer == "swin"]
    assert len(swin) == 4 and all(r.result.status_text == "unsupported: cannot run causally" and r.causal
                                  for r in swin)
    assert all(r.status is Status.UNSUPPORTED and r.result.detail == "cannot run causally" for r in swin)
    assert all(r.ok and r.causal for r in records if r.mixer != "swin")
    assert "swin" not in {c.mixer for c in calls}
    assert {r.mixer for r in crossover_table(records)} == {"linear"}


OOM = CaseResult(Status.OOM)


def _record(mixer: str, length: int, outcome: float | CaseResult) -> SpeedRecord:
    """``outcome``: the time (ms) of an ok case, or the result of one without a measurement."""
    result = CaseResult(Status.OK, outcome, 1.0) if isinstance(outcome, float) else outcome
    return SpeedRecord(SpeedCase(mixer, length, "fwd", False, 2.0), result)


def _crossovers(times: dict[str, list[float | CaseResult]], lengths: list[int]) -> dict[str, int | None]:
    records = [_record(m, n, t) for m, ts in times.items() for n, t in zip(lengths, ts)]
    return {row.mixer: row.crossover for row in crossover_table(records)}


def test_crossover() -> None:
    lengths = [256, 1024, 4096]
    crossovers = _crossovers({"softmax": [1.0, 10.0, 100.0],
                              "late": [5.0, 5.0, 50.0],  # faster from 1024 on
                              "dip": [0.5, 20.0, 50.0],  # faster at 256, slower at 1024: the later length counts
                              "never": [2.0, 20.0, 200.0],
                              "always": [0.1, 1.0, 10.0]}, lengths)
    assert crossovers == {"late": 1024, "dip": 4096, "never": None, "always": 256}
    # softmax out of memory at the longest length: a mixer that ran counts as faster there
    crossovers = _crossovers({"softmax": [1.0, 10.0, OOM], "quadratic": [2.0, 20.0, 400.0],
                              "slow": [2.0, 20.0, OOM]}, [256, 1024, 4096])
    assert crossovers == {"quadratic": 4096, "slow": None}
    skipped = CaseResult.skipped(Status.OOM, 1024)
    crossovers = _crossovers({"softmax": [1.0, OOM, skipped], "lin": [2.0, 20.0, 30.0],
                              "fails": [0.5, OOM, skipped]}, [256, 1024, 4096])
    assert crossovers == {"lin": 1024, "fails": 256}  # 'fails' never compared beyond 256


def test_crossover_text_and_ratio_cells() -> None:
    records = [_record("softmax", 16, 1.0), _record("softmax", 64, 4.0), _record("softmax", 256, OOM),
               _record("fast", 16, 0.5), _record("fast", 64, 1.0), _record("fast", 256, 3.0),
               _record("slow", 16, 2.0), _record("slow", 64, OOM),
               _record("slow", 256, CaseResult.skipped(Status.OOM, 64))]
    rows = {r.mixer: r for r in crossover_table(records)}
    assert rows["fast"].crossover_text == "≤ 16" and rows["fast"].cells == {16: "0.5", 64: "0.25", 256: "softmax oom"}
    assert rows["fast"].ratios[64] == pytest.approx(0.25)
    assert rows["slow"].crossover_text == "none" and rows["slow"].cells == {16: "2", 64: "oom", 256: "skipped"}


def test_classify() -> None:
    assert classify(CaseTimeout("budget")).status is Status.TIMEOUT
    assert classify(MemoryError()).status is Status.OOM
    assert classify(torch.OutOfMemoryError("CUDA out of memory")).status is Status.OOM
    assert classify(RuntimeError("[enforce fail] DefaultCPUAllocator: can't allocate memory: you tried")).status \
        is Status.OOM
    error = classify(ValueError("bad hw\nmore"))
    assert (error.status, error.detail, error.status_text) == (Status.ERROR, "ValueError: bad hw",
                                                               "error: ValueError: bad hw")
    assert len(classify(KeyError("k" * 400)).status_text) == 160


def test_status_text_and_json_round_trip() -> None:
    skipped = CaseResult.skipped(Status.OOM_KILLED, 64)
    assert (skipped.status_text, skipped.cause, skipped.ok) == ("skipped: oom at 64", Status.OOM_KILLED, False)
    assert CaseResult(Status.OOM_KILLED).status_text == "oom (killed)" and f"{Status.OOM_KILLED}" == "oom (killed)"
    measured = CaseResult.measured([3.0, 1.0, 2.0], 5.0, "rss-hwm-reset")
    assert (measured.time_ms, measured.time_min_ms, measured.time_max_ms, measured.ok) == (2.0, 1.0, 3.0, True)
    for result in (measured, skipped, CaseResult.error("ValueError: x")):
        assert CaseResult.from_json(result.to_json()) == result


BAD_SETTINGS = [({"mixers": ["nope"]}, "--mixers"), ({"lengths": [16, 0]}, "--lengths"),
                ({"passes": ["back"]}, "--pass"), ({"value_ranges": [0]}, "--value-range"),
                ({"dim": 10, "heads": 3}, "--heads"),
                ({"dtype": "int8"}, "--dtype"), ({"repeats": 0}, "--repeats"), ({"case_timeout": 0}, "--case-timeout"),
                ({"mem_limit_mb": 10, "isolate": False}, "--mem-limit-mb")]


@pytest.mark.parametrize("options, message", BAD_SETTINGS)
def test_settings_errors_name_the_option(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SpeedSettings(**options)


def test_cli_errors_name_the_option(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--lengths"):
        main(["speed", "--lengths", "16,x", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="unknown mixer"):
        main(["speed", "--mixers", "softmax,nope", "--out", str(tmp_path)])
    with pytest.raises(SystemExit):  # argparse: invalid choice
        main(["speed", "--pass", "backward", "--out", str(tmp_path)])


def test_value_range_sweep_and_plots_without_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture) -> None:
    settings = SpeedSettings(mixers=["linear"], lengths=[16, 64], passes=["fwd"], value_ranges=[1.0, 10.0])
    records = run_speed(settings, run_case=_fake_runner([]))
    assert sorted({(r.mixer, r.value_range) for r in records}) == [("linear", 1.0), ("linear", 10.0),
                                                                   ("softmax", 1.0), ("softmax", 10.0)]
    if HAS_MATPLOTLIB:
        names = {p.name for p in write_outputs(records, settings, tmp_path / "plots")}
        assert {"time_vs_value_range.png", "memory_vs_value_range.png", "time_vs_length.png"} <= names
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    written = write_outputs(records, settings, tmp_path / "plain")
    assert [p.name for p in written] == ["speed.csv", "speed.md"]
    assert "matplotlib is not installed" in capsys.readouterr().out
    assert "inputs in [-10, 10]" in (tmp_path / "plain" / "speed.md").read_text()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_in_process() -> None:
    settings = SpeedSettings(mixers=["linear"], lengths=[64, 256], passes=["fwd", "fwdbwd"], dim=16, repeats=2,
                             device="cuda")
    records = run_speed(settings)
    assert all(r.status == "ok" and r.time_ms > 0 and r.peak_mem_mb > 0 for r in records)
    assert {r.mem_method for r in records} == {"cuda-max-allocated"}



def test_window_sets_the_taps_of_sliding_window_mixers_only(monkeypatch):
    import tokenmix.speed.measure as measure

    seen = {}
    original = measure.create_mixer

    def spy(name, dim, **kwargs):
        seen[name] = kwargs["max_len"]
        return original(name, dim, **kwargs)

    monkeypatch.setattr(measure, "create_mixer", spy)
    for name in ("extractor_we", "linear"):
        measure.build_pass(SpeedCase(name, 32, "fwd", True, 2.0, dim=8, window=8), 32)
    assert seen == {"extractor_we": 8, "linear": 32}
    with pytest.raises(ValueError, match="window"):
        SpeedSettings(mixers=["linear"], lengths=[8], window=0)


def test_the_functions_mode_times_every_chunked_form_beside_the_peer(capsys: pytest.CaptureFixture) -> None:
    """``tokenmix speed --functions``: one row per chunked form (and transformers' gated delta rule where it is
    installed), each length's time against the GEMM floor, the local slope; the ratio to the peer."""
    torch_threads = torch.get_num_threads()
    main(["speed", "--functions", "--lengths", "32,64", "--dim", "8", "--heads", "2", "--repeats", "1",
          "--threads", "1"])
    torch.set_num_threads(torch_threads)
    out = capsys.readouterr().out
    assert "float32 GEMM 2048^3" in out and "2 heads x 8" in out
    for form in ("linear_attn", "based (r = 16)", "simple_gla", "retention", "gla", "delta_rule", "gated_delta_rule"):
        row = next(line for line in out.splitlines() if line.startswith(form + " "))
        assert row.count("x)") == 2 and math.isfinite(float(row.split()[-1]))  # two lengths, one slope
    if importlib.util.find_spec("transformers") is not None:
        assert "gated delta rule, transformers / tokenmix:" in out
