"""Fashion-MNIST (Xiao, Rasul, Vollgraf, 2017) from its four IDX files, fetched on first use when missing.

The files are the ones the dataset is distributed as, gzipped (``.gz``) or not::

    train-images-idx3-ubyte   train-labels-idx1-ubyte   (60,000 images)
    t10k-images-idx3-ubyte    t10k-labels-idx1-ubyte    (10,000 images)

Where they are looked for (the first directory holding both files of the split wins):

1. ``root`` when given (the directory itself, then ``root/fashion-mnist``); nothing else then, and
   nothing is fetched;
2. otherwise ``$TOKENMIX_DATA/fashion-mnist`` and ``$TOKENMIX_DATA``, when the variable is set;
3. then :data:`DEFAULT_ROOT`, ``/usr/share/datasets/fashion-mnist`` (Debian/Ubuntu package
   ``dataset-fashion-mnist``);
4. then the fetched copy, :data:`CACHE_NAME` in the data cache (:func:`tokenmix.data.cache.cache_dir`:
   ``$TOKENMIX_DATA`` or ``~/.cache/tokenmix``), checked against its recorded SHA-256.

When none holds them, :func:`fetch_fashion_mnist` fills the fetched copy: ``apt-get download
dataset-fashion-mnist`` + ``dpkg -x`` (:mod:`.debian`) where apt is available, else (or when that fails) the
four ``*-ubyte.gz`` files from the dataset's published URL (:data:`URL`), each checked against its published
MD5 (:data:`MD5`), with a progress bar. (Debian's copies hold the published gzip streams under normalised gzip
headers, so the published MD5s do not apply to them as they are: their decompressed data are checked against
:data:`IDX_SHA256` instead.)
When both fail, :class:`FashionMNISTNotFoundError` says what was tried and how to get the files by hand.

IDX format: a big-endian header ``0x00 0x00 <type> <ndim>`` (type 0x08 = unsigned byte), then ``ndim``
big-endian uint32 sizes, then the data, row-major. Images have magic ``0x00000803`` (N, rows, cols),
labels ``0x00000801`` (N,).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import sys
import tempfile
import zlib
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from .cache import ChecksumError, cache_dir, cached, lookup
from .debian import APT_GET, DPKG, DebianFetchError, download_package
from .download import download
from .source import DataSource

__all__ = [
    "CACHE_NAME",
    "DEBIAN_PACKAGE",
    "DEFAULT_ROOT",
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_MEAN",
    "FASHION_MNIST_SOURCE",
    "FASHION_MNIST_STD",
    "FashionMNISTNotFoundError",
    "IDX_SHA256",
    "MD5",
    "PUBLISHED_SHAPES",
    "URL",
    "fashion_mnist_shapes",
    "fetch_fashion_mnist",
    "load_fashion_mnist",
    "locate_fashion_mnist",
    "normalize_images",
]

FASHION_MNIST_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)
# Per-pixel mean and standard deviation of the training images, pixels scaled to [0, 1].
FASHION_MNIST_MEAN = 0.2860
FASHION_MNIST_STD = 0.3530

DEFAULT_ROOT = Path("/usr/share/datasets/fashion-mnist")
ENV_VAR = "TOKENMIX_DATA"
DEBIAN_PACKAGE = "dataset-fashion-mnist"
CACHE_NAME = "fetched/fashion-mnist"  # the fetched copy, inside the data cache
# The published files and their MD5 checksums (github.com/zalandoresearch/fashion-mnist, "Get the Data").
URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
MD5 = {
    "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
    "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
    "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
    "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
}
# SHA-256 of each file's decompressed IDX data. Debian's copies hold the published gzip streams byte for byte
# with the gzip header normalised (no file name; restoring the name and the mtime, 2017-08-31, gives back the
# published MD5s), so their data are checked against these, computed from them.
IDX_SHA256 = {
    "train-images-idx3-ubyte.gz": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    "train-labels-idx1-ubyte.gz": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    "t10k-images-idx3-ubyte.gz": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    "t10k-labels-idx1-ubyte.gz": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
}
# (images, rows, cols) of each split of the published data set.
PUBLISHED_SHAPES = {"train": (60_000, 28, 28), "test": (10_000, 28, 28)}

_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
_IMAGES_MAGIC = 0x00000803
_LABELS_MAGIC = 0x00000801
_IN_DEB = Path("usr/share/datasets/fashion-mnist")  # where the package keeps the files

_HOW_TO_GET = (
    "To get Fashion-MNIST by hand, either install the Debian/Ubuntu package (`apt-get install "
    f"dataset-fashion-mnist`, which puts it in {DEFAULT_ROOT}), or download the four IDX files "
    f"({', '.join(MD5)}, from {URL}; MD5s in https://github.com/zalandoresearch/fashion-mnist) into a directory "
    f"and pass it as load_fashion_mnist(root=...) or set {ENV_VAR}=<that directory>."
)


class FashionMNISTNotFoundError(FileNotFoundError):
    """The files are not found and could not be fetched; the message says what was tried and how to get them."""


def _candidate_dirs(root: str | Path | None) -> list[Path]:
    if root is not None:
        root = Path(root).expanduser()
        return [root, root / "fashion-mnist"]
    dirs = []
    env = os.environ.get(ENV_VAR)
    if env:
        env_root = Path(env).expanduser()
        dirs += [env_root / "fashion-mnist", env_root]
    return dirs + [DEFAULT_ROOT]


def _find(directory: Path, name: str) -> Path | None:
    for candidate in (directory / name, directory / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def _in(directory: Path, split: str) -> tuple[Path, Path] | None:
    images, labels = (_find(directory, name) for name in _FILES[split])
    return None if images is None or labels is None else (images, labels)


def _search(root: str | Path | None, split: str) -> tuple[tuple[Path, Path] | None, list[Path]]:
    """((images, labels) paths of ``split``, or None; the directories searched), fetching nothing."""
    searched = _candidate_dirs(root)
    for directory in searched:
        if (found := _in(directory, split)) is not None:
            return found, searched
    if root is not None:
        return None, searched
    searched.append(cache_dir() / CACHE_NAME)  # the fetched copy, only while its checksum matches
    fetched = lookup(CACHE_NAME)
    return (None if fetched is None else _in(fetched, split)), searched


def locate_fashion_mnist() -> str | None:
    """Where both splits are found (see the module docstring), fetching nothing; None when missing."""
    found = {split: _search(None, split)[0] for split in _FILES}
    if any(paths is None for paths in found.values()):
        return None
    dirs = {split: str(paths[0].parent) for split, paths in found.items()}
    return dirs["train"] if dirs["train"] == dirs["test"] else "; ".join(f"{s}: {d}" for s, d in dirs.items())


def _say(message: str, progress: bool | None) -> None:
    if progress is not False:
        print(message, file=sys.stderr, flush=True)


def _from_debian(dest: Path, progress: bool | None) -> None:
    if shutil.which(APT_GET) is not None:
        _say(f"fetching Fashion-MNIST: {APT_GET} download {DEBIAN_PACKAGE} (about 31 MB)", progress)
    with tempfile.TemporaryDirectory(prefix="tokenmix-fashion-mnist-") as tmp:
        files = download_package(DEBIAN_PACKAGE, Path(tmp), apt_get=APT_GET, dpkg=DPKG) / _IN_DEB
        missing = [name for name in MD5 if not (files / name).is_file()]
        if missing:
            raise DebianFetchError(f"the package {DEBIAN_PACKAGE} has no {', '.join(missing)} in /{_IN_DEB}")
        for name in MD5:
            shutil.copyfile(files / name, dest / name)
            _check_content(dest / name, IDX_SHA256[name])


def _check_content(path: Path, sha256: str) -> None:
    """Raise ChecksumError unless the decompressed content of the gzip file ``path`` has SHA-256 ``sha256``."""
    digest = hashlib.sha256()
    try:
        with gzip.open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    except (OSError, EOFError, zlib.error) as error:
        raise ChecksumError(f"{path.name}: corrupt gzip data ({error})") from None
    if digest.hexdigest() != sha256:
        raise ChecksumError(f"{path.name}: its data have SHA-256 {digest.hexdigest()}, expected {sha256} (the "
                            f"published data set's)")


def _from_url(dest: Path, progress: bool | None) -> None:
    _say(f"fetching Fashion-MNIST: the four files from {URL} (about 30 MB)", progress)
    for name, md5 in MD5.items():
        download(URL + name, dest / name, md5=md5, progress=progress)


def _fetch_into(dest: Path, progress: bool | None) -> None:
    dest.mkdir()
    failures = []
    for how, step in ((f"`{APT_GET} download {DEBIAN_PACKAGE}`", _from_debian), (f"download from {URL}", _from_url)):
        try:
            step(dest, progress)
            return
        except (OSError, ValueError) as error:  # DebianFetchError, URLError, ChecksumError
            failures.append(f"{how}: {error}")
    raise FashionMNISTNotFoundError(f"fetching Fashion-MNIST failed: {'; '.join(failures)}. {_HOW_TO_GET}")


def fetch_fashion_mnist(progress: bool | None = None) -> Path:
    """The fetched copy (the four ``.gz`` files in ``cache_dir() / CACHE_NAME``), fetched first when it is
    missing or no longer matches its recorded checksum: with apt, else from :data:`URL` (module docstring).

    ``progress``: a line per step and a download bar on stderr (``None``: the bar only on a terminal).
    Raises :class:`FashionMNISTNotFoundError` naming each attempt's failure and how to get the files by hand."""
    return cached(CACHE_NAME, lambda dest: _fetch_into(dest, progress))


