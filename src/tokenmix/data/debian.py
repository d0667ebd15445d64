"""A Debian/Ubuntu package's files without installing it: ``apt-get download`` + ``dpkg -x``.

The loaders whose data ship as Debian packages (:mod:`.austen`: ``r-cran-janeaustenr``;
:mod:`.fashion_mnist`: ``dataset-fashion-mnist``) fetch them with :func:`download_package`: the ``.deb``
is downloaded into a working directory (no root needed, nothing is installed) and unpacked there with
``dpkg -x``. The callers pass the ``apt_get`` / ``dpkg`` executables (their module attributes, so tests
can point them at fakes) and turn :class:`DebianFetchError` into their own error with their own advice.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

__all__ = ["APT_GET", "DPKG", "DebianFetchError", "download_package", "extract_deb"]

APT_GET = "apt-get"
DPKG = "dpkg"
_TIMEOUT_S = 600


class DebianFetchError(FileNotFoundError):
    """``apt-get`` or ``dpkg`` is missing or failed; the message says which and why."""


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise DebianFetchError(f"`{' '.join(cmd)}` took longer than {_TIMEOUT_S} s") from None


def extract_deb(deb: Path, dest: Path, *, dpkg: str = DPKG) -> Path:
    """``dpkg -x deb dest``; returns ``dest``, the root the package's files are unpacked under."""
    if shutil.which(dpkg) is None:
        raise DebianFetchError(f"`{dpkg}` is needed to unpack {deb}")
    done = _run([dpkg, "-x", str(deb), str(dest)], dest.parent)
    if done.returncode != 0:
        raise DebianFetchError(f"`{dpkg} -x {deb}` failed: {done.stderr.strip()}")
    return dest


def download_package(package: str, workdir: Path, *, apt_get: str = APT_GET, dpkg: str = DPKG) -> Path:
    """``apt-get download package`` into ``workdir`` (after ``apt-get update`` when the first try fails,
    e.g. without package lists), then ``dpkg -x`` into ``workdir / "root"``; returns that root."""
    if shutil.which(apt_get) is None:
        raise DebianFetchError(f"{package} is not installed and `{apt_get}` is not available")
    done = _run([apt_get, "download", package], workdir)
    if done.returncode != 0:  # maybe no package lists yet
        _run([apt_get, "update"], workdir)
        done = _run([apt_get, "download", package], workdir)
    debs = sorted(workdir.glob(f"{package}_*.deb"))
    if done.returncode != 0 or not debs:
        raise DebianFetchError(f"`{apt_get} download {package}` failed: {done.stderr.strip()[-500:]}")
    return extract_deb(debs[-1], workdir / "root", dpkg=dpkg)
