"""``tokenmix speed``: running time and peak memory of token mixers against sequence length and input range.

The simulation experiments of seed 001 (§4: one input of head dimension 64, time and memory against the
sequence length N, and against the value range [-r, r] of the input) for every registered mixer. Each case
is one mixer, length, pass and value range:

* the mixer is built with ``max_len=length`` (sliding-window mixers, i.e. the Extractors, with
  ``max_len=window`` when ``--window`` is given) and ``num_heads=heads`` (1 for mixers without heads), seeded,
  in training mode (no mixer has dropout by default); the input, uniform in [-r, r], has shape
  (batch, length, dim); spatial mixers see it as the most square grid H x W = length (H <= W);
* pass ``fwd`` is a forward pass under ``torch.no_grad()`` (inference), ``fwdbwd`` a forward pass and the
  backward pass of ``y.sum()`` into the input and the parameters (gradients are reset between passes);
* the first (cold) pass measures the peak memory, then ``warmup`` passes, then ``repeats`` timed passes;
  the time is their median (CUDA is synchronised around each pass);
* memory on CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` minus the memory
  allocated before the pass; on the CPU: the peak resident set size (``VmHWM``, reset through
  ``/proc/self/clear_refs`` just before the pass) over the resident size taken after the mixer and the input
  were built. On the CPU every case runs in a fresh subprocess by default (``isolate``), so that one case's
  allocations and the allocator's cache cannot hide another's; in-process CPU numbers are approximate.

Without ``causal`` the mixers run bidirectionally, except the causal-only ones, which run causally (the
``causal`` column says so); with ``causal`` every mixer runs causally and those that cannot get
"unsupported" rows. "softmax" (quadratic attention) is always measured too, in every mode another mixer
runs in, as the reference of the relative table. An out-of-memory case or one over its time budget is a
result, and the longer lengths of that mixer (same pass, mode and range) are skipped.

Outputs in ``out_dir``: ``speed.csv`` (one row per case), ``speed.md`` (settings, machine, time and memory
tables, time relative to softmax with the crossover length), ``time_vs_length.png`` and
``memory_vs_length.png`` (log-log; with several value ranges also ``*_vs_value_range.png``).
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import math
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable

import torch

from .ops.spatial import square_grid
from .procmem import proc_status_kb, reset_peak_rss
from .registry import create_mixer, list_mixers, mixer_info
from .validate import is_positive_int as _positive_int

__all__ = ["SpeedSettings", "SpeedCase", "CaseResult", "SpeedRecord", "CrossoverRow", "CaseTimeout", "run_speed",
           "measure_case", "run_in_process", "run_isolated", "classify", "crossover_table", "write_outputs",
           "REFERENCE", "COLUMNS"]

REFERENCE = "softmax"
PASSES = ("fwd", "fwdbwd")
DEVICES = ("cpu", "cuda")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DEFAULT_LENGTHS = (256, 1024, 4096, 16384)
COLUMNS = ["mixer", "length", "pass", "causal", "value_range", "time_ms", "peak_mem_mb", "status", "time_min_ms",
           "time_max_ms", "dim", "heads", "batch", "device", "dtype", "threads", "repeats", "warmup", "mem_method",
           "grid"]
RESULT_TAG = "TOKENMIX_SPEED_RESULT "
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
IN_PROCESS = " (in-process)"
IN_PROCESS_NOTE = ("in-process CPU numbers are approximate: memory freed by earlier cases and kept by the allocator "
                   "is reused without raising the resident size")


# -- settings ---------------------------------------------------------------------------------------------

def public_mixers() -> list[str]:
    """Every registered mixer whose name does not start with "_" (what ``--mixers all`` means)."""
    return list_mixers()


@dataclass
class SpeedSettings:
    """What one ``tokenmix speed`` run measures (field comments name the CLI options)."""

    mixers: list[str] = field(default_factory=public_mixers)  # --mixers (softmax is added as the reference)
    lengths: list[int] = field(default_factory=lambda: list(DEFAULT_LENGTHS))  # --lengths
    dim: int = 64  # --dim
    heads: int = 1  # --heads (mixers without heads use 1)
    batch: int = 1  # --batch
    causal: bool = False  # --causal
    passes: list[str] = field(default_factory=lambda: list(PASSES))  # --pass fwd|fwdbwd|both
    value_ranges: list[float] = field(default_factory=lambda: [2.0])  # --value-range, inputs uniform in [-r, r]
    device: str = "cpu"  # --device
    dtype: str = "float32"  # --dtype
    repeats: int = 5  # --repeats: timed passes (median)
    warmup: int = 1  # --warmup: untimed passes after the cold (memory) pass
    case_timeout: float = 120.0  # --case-timeout: seconds per case, isolated start-up included
    isolate: bool | None = None  # --isolate/--no-isolate; None: isolated on the CPU, in-process on CUDA
    mem_limit_mb: float | None = None  # --mem-limit-mb: address space an isolated CPU case may add
    threads: int | None = None  # --threads: torch intra-op threads (None: torch's current setting)
    seed: int = 0  # --seed
    window: int | None = None  # --window: max_len of sliding-window mixers (the Extractors' taps); None: N

    def __post_init__(self) -> None:
        self.validate()

    @property
    def isolated(self) -> bool:
        return self.device == "cpu" if self.isolate is None else self.isolate

    @property
    def num_threads(self) -> int:
        return self.threads or torch.get_num_threads()

    def validate(self) -> None:
        """``ValueError`` naming the option for anything the run could not honour."""
        self._validate_lists()
        self._validate_sizes()
        if self.device not in DEVICES:
            raise ValueError(f"device (--device): unknown device {self.device!r}; choose one of {', '.join(DEVICES)}")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device (--device): cuda requested but CUDA is not available here")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype (--dtype): unknown dtype {self.dtype!r}; choose one of {', '.join(DTYPES)}")
        if not (isinstance(self.case_timeout, (int, float)) and self.case_timeout > 0):
            raise ValueError(f"case_timeout (--case-timeout) must be > 0 seconds, got {self.case_timeout!r}")
        if self.mem_limit_mb is not None:
            if not self.mem_limit_mb > 0:
                raise ValueError(f"mem_limit_mb (--mem-limit-mb) must be > 0, got {self.mem_limit_mb!r}")
            if self.device != "cpu" or not self.isolated:
                raise ValueError("mem_limit_mb (--mem-limit-mb) applies only to isolated CPU cases (--isolate)")

    def _validate_lists(self) -> None:
        if not self.mixers:
            raise ValueError("mixers (--mixers): no mixer given")
        unknown = [m for m in self.mixers if m not in list_mixers(include_hidden=True)]
        if unknown:
            raise ValueError(f"mixers (--mixers): unknown mixer(s) {unknown}; available: {', '.join(public_mixers())}")
        if not self.lengths or not all(_positive_int(n) for n in self.lengths):
            raise ValueError(f"lengths (--lengths) must be positive ints, got {self.lengths!r}")
        if not self.passes or any(p not in PASSES for p in self.passes):
            raise ValueError(f"passes (--pass): unknown pass in {self.passes!r}; choose from fwd, fwdbwd, both")
        if not self.value_ranges or not all(isinstance(r, (int, float)) and math.isfinite(r) and r > 0
                                            for r in self.value_ranges):
            raise ValueError(f"value_ranges (--value-range) must be finite numbers > 0, got {self.value_ranges!r}")

    def _validate_sizes(self) -> None:
        if self.window is not None and not _positive_int(self.window):
            raise ValueError(f"window (--window) must be a positive int, got {self.window!r}")
        for name, value, least in (("dim", self.dim, 1), ("heads", self.heads, 1), ("batch", self.batch, 1),
                                   ("repeats", self.repeats, 1), ("warmup", self.warmup, 0)):
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= least):
                raise ValueError(f"{name} (--{name}) must be an int >= {least}, got {value!r}")
        if self.dim % self.heads:
            raise ValueError(f"heads (--heads): dim={self.dim} is not divisible by heads={self.heads}")
        if self.threads is not None and not (_positive_int(self.threads)):
            raise ValueError(f"threads (--threads) must be a positive int, got {self.threads!r}")




# -- one case ---------------------------------------------------------------------------------------------

@dataclass
class SpeedCase:
    """One measurement, as it travels (as JSON) to an isolated subprocess."""

    mixer: str
    length: int
    pass_name: str
    causal: bool
    value_range: float
    dim: int = 64
    heads: int = 1
    batch: int = 1
    device: str = "cpu"
    dtype: str = "float32"
    repeats: int = 5
    warmup: int = 1
    timeout: float = 120.0
    seed: int = 0
    threads: int = 1
    isolated: bool = False
    mem_limit_mb: float | None = None
    window: int | None = None


@dataclass
class CaseResult:
    """What a case gives: its status, and the median (and fastest and slowest) time and the peak memory when it
    is "ok"."""

    status: str
    time_ms: float | None = None
    peak_mem_mb: float | None = None
    mem_method: str = ""
    time_min_ms: float | None = None
    time_max_ms: float | None = None


class CaseTimeout(Exception):
    """A case ran past its time budget."""


def classify(exc: BaseException) -> str:
    """The status of a case that raised ``exc``: "timeout", "oom", or "error: <type>: <message>"."""
    if isinstance(exc, CaseTimeout):
        return "timeout"
    oom_types = tuple(t for t in (getattr(torch, "OutOfMemoryError", None),
                                  getattr(torch.cuda, "OutOfMemoryError", None)) if t is not None)
    if isinstance(exc, (MemoryError, *oom_types)):
        return "oom"
    message = str(exc).strip()
    if isinstance(exc, RuntimeError) and re.search(r"out of memory|can't allocate memory", message, re.IGNORECASE):
        return "oom"
    first_line = message.splitlines()[0] if message else ""
    return f"error: {type(exc).__name__}: {first_line}"[:160]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _make_pass(mixer: torch.nn.Module, x: torch.Tensor, pass_name: str, hw: tuple[int, int] | None
               ) -> Callable[[], None]:
    call = (lambda: mixer(x, hw=hw)) if hw is not None else (lambda: mixer(x))
    if pass_name == "fwd":
        def forward() -> None:
            with torch.no_grad():
                call()
        return forward
    x.requires_grad_(True)

    def forward_backward() -> None:
        x.grad = None
        mixer.zero_grad(set_to_none=True)
        call().sum().backward()
    return forward_backward


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


def _ru_maxrss_kb() -> int:
    import resource

    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss // 1024 if sys.platform == "darwin" else maxrss  # bytes on macOS, kB on Linux


def _cpu_peak_mb(run: Callable[[], None], isolated: bool) -> tuple[float, str]:
    """Run the pass once; its peak resident memory over the resident memory before it (MB), and the method.
    In an isolated process the allocator is set to follow live allocations for this pass only."""
    if isolated:
        _exact_rss_allocation(True)
    try:
        return _cpu_peak_of(run, isolated)
    finally:
        if isolated:
            _exact_rss_allocation(False)


def _cpu_peak_of(run: Callable[[], None], isolated: bool) -> tuple[float, str]:
    _release_free_memory()
    suffix = "" if isolated else IN_PROCESS
    if proc_status_kb("VmHWM") is not None:
        reset = reset_peak_rss()
        before = proc_status_kb("VmRSS" if reset else "VmHWM")
        run()
        peak = proc_status_kb("VmHWM")
        method = "rss-hwm-reset" if reset else "rss-hwm"
    else:
        before = _ru_maxrss_kb()
        run()
        peak, method = _ru_maxrss_kb(), "ru_maxrss"
    return max(0, peak - before) / 1024, method + suffix


def _cuda_peak_mb(run: Callable[[], None], device: torch.device) -> tuple[float, str]:
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    run()
    torch.cuda.synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - before) / 2**20, "cuda-max-allocated"


def _timed_ms(run: Callable[[], None], device: torch.device) -> float:
    _sync(device)
    start = time.perf_counter()
    run()
    _sync(device)
    return 1000 * (time.perf_counter() - start)


def _build_pass(case: SpeedCase, length: int) -> Callable[[], None]:
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
    return _make_pass(mixer, x, case.pass_name, square_grid(length) if info.spatial else None)


def _process_warmup(case: SpeedCase) -> None:
    """One pass of the case's mixer at a short length, so that a fresh process's one-time costs (thread pool,
    kernel selection, lazy library loading, the CUDA context) stay out of the case's cold pass."""
    try:
        _build_pass(case, min(case.length, 16))()
        _sync(torch.device(case.device))
    except Exception:  # the case itself meets (and reports) the same problem
        pass


