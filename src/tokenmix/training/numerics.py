"""Pinned numerics: the same floating-point kernels on every x86 host, and the host each row ran on.

A CPU run's result depends on more than its seed and config: PyTorch picks its vectorised kernels for the
processor it finds (ATen's ``DEFAULT``/``AVX2``/``AVX512`` builds of each operation sum in different orders),
Intel's oneMKL picks a matrix-multiply code path per processor and per cache size, oneDNN (convolutions) picks
its own ISA, and the thread count changes every parallel reduction. Two hosts with the same code therefore
give rows that differ in the last bits, and over a thousand optimiser steps in the second decimal.

:data:`PINNED_ENV` fixes all of them to a level every x86-64 host of the last decade has (AVX2 with FMA):

* ``ATEN_CPU_CAPABILITY=avx2``: ATen's dispatch never takes its AVX-512 kernels;
* ``MKL_CBWR=COMPATIBLE``: oneMKL's conditional numerical reproducibility mode on its SSE2 branch, the only
  branch Intel documents as reproducible on processors of other vendors (AMD's among them);
* ``ONEDNN_MAX_CPU_ISA=AVX2``: oneDNN's ISA cap;
* the torch threads of a run, part of its config (``[train] threads``);
* and, in the run layer, the fused Adam/AdamW kernel (:func:`~tokenmix.training.setup.fused_supported`): the
  unfused step takes its square root from oneMKL's vector maths, which none of the above pins (on an emulated
  AVX2-only AMD host it gave other last bits than on an AVX-512 one, with everything else bitwise equal).

They are read once, when each library starts, so they must be in the environment before ``import torch``:
the sweep's runs are fresh spawned processes, started with :func:`pinned_environment` (so ``tokenmix compare``
pins every run it trains; a run trained in an already started process records what that process has).
:func:`numerics` reads back what the running process actually uses (ATen's capability from torch, oneMKL's
branch from the library itself, oneDNN's cap from the environment) and names it: :data:`PINNED` when every
setting is pinned, else ``unpinned(...)`` with what it found. Every row records it in its ``numerics`` column,
and :func:`host_fingerprint` in its ``host`` column: vendor, family/model/stepping, the vector ISA flags, oneMKL's
and oneDNN's versions and a short digest of all of it, so that two hosts that share a model name ("AMD EPYC")
are told apart.

Rows of one pinned level are comparable across hosts (the verify ledgers hold the evidence); rows of different
numerics, or unpinned rows of different hosts, are not: a claim that compares them is confounded.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import re
from pathlib import Path
from typing import Mapping

__all__ = ["PINNED", "PINNED_ENV", "UNPINNED", "pinned_environment", "numerics", "host_fingerprint", "host_id",
           "same_numerics_key", "mkl_branch"]

PINNED = "x86-avx2-cnr"  # the name of the pinned level, recorded in every pinned row
UNPINNED = "unpinned"
PINNED_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "AVX2"}
# oneMKL's MKL_CBWR_* branch numbers (mkl_cbwr.h), as mkl_cbwr_get(MKL_CBWR_BRANCH) returns them
_MKL_BRANCHES = {0: "OFF", 1: "BRANCH_OFF", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3", 7: "SSE4_1",
                 8: "SSE4_2", 9: "AVX", 10: "AVX2", 11: "AVX512_MIC", 12: "AVX512", 13: "AVX512_MIC_E1",
                 14: "AVX512_E1"}
# the ISA extensions torch's CPUID probe reports (torch.cpu._is_<name>_supported), in this order
_ISA_PROBES = ("avx2", "avx512", "vnni", "avx512_bf16", "amx_tile", "amx_fp16")


def pinned_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with :data:`PINNED_ENV` set: the environment of a run
    process whose numerics are pinned."""
    return {**(os.environ if base is None else base), **PINNED_ENV}


def _torch_library() -> ctypes.CDLL | None:
    import torch

    for name in ("libtorch_cpu.so", "libtorch_cpu.dylib"):
        path = Path(torch.__file__).parent / "lib" / name
        if path.exists():
            try:
                return ctypes.CDLL(str(path))
            except OSError:
                return None
    return None


