"""Measuring one :class:`SpeedCase`: the pass it times, its time and peak memory, and where it runs (this
process, or a fresh ``python -m tokenmix.speed --case <json>`` subprocess whose entry point is here).

On the CPU the peak memory is read from the resident set size, which the C allocator blurs: glibc keeps
freed blocks, so the helpers below hand them back and make large blocks follow the live allocations while the
memory pass runs.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import torch

from ..ops.spatial import square_grid
from ..procmem import PeakRSS, proc_status_kb, synchronize
from ..registry import create_mixer, mixer_info
from ..timing import Deadline, DeadlinePassed, measure
from .record import CaseResult, Status
from .settings import DTYPES, SpeedCase

__all__ = ["CaseTimeout", "classify", "build_pass", "measure_case", "run_in_process", "run_isolated",
           "child_main", "cpu_peak_mb", "cuda_peak_mb", "MEM_METHODS", "IN_PROCESS"]

RESULT_TAG = "TOKENMIX_SPEED_RESULT "
IN_PROCESS = " (in-process)"  # appended to a CPU memory method measured without isolation
MEM_METHODS = {
    "cuda-max-allocated": "torch.cuda.max_memory_allocated over the pass (peak stats reset before it) minus "
                          "torch.cuda.memory_allocated before it; the caching allocator's reserve is not counted",
    "rss-hwm-reset": "peak resident set size VmHWM of the case's own subprocess over the pass (reset through "
                     "/proc/self/clear_refs just before it) minus VmRSS at that moment, after the mixer and input "
                     "were built",
    "rss-hwm": "VmHWM after the pass minus VmHWM before it (the peak could not be reset: an earlier, higher peak "
               "hides part of the pass)",
    "ru_maxrss": "getrusage ru_maxrss after the pass minus before it (no /proc: an earlier, higher peak hides part "
                 "of the pass)",
}
Pass = Callable[[], None]


CaseTimeout = DeadlinePassed  # a case ran past its time budget (its Deadline)


def classify(exc: BaseException) -> CaseResult:
    """The result of a case that raised ``exc``: timeout, oom, or an error with its type and first line."""
    if isinstance(exc, CaseTimeout):
        return CaseResult(Status.TIMEOUT)
    oom_types = tuple(t for t in (getattr(torch, "OutOfMemoryError", None),
                                  getattr(torch.cuda, "OutOfMemoryError", None)) if t is not None)
    if isinstance(exc, (MemoryError, *oom_types)):
        return CaseResult(Status.OOM)
    message = str(exc).strip()
    if isinstance(exc, RuntimeError) and re.search(r"out of memory|can't allocate memory", message, re.IGNORECASE):
        return CaseResult(Status.OOM)
    first_line = message.splitlines()[0] if message else ""
    return CaseResult.error(f"{type(exc).__name__}: {first_line}")


# -- the pass -----------------------------------------------------------------------------------------------

def _forward_pass(call: Callable[[], torch.Tensor]) -> Pass:
    """Pass ``fwd``: inference, without autograd."""
    def forward() -> None:
        with torch.no_grad():
            call()
    return forward


def _forward_backward_pass(call: Callable[[], torch.Tensor], mixer: torch.nn.Module, x: torch.Tensor) -> Pass:
    """Pass ``fwdbwd``: the forward pass and the backward of ``y.sum()`` into the input and the parameters
    (their gradients reset before each pass)."""
    x.requires_grad_(True)

    def forward_backward() -> None:
        x.grad = None
        mixer.zero_grad(set_to_none=True)
        call().sum().backward()
    return forward_backward


def build_pass(case: SpeedCase, length: int) -> Pass:
    """The seeded mixer and input of ``case`` at ``length``, as a function running one pass."""
    device, dtype = torch.device(case.device), DTYPES[case.dtype]
    info = mixer_info(case.mixer)
    torch.manual_seed(case.seed)
    max_len = case.window if case.window is not None and info.sliding_window else length
    mixer = create_mixer(case.mixer, case.dim, num_heads=info.heads(case.heads) or 1, causal=case.causal,
                         max_len=max_len).to(device=device, dtype=dtype)
    generator = torch.Generator(device=device).manual_seed(case.seed)
    x = torch.rand(case.batch, length, case.dim, generator=generator, device=device, dtype=dtype)
    x = x.mul_(2).sub_(1).mul_(case.value_range)
    hw = square_grid(length) if info.spatial else None
    call = (lambda: mixer(x, hw=hw)) if hw is not None else (lambda: mixer(x))
    return _forward_pass(call) if case.pass_name == "fwd" else _forward_backward_pass(call, mixer, x)


# -- time and memory ----------------------------------------------------------------------------------------

def _glibc(function: str) -> Callable[..., int] | None:
    """A glibc allocator function (``malloc_trim``, ``mallopt``), or None where the C library is not glibc."""
    try:
        import ctypes

        return getattr(ctypes.CDLL("libc.so.6"), function)
    except (OSError, AttributeError):
        return None


def _release_free_memory() -> None:
    """Collect garbage and hand the C allocator's free memory back to the system (glibc malloc_trim)."""
    gc.collect()
    trim = _glibc("malloc_trim")
    if trim is not None:
        trim(0)


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc mallopt parameters


def _mallopt(param: int, value: int) -> None:
    mallopt = _glibc("mallopt")
    if mallopt is not None:  # not glibc: nothing to tune
        mallopt(param, value)