def measure_case(case: SpeedCase) -> CaseResult:
    """Build the mixer and the input, then the cold (memory) pass, the warm-up and the timed repeats, in this
    process. Raises :class:`CaseTimeout` when the case runs past ``case.timeout`` seconds (checked after each
    pass), and whatever the mixer raises (e.g. ``torch.OutOfMemoryError``)."""
    deadline = time.perf_counter() + case.timeout
    device = torch.device(case.device)
    run = _build_pass(case, case.length)

    def check(done: str) -> None:
        if time.perf_counter() > deadline:
            raise CaseTimeout(f"past the {case.timeout:g} s budget after {done}")

    if device.type == "cuda":
        peak_mb, method = _cuda_peak_mb(run, device)
    else:
        peak_mb, method = _cpu_peak_mb(run, case.isolated)
    check("the cold pass")
    for _ in range(case.warmup):
        run()
        check("a warm-up pass")
    times = []
    for _ in range(case.repeats):
        times.append(_timed_ms(run, device))
        check(f"{len(times)} timed pass(es)")
    return CaseResult("ok", statistics.median(times), peak_mb, method, min(times), max(times))


def run_in_process(case: SpeedCase) -> CaseResult:
    """:func:`measure_case` in this process (exceptions propagate; :func:`run_speed` classifies them)."""
    return measure_case(case)


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parent.parent)  # tokenmix importable without an install
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    return env


