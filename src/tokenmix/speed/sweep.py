"""The sweep of a ``tokenmix speed`` run: which mixers run in which mode, every case of each in turn through
one runner (a subprocess per case, or this process), and the skipping of a mixer's longer lengths once it ran
out of memory or time."""

from __future__ import annotations

import gc
from typing import Callable

import torch

from ..ops.spatial import square_grid
from ..registry import mixer_info
from .measure import classify, run_in_process, run_isolated
from .record import CaseResult, SpeedRecord, Status
from .report import mem_method_lines
from .settings import REFERENCE, SpeedCase, SpeedSettings, settings_line

__all__ = ["RunCase", "mode_for", "plan", "run_speed"]

RunCase = Callable[[SpeedCase], CaseResult]


def mode_for(name: str, causal: bool) -> tuple[bool, str | None]:
    """The mode ``name`` runs in for a sweep with ``causal``, and why it cannot (None when it can)."""
    info = mixer_info(name)
    if causal:
        return True, None if info.causal else "cannot run causally"
    return (False, None) if info.bidirectional else (True, None)  # causal-only mixers run causally


def plan(settings: SpeedSettings) -> list[tuple[str, bool, str | None]]:
    """(mixer, causal, unsupported reason) in sweep order: the softmax reference first, in the sweep's mode and
    in every other mode a mixer runs in, then the other mixers."""
    others = [(name, *mode_for(name, settings.causal)) for name in dict.fromkeys(settings.mixers)
              if name != REFERENCE]
    reference_modes = sorted({settings.causal} | {causal for _, causal, reason in others if reason is None})
    return [(REFERENCE, causal, None) for causal in reference_modes] + others


def run_speed(settings: SpeedSettings, *, run_case: RunCase | None = None) -> list[SpeedRecord]:
    """Measure every case of ``settings`` (see :mod:`tokenmix.speed`), printing one line per case as it
    finishes; ``run_case`` replaces the runner (default: :func:`run_isolated` or :func:`run_in_process`)."""
    settings.validate()
    runner = run_case or (run_isolated if settings.isolated else run_in_process)
    lengths = sorted(set(settings.lengths))
    threads_before = torch.get_num_threads()
    torch.set_num_threads(settings.num_threads)
    print(f"tokenmix speed: {settings_line(settings)}", flush=True)
    if settings.device == "cuda" and not settings.isolated:
        _cuda_warmup(settings.device)
    records: list[SpeedRecord] = []
    try:
        for value_range in settings.value_ranges:
            for name, causal, reason in plan(settings):
                records += _sweep_mixer(settings, runner, name, causal, reason, value_range, lengths)
    finally:
        torch.set_num_threads(threads_before)
    for line in mem_method_lines(records):
        print(f"memory method: {line.removeprefix('- ')}", flush=True)
    return records


def _sweep_mixer(settings: SpeedSettings, runner: RunCase, name: str, causal: bool, reason: str | None,
                 value_range: float, lengths: list[int]) -> list[SpeedRecord]:
    """One mixer in one mode at one value range: every length x pass, longer lengths skipped after a pass
    ran out of memory or time."""
    spatial = mixer_info(name).spatial
    stopped: dict[str, tuple[Status, int]] = {}  # pass -> the status and length after which it is skipped
    records = []
    for length in lengths:
        for pass_name in settings.passes:
            case = settings.case(name, length, pass_name, causal, value_range)
            if reason is not None:
                result = CaseResult(Status.UNSUPPORTED, detail=reason)
            elif pass_name in stopped:
                result = CaseResult.skipped(*stopped[pass_name])
            else:
                result = _attempt(runner, case)
                if result.status.out_of_budget:
                    stopped[pass_name] = (result.status, length)
            record = SpeedRecord(case, result, "x".join(map(str, square_grid(length))) if spatial else "")
            print(_progress(record), flush=True)
            records.append(record)
    return records


def _attempt(runner: RunCase, case: SpeedCase) -> CaseResult:
    try:
        return runner(case)
    except Exception as exc:  # out of memory, time or luck: a result
        result = classify(exc)
    _free_memory(case.device)  # after the except block, so the traceback's tensors are gone
    return result


def _free_memory(device: str) -> None:
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def _cuda_warmup(device: str) -> None:
    """Create the CUDA context and cuBLAS workspace, so the first case's memory does not include them."""
    a = torch.randn(64, 64, device=device, requires_grad=True)
    (a @ a).sum().backward()
    torch.cuda.synchronize(device)


def _progress(record: SpeedRecord) -> str:
    time_ms = "" if record.time_ms is None else f"{record.time_ms:10.3f} ms"
    mem = "" if record.peak_mem_mb is None else f"{record.peak_mem_mb:9.1f} MB"
    return (f"{record.mixer:<15} {'causal' if record.causal else 'bidir':<6} N={record.length:<8} "
            f"{record.pass_name:<6} r={record.value_range:<5g} {record.result.status_text:<12} {time_ms:>13} "
            f"{mem:>12}")
