"""One file from a URL, checked against its published MD5 checksum, with a progress bar (tqdm).

Used where a data set's files are published with checksums (:mod:`.fashion_mnist`). Any URL that
``urllib`` opens works, ``file://`` included (the tests serve their fixtures that way).
"""

from __future__ import annotations

import hashlib
import os
import urllib.request
from pathlib import Path

from .cache import ChecksumError

__all__ = ["download"]

_CHUNK = 1 << 16


def download(url: str, dest: str | Path, *, md5: str, progress: bool | None = None, timeout: float = 60.0) -> Path:
    """``url`` saved as ``dest`` once its MD5 equals ``md5``; returns ``dest``.

    The bytes go to ``dest + ".part"`` first and are renamed only when the checksum matches; a mismatch
    raises :class:`~tokenmix.data.cache.ChecksumError` (naming the URL, the expected and the received
    digest) and keeps nothing. Network failures raise ``OSError`` (``urllib.error.URLError``).
    ``progress``: a tqdm bar on stderr (``None``: only when stderr is a terminal)."""
    from tqdm.auto import tqdm

    dest = Path(dest)
    part = dest.with_name(dest.name + ".part")
    digest = hashlib.md5()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, open(part, "wb") as out:
            size = response.headers.get("Content-Length") if response.headers else None
            with tqdm(total=int(size) if size else None, unit="B", unit_scale=True, desc=dest.name,
                      disable=None if progress is None else not progress, leave=False) as bar:
                for chunk in iter(lambda: response.read(_CHUNK), b""):
                    out.write(chunk)
                    digest.update(chunk)
                    bar.update(len(chunk))
        if digest.hexdigest() != md5.lower():
            raise ChecksumError(f"{url}: MD5 {digest.hexdigest()}, expected {md5} (the published checksum); "
                                f"the download was not kept")
        os.replace(part, dest)
    finally:
        if part.exists():
            part.unlink()
    return dest