def run_isolated(case: SpeedCase) -> CaseResult:
    """The case in a fresh ``python -m tokenmix.speed --case <json>`` subprocess, killed after ``case.timeout``
    seconds (its start-up, about as long as importing torch, included)."""
    command = [sys.executable, "-m", "tokenmix.speed", "--case", json.dumps(asdict(case))]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=case.timeout, env=_child_env())
    except subprocess.TimeoutExpired:
        return CaseResult("timeout")
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            return CaseResult(**json.loads(line[len(RESULT_TAG):]))
    if done.returncode == -signal.SIGKILL:
        return CaseResult("oom (killed)")
    if done.returncode < 0:
        return CaseResult(f"error: killed by {signal.Signals(-done.returncode).name}")
    last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}, no result"])[-1]
    return CaseResult(f"error: {last}"[:160])


def _limit_address_space(extra_mb: float) -> None:
    """Let this process map at most ``extra_mb`` more address space (RLIMIT_AS over the current VmSize)."""
    import resource

    size_kb = proc_status_kb("VmSize")
    if size_kb is None:
        raise RuntimeError("--mem-limit-mb needs /proc/self/status (Linux)")
    limit = size_kb * 1024 + int(extra_mb * 2**20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))


def _child_main(case_json: str) -> int:
    """The isolated subprocess: one case, its result printed as one tagged JSON line."""
    case = SpeedCase(**json.loads(case_json))
    torch.set_num_threads(case.threads)
    try:
        _process_warmup(case)
        if case.mem_limit_mb is not None:
            _limit_address_space(case.mem_limit_mb)
        result = measure_case(case)
    except Exception as exc:  # every failure is a result
        result = CaseResult(classify(exc))
    print(RESULT_TAG + json.dumps(asdict(result)), flush=True)
    return 0


