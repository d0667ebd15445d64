"""Where a result came from: the code, the library and the machine that produced it.

Every recorded row carries :data:`PROVENANCE_COLUMNS` (:func:`provenance`):

* ``code``: the first 12 hex digits of the sha256 of the ``tokenmix`` package's Python sources (every ``.py``
  file under the package, by relative path and content, sorted). It names what computed the row whether or not
  the package sits in a git checkout and whether or not that checkout is clean: two rows with the same ``code``
  ran the same source. :func:`code_version_at` computes the same value for any commit of a checkout, so rows
  written before provenance was recorded can be given theirs from git history.
* ``commit``: the checkout's ``HEAD`` (12 hex digits), empty outside a git checkout;
* ``clean``: ``true`` when the package's sources are as committed at ``commit``, ``false`` when they differ
  (then ``code`` still identifies the source that ran), empty outside a checkout;
* ``torch``: ``torch.__version__``; ``threads``: the torch intra-op threads the run used (also part of the
  run's ``config_hash``: a run's floating-point reductions, hence its result, depend on it);
* ``cpu``: the processor's model name (``/proc/cpuinfo``, else :func:`platform.processor`), with CUDA's device
  name appended when the run used a GPU;
* ``numerics``: the floating-point kernels the run used, :data:`~tokenmix.training.numerics.PINNED` where they
  were pinned (every run ``tokenmix compare`` trains) or what they were (:func:`~tokenmix.training.numerics.numerics`);
* ``host``: the host's fingerprint (:func:`~tokenmix.training.numerics.host_fingerprint`): vendor, family/model,
  ISA extensions, oneMKL and oneDNN versions and a digest; two hosts of one model name differ here.
"""

from __future__ import annotations

import functools
import hashlib
import platform
import subprocess
from pathlib import Path

__all__ = ["PROVENANCE_COLUMNS", "provenance", "code_version", "code_version_at", "cpu_model", "git_state"]

PROVENANCE_COLUMNS = ["code", "commit", "clean", "torch", "threads", "cpu", "numerics", "host"]
_PACKAGE = Path(__file__).resolve().parents[1]  # src/tokenmix


def _digest(files: list[tuple[str, bytes]]) -> str:
    sha = hashlib.sha256()
    for name, content in sorted(files):
        sha.update(name.encode() + b"\0" + hashlib.sha256(content).digest())
    return sha.hexdigest()[:12]


@functools.lru_cache(maxsize=None)
def code_version(package: Path = _PACKAGE) -> str:
    """The ``code`` of the package at ``package`` as it is on disk (see the module docstring)."""
    files = [(p.relative_to(package).as_posix(), p.read_bytes()) for p in package.rglob("*.py")
             if "__pycache__" not in p.parts]
    return _digest(files)


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True)


def code_version_at(repo: str | Path, commit: str, package: str = "src/tokenmix") -> str | None:
    """The ``code`` the package at ``package`` (a path inside the repository ``repo``) had at ``commit``; None
    when git cannot tell (no such commit or path)."""
    listing = _git(Path(repo), "ls-tree", "-r", "-z", commit, "--", package.rstrip("/") + "/")
    if listing.returncode != 0 or not listing.stdout:
        return None
    files = []
    for entry in listing.stdout.split(b"\0"):
        if not entry:
            continue
        meta, path = entry.split(b"\t", 1)
        name = path.decode()
        if not name.endswith(".py"):
            continue
        blob = _git(Path(repo), "cat-file", "blob", meta.split()[2].decode())
        files.append((name[len(package.rstrip("/")) + 1:], blob.stdout))
    return _digest(files)


@functools.lru_cache(maxsize=None)
def git_state(package: Path = _PACKAGE) -> tuple[str, str]:
    """(commit, clean) of the checkout holding ``package``: HEAD's first 12 hex digits and "true"/"false" for
    whether the package's files match it (untracked ``.py`` files count as changes); ("", "") outside git."""
    head = _git(package, "rev-parse", "HEAD")
    if head.returncode != 0:
        return "", ""
    status = _git(package, "status", "--porcelain", "--untracked-files=all", "--", ".")
    dirty = any(line.strip().endswith(b".py") or b".py " in line
                for line in status.stdout.splitlines()) if status.returncode == 0 else True
    return head.stdout.decode().strip()[:12], "false" if dirty else "true"


@functools.lru_cache(maxsize=None)
def cpu_model() -> str:
    """The processor's model name (first ``model name`` of /proc/cpuinfo, else :func:`platform.processor`)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def provenance(threads: int, device: str = "cpu") -> dict[str, str | int]:
    """The :data:`PROVENANCE_COLUMNS` of a run in this process that used ``threads`` torch threads on
    ``device``."""
    import torch

    from .numerics import host_fingerprint, numerics

    commit, clean = git_state()
    cpu = cpu_model()
    if str(device).startswith("cuda") and torch.cuda.is_available():
        cpu += " + " + torch.cuda.get_device_name(torch.device(device))
    return {"code": code_version(), "commit": commit, "clean": clean, "torch": torch.__version__,
            "threads": int(threads), "cpu": cpu, "numerics": numerics(), "host": host_fingerprint()}
