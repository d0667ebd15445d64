"""Jane Austen's six completed novels, as plain text.

Where the text comes from (:func:`load_austen`):

1. ``source`` when given: a directory of ``*.txt`` files (one novel per file, the file name without
   ``.txt`` is the title), or an R package directory of ``janeaustenr`` (or a root it was extracted to
   with ``dpkg -x``), or the Debian ``.deb`` file itself;
2. otherwise the Debian/Ubuntu package ``r-cran-janeaustenr`` (Julia Silge's R package, texts from
   Project Gutenberg): the installed copy in ``/usr/lib/R/site-library/janeaustenr`` when there is one,
   else ``apt-get download r-cran-janeaustenr`` into a temporary directory and ``dpkg -x``. The six texts
   are then cached as ``austen/novels.json`` in :func:`tokenmix.data.cache.cache_dir` with a checksum,
   so apt is needed once per cache directory.

The package keeps its data in an R *lazy-load database*: ``data/Rdata.rdx`` (older packages / other
packages: ``R/sysdata.rdx``) is a serialized R list ``list(variables = list(name = c(offset, length)),
references = ..., compressed = ...)``, compressed as a whole (gzip, as ``saveRDS`` writes it; a 4-byte
big-endian length + zlib stream is accepted too); each object is a record at ``[offset, offset + length)``
of ``Rdata.rdb``: a 4-byte big-endian uncompressed length, then a zlib stream (or, for bzip2/xz/none
compression, a type byte ``'2'``/``'Z'``/``'0'`` and the data), holding the object's R serialization.
The objects are parsed with the ``rdata`` package; each novel is a character vector, one element per
printed line, which is joined with ``"\\n"``.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import struct
import tempfile
import warnings
import zlib
from pathlib import Path
from typing import Any

from .cache import cache_dir, cached, lookup
from .debian import APT_GET, DPKG, DebianFetchError, download_package, extract_deb
from .source import DataSource

__all__ = ["AUSTEN_NOVELS", "AUSTEN_SOURCE", "AustenNotFoundError", "CACHE_NAME", "DEBIAN_PACKAGE", "load_austen",
           "locate_austen", "read_janeaustenr", "read_lazyload_index", "read_lazyload_object", "r_strings"]

DEBIAN_PACKAGE = "r-cran-janeaustenr"
CACHE_NAME = "austen/novels.json"
# R object name -> title, in publication order (the order of janeaustenr::austen_books()).
AUSTEN_NOVELS = {
    "sensesensibility": "Sense & Sensibility",
    "prideprejudice": "Pride & Prejudice",
    "mansfieldpark": "Mansfield Park",
    "emma": "Emma",
    "northangerabbey": "Northanger Abbey",
    "persuasion": "Persuasion",
}
# Where an installed R package may live; module attributes (as APT_GET and DPKG) so tests can point them elsewhere.
INSTALLED_ROOTS: tuple[Path, ...] = (
    Path("/usr/lib/R/site-library/janeaustenr"),
    Path("/usr/local/lib/R/site-library/janeaustenr"),
    Path("/usr/lib/R/library/janeaustenr"),
)
_DB_CANDIDATES = ("data/Rdata", "R/sysdata")  # lazy-load database bases inside an R package
_PKG_IN_DEB = Path("usr/lib/R/site-library/janeaustenr")

HOW_TO_GET = (
    f"Jane Austen's novels come from the Debian/Ubuntu package {DEBIAN_PACKAGE}: either install it "
    f"(`apt-get install {DEBIAN_PACKAGE}`) or let tokenmix fetch it (needs `apt-get` and `dpkg`; it runs "
    f"`apt-get download {DEBIAN_PACKAGE}`, after `apt-get update` if apt has no package lists), "
    f"or pass source=<a directory of one .txt file per novel, named by title> (or the downloaded .deb), "
    f"or set TOKENMIX_DATA to a cache directory that already holds {CACHE_NAME}."
)


class AustenNotFoundError(FileNotFoundError):
    """The novels could not be found or fetched; the message says how to get them."""


# -- R lazy-load databases -----------------------------------------------------------------------------
def _decompress_whole(data: bytes) -> bytes:
    """A whole serialized R file: gzip / bzip2 / xz (as saveRDS writes), 4-byte length + zlib, or raw."""
    if data[:2] == b"\x1f\x8b":
        return gzip.decompress(data)
    if data[:3] == b"BZh":
        return bz2.decompress(data)
    if data[:6] == b"\xfd7zXZ\x00":
        return lzma.decompress(data)
    if data[:2] in (b"X\n", b"A\n", b"B\n"):
        return data
    if len(data) > 4:
        return _decompress_record(data)
    raise ValueError("not a serialized R object (unknown compression)")


def _decompress_record(record: bytes) -> bytes:
    """One lazy-load record: 4-byte big-endian length, then zlib, or a type byte and data."""
    if len(record) < 5:
        raise ValueError(f"lazy-load record too short ({len(record)} bytes)")
    (size,) = struct.unpack(">I", record[:4])
    kind, body = record[4:5], record[5:]
    if kind == b"Z":
        raw = lzma.decompress(body)
    elif kind == b"2":
        raw = bz2.decompress(body)
    elif kind == b"0":
        raw = body
    else:
        try:
            raw = zlib.decompress(record[4:])
        except zlib.error as exc:
            raise ValueError(f"lazy-load record is not zlib/bzip2/xz compressed: {exc}") from None
    if len(raw) != size:
        raise ValueError(f"lazy-load record: header says {size} bytes, decompressed to {len(raw)}")
    return raw


def _unserialize(raw: bytes) -> Any:
    """An R serialization (``X\\n`` XDR, binary or ASCII) -> Python, via ``rdata``."""
    import rdata  # optional dependency (the "data" extra); imported only when R data are read

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Unknown file type: assumed RDS" from older rdata versions
        try:
            parsed = rdata.parser.parse_data(raw, extension=".rds")
        except TypeError:  # rdata without the extension keyword
            parsed = rdata.parser.parse_data(raw)
    return rdata.conversion.convert(parsed)


def read_lazyload_index(rdx_bytes: bytes) -> dict[str, tuple[int, int]]:
    """The ``.rdx`` index of a lazy-load database: ``{object name: (offset, length)}`` in the ``.rdb``."""
    index = _unserialize(_decompress_whole(rdx_bytes))
    if not isinstance(index, dict) or "variables" not in index:
        raise ValueError("not a lazy-load index: expected an R list with an element 'variables'")
    out = {}
    for name, pos in index["variables"].items():
        values = [int(v) for v in pos]
        if len(values) != 2 or values[0] < 0 or values[1] <= 0:
            raise ValueError(f"lazy-load index: bad (offset, length) for {name!r}: {values}")
        out[str(name)] = (values[0], values[1])
    return out


def read_lazyload_object(rdb_bytes: bytes, offset: int, length: int) -> Any:
    """The object stored at ``[offset, offset + length)`` of a ``.rdb`` file, converted by ``rdata``."""
    if offset < 0 or length <= 0 or offset + length > len(rdb_bytes):
        raise ValueError(f"lazy-load record [{offset}, {offset + length}) lies outside the database "
                         f"({len(rdb_bytes)} bytes)")
    return _unserialize(_decompress_record(rdb_bytes[offset:offset + length]))


def r_strings(obj: Any) -> list[str]:
    """A converted R character vector as a list of ``str`` (``NA`` -> ``""``)."""
    import numpy as np

    values = np.ma.filled(obj, "") if isinstance(obj, np.ma.MaskedArray) else obj
    if isinstance(values, str):
        return [values]
    out = []
    for v in list(values):
        if v is None or (isinstance(v, float) and v != v):
            out.append("")
        elif isinstance(v, bytes):
            out.append(v.decode("utf-8", errors="replace"))
        else:
            out.append(str(v))
    return out


def _find_db(package_root: Path) -> tuple[Path, Path] | None:
    for base in _DB_CANDIDATES:
        rdx, rdb = package_root / f"{base}.rdx", package_root / f"{base}.rdb"
        if rdx.is_file() and rdb.is_file():
            return rdx, rdb
    return None


def read_janeaustenr(package_root: str | Path) -> dict[str, str]:
    """``{title: text}`` of the six novels from an installed/extracted ``janeaustenr`` R package."""
    root = Path(package_root)
    if (root / _PKG_IN_DEB).is_dir():  # a dpkg -x root
        root = root / _PKG_IN_DEB
    found = _find_db(root)
    if found is None:
        raise AustenNotFoundError(f"no R lazy-load database ({' or '.join(b + '.rdx/.rdb' for b in _DB_CANDIDATES)})"
                                  f" under {root}. {HOW_TO_GET}")
    rdx, rdb = found
    index = read_lazyload_index(rdx.read_bytes())
    missing = [name for name in AUSTEN_NOVELS if name not in index]
    if missing:
        raise ValueError(f"{rdx}: the lazy-load database lacks {missing}; it holds {sorted(index)}")
    data = rdb.read_bytes()
    return {title: "\n".join(r_strings(read_lazyload_object(data, *index[name])))
            for name, title in AUSTEN_NOVELS.items()}


# -- getting the package ---------------------------------------------------------------------------------
def _extract_deb(deb: Path, dest: Path) -> Path:
    try:
        return extract_deb(deb, dest, dpkg=DPKG)
    except DebianFetchError as error:
        raise AustenNotFoundError(f"{error}. {HOW_TO_GET}") from None


def _download_janeaustenr(workdir: Path) -> Path:
    """``apt-get download`` + ``dpkg -x`` into ``workdir``; the extracted root."""
    try:
        return download_package(DEBIAN_PACKAGE, workdir, apt_get=APT_GET, dpkg=DPKG)
    except DebianFetchError as error:
        raise AustenNotFoundError(f"{error}. {HOW_TO_GET}") from None


def _build_novels_json(dest: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="tokenmix-austen-") as tmp:
        root = next((r for r in INSTALLED_ROOTS if _find_db(r) is not None), None)
        novels = read_janeaustenr(root if root is not None else _download_janeaustenr(Path(tmp)))
    dest.write_text(json.dumps(novels, ensure_ascii=False, indent=0), encoding="utf-8")


def _read_text_dir(directory: Path) -> dict[str, str]:
    files = sorted(directory.glob("*.txt"))
    novels = {}
    for f in files:
        text = f.read_text(encoding="utf-8-sig").replace("\r\n", "\n")
        if not text.strip():
            raise ValueError(f"{f} is empty")
        novels[f.stem] = text
    return novels


def load_austen(source: str | Path | None = None) -> dict[str, str]:
    """``{title: text}`` of the novels (see the module docstring for ``source``).

    Without ``source``: the six novels of ``r-cran-janeaustenr`` in publication order, cached in
    ``cache_dir()/austen/novels.json``. Raises :class:`AustenNotFoundError` saying how to get them.
    """
    if source is not None:
        path = Path(source).expanduser()
        if path.is_dir():
            if any(path.glob("*.txt")):
                return _read_text_dir(path)
            if _find_db(path) is not None or (path / _PKG_IN_DEB).is_dir():
                return read_janeaustenr(path)
            raise AustenNotFoundError(f"{path} holds no *.txt files and no janeaustenr R package. {HOW_TO_GET}")
        if path.is_file() and path.suffix == ".deb":
            with tempfile.TemporaryDirectory(prefix="tokenmix-austen-") as tmp:
                return read_janeaustenr(_extract_deb(path, Path(tmp) / "root"))
        raise AustenNotFoundError(f"source {str(path)!r} is neither a directory nor a .deb file. {HOW_TO_GET}")
    path = cached(CACHE_NAME, _build_novels_json)
    novels = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(novels, dict) or list(novels) != list(AUSTEN_NOVELS.values()):
        raise ValueError(f"{path} does not hold the six novels {list(AUSTEN_NOVELS.values())}; delete it "
                         f"(and {path.name}.sha256) to rebuild it from {DEBIAN_PACKAGE}")
    return novels


def locate_austen() -> str | None:
    """Where the default source's novels are, fetching nothing: the cached ``novels.json`` (while its
    checksum matches), else an installed ``janeaustenr`` (read into the cache on first use); None if neither."""
    found = lookup(CACHE_NAME)
    if found is not None:
        return str(found)
    root = next((r for r in INSTALLED_ROOTS if _find_db(r) is not None), None)
    return None if root is None else f"{root} (the installed R package; read into the data cache on first use)"


def _fetch_austen(progress: bool | None) -> str:
    """:func:`load_austen` (apt prints no progress of its own); the cached file's path."""
    load_austen()
    return str(cache_dir() / CACHE_NAME)


AUSTEN_SOURCE = DataSource("Jane Austen's novels (r-cran-janeaustenr)", how=HOW_TO_GET, locate=locate_austen,
                           fetch=_fetch_austen)