# -- the sweep ------------------------------------------------------------------------------------------

@dataclass
class SpeedRecord:
    """One row of ``speed.csv``: a case, its settings and its outcome (``pass_name`` is the "pass" column)."""

    mixer: str
    length: int
    pass_name: str
    causal: bool
    value_range: float
    time_ms: float | None
    peak_mem_mb: float | None
    status: str
    dim: int = 64
    heads: int = 1
    batch: int = 1
    device: str = "cpu"
    dtype: str = "float32"
    threads: int = 1
    repeats: int = 5
    warmup: int = 1
    mem_method: str = ""
    grid: str = ""
    time_min_ms: float | None = None
    time_max_ms: float | None = None

    @classmethod
    def of(cls, case: SpeedCase, result: CaseResult, grid: str) -> SpeedRecord:
        """The row of ``case``: its settings (the fields the two share) and its ``result``."""
        shared = {f.name: getattr(case, f.name) for f in fields(cls) if f.name in SpeedCase.__dataclass_fields__}
        return cls(**shared, **asdict(result), grid=grid)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def as_row(self) -> dict[str, object]:
        row = {f.name: getattr(self, f.name) for f in fields(self)}
        row["pass"] = row.pop("pass_name")
        for name in ("time_ms", "time_min_ms", "time_max_ms"):
            row[name] = "" if row[name] is None else round(row[name], 3)
        row["peak_mem_mb"] = "" if self.peak_mem_mb is None else round(self.peak_mem_mb, 1)
        return {c: row[c] for c in COLUMNS}


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