def _exact_rss_allocation(exact: bool) -> None:
    """glibc raises its mmap threshold as large blocks are freed, after which freed blocks stay in the heap
    and the peak RSS of a pass depends on what ran before it. For the memory pass every block of 128 KiB or
    more is mmapped (RSS follows the live allocations); for the timed passes, large thresholds keep freed
    blocks for reuse, as glibc's own adaptation would after a warm-up (so page faults do not inflate the
    times of mechanisms with many temporaries)."""
    if exact:
        _mallopt(_M_MMAP_THRESHOLD, 128 * 1024)
        _mallopt(_M_TRIM_THRESHOLD, 256 * 1024)
    else:
        _mallopt(_M_MMAP_THRESHOLD, 32 * 2**20)
        _mallopt(_M_TRIM_THRESHOLD, 64 * 2**20)


def cpu_peak_mb(run: Pass, isolated: bool) -> tuple[float, str]:
    """Run the pass once; its peak resident memory over the resident memory before it (MB), and the method.
    In an isolated process the allocator is set to follow live allocations for this pass only."""
    if isolated:
        _exact_rss_allocation(True)
    try:
        _release_free_memory()
        peak = PeakRSS()
        peak.start()
        run()
        peak_mb = peak.peak_mb()
    finally:
        if isolated:
            _exact_rss_allocation(False)
    if peak.exact:
        method = "rss-hwm-reset"
    else:
        method = "rss-hwm" if proc_status_kb("VmHWM") is not None else "ru_maxrss"
    return peak_mb, method + ("" if isolated else IN_PROCESS)


def cuda_peak_mb(run: Pass, device: torch.device) -> tuple[float, str]:
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    run()
    torch.cuda.synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - before) / 2**20, "cuda-max-allocated"


# -- one case -----------------------------------------------------------------------------------------------

def measure_case(case: SpeedCase) -> CaseResult:
    """Build the mixer and the input, then the cold (memory) pass, the warm-up and the timed repeats, in this
    process; the warm-up and timed passes are :func:`tokenmix.timing.measure`'s (by count, ``case.threads``).
    Raises :class:`CaseTimeout` when the case runs past ``case.timeout`` seconds (checked after each pass), and
    whatever the mixer raises (e.g. ``torch.OutOfMemoryError``)."""
    deadline = Deadline(case.timeout)
    device = torch.device(case.device)
    run = build_pass(case, case.length)
    if device.type == "cuda":
        peak_mb, method = cuda_peak_mb(run, device)
    else:
        peak_mb, method = cpu_peak_mb(run, case.isolated)
    deadline.check("the cold pass")
    timing = measure(run, repeats=case.repeats, warmup=case.warmup, threads=case.threads, deadline=deadline)
    return CaseResult.measured([1000 * t for t in timing.times], peak_mb, method)


def run_in_process(case: SpeedCase) -> CaseResult:
    """:func:`measure_case` in this process (exceptions propagate; :func:`run_speed` classifies them)."""
    return measure_case(case)


# -- one case in its own process ----------------------------------------------------------------------------

def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    src_root = str(Path(__file__).resolve().parents[2])  # tokenmix importable without an install
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src_root, env.get("PYTHONPATH", "")) if p)
    return env


def run_isolated(case: SpeedCase) -> CaseResult:
    """The case in a fresh ``python -m tokenmix.speed --case <json>`` subprocess, killed after ``case.timeout``
    seconds (its start-up, about as long as importing torch, included)."""
    command = [sys.executable, "-m", "tokenmix.speed", "--case", json.dumps(asdict(case))]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=case.timeout, env=_child_env())
    except subprocess.TimeoutExpired:
        return CaseResult(Status.TIMEOUT)
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            return CaseResult.from_json(line[len(RESULT_TAG):])
    if done.returncode == -signal.SIGKILL:
        return CaseResult(Status.OOM_KILLED)
    if done.returncode < 0:
        return CaseResult.error(f"killed by {signal.Signals(-done.returncode).name}")
    return CaseResult.error((done.stderr.strip().splitlines() or [f"exit status {done.returncode}, no result"])[-1])


def _process_warmup(case: SpeedCase) -> None:
    """One pass of the case's mixer at a short length, so that a fresh process's one-time costs (thread pool,
    kernel selection, lazy library loading, the CUDA context) stay out of the case's cold pass."""
    try:
        build_pass(case, min(case.length, 16))()
        synchronize(torch.device(case.device))
    except Exception:  # the case itself meets (and reports) the same problem
        pass


def _limit_address_space(extra_mb: float) -> None:
    """Let this process map at most ``extra_mb`` more address space (RLIMIT_AS over the current VmSize)."""
    import resource

    size_kb = proc_status_kb("VmSize")
    if size_kb is None:
        raise RuntimeError("--mem-limit-mb needs /proc/self/status (Linux)")
    limit = size_kb * 1024 + int(extra_mb * 2**20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))


def _run_child_case(case_json: str) -> None:
    """The isolated subprocess's work: one case, its result printed as one tagged JSON line."""
    case = SpeedCase(**json.loads(case_json))
    torch.set_num_threads(case.threads)
    try:
        _process_warmup(case)
        if case.mem_limit_mb is not None:
            _limit_address_space(case.mem_limit_mb)
        result = measure_case(case)
    except Exception as exc:  # every failure is a result
        result = classify(exc)
    print(RESULT_TAG + result.to_json(), flush=True)


def child_main(argv: list[str] | None = None) -> int:
    """``python -m tokenmix.speed --case <json>``: the entry point of :func:`run_isolated`'s subprocess."""
    parser = argparse.ArgumentParser(prog="python -m tokenmix.speed",
                                     description="one isolated case of `tokenmix speed` (use `tokenmix speed`)")
    parser.add_argument("--case", required=True, help="the SpeedCase as JSON")
    _run_child_case(parser.parse_args(argv).case)
    return 0
