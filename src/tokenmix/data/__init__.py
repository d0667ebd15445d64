"""Datasets used by the benchmarks (loaded from local files; nothing is downloaded)."""

from .fashion_mnist import (
    FASHION_MNIST_CLASSES,
    FASHION_MNIST_MEAN,
    FASHION_MNIST_STD,
    load_fashion_mnist,
    normalize_images,
)

__all__ = ["FASHION_MNIST_CLASSES", "FASHION_MNIST_MEAN", "FASHION_MNIST_STD", "load_fashion_mnist",
           "normalize_images"]