def _free_memory(device: str) -> None:
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def _attempt(runner: RunCase, case: SpeedCase) -> CaseResult:
    try:
        return runner(case)
    except Exception as exc:  # out of memory, time or luck: a result
        status = classify(exc)
    _free_memory(case.device)  # after the except block, so the traceback's tensors are gone
    return CaseResult(status)


def _cuda_warmup(device: str) -> None:
    """Create the CUDA context and cuBLAS workspace, so the first case's memory does not include them."""
    a = torch.randn(64, 64, device=device, requires_grad=True)
    (a @ a).sum().backward()
    torch.cuda.synchronize(device)


def _progress(record: SpeedRecord) -> str:
    time_ms = "" if record.time_ms is None else f"{record.time_ms:10.3f} ms"
    mem = "" if record.peak_mem_mb is None else f"{record.peak_mem_mb:9.1f} MB"
    return (f"{record.mixer:<15} {'causal' if record.causal else 'bidir':<6} N={record.length:<8} "
            f"{record.pass_name:<6} r={record.value_range:<5g} {record.status:<12} {time_ms:>13} {mem:>12}")


def settings_line(settings: SpeedSettings) -> str:
    where = "a subprocess per case" if settings.isolated else "in-process"
    return (f"dim {settings.dim}, heads {settings.heads}, batch {settings.batch}, {settings.device} "
            f"{settings.dtype}, {settings.num_threads} thread(s), passes {'/'.join(settings.passes)}, "
            f"value range(s) {', '.join(f'[-{r:g}, {r:g}]' for r in settings.value_ranges)}, cold pass + "
            f"{settings.warmup} warm-up + median of {settings.repeats}, budget {settings.case_timeout:g} s per case, "
            f"{where}" + (f", +{settings.mem_limit_mb:g} MB address space" if settings.mem_limit_mb else "")
            + (f", sliding windows of {settings.window} taps" if settings.window else ""))


