"""Tests of tokenmix.data.fashion_mnist on small IDX fixtures written here (and the real data if installed)."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from tokenmix.data import FASHION_MNIST_CLASSES, load_fashion_mnist, normalize_images
from tokenmix.data import debian
from tokenmix.data import fashion_mnist as fm
from tokenmix.data.cache import ChecksumError, checksum
from tokenmix.data.download import download

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
    """Resolution must not depend on whether the Debian package is installed on this machine, on a fetched
    copy in the user's cache, or on apt and the network: fetching fails at once."""
    monkeypatch.setattr(fm, "DEFAULT_ROOT", tmp_path / "no-system-data")
    monkeypatch.delenv("TOKENMIX_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the default cache, ~/.cache/tokenmix
    monkeypatch.setattr(fm, "APT_GET", "tokenmix-test-no-such-apt-get")
    monkeypatch.setattr(fm, "URL", (tmp_path / "no-such-server").as_uri() + "/")


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
    with pytest.raises(fm.FashionMNISTNotFoundError, match="apt-get install dataset-fashion-mnist") as error:
        load_fashion_mnist()  # not found, so fetched: neither apt nor the download works here
    message = str(error.value)
    assert "`tokenmix-test-no-such-apt-get` is not available" in message  # what was tried, and why it failed
    assert f"download from {fm.URL}" in message and "8d4fb7e6c68d591d4c3dfef9ec88bf0d" not in message
    assert "MD5s in https://github.com/zalandoresearch/fashion-mnist" in message  # how to get them by hand
    assert not (tmp_path / "fetched" / "fashion-mnist").exists()  # nothing half-fetched left in the cache


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


# -- fetching ------------------------------------------------------------------------------------------------
def published_fixture(directory: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """A tiny data set as the four gzipped files of the published one; its arrays per split."""
    return {"train": write_split(directory, "train", n=6, gz=True, seed=7),
            "test": write_split(directory, "test", n=3, gz=True, seed=8)}


def digests(directory: Path, of_content: bool) -> dict[str, str]:
    """MD5 of each of the four files, or SHA-256 of its decompressed content."""
    if of_content:
        return {n: hashlib.sha256(gzip.decompress((directory / n).read_bytes())).hexdigest() for n in fm.MD5}
    return {n: hashlib.md5((directory / n).read_bytes()).hexdigest() for n in fm.MD5}


@pytest.fixture
def served(tmp_path, no_system_data, monkeypatch) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The tiny data set published at a file:// URL with its MD5s; the data cache in tmp_path / "cache"."""
    arrays = published_fixture(tmp_path / "server")
    monkeypatch.setattr(fm, "URL", (tmp_path / "server").as_uri() + "/")
    monkeypatch.setattr(fm, "MD5", digests(tmp_path / "server", of_content=False))
    monkeypatch.setenv("TOKENMIX_DATA", str(tmp_path / "cache"))
    return arrays


def test_fetches_the_published_files_checks_them_and_caches_them(tmp_path, served, capsys):
    x, y = load_fashion_mnist(split="test")  # found nowhere (no apt either): downloaded
    np.testing.assert_array_equal(x.numpy(), served["test"][0])
    np.testing.assert_array_equal(y.numpy(), served["test"][1])
    fetched = tmp_path / "cache" / "fetched" / "fashion-mnist"
    assert sorted(p.name for p in fetched.iterdir()) == sorted(fm.MD5)
    assert (fetched.parent / "fashion-mnist.sha256").read_text().strip() == checksum(fetched)
    assert f"fetching Fashion-MNIST: the four files from {fm.URL}" in capsys.readouterr().err
    shutil.rmtree(tmp_path / "server")  # from now on the cache alone serves them
    np.testing.assert_array_equal(load_fashion_mnist(split="train")[0].numpy(), served["train"][0])
    assert fm.locate_fashion_mnist() == str(fetched)
    (fetched / "t10k-labels-idx1-ubyte.gz").write_bytes(b"tampered")  # no longer matches its record: not used
    assert fm.locate_fashion_mnist() is None


def test_a_wrong_checksum_keeps_nothing(tmp_path, served, monkeypatch):
    monkeypatch.setattr(fm, "MD5", {**fm.MD5, "t10k-labels-idx1-ubyte.gz": "0" * 32})
    with pytest.raises(fm.FashionMNISTNotFoundError, match=r"t10k-labels-idx1-ubyte.gz: MD5 [0-9a-f]{32}, "
                                                         r"expected 0{32}"):
        load_fashion_mnist()
    assert not (tmp_path / "cache" / "fetched" / "fashion-mnist").exists()
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]  # no .gz, no .part, no record


def test_download_keeps_only_a_file_with_the_right_md5(tmp_path):
    source = tmp_path / "a.bin"
    source.write_bytes(b"abc" * 100_000)
    right = hashlib.md5(source.read_bytes()).hexdigest()
    assert download(source.as_uri(), tmp_path / "b.bin", md5=right, progress=False).read_bytes() == source.read_bytes()
    with pytest.raises(ChecksumError, match=f"MD5 {right}, expected {'f' * 32}"):
        download(source.as_uri(), tmp_path / "c.bin", md5="f" * 32, progress=False)
    with pytest.raises(OSError):
        download((tmp_path / "missing.bin").as_uri(), tmp_path / "d.bin", md5=right, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "b.bin"]


FAKE_APT_GET = """#!/bin/sh
# apt-get for the tests: logs its arguments; "download PKG" writes PKG_1.0_all.deb, a tar of $FAKE_DEB_ROOT
# (after an "apt-get update" only, when $FAKE_APT_NEEDS_UPDATE is set)
echo "$@" >> "$FAKE_APT_LOG"
[ "$1" = download ] || exit 0
if [ -n "$FAKE_APT_NEEDS_UPDATE" ] && ! grep -qx update "$FAKE_APT_LOG"; then
    echo "E: Unable to locate package $2" >&2
    exit 100
fi
tar -czf "$2_1.0_all.deb" -C "$FAKE_DEB_ROOT" .
"""
FAKE_DPKG = """#!/bin/sh
# dpkg for the tests: "-x DEB DEST" unpacks the tar the fake apt-get wrote
[ "$1" = -x ] || exit 2
mkdir -p "$3" && tar -xzf "$2" -C "$3"
"""


@pytest.fixture
def fake_apt(tmp_path, monkeypatch) -> Path:
    """Fake ``apt-get`` and ``dpkg`` first on PATH; returns the root whose files the fake package holds."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("apt-get", FAKE_APT_GET), ("dpkg", FAKE_DPKG)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_APT_LOG", str(tmp_path / "apt.log"))
    monkeypatch.setenv("FAKE_DEB_ROOT", str(tmp_path / "deb-root"))
    monkeypatch.delenv("FAKE_APT_NEEDS_UPDATE", raising=False)
    return tmp_path / "deb-root"


def test_fetches_with_apt_where_there_is_apt(tmp_path, no_system_data, fake_apt, monkeypatch):
    packaged = fake_apt / "usr" / "share" / "datasets" / "fashion-mnist"
    arrays = published_fixture(packaged)
    monkeypatch.setattr(fm, "APT_GET", "apt-get")
    monkeypatch.setattr(fm, "IDX_SHA256", digests(packaged, of_content=True))
    monkeypatch.setenv("TOKENMIX_DATA", str(tmp_path / "cache"))
    x, y = load_fashion_mnist()
    np.testing.assert_array_equal(x.numpy(), arrays["train"][0])
    np.testing.assert_array_equal(y.numpy(), arrays["train"][1])
    assert (tmp_path / "apt.log").read_text().splitlines() == ["download dataset-fashion-mnist"]
    # A package whose data are not the published ones is refused; the download (unreachable here) is tried next.
    shutil.rmtree(tmp_path / "cache")
    monkeypatch.setattr(fm, "IDX_SHA256", {**fm.IDX_SHA256, "train-images-idx3-ubyte.gz": "0" * 64})
    with pytest.raises(fm.FashionMNISTNotFoundError) as error:
        load_fashion_mnist()
    message = str(error.value)
    assert "train-images-idx3-ubyte.gz: its data have SHA-256" in message and f"download from {fm.URL}" in message


def test_the_shared_apt_helper_updates_when_the_first_download_fails(tmp_path, fake_apt, monkeypatch):
    (fake_apt / "usr" / "share").mkdir(parents=True)
    (fake_apt / "usr" / "share" / "x.txt").write_text("packaged")
    monkeypatch.setenv("FAKE_APT_NEEDS_UPDATE", "1")
    (tmp_path / "work").mkdir()
    root = debian.download_package("some-package", tmp_path / "work")
    assert root == tmp_path / "work" / "root" and (root / "usr" / "share" / "x.txt").read_text() == "packaged"
    assert (tmp_path / "apt.log").read_text().splitlines() == ["download some-package", "update",
                                                                 "download some-package"]
    shutil.rmtree(fake_apt)  # now the download fails for good
    (tmp_path / "again").mkdir()
    with pytest.raises(debian.DebianFetchError, match="`apt-get download other` failed"):
        debian.download_package("other", tmp_path / "again")
    with pytest.raises(debian.DebianFetchError, match="`no-such-apt-get` is not available"):
        debian.download_package("other", tmp_path / "again", apt_get="no-such-apt-get")


def test_shapes_come_from_the_headers_alone(tmp_path, no_system_data, monkeypatch):
    images, labels = fixture_arrays(7, 3)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx_bytes(images)[:-100]))
    (tmp_path / "d" / "train-labels-idx1-ubyte").write_bytes(idx_bytes(labels))
    write_split(tmp_path / "d", "test", n=3, gz=False)
    assert fm.fashion_mnist_shapes(tmp_path / "d") == {"train": (7, 28, 28), "test": (3, 28, 28)}
    with pytest.raises(ValueError, match="size mismatch"):  # the images were never read to say so
        load_fashion_mnist(tmp_path / "d")
    assert fm.fashion_mnist_shapes(tmp_path / "empty") is None  # a root without the files: loading fails too
    assert fm.fashion_mnist_shapes() == fm.PUBLISHED_SHAPES  # found nowhere: the published ones will be fetched
    monkeypatch.setenv("TOKENMIX_DATA", str(tmp_path / "d"))
    assert fm.fashion_mnist_shapes()["test"] == (3, 28, 28)


# Debian's gzip headers name no file and carry the package's build time; the published files were written
# at these times (2017-08-31), with the file name in the header.
PUBLISHED_MTIMES = {"train": 1504176606, "t10k": 1504176627}


@pytest.mark.skipif(not HAVE_SYSTEM_DATA, reason="not installed (apt-get install dataset-fashion-mnist)")
def test_the_debian_files_are_the_published_ones():
    """The installed files' MD5s differ from the published ones, but only by their gzip header: restoring the
    published header gives the published MD5s; and their data have the SHA-256s the apt route checks."""
    for name, md5 in fm.MD5.items():
        raw = (SYSTEM_ROOT / name).read_bytes()
        assert raw[3] == 0 and hashlib.md5(raw).hexdigest() != md5  # no file name in the header
        header = b"\x1f\x8b\x08\x08" + struct.pack("<I", PUBLISHED_MTIMES[name.split("-")[0]]) + raw[8:10]
        assert hashlib.md5(header + name.removesuffix(".gz").encode() + b"\0" + raw[10:]).hexdigest() == md5
        assert hashlib.sha256(gzip.decompress(raw)).hexdigest() == fm.IDX_SHA256[name]