@functools.lru_cache(maxsize=None)
def mkl_branch() -> str:
    """oneMKL's conditional-reproducibility branch in this process ("OFF" when CNR is off, "COMPATIBLE",
    "AVX2", ...), read from the oneMKL linked into torch; "n/a" where torch has no oneMKL or does not export
    the function (then the environment's ``MKL_CBWR``, if any, follows in brackets)."""
    library = _torch_library()
    getter = getattr(library, "mkl_serv_cbwr_get", None) if library is not None else None
    if getter is None:
        return "n/a" + (f"[{os.environ['MKL_CBWR']}]" if os.environ.get("MKL_CBWR") else "")
    getter.restype, getter.argtypes = ctypes.c_int, [ctypes.c_int]
    value = getter(1)  # MKL_CBWR_BRANCH
    return _MKL_BRANCHES.get(value & 0xFFFF, str(value)) + (",STRICT" if value & 0x10000 else "")


def numerics() -> str:
    """The numerics this process computes with: :data:`PINNED` when ATen's capability, oneMKL's branch and
    oneDNN's cap are the pinned ones, else ``unpinned(aten=...,mkl=...,onednn=...)``."""
    import torch

    aten = torch.backends.cpu.get_cpu_capability().lower()
    mkl = mkl_branch()
    onednn = os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "ALL"
    want = PINNED_ENV
    if aten == want["ATEN_CPU_CAPABILITY"] and mkl in (want["MKL_CBWR"], "n/a") and \
            onednn.upper() == want["ONEDNN_MAX_CPU_ISA"]:
        return PINNED
    return f"{UNPINNED}(aten={aten},mkl={mkl},onednn={onednn.lower()})"


def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if ":" not in line:
                if info:
                    break  # the first processor is enough
                continue
            key, value = (part.strip() for part in line.split(":", 1))
            info.setdefault(key, value)
    except OSError:
        pass
    return info


def _library_versions() -> str:
    import torch

    shown = torch.__config__.show()
    mkl = re.search(r"Math Kernel Library Version ([\w.]+)", shown)
    dnn = re.search(r"MKL-DNN v([\w.]+)", shown)
    return f"torch {torch.__version__}, mkl {mkl.group(1) if mkl else '-'}, onednn {dnn.group(1) if dnn else '-'}"


@functools.lru_cache(maxsize=None)
def host_fingerprint() -> str:
    """What of this host can change a result: processor vendor, family/model/stepping, model name (from
    /proc/cpuinfo), the vector ISA extensions its CPUID reports, and the versions of torch, oneMKL and oneDNN;
    ends with a 10-digit digest of it all (``#...``) that :func:`host_id` returns alone."""
    import torch

    info = _cpuinfo()
    # the ISA from CPUID as torch probes it, not /proc/cpuinfo's flags: an emulated or masked processor (a
    # virtual machine's CPU model, qemu's -cpu) shows its own ISA there, while /proc/cpuinfo may be the host's
    probes = [(name, getattr(torch.cpu, f"_is_{name}_supported", None)) for name in _ISA_PROBES]
    isa = "+".join(name for name, probe in probes if probe is not None and probe()) or platform.machine()
    cpu = (f"{info.get('vendor_id', platform.machine())} {info.get('cpu family', '?')}/{info.get('model', '?')}/"
           f"{info.get('stepping', '?')} {info.get('model name', platform.processor() or '?')}")
    text = f"{cpu}; isa {isa}; {_library_versions()}"
    return f"{text} #{hashlib.sha256(text.encode()).hexdigest()[:10]}"


def host_id(fingerprint: str) -> str:
    """The digest of a recorded ``host`` fingerprint ("" for an empty one)."""
    return fingerprint.rsplit("#", 1)[-1] if "#" in fingerprint else fingerprint


def same_numerics_key(row: Mapping[str, str]) -> str:
    """What must match between two rows for their difference to be the mechanisms' and not the arithmetic's:
    the pinned level alone for a pinned row (any host), else the numerics and the host (the recorded
    fingerprint's digest; for a row recorded before hosts were, its ``cpu`` name, marked as such)."""
    level = row.get("numerics") or ""
    if level == PINNED:
        return PINNED
    host = host_id(row.get("host") or "") or f"cpu name {row.get('cpu') or '?'} (host not recorded)"
    return f"{level or 'unpinned (not recorded)'} on {host}"
