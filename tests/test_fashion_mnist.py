"""Tests of tokenmix.data.fashion_mnist on small IDX fixtures written here (and the real data if installed)."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from tokenmix.data import FASHION_MNIST_CLASSES, load_fashion_mnist, normalize_images
from tokenmix.data import fashion_mnist as fm

SYSTEM_ROOT = Path("/usr/share/datasets/fashion-mnist")
NAMES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
         "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


def idx_bytes(array: np.ndarray, magic: int | None = None) -> bytes:
    magic = (0x0800 | array.ndim) if magic is None else magic
    header = struct.pack(">I", magic) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def fixture_arrays(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), rng.integers(0, 10, n, dtype=np.uint8)


def write_split(directory: Path, split: str, n: int = 5, *, gz: bool, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    directory.mkdir(parents=True, exist_ok=True)
    images, labels = fixture_arrays(n, seed)
    for name, array in zip(NAMES[split], (images, labels)):
        data = idx_bytes(array)
        if gz:
            (directory / f"{name}.gz").write_bytes(gzip.compress(data))
        else:
            (directory / name).write_bytes(data)
    return images, labels


@pytest.fixture
def no_system_data(monkeypatch, tmp_path):
    """Resolution must not depend on whether the Debian package is installed on this machine."""
    monkeypatch.setattr(fm, "DEFAULT_ROOT", tmp_path / "no-system-data")
    monkeypatch.delenv("TOKENMIX_DATA", raising=False)


@pytest.mark.parametrize("gz", [True, False], ids=["gzip", "plain"])
@pytest.mark.parametrize("split", ["train", "test"])
def test_reads_idx_files(tmp_path, no_system_data, split, gz):
    images, labels = write_split(tmp_path, split, n=5, gz=gz, seed=1)
    x, y = load_fashion_mnist(tmp_path, split)
    assert x.shape == (5, 28, 28) and x.dtype == torch.uint8
    assert y.shape == (5,) and y.dtype == torch.int64
    np.testing.assert_array_equal(x.numpy(), images)
    np.testing.assert_array_equal(y.numpy(), labels)
    x[0, 0, 0] = 7  # a writable tensor that owns its memory
    load_fashion_mnist(str(tmp_path), split)  # str roots work too


def test_mixed_gzip_and_plain_and_the_other_split_is_independent(tmp_path, no_system_data):
    images, labels = fixture_arrays(3, 2)
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx_bytes(images)))
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(idx_bytes(labels))
    x, y = load_fashion_mnist(tmp_path)
    np.testing.assert_array_equal(x.numpy(), images)
    np.testing.assert_array_equal(y.numpy(), labels)
    with pytest.raises(FileNotFoundError):
        load_fashion_mnist(tmp_path, "test")


def test_env_var_resolution(tmp_path, no_system_data, monkeypatch):
    sub_images, _ = write_split(tmp_path / "a" / "fashion-mnist", "train", n=2, gz=True, seed=3)
    flat_images, _ = write_split(tmp_path / "b", "train", n=4, gz=False, seed=4)
    monkeypatch.setenv("TOKENMIX_DATA", str(tmp_path / "a"))
    np.testing.assert_array_equal(load_fashion_mnist()[0].numpy(), sub_images)  # $TOKENMIX_DATA/fashion-mnist
    monkeypatch.setenv("TOKENMIX_DATA", str(tmp_path / "b"))
    np.testing.assert_array_equal(load_fashion_mnist()[0].numpy(), flat_images)  # $TOKENMIX_DATA itself
    # An explicit root wins over the variable.
    assert load_fashion_mnist(tmp_path / "a" / "fashion-mnist")[0].shape[0] == 2


def test_default_root_is_the_last_resort(tmp_path, no_system_data, monkeypatch):
    write_split(tmp_path / "system", "test", n=3, gz=True)
    monkeypatch.setattr(fm, "DEFAULT_ROOT", tmp_path / "system")
    monkeypatch.setenv("TOKENMIX_DATA", str(tmp_path / "empty"))
    assert load_fashion_mnist(split="test")[0].shape == (3, 28, 28)


def test_missing_files_say_how_to_get_them(tmp_path, no_system_data, monkeypatch):
    with pytest.raises(FileNotFoundError, match="dataset-fashion-mnist") as error:
        load_fashion_mnist(tmp_path)
    assert "TOKENMIX_DATA" in str(error.value) and str(tmp_path) in str(error.value)
    monkeypatch.setenv("TOKENMIX_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="apt-get install dataset-fashion-mnist"):
        load_fashion_mnist()


@pytest.mark.parametrize("corruption", ["magic", "labels_magic", "truncated", "too_long", "header", "bad_gzip",
                                        "count_mismatch", "label_range"])
def test_corrupt_files_raise_value_error(tmp_path, no_system_data, corruption):
    images, labels = fixture_arrays(4, 5)
    image_data, label_data = idx_bytes(images), idx_bytes(labels)
    if corruption == "magic":
        image_data = idx_bytes(images, magic=0x00000903)
    elif corruption == "labels_magic":
        label_data = idx_bytes(images)  # an images file where the labels should be
    elif corruption == "truncated":
        image_data = image_data[:-10]
    elif corruption == "too_long":
        image_data = image_data + b"\x00"
    elif corruption == "header":
        image_data = image_data[:6]
    elif corruption == "count_mismatch":
        label_data = idx_bytes(labels[:3])
    elif corruption == "label_range":
        label_data = idx_bytes(np.array([0, 1, 10, 2], dtype=np.uint8))
    (tmp_path / "train-images-idx3-ubyte").write_bytes(image_data)
    if corruption == "bad_gzip":
        (tmp_path / "train-images-idx3-ubyte").unlink()
        (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(image_data)[:-20])
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(label_data)
    with pytest.raises(ValueError):
        load_fashion_mnist(tmp_path)


def test_bad_split_raises(tmp_path):
    with pytest.raises(ValueError, match="split"):
        load_fashion_mnist(tmp_path, "validation")


def test_classes_and_normalize():
    assert len(FASHION_MNIST_CLASSES) == 10 and FASHION_MNIST_CLASSES[9] == "Ankle boot"
    x = torch.tensor([[[0, 255]]], dtype=torch.uint8)
    out = normalize_images(x, mean=0.5, std=0.5)
    assert out.shape == (1, 1, 1, 2) and out.dtype == torch.float32
    torch.testing.assert_close(out.flatten(), torch.tensor([-1.0, 1.0]))
    with pytest.raises(ValueError):
        normalize_images(x.float())


HAVE_SYSTEM_DATA = SYSTEM_ROOT.is_dir() and any(SYSTEM_ROOT.glob("train-images-idx3-ubyte*"))


@pytest.mark.skipif(not HAVE_SYSTEM_DATA, reason="not installed (apt-get install dataset-fashion-mnist)")
def test_real_data_smoke(monkeypatch):
    monkeypatch.delenv("TOKENMIX_DATA", raising=False)
    x, y = load_fashion_mnist(split="train")
    assert x.shape == (60_000, 28, 28) and x.dtype == torch.uint8
    assert y.shape == (60_000,) and y.dtype == torch.int64
    assert torch.bincount(y).tolist() == [6_000] * 10
