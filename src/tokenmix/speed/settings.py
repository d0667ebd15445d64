"""What a ``tokenmix speed`` run measures: the run's :class:`SpeedSettings` (checked once, when they are made)
and the :class:`SpeedCase` each measurement gets from them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..registry import list_mixers, mixer_info
from ..validate import is_positive_int

__all__ = ["SpeedSettings", "SpeedCase", "settings_line", "public_mixers", "REFERENCE", "PASSES", "DEVICES",
           "DTYPES", "DEFAULT_LENGTHS"]

REFERENCE = "softmax"
PASSES = ("fwd", "fwdbwd")
DEVICES = ("cpu", "cuda")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DEFAULT_LENGTHS = (256, 1024, 4096, 16384)


def public_mixers() -> list[str]:
    """Every registered mixer that is not a test double (what ``--mixers all`` means)."""
    return list_mixers()


@dataclass
class SpeedCase:
    """One measurement: a mixer at one length, pass, mode and value range, with the settings it runs under.
    It travels as JSON to an isolated subprocess, so every field is a plain value."""

    mixer: str
    length: int
    pass_name: str
    causal: bool
    value_range: float
    dim: int = 64
    heads: int = 1
    batch: int = 1
    device: str = "cpu"
    dtype: str = "float32"
    repeats: int = 5
    warmup: int = 1
    timeout: float = 120.0
    seed: int = 0
    threads: int = 1
    isolated: bool = False
    mem_limit_mb: float | None = None
    window: int | None = None


@dataclass
class SpeedSettings:
    """What one ``tokenmix speed`` run measures (field comments name the CLI options)."""

    mixers: list[str] = field(default_factory=public_mixers)  # --mixers (softmax is added as the reference)
    lengths: list[int] = field(default_factory=lambda: list(DEFAULT_LENGTHS))  # --lengths
    dim: int = 64  # --dim
    heads: int = 1  # --heads (mixers without heads use 1)
    batch: int = 1  # --batch
    causal: bool = False  # --causal
    passes: list[str] = field(default_factory=lambda: list(PASSES))  # --pass fwd|fwdbwd|both
    value_ranges: list[float] = field(default_factory=lambda: [2.0])  # --value-range, inputs uniform in [-r, r]
    device: str = "cpu"  # --device
    dtype: str = "float32"  # --dtype
    repeats: int = 5  # --repeats: timed passes (median)
    warmup: int = 1  # --warmup: untimed passes after the cold (memory) pass
    case_timeout: float = 120.0  # --case-timeout: seconds per case, isolated start-up included
    isolate: bool | None = None  # --isolate/--no-isolate; None: isolated on the CPU, in-process on CUDA
    mem_limit_mb: float | None = None  # --mem-limit-mb: address space an isolated CPU case may add
    threads: int | None = None  # --threads: torch intra-op threads (None: torch's current setting)
    seed: int = 0  # --seed
    window: int | None = None  # --window: max_len of sliding-window mixers (the Extractors' taps); None: N

    def __post_init__(self) -> None:
        self.validate()

    @property
    def isolated(self) -> bool:
        """Whether every case runs in a fresh subprocess."""
        return self.device == "cpu" if self.isolate is None else self.isolate

    @property
    def num_threads(self) -> int:
        """The torch intra-op threads the cases run with."""
        return self.threads or torch.get_num_threads()

    def case(self, mixer: str, length: int, pass_name: str, causal: bool, value_range: float) -> SpeedCase:
        """The case of ``mixer`` at ``length``, ``pass_name``, mode and value range under these settings."""
        return SpeedCase(mixer, length, pass_name, causal, float(value_range), dim=self.dim,
                         heads=mixer_info(mixer).heads(self.heads) or 1, batch=self.batch, device=self.device,
                         dtype=self.dtype, repeats=self.repeats, warmup=self.warmup,
                         timeout=float(self.case_timeout), seed=self.seed, threads=self.num_threads,
                         isolated=self.isolated, mem_limit_mb=self.mem_limit_mb, window=self.window)

    def validate(self) -> None:
        """``ValueError`` naming the option for anything the run could not honour."""
        self._validate_lists()
        self._validate_sizes()
        if self.device not in DEVICES:
            raise ValueError(f"device (--device): unknown device {self.device!r}; choose one of {', '.join(DEVICES)}")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device (--device): cuda requested but CUDA is not available here")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype (--dtype): unknown dtype {self.dtype!r}; choose one of {', '.join(DTYPES)}")
        if not (isinstance(self.case_timeout, (int, float)) and self.case_timeout > 0):
            raise ValueError(f"case_timeout (--case-timeout) must be > 0 seconds, got {self.case_timeout!r}")
        if self.mem_limit_mb is not None:
            if not self.mem_limit_mb > 0:
                raise ValueError(f"mem_limit_mb (--mem-limit-mb) must be > 0, got {self.mem_limit_mb!r}")
            if self.device != "cpu" or not self.isolated:
                raise ValueError("mem_limit_mb (--mem-limit-mb) applies only to isolated CPU cases (--isolate)")

    def _validate_lists(self) -> None:
        if not self.mixers:
            raise ValueError("mixers (--mixers): no mixer given")
        unknown = [m for m in self.mixers if m not in list_mixers(include_hidden=True)]
        if unknown:
            raise ValueError(f"mixers (--mixers): unknown mixer(s) {unknown}; available: {', '.join(public_mixers())}")
        if not self.lengths or not all(is_positive_int(n) for n in self.lengths):
            raise ValueError(f"lengths (--lengths) must be positive ints, got {self.lengths!r}")
        if not self.passes or any(p not in PASSES for p in self.passes):
            raise ValueError(f"passes (--pass): unknown pass in {self.passes!r}; choose from fwd, fwdbwd, both")
        if not self.value_ranges or not all(isinstance(r, (int, float)) and math.isfinite(r) and r > 0
                                            for r in self.value_ranges):
            raise ValueError(f"value_ranges (--value-range) must be finite numbers > 0, got {self.value_ranges!r}")

    def _validate_sizes(self) -> None:
        if self.window is not None and not is_positive_int(self.window):
            raise ValueError(f"window (--window) must be a positive int, got {self.window!r}")
        for name, value, least in (("dim", self.dim, 1), ("heads", self.heads, 1), ("batch", self.batch, 1),
                                   ("repeats", self.repeats, 1), ("warmup", self.warmup, 0)):
            if not (is_positive_int(value) or (least == 0 and value == 0 and type(value) is int)):
                raise ValueError(f"{name} (--{name}) must be an int >= {least}, got {value!r}")
        if self.dim % self.heads:
            raise ValueError(f"heads (--heads): dim={self.dim} is not divisible by heads={self.heads}")
        if self.threads is not None and not is_positive_int(self.threads):
            raise ValueError(f"threads (--threads) must be a positive int, got {self.threads!r}")


def settings_line(settings: SpeedSettings) -> str:
    """The settings in one line (the run's first printed line and the report's "Settings")."""
    where = "a subprocess per case" if settings.isolated else "in-process"
    return (f"dim {settings.dim}, heads {settings.heads}, batch {settings.batch}, {settings.device} "
            f"{settings.dtype}, {settings.num_threads} thread(s), passes {'/'.join(settings.passes)}, "
            f"value range(s) {', '.join(f'[-{r:g}, {r:g}]' for r in settings.value_ranges)}, cold pass + "
            f"{settings.warmup} warm-up + median of {settings.repeats}, budget {settings.case_timeout:g} s per case, "
            f"{where}" + (f", +{settings.mem_limit_mb:g} MB address space" if settings.mem_limit_mb else "")
            + (f", sliding windows of {settings.window} taps" if settings.window else ""))