def _fetch_to_str(progress: bool | None) -> str:
    return str(fetch_fashion_mnist(progress))


def _parse_header(raw: bytes, path: Path, magic: int) -> tuple[tuple[int, ...], int]:
    """(the shape, the header's length in bytes) of an IDX file's start ``raw``."""
    if len(raw) < 4:
        raise ValueError(f"{path}: not an IDX file (only {len(raw)} bytes)")
    found = int.from_bytes(raw[:4], "big")
    if found != magic:
        raise ValueError(f"{path}: not an IDX file of the expected kind: magic number 0x{found:08x}, "
                         f"expected 0x{magic:08x}")
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: truncated IDX header ({len(raw)} bytes, need {header})")
    return tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4)), header


def _idx_shape(path: Path, magic: int) -> tuple[int, ...]:
    """The shape an IDX file's header states, reading only the header."""
    with open(path, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    try:
        with (gzip.open(path, "rb") if gzipped else open(path, "rb")) as f:
            raw = f.read(4 + 4 * (magic & 0xFF))
    except (OSError, EOFError, zlib.error) as error:
        raise ValueError(f"{path}: corrupt gzip data ({error})") from error
    return _parse_header(raw, path, magic)[0]


def fashion_mnist_shapes(root: str | Path | None = None) -> dict[str, tuple[int, int, int]] | None:
    """``{split: (images, rows, cols)}`` without reading any images: from the headers of the files
    :func:`load_fashion_mnist` would read, or :data:`PUBLISHED_SHAPES` for a split it would fetch. None when
    ``root`` is given and does not hold both splits (loading would fail)."""
    shapes = {}
    for split in _FILES:
        found = _search(root, split)[0]
        if found is None and root is not None:
            return None
        shapes[split] = PUBLISHED_SHAPES[split] if found is None else _idx_shape(found[0], _IMAGES_MAGIC)
    return shapes


def _read_idx(path: Path, magic: int) -> np.ndarray:
    """The array stored in the IDX file ``path`` (gzipped or not), checking its magic number and size."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":  # gzip, whatever the file is called
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as error:
            raise ValueError(f"{path}: corrupt gzip data ({error})") from error
    shape, header = _parse_header(raw, path, magic)
    expected = header + int(np.prod(shape, dtype=np.int64))
    if len(raw) != expected:
        raise ValueError(f"{path}: size mismatch: the header says shape {shape} ({expected} bytes in all), "
                         f"but the file has {len(raw)} bytes")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape).copy()


def load_fashion_mnist(root: str | Path | None = None, split: str = "train") -> tuple[Tensor, Tensor]:
    """Fashion-MNIST ``split`` (``"train"``: 60,000 images, ``"test"``: 10,000) as
    ``(images, labels)``: ``images`` uint8 of shape (N, 28, 28) (0 = background), ``labels`` int64 (N,)
    in ``[0, 10)`` indexing :data:`FASHION_MNIST_CLASSES`.

    See the module docstring for where the files are looked for and how they are fetched when missing
    (without ``root``). Missing files raise ``FileNotFoundError`` (:class:`FashionMNISTNotFoundError` when
    fetching failed too) saying how to get them; a corrupt file raises ``ValueError`` naming it.
    """
    if split not in _FILES:
        raise ValueError(f"load_fashion_mnist: split must be 'train' or 'test', got {split!r}")
    found, searched = _search(root, split)
    if found is None:
        images_name, labels_name = _FILES[split]
        missing = (f"Fashion-MNIST {split} files ({images_name}[.gz], {labels_name}[.gz]) not found in: "
                   f"{', '.join(str(d) for d in searched)}")
        if root is not None:
            raise FileNotFoundError(f"{missing}. {_HOW_TO_GET}")
        try:
            fetched = fetch_fashion_mnist()
        except FashionMNISTNotFoundError as error:
            raise FashionMNISTNotFoundError(f"{missing}; {error}") from None
        found = tuple(fetched / f"{name}.gz" for name in _FILES[split])
    images_path, labels_path = found
    images = _read_idx(images_path, _IMAGES_MAGIC)
    labels = _read_idx(labels_path, _LABELS_MAGIC)
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{images_path} has {images.shape[0]} images but {labels_path} has {labels.shape[0]} labels")
    if labels.size and int(labels.max()) >= len(FASHION_MNIST_CLASSES):
        raise ValueError(f"{labels_path}: label {int(labels.max())} is out of range "
                         f"[0, {len(FASHION_MNIST_CLASSES)})")
    return torch.from_numpy(images), torch.from_numpy(labels.astype(np.int64))


def normalize_images(images: Tensor, *, mean: float = FASHION_MNIST_MEAN, std: float = FASHION_MNIST_STD,
                     dtype: torch.dtype = torch.float32) -> Tensor:
    """uint8 images (B, H, W) -> float (B, 1, H, W), ``(pixels / 255 - mean) / std``."""
    if not isinstance(images, Tensor) or images.dtype != torch.uint8 or images.dim() != 3:
        got = f"{images.dtype} {tuple(images.shape)}" if isinstance(images, Tensor) else type(images).__name__
        raise ValueError(f"normalize_images: expects uint8 images of shape (B, H, W), got {got}")
    return ((images.to(dtype) / 255.0 - mean) / std)[:, None]


FASHION_MNIST_SOURCE = DataSource("Fashion-MNIST", how=_HOW_TO_GET, locate=locate_fashion_mnist,
                                  fetch=_fetch_to_str)
