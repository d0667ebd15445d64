"""Fashion-MNIST (Xiao, Rasul, Vollgraf, 2017) from its four IDX files.

The files are the ones the dataset is distributed as, gzipped (``.gz``) or not::

    train-images-idx3-ubyte   train-labels-idx1-ubyte   (60,000 images)
    t10k-images-idx3-ubyte    t10k-labels-idx1-ubyte    (10,000 images)

Where they are looked for (the first directory holding both files of the split wins):

1. ``root`` when given (the directory itself, then ``root/fashion-mnist``); nothing else then;
2. otherwise ``$TOKENMIX_DATA/fashion-mnist`` and ``$TOKENMIX_DATA``, when the variable is set;
3. then :data:`DEFAULT_ROOT`, ``/usr/share/datasets/fashion-mnist`` (Debian/Ubuntu package
   ``dataset-fashion-mnist``).

IDX format: a big-endian header ``0x00 0x00 <type> <ndim>`` (type 0x08 = unsigned byte), then ``ndim``
big-endian uint32 sizes, then the data, row-major. Images have magic ``0x00000803`` (N, rows, cols),
labels ``0x00000801`` (N,).
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_MEAN",
    "FASHION_MNIST_STD",
    "DEFAULT_ROOT",
    "load_fashion_mnist",
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

_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
_IMAGES_MAGIC = 0x00000803
_LABELS_MAGIC = 0x00000801

_HOW_TO_GET = (
    "To get Fashion-MNIST, either install the Debian/Ubuntu package (`apt-get install dataset-fashion-mnist`, "
    f"which puts it in {DEFAULT_ROOT}), or download the four IDX files (train-images-idx3-ubyte.gz, "
    "train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz, from "
    "https://github.com/zalandoresearch/fashion-mnist) into a directory and pass it as "
    f"load_fashion_mnist(root=...) or set {ENV_VAR}=<that directory>."
)


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


def _read_idx(path: Path, magic: int) -> np.ndarray:
    """The array stored in the IDX file ``path`` (gzipped or not), checking its magic number and size."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":  # gzip, whatever the file is called
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as error:
            raise ValueError(f"{path}: corrupt gzip data ({error})") from error
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
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    expected = header + int(np.prod(shape, dtype=np.int64))
    if len(raw) != expected:
        raise ValueError(f"{path}: size mismatch: the header says shape {shape} ({expected} bytes in all), "
                         f"but the file has {len(raw)} bytes")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape).copy()


def load_fashion_mnist(root: str | Path | None = None, split: str = "train") -> tuple[Tensor, Tensor]:
    """Fashion-MNIST ``split`` (``"train"``: 60,000 images, ``"test"``: 10,000) as
    ``(images, labels)``: ``images`` uint8 of shape (N, 28, 28) (0 = background), ``labels`` int64 (N,)
    in ``[0, 10)`` indexing :data:`FASHION_MNIST_CLASSES`.

    See the module docstring for where the files are looked for. Missing files raise
    ``FileNotFoundError`` saying how to get them; a corrupt file raises ``ValueError`` naming it.
    """
    if split not in _FILES:
        raise ValueError(f"load_fashion_mnist: split must be 'train' or 'test', got {split!r}")
    images_name, labels_name = _FILES[split]
    searched = _candidate_dirs(root)
    for directory in searched:
        images_path, labels_path = _find(directory, images_name), _find(directory, labels_name)
        if images_path is not None and labels_path is not None:
            break
    else:
        where = ", ".join(str(d) for d in searched)
        raise FileNotFoundError(f"Fashion-MNIST {split} files ({images_name}[.gz], {labels_name}[.gz]) not found "
                                f"in: {where}. {_HOW_TO_GET}")
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
