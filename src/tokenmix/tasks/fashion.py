"""Fashion-MNIST (Xiao et al. 2017) as two tasks over the same splits.

* ``"fashion"`` (kind ``"image"``): ``Split(images=(M, 1, 28, 28) float32, labels=(M,))``, images normalised by
  :func:`tokenmix.data.normalize_images`; the model is a ViT over 4 x 4 patches (``build_model``).
* ``"fashion_pixels"`` (kind ``"classification"``): the Long Range Arena "Image" style -- each image is a
  784-long sequence of its pixels in row-major order, each pixel's 8-bit intensity being its token id
  (``0..255``, ``vocab_size = 256``). Every position is real (``lengths`` are all 784, masks all True); the
  ``pad_id`` 0 is never used as padding (it coincides with the intensity 0, which is harmless since nothing
  is padded).

Splits: the 60,000 training images are cut into a training part and a validation part taken off the
**end** of the file: ``val`` = the last ``val_size`` images (5,000 with the "paper" preset), ``train`` = the
first ``train_size`` of the images before them; ``test`` = the first ``test_size`` of the 10,000 test images.
So validation images are never training images, and the "quick" splits are subsets of the "paper" ones
(their validation images are among the last 5,000). Presets: "quick" 6,000 / 1,000 / 1,000; "paper" every
image: 55,000 / 5,000 / 10,000. ``seed`` is accepted for uniformity with the other tasks; the splits do not
depend on it (they are fixed slices).

``root`` is passed to :func:`tokenmix.data.load_fashion_mnist` (``None`` = its default lookup:
``$TOKENMIX_DATA``, then ``/usr/share/datasets/fashion-mnist``, then the fetched copy in the data cache, and
fetching the files when none holds them); missing files raise its ``FileNotFoundError``, which says what was
tried and how to get them. Without reading any image, ``stated_shape`` gives the split sizes from the files'
IDX headers, or from the published 60,000 / 10,000 images where the files will be fetched.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from ..data.fashion_mnist import FASHION_MNIST_SOURCE, fashion_mnist_shapes, load_fashion_mnist, normalize_images
from ..validate import is_positive_int
from .base import Task, TaskShape
from .batches import Split
from .registry import register_task

__all__ = ["FashionTask", "FashionPixelsTask"]

PRESETS = {
    "quick": dict(train_size=6_000, val_size=1_000, test_size=1_000),
    "paper": dict(train_size=None, val_size=5_000, test_size=None),  # None: all there are
}
_SOURCE = "Xiao, Rasul, Vollgraf (2017) Fashion-MNIST; pixel sequences after Tay et al. (2021) LRA Image"


def _options(task: type[Task], preset: str, seed: int, root: str | Path | None, train_size: int | None,
             val_size: int | None, test_size: int | None) -> dict[str, int | None]:
    """The requested split sizes (``None``: all there are), with the preset's filled in, after checking the
    options."""
    if preset not in PRESETS:
        task._fail(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        task._fail(f"seed must be an int, got {seed!r}")
    if root is not None and not isinstance(root, (str, Path)):
        task._fail(f"root must be a path (str or pathlib.Path) or None, got {root!r}")
    sizes = {}
    for name, value in (("train_size", train_size), ("val_size", val_size), ("test_size", test_size)):
        value = PRESETS[preset][name] if value is None else value
        if value is not None and not is_positive_int(value):
            task._fail(f"{name} must be a positive int or None, got {value!r}")
        sizes[name] = value
    return sizes


def _counts(task: type[Task], sizes: dict[str, int | None], n: int, n_test: int) -> dict[str, int]:
    """Each split's number of images, from the files' ``n`` training and ``n_test`` test images."""
    n_val = sizes["val_size"]
    if n_val >= n:
        task._fail(f"val_size={n_val} leaves no training images: the training file has {n}")
    cut = n - n_val
    n_train = cut if sizes["train_size"] is None else min(sizes["train_size"], cut)
    n_test = n_test if sizes["test_size"] is None else min(sizes["test_size"], n_test)
    if n_test == 0:
        task._fail("the test file has no images")
    return {"train": n_train, "val": n_val, "test": n_test}


def _raw_splits(task: type[Task], preset: str, seed: int, root: str | Path | None, train_size: int | None,
                val_size: int | None, test_size: int | None) -> dict[str, tuple[Tensor, Tensor]]:
    """uint8 images (M, 28, 28) and int64 labels of each split, after checking the options."""
    sizes = _options(task, preset, seed, root, train_size, val_size, test_size)
    train_images, train_labels = load_fashion_mnist(root, "train")  # FileNotFoundError says how to get it
    test_images, test_labels = load_fashion_mnist(root, "test")
    counts = _counts(task, sizes, train_images.shape[0], test_images.shape[0])
    cut = train_images.shape[0] - counts["val"]
    return {
        "train": (train_images[:counts["train"]], train_labels[:counts["train"]]),
        "val": (train_images[cut:], train_labels[cut:]),
        "test": (test_images[:counts["test"]], test_labels[:counts["test"]]),
    }


class _FashionMNIST(Task):
    """What the two tasks share: the data, and stating their shape without reading any image."""

    num_classes = 10
    data_source = FASHION_MNIST_SOURCE

    @classmethod
    def stated_shape(cls, preset: str = "quick", seed: int = 0, root: str | Path | None = None,
                     train_size: int | None = None, val_size: int | None = None,
                     test_size: int | None = None) -> TaskShape | None:
        """The shape from the files' IDX headers, or the published data set's where they will be fetched
        (:func:`tokenmix.data.fashion_mnist.fashion_mnist_shapes`); None when ``root`` lacks them."""
        sizes = _options(cls, preset, seed, root, train_size, val_size, test_size)
        shapes = fashion_mnist_shapes(root)
        if shapes is None:
            return None
        return cls._shape(_counts(cls, sizes, shapes["train"][0], shapes["test"][0]), shapes["train"][1:])

    @classmethod
    def _shape(cls, sizes: dict[str, int], image: tuple[int, int]) -> TaskShape:
        raise NotImplementedError


_FIXED = "nothing: the splits are fixed (the seed varies only the weights, dropout and batch order)"


@register_task("fashion", description="Fashion-MNIST 10-way image classification (ViT on 4x4 patches)",
               kind="image", metric="accuracy", source=_SOURCE, seed_draws=_FIXED)
class FashionTask(_FashionMNIST):
    """Fashion-MNIST images. Options: ``preset``, ``seed``, ``root``, ``train_size``, ``val_size``,
    ``test_size`` (``None`` = from ``preset``). See the module docstring."""

    image_shape = (1, 28, 28)

    def __init__(self, preset: str = "quick", seed: int = 0, root: str | Path | None = None,
                 train_size: int | None = None, val_size: int | None = None, test_size: int | None = None) -> None:
        raw = _raw_splits(self, preset, seed, root, train_size, val_size, test_size)
        self.preset, self.seed, self.root = preset, seed, root
        self.image_shape = (1, *raw["train"][0].shape[1:])
        self.splits = {name: Split(labels=labels.clone(), images=normalize_images(images))
                       for name, (images, labels) in raw.items()}

    @classmethod
    def _shape(cls, sizes: dict[str, int], image: tuple[int, int]) -> TaskShape:
        return TaskShape(sizes, num_classes=cls.num_classes, image_shape=(1, *image))


@register_task("fashion_pixels",
               description="Fashion-MNIST as 784-long pixel sequences (token = 8-bit intensity), LRA Image style",
               kind="classification", metric="accuracy", source=_SOURCE, seed_draws=_FIXED)
class FashionPixelsTask(_FashionMNIST):
    """Fashion-MNIST as pixel-intensity token sequences. Options as :class:`FashionTask`."""

    vocab_size = 256
    pad_id = 0
    max_len = 28 * 28

    def __init__(self, preset: str = "quick", seed: int = 0, root: str | Path | None = None,
                 train_size: int | None = None, val_size: int | None = None, test_size: int | None = None) -> None:
        raw = _raw_splits(self, preset, seed, root, train_size, val_size, test_size)
        self.preset, self.seed, self.root = preset, seed, root
        self.max_len = raw["train"][0][0].numel()
        self.splits = {}
        for name, (images, labels) in raw.items():
            m = images.shape[0]
            ids = images.reshape(m, -1).to(torch.long)
            self.splits[name] = Split(labels=labels.clone(), ids=ids,
                                      lengths=torch.full((m,), ids.shape[1], dtype=torch.long))

    @classmethod
    def _shape(cls, sizes: dict[str, int], image: tuple[int, int]) -> TaskShape:
        return TaskShape(sizes, num_classes=cls.num_classes, vocab_size=cls.vocab_size, max_len=image[0] * image[1],
                         pad_id=cls.pad_id)