def run_speed(settings: SpeedSettings, *, run_case: RunCase | None = None) -> list[SpeedRecord]:
    """Measure every case of ``settings`` (see the module docstring), printing one line per case as it
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
    for line in _mem_method_lines(records):
        print(f"memory method: {line.removeprefix('- ')}", flush=True)
    return records


def _sweep_mixer(settings: SpeedSettings, runner: RunCase, name: str, causal: bool, reason: str | None,
                 value_range: float, lengths: list[int]) -> list[SpeedRecord]:
    """One mixer in one mode at one value range: every length x pass, longer lengths skipped after a pass
    ran out of memory or time."""
    info = mixer_info(name)
    heads = info.heads(settings.heads) or 1
    stopped: dict[str, str] = {}  # pass -> why its longer lengths are skipped
    records = []
    for length in lengths:
        for pass_name in settings.passes:
            case = SpeedCase(name, length, pass_name, causal, float(value_range), dim=settings.dim, heads=heads,
                             batch=settings.batch, device=settings.device, dtype=settings.dtype,
                             repeats=settings.repeats, warmup=settings.warmup, timeout=float(settings.case_timeout),
                             seed=settings.seed, threads=settings.num_threads, isolated=settings.isolated,
                             mem_limit_mb=settings.mem_limit_mb, window=settings.window)
            if reason is not None:
                result = CaseResult(f"unsupported: {reason}")
            elif pass_name in stopped:
                result = CaseResult(f"skipped: {stopped[pass_name]}")
            else:
                result = _attempt(runner, case)
                if result.status.startswith(("oom", "timeout")):
                    stopped[pass_name] = f"{result.status.split()[0]} at {length}"
            grid = "x".join(map(str, square_grid(length))) if info.spatial else ""
            record = SpeedRecord.of(case, result, grid)
            print(_progress(record), flush=True)
            records.append(record)
    return records


# -- relative to softmax ------------------------------------------------------------------------------

@dataclass
class CrossoverRow:
    """One mixer against softmax in one (pass, mode, value range): the time ratio at each length, whether the
    mixer was faster there (None: not compared), and the crossover length (None: never faster)."""

    mixer: str
    pass_name: str
    causal: bool
    value_range: float
    ratios: dict[int, float | None]
    faster: dict[int, bool | None]
    crossover: int | None
    cells: dict[int, str]

    @property
    def first_compared(self) -> int | None:
        return min((n for n, f in self.faster.items() if f is not None), default=None)

    @property
    def crossover_text(self) -> str:
        if self.crossover is None:
            return "none"
        return f"≤ {self.crossover}" if self.crossover == self.first_compared else str(self.crossover)


def _failed_for_size(status: str) -> bool:
    """Out of memory or time, or skipped after that: the length was too much for the mechanism."""
    return status.startswith(("oom", "timeout", "skipped: oom", "skipped: timeout"))


def _compare(mixer: SpeedRecord | None, reference: SpeedRecord | None) -> tuple[float | None, bool | None, str]:
    """(ratio, faster, cell text) at one length."""
    if mixer is None or reference is None:
        return None, None, "n/a"
    if mixer.ok and reference.ok:
        ratio = mixer.time_ms / reference.time_ms if reference.time_ms else math.inf
        return ratio, ratio < 1, f"{ratio:.3g}"
    reference_word = reference.status.removeprefix("skipped: ").split(":")[0].split()[0]
    if mixer.ok and _failed_for_size(reference.status):
        return None, True, f"softmax {reference_word}"
    if _failed_for_size(mixer.status) and reference.ok:
        return None, False, mixer.status.split(":")[0].split()[0]
    if mixer.ok:
        return None, None, f"n/a (softmax {reference_word})"
    return None, None, mixer.status.split(":")[0].split()[0]


def _crossover(faster: dict[int, bool | None]) -> int | None:
    """The smallest length from which the mixer is faster at every compared length (None: never)."""
    crossover = None
    for length in sorted(faster, reverse=True):
        if faster[length] is None:
            continue
        if not faster[length]:
            break
        crossover = length
    return crossover


def crossover_table(records: list[SpeedRecord]) -> list[CrossoverRow]:
    """Every non-reference mixer's time relative to softmax measured in the same run, per (value range, pass,
    mode), with its crossover length: the smallest measured length N at which the mixer is faster than softmax
    and stays faster at every longer length where the two were compared. A mixer that ran where softmax ran out
    of memory or time (or was skipped after that) counts as faster there; one that ran out where softmax ran,
    as slower; lengths where neither comparison applies are left out."""
    by_key = {(r.mixer, r.pass_name, r.causal, r.value_range, r.length): r for r in records}
    groups = dict.fromkeys((r.mixer, r.pass_name, r.causal, r.value_range) for r in records
                           if r.mixer != REFERENCE and not r.status.startswith("unsupported"))
    lengths = sorted({r.length for r in records})
    rows = []
    for mixer, pass_name, causal, value_range in groups:
        ratios, faster, cells = {}, {}, {}
        for n in lengths:
            ratios[n], faster[n], cells[n] = _compare(by_key.get((mixer, pass_name, causal, value_range, n)),
                                                      by_key.get((REFERENCE, pass_name, causal, value_range, n)))
        rows.append(CrossoverRow(mixer, pass_name, causal, value_range, ratios, faster, _crossover(faster), cells))
    return rows


# -- outputs ------------------------------------------------------------------------------------------

CROSSOVER_NOTE = ("ratio = mixer time / softmax time at the same length, pass, mode and value range (< 1: the "
                  "mixer is faster). Crossover: the smallest measured length from which the mixer is faster than "
                  "softmax at that and every longer measured length where both were compared; \"≤ N\" when that "
                  "is the shortest compared length (it may already be faster below it), \"none\" when it is not "
                  "faster at the longest one. A mixer that ran where softmax ran out of memory or time counts as "
                  "faster there, one that ran out where softmax ran as slower.")


def _mode(causal: bool) -> str:
    return "causal" if causal else "bidir"


def _groups(records: list[SpeedRecord]) -> list[tuple[str, bool, float]]:
    return list(dict.fromkeys((r.pass_name, r.causal, r.value_range) for r in records))


def _group_title(pass_name: str, causal: bool, value_range: float) -> str:
    return f"{pass_name}, {_mode(causal)}, inputs in [-{value_range:g}, {value_range:g}]"


def _markdown_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)] + ["| " + " | ".join(r) + " |"
                                                                              for r in rows]


def relative_tables(records: list[SpeedRecord]) -> list[str]:
    """Markdown lines: per (pass, mode, value range), each mixer's time relative to softmax, and its crossover."""
    rows = crossover_table(records)
    lengths = sorted({r.length for r in records})
    lines = []
    for pass_name, causal, value_range in _groups(records):
        group = [r for r in rows if (r.pass_name, r.causal, r.value_range) == (pass_name, causal, value_range)]
        if not group:
            continue
        lines += [f"### time / softmax time: {_group_title(pass_name, causal, value_range)}", ""]
        lines += _markdown_table(["mixer", *(f"N={n}" for n in lengths), "crossover"],
                                 [[r.mixer, *(r.cells[n] for n in lengths), r.crossover_text] for r in group])
        lines.append("")
    return lines


