"""A small on-disk cache of built data files, each recorded with a SHA-256 checksum.

``cached(name, build)`` is an idempotent step: the first call runs ``build(tmp_path)``, which must
create a file (or a directory) at ``tmp_path``; the result is checksummed, checked against ``sha256``
when one is given, moved atomically to ``cache_dir() / name`` and recorded in ``name + ".sha256"``
beside it. Later calls find the entry with a matching checksum and return its path without building.
An entry whose recorded checksum no longer matches its content (a half-written or edited file) is
rebuilt.

The cache lives in ``$TOKENMIX_DATA`` when that variable is set, else in ``~/.cache/tokenmix``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

__all__ = ["ChecksumError", "ENV_VAR", "cache_dir", "cached", "checksum", "lookup"]

ENV_VAR = "TOKENMIX_DATA"
_MANIFEST_SUFFIX = ".sha256"


class ChecksumError(ValueError):
    """A built (or expected) cache entry does not have the checksum it must have."""


def cache_dir() -> Path:
    """``$TOKENMIX_DATA`` or ``~/.cache/tokenmix``, created if missing."""
    root = os.environ.get(ENV_VAR)
    path = Path(root).expanduser() if root else Path.home() / ".cache" / "tokenmix"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def checksum(path: str | Path) -> str:
    """SHA-256 hex digest of a file, or of a directory: over its files' relative paths and digests,
    in sorted order (so the same tree always gives the same digest)."""
    path = Path(path)
    if path.is_file():
        return _file_digest(path)
    if not path.is_dir():
        raise FileNotFoundError(f"nothing to checksum at {path}")
    digest = hashlib.sha256()
    for item in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(item.relative_to(path).as_posix().encode("utf-8") + b"\0")
        digest.update(_file_digest(item).encode("ascii") + b"\n")
    return digest.hexdigest()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _entry_ok(target: Path, manifest: Path, sha256: str | None) -> bool:
    if not (target.exists() and manifest.is_file()):
        return False
    recorded = manifest.read_text().strip()
    if sha256 is not None and recorded != sha256.lower():
        return False
    try:
        return checksum(target) == recorded
    except OSError:
        return False


def _entry_paths(name: str) -> tuple[Path, Path]:
    """(the entry's path, its checksum record) for the relative entry name ``name``."""
    rel = Path(name)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise ValueError(f"cache entry name must be a relative path inside the cache, got {name!r}")
    target = cache_dir() / rel
    return target, target.with_name(target.name + _MANIFEST_SUFFIX)


def lookup(name: str) -> Path | None:
    """The path of cache entry ``name`` when it is there and matches its recorded checksum, else None;
    nothing is built."""
    target, manifest = _entry_paths(name)
    return target if _entry_ok(target, manifest, None) else None


def cached(name: str, build: Callable[[Path], None], *, sha256: str | None = None) -> Path:
    """The path of cache entry ``name`` (a relative path such as ``"austen/novels.json"``), built by
    ``build(tmp_path)`` if it is missing or does not match its recorded checksum.

    ``sha256``: the checksum the entry must have; a build that produces anything else raises
    :class:`ChecksumError` and leaves the cache unchanged.
    """
    target, manifest = _entry_paths(name)
    if _entry_ok(target, manifest, sha256):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))  # same filesystem: atomic move
    try:
        tmp = work / target.name
        build(tmp)
        if not tmp.exists():
            raise FileNotFoundError(f"cache entry {name!r}: the build step created nothing at {tmp}")
        digest = checksum(tmp)
        if sha256 is not None and digest != sha256.lower():
            raise ChecksumError(f"cache entry {name!r}: built content has SHA-256 {digest}, expected {sha256}; "
                                f"the source data differ from the expected version (nothing was cached)")
        if target.is_dir() and not target.is_symlink():
            _remove(target)  # os.replace cannot replace a non-empty directory
        os.replace(tmp, target)
        tmp_manifest = work / "manifest"
        tmp_manifest.write_text(digest + "\n")
        os.replace(tmp_manifest, manifest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target
