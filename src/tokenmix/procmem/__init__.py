"""Measuring this process, shared by ``tokenmix speed`` and the trainer: peak resident memory, read from Linux's
``/proc/self`` (``getrusage`` where there is no ``/proc``), and waiting for a device's queued work before a clock
or a memory counter is read.

``VmHWM`` is the process's peak resident set size; writing ``5`` to ``/proc/self/clear_refs`` (Linux >= 4.0)
resets it to the current resident size, so that the peak of one phase can be measured on its own.
"""

from __future__ import annotations

import re
import sys
from typing import Callable

import torch

__all__ = ["proc_status_kb", "reset_peak_rss", "ru_maxrss_kb", "PeakRSS", "synchronize"]


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on ``device`` (CUDA runs asynchronously; the CPU needs no wait)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def proc_status_kb(key: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``, ``VmSize``); None where there is none."""
    try:
        with open("/proc/self/status") as status:
            match = re.search(rf"^{key}:\s+(\d+)\s*kB", status.read(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) if match else None


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current resident size (Linux >= 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
        return True
    except OSError:
        return False


def ru_maxrss_kb() -> float:
    """The process's peak resident size in KiB from ``getrusage`` (it reports bytes on macOS, KiB on Linux)."""
    import resource

    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss / 1024 if sys.platform == "darwin" else float(maxrss)


class PeakRSS:
    """The peak resident memory of a phase above the memory at its start, in MiB.

    ``start()`` resets VmHWM (falling back to the running peak where it cannot be reset: then a phase that
    stays below an earlier, higher peak reads 0); ``peak_mb()`` is VmHWM minus the resident size at the start.
    ``fallback`` gives the peak RSS in KiB where ``/proc`` is missing (default: ``getrusage``).
    """

    def __init__(self, fallback: Callable[[], float] = ru_maxrss_kb) -> None:
        self._fallback = fallback
        self._start_kb = 0.0
        self.exact = False

    def start(self) -> None:
        if proc_status_kb("VmHWM") is None:
            self._start_kb = self._fallback()
            return
        self.exact = reset_peak_rss()
        self._start_kb = float(proc_status_kb("VmRSS" if self.exact else "VmHWM") or 0)

    def peak_mb(self) -> float:
        peak = proc_status_kb("VmHWM")
        peak_kb = float(peak) if peak is not None else self._fallback()
        return max(0.0, peak_kb - self._start_kb) / 1024
