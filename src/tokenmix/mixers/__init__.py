"""Token mixers, one module per mechanism family. Importing this package registers all of them, and then
their operation counts (:mod:`tokenmix.counts`, whose modules refer to the mixer classes)."""

import importlib
import pkgutil

from .. import counts
from .base import Mixer, QKVMixer, SpatialMixer

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")
counts.load_families()

__all__ = ["Mixer", "QKVMixer", "SpatialMixer"]