def _value_table(records: list[SpeedRecord], attribute: str, title: str) -> list[str]:
    lengths = sorted({r.length for r in records})
    lines = []
    for pass_name, causal, value_range in _groups(records):
        group = [r for r in records if (r.pass_name, r.causal, r.value_range) == (pass_name, causal, value_range)]
        cells: dict[str, dict[int, str]] = {}
        for r in group:
            value = getattr(r, attribute)
            cells.setdefault(r.mixer, {})[r.length] = (f"{value:.{3 if attribute == 'time_ms' else 1}f}" if r.ok
                                                       else r.status.split(":")[0])
        lines += [f"### {title}: {_group_title(pass_name, causal, value_range)}", ""]
        lines += _markdown_table(["mixer", *(f"N={n}" for n in lengths)],
                                 [[m, *(c.get(n, "") for n in lengths)] for m, c in cells.items()])
        lines.append("")
    return lines


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            match = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read(), re.MULTILINE)
        if match:
            return match.group(1).strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_lines(settings: SpeedSettings) -> list[str]:
    device = torch.cuda.get_device_name(0) if settings.device == "cuda" else _cpu_name()
    return [f"- platform: {platform.platform()}, Python {platform.python_version()}",
            f"- CPU: {_cpu_name()}, {os.cpu_count()} logical CPUs; torch {torch.__version__}, "
            f"{settings.num_threads} intra-op thread(s)",
            f"- device: {settings.device} ({device})"]


def _mem_method_lines(records: list[SpeedRecord]) -> list[str]:
    used = sorted({r.mem_method for r in records if r.mem_method})
    lines = []
    for method in used:
        base = method.removesuffix(IN_PROCESS)
        lines.append(f"- `{method}`: {MEM_METHODS.get(base, base)}" + (f"; {IN_PROCESS_NOTE}" if
                                                                         method.endswith(IN_PROCESS) else ""))
    return lines or ["- (no case measured memory)"]


def _report(records: list[SpeedRecord], settings: SpeedSettings) -> str:
    spatial = sorted({f"{r.mixer} ({r.length} as {r.grid})" for r in records if r.grid})
    lines = ["# tokenmix speed", "", f"Settings: {settings_line(settings)}.", "",
             f"Mixers: {', '.join(dict.fromkeys(r.mixer for r in records))} (softmax is the reference).",
             "Pass `fwd`: forward under `torch.no_grad()`; `fwdbwd`: forward and the backward of `y.sum()` into "
             "the input and the parameters. Time: median of the timed passes (ms; speed.csv also has the fastest "
             "and the slowest: a wide spread means a busy machine). Peak memory: of the first, cold pass, over the "
             "memory held before it (MB).", ""]
    if spatial:
        lines += ["Spatial mixers see the length as the most square grid H x W: " + ", ".join(spatial) + ".", ""]
    lines += ["## Machine", "", *machine_lines(settings), "", "## Memory method", "", *_mem_method_lines(records), "",
              "## Time relative to softmax", "", CROSSOVER_NOTE, "", *relative_tables(records),
              "## Time (ms)", "", *_value_table(records, "time_ms", "time (ms)"),
              "## Peak memory (MB)", "", *_value_table(records, "peak_mem_mb", "peak memory (MB)")]
    failures = [r for r in records if not r.ok]
    if failures:
        lines += ["## Cases without a measurement", ""]
        lines += [f"- {r.mixer} {_mode(r.causal)} N={r.length} {r.pass_name} r={r.value_range:g}: {r.status}"
                  for r in failures]
    return "\n".join(lines) + "\n"


