"""Token mixers, one module per mechanism family. Importing this package registers all of them; their operation
counts are in :mod:`tokenmix.counting`, which imports the mixer classes (never the other way round)."""

import importlib
import pkgutil

from .base import Mixer, SpatialMixer
from .heads import QKVMixer

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in ("base", "heads"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["Mixer", "QKVMixer", "GatedHeadsMixer", "SpatialMixer"]