def write_outputs(records: list[SpeedRecord], settings: SpeedSettings, out_dir: str | Path) -> list[Path]:
    """``speed.csv``, ``speed.md`` and the plots (skipped, with a note, when matplotlib is missing); returns
    the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "speed.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(r.as_row() for r in records)
    (out / "speed.md").write_text(_report(records, settings))
    written = [out / "speed.csv", out / "speed.md"]
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no plots (pip install matplotlib)", flush=True)
        return written
    matplotlib.use("Agg")
    written += _plot_vs_length(records, out)
    if len(settings.value_ranges) > 1:
        written += _plot_vs_value_range(records, out)
    return written


def _subplots(count: int):  # -> (matplotlib Figure, list of Axes)
    import matplotlib.pyplot as plt

    cols = min(count, 2)
    rows = math.ceil(count / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.5 * rows), squeeze=False)
    for ax in axes.flat[count:]:
        ax.set_visible(False)
    return fig, list(axes.flat)


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _styles(mixers: list[str]) -> dict[str, dict[str, object]]:
    """A distinct colour per mixer (dark tab20 hues first, then the light ones), dashed past 20 mixers."""
    import matplotlib.pyplot as plt

    order = [*range(0, 20, 2), *range(1, 20, 2)]
    return {m: {"color": plt.cm.tab20(order[i % 20]), "linestyle": "-" if i < 20 else "--",
                "linewidth": 2.5 if m == REFERENCE else 1.2} for i, m in enumerate(mixers)}


def _log_axes(ax, xs: list[float], xlabel: str, ylabel: str, title: str) -> None:
    from matplotlib.ticker import NullLocator

    ax.set(xscale="log", yscale="log", xlabel=xlabel, ylabel=ylabel, title=title)
    ax.set_xticks(xs, labels=[f"{x:g}" for x in xs])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.grid(True, which="both", alpha=0.3)
    if ax.lines:
        ax.legend(fontsize="small")


def _plot_vs_length(records: list[SpeedRecord], out: Path) -> list[Path]:
    groups = _groups(records)
    mixers = list(dict.fromkeys(r.mixer for r in records))
    styles = _styles(mixers)
    lengths = sorted({r.length for r in records})
    paths = []
    for attribute, label, name in (("time_ms", "time (ms)", "time_vs_length.png"),
                                   ("peak_mem_mb", "peak memory (MB)", "memory_vs_length.png")):
        fig, axes = _subplots(len(groups))
        for ax, (pass_name, causal, value_range) in zip(axes, groups):
            for mixer in mixers:
                points = sorted((r.length, getattr(r, attribute)) for r in records
                                if r.ok and r.mixer == mixer and (r.pass_name, r.causal, r.value_range)
                                == (pass_name, causal, value_range) and getattr(r, attribute) > 0)
                if points:
                    ax.plot(*zip(*points), marker="o", label=mixer, **styles[mixer])
            _log_axes(ax, lengths, "sequence length N", label, _group_title(pass_name, causal, value_range))
        paths.append(_save(fig, out / name))
    return paths


def _plot_vs_value_range(records: list[SpeedRecord], out: Path) -> list[Path]:
    """Time and memory against the value range at the longest length (seed 001 Tables 2-3)."""
    length = max(r.length for r in records)
    at_length = [r for r in records if r.length == length]
    groups = list(dict.fromkeys((r.pass_name, r.causal) for r in at_length))
    styles = _styles(list(dict.fromkeys(r.mixer for r in records)))
    mixers = list(dict.fromkeys(r.mixer for r in at_length))
    ranges = sorted({r.value_range for r in at_length})
    paths = []
    for attribute, label, name in (("time_ms", "time (ms)", "time_vs_value_range.png"),
                                   ("peak_mem_mb", "peak memory (MB)", "memory_vs_value_range.png")):
        fig, axes = _subplots(len(groups))
        for ax, (pass_name, causal) in zip(axes, groups):
            for mixer in mixers:
                points = sorted((r.value_range, getattr(r, attribute)) for r in at_length
                                if r.ok and r.mixer == mixer and (r.pass_name, r.causal) == (pass_name, causal)
                                and getattr(r, attribute) > 0)
                if points:
                    ax.plot(*zip(*points), marker="o", label=mixer, **styles[mixer])
            _log_axes(ax, ranges, "value range r (inputs in [-r, r])", label,
                      f"{pass_name}, {_mode(causal)}, N={length}")
        paths.append(_save(fig, out / name))
    return paths


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tokenmix.speed",
                                     description="one isolated case of `tokenmix speed` (use `tokenmix speed`)")
    parser.add_argument("--case", required=True, help="the SpeedCase as JSON")
    return _child_main(parser.parse_args(argv).case)


if __name__ == "__main__":
    sys.exit(_main())
