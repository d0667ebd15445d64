"""What a task is: datasets with splits, a metric, and the model that fits them (:class:`Task`).

A task is built by name, ``tokenmix.tasks.create_task(name, preset="quick", seed=0, **options)``, and gives:

* ``splits``: ``{"train": ..., "val": ..., "test": ...}``, each a :class:`Split` of tensors;
* ``batches(split, batch_size, *, shuffle, seed)``: an iterator of batches — :class:`TokenBatch`
  ``(ids, mask, labels)`` for sequence classification, :class:`LMBatch` ``(ids, targets)`` for language
  modelling, :class:`ImageBatch` ``(images, labels)`` for images; masked language modelling gives a
  :class:`TokenBatch` whose ``labels`` are per position (``(B, N)``, the original token where the input was
  masked, ``IGNORE_INDEX`` elsewhere). The same seed gives the same batches
  in the same order, whatever the model;
* ``build_model(mixer, dim=, depth=, num_heads=, mixer_options=, protocol=, init_std=, model_options=)``: a
  ``SequenceClassifier`` (with ``pooling="tokens"`` and a class per vocabulary entry for masked language
  modelling), ``CausalLM`` or ``ViT`` sized for the task (vocabulary, classes, length), or a
  paper's own network (``protocol="paper-000"``: ``RelationNet``; ``"paper-003"``:
  ``ContextualizerClassifier``; ``"paper-004"``: the ``CausalLM`` of Chen 2023 §6), with the settings
  :data:`tokenmix.protocols.MODEL_PROTOCOLS` gives each protocol;
* ``loss(model, batch)`` and ``evaluate(model, split, batch_size)``: the training loss and the metric.

Tasks register with :func:`tokenmix.tasks.registry.register_task`; the trainer and ``tokenmix compare`` see
only that registry. Splits and batches are in :mod:`tokenmix.tasks.batches`.

Planning without data: a task class may state its shape -- each split's size, and what ``build_model`` sizes
the model by -- from its options alone (``stated_shape``, a :class:`TaskShape`); :func:`planned_task` then
gives a :class:`PlannedTask` that builds models but holds no examples (``tokenmix compare --dry-run``).
``data_source`` (a :class:`tokenmix.data.source.DataSource`) says where the task's data are and how they are
fetched (``tokenmix data``); ``None`` for generated tasks.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ..data.source import DataSource
from ..protocols import MODEL_PROTOCOLS
from ..validate import is_positive_int
from .batches import IGNORE_INDEX, ImageBatch, LMBatch, Split, TokenBatch, to_device

__all__ = ["KINDS", "TaskInfo", "Task", "TaskShape", "PlannedTask"]

KINDS = ("classification", "language_model", "masked_lm", "image")


@dataclass(frozen=True)
class TaskInfo:
    """What a task is: ``kind`` is "classification" (TokenBatch), "language_model" (LMBatch), "masked_lm"
    (TokenBatch with per-position labels) or "image" (ImageBatch); ``metric`` names what :meth:`Task.evaluate`
    reports first."""

    name: str
    description: str
    kind: str
    metric: str
    source: str
    options: tuple[str, ...]
    seed_draws: str = ""  # what the task's ``seed`` draws, in words (the report says it for `[task] seed = "run"`)
    retired: str | None = None  # why no claim may be judged on the task any more (None: it may)

    @property
    def higher_is_better(self) -> bool:
        """Accuracy-like metrics improve upwards; perplexity (and losses) downwards."""
        return self.metric not in ("perplexity", "loss")


@dataclass(frozen=True)
class TaskShape:
    """What a task is sized by, known without its examples: ``sizes``, each split's number of examples
    (``None``: only the data can tell, e.g. "every window of the text"), and the attributes of
    :class:`Task` that :meth:`Task.build_model` sizes the model by."""

    sizes: dict[str, int | None]
    num_classes: int | None = None
    vocab_size: int | None = None
    max_len: int = 0
    pad_id: int = 0
    image_shape: tuple[int, int, int] | None = None
    model_defaults: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, task: "Task") -> "TaskShape":
        """The shape of ``task`` (a built task, or a :class:`PlannedTask`)."""
        return cls(task.split_sizes(), task.num_classes, task.vocab_size, task.max_len, task.pad_id,
                   task.image_shape, dict(task.model_defaults))


class Task:
    """Base class. Subclasses set ``self.splits`` (and the sizes below) in ``__init__`` and may override
    ``build_model``; batching, loss and evaluation follow from ``info.kind``.

    ``stated_shape``: ``None``, or a classmethod taking exactly the constructor's options and returning the
    :class:`TaskShape` the constructor would give, loading no data (checking the options as the constructor
    does), or ``None`` where only the data can tell (then planning builds the task itself)."""

    info: ClassVar[TaskInfo]
    splits: dict[str, Split]
    num_classes: int | None = None
    vocab_size: int | None = None
    pad_id: int = 0
    max_len: int = 0  # longest sequence (tokens), or the context length for language modelling
    image_shape: tuple[int, int, int] | None = None  # (C, H, W) for image tasks
    # Model settings a preset implies (e.g. the "lm" task's "paper" preset: init_std 0.01); build_model's
    # own arguments override them.
    model_defaults: dict[str, Any] = {}
    # True where an example is a pair of documents side by side (ids (B, 2 max_len)): build_model then builds the
    # two-tower DualEncoderClassifier (LRA's Retrieval)
    pair_input: ClassVar[bool] = False
    data_source: ClassVar[DataSource | None]  # where the data are (tokenmix data); None: generated; each task sets it
    stated_shape: ClassVar[Callable[..., TaskShape | None] | None] = None
    retired_settings: ClassVar[str | None] = None  # which settings :meth:`retired_setting` refuses, in words

    @classmethod
    def _fail(cls, message: str, error: type[Exception] = ValueError) -> None:
        raise error(f"task {cls.info.name!r}: {message}")

    @classmethod
    def retired_setting(cls, options: dict[str, Any]) -> str | None:
        """Why no claim may be judged on the task with these options (the experiment's ``[task]`` table, less
        its name), where one setting of a task is retired and the others are not; None: claims may be judged."""
        return None

    def split_sizes(self) -> dict[str, int | None]:
        """Each split's number of examples."""
        return {name: len(split) for name, split in self.splits.items()}

    # -- batching ------------------------------------------------------------------------------
    def batches(self, split: str, batch_size: int, *, shuffle: bool = False, seed: int = 0,
                drop_last: bool = False) -> Iterator[TokenBatch | LMBatch | ImageBatch]:
        """Batches of ``split``; with ``shuffle`` the order is drawn from ``seed`` alone."""
        if split not in self.splits:
            self._fail(f"unknown split {split!r}; splits: {', '.join(self.splits)}")
        if not is_positive_int(batch_size):
            self._fail(f"batch_size must be a positive int, got {batch_size!r}")
        data = self.splits[split]
        n = len(data)
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)) if shuffle else torch.arange(n)
        stop = n - n % batch_size if drop_last else n
        for start in range(0, stop, batch_size):
            yield self._batch(data, order[start:start + batch_size])

    @staticmethod
    def _padded(data: Split, index: Tensor) -> tuple[Tensor, Tensor]:
        """Rows ``index`` of a right-padded token split, cut to their longest: (ids, mask)."""
        lengths = data.lengths[index]
        width = int(lengths.max())
        return data.ids[index, :width], torch.arange(width)[None, :] < lengths[:, None]

    def _batch(self, data: Split, index: Tensor) -> TokenBatch | LMBatch | ImageBatch:
        kind = self.info.kind
        if kind == "classification":
            return TokenBatch(*self._padded(data, index), data.labels[index])
        if kind == "language_model":
            window = data.ids[index]
            return LMBatch(window[:, :-1], window[:, 1:])
        return ImageBatch(data.images[index], data.labels[index])

    # -- models and metrics --------------------------------------------------------------------
    def build_model(self, mixer: Any, *, dim: int = 64, depth: int = 2, num_heads: int | None = None,
                    mixer_options: dict[str, Any] | None = None, protocol: str = "default",
                    init_std: float | None = None, model_options: dict[str, Any] | None = None) -> nn.Module:
        """The model this task trains, sized for the task (vocabulary, classes, length).

        ``mixer`` is a registry name or a layer pattern (:mod:`tokenmix.models.patterns`). ``protocol`` (one of
        :data:`tokenmix.protocols.MODEL_PROTOCOLS`, where each setting below is cited):

        * ``"default"``: a ``SequenceClassifier`` pooling the mean of the real tokens, a ``CausalLM``, or a
          ``ViT`` over 4 x 4 patches (``model_options={"patch_size": ...}`` changes it);
        * ``"paper-000"`` (classification): Yamada et al.'s (2022) single-layer ``RelationNet`` (first token,
          dropout 0.5, Glorot); ``depth`` must be 1, ``dim`` is the embedding width m and
          ``model_options={"inner_dim": d}`` the separate mixing depth d;
        * ``"paper-003"`` (classification): Maupomé & Meurs (2021)'s ``ContextualizerClassifier``; ``mixer``
          must be ``"contextualizer"``; c^(0) is random U(-1, 1) as in their Tables 2-3 unless
          ``mixer_options`` sets ``context``; ``depth`` is unused (must be 1);
        * ``"paper-004"`` (language modelling): Chen (2023)'s ``CausalLM`` with N(0, 0.01) initialisation
          and dropout 0.1 (§6, Table 1).

        ``init_std`` (every parameter N(0, init_std), biases zero; :func:`tokenmix.ops.init.normal_init_`)
        overrides the protocol's and the preset's (``model_defaults``). ``model_options`` are further
        keyword arguments of the model class (``ffn_dim``, ``dropout``, ``positional``, ``pooling``, ...);
        one the model does not take raises ``ValueError``."""
        from ..models import (CausalLM, ContextualizerClassifier, DualEncoderClassifier, RelationNet,
                              SequenceClassifier, ViT)

        kind = self.info.kind
        if protocol not in MODEL_PROTOCOLS:
            self._fail(f"unknown model protocol {protocol!r}; protocols: {', '.join(MODEL_PROTOCOLS)}")
        settings = MODEL_PROTOCOLS[protocol]
        if kind not in settings["kinds"]:
            self._fail(f"protocol {protocol!r} is for {', '.join(settings['kinds'])} tasks; this task is {kind}")
        # the protocol's settings, under the task's preset (model_defaults), the options and init_std
        options = {**settings["options"], **self.model_defaults, **(model_options or {})}
        if init_std is not None:
            options["init_std"] = init_std
        if settings["single_layer"] and depth != 1:
            self._fail(f"protocol {protocol!r} has a single mixing layer; depth must be 1, got {depth}")
        if settings["mixer"] is not None and mixer != settings["mixer"]:
            self._fail(f"protocol {protocol!r} is the {settings['mixer'].capitalize()}'s own network; "
                       f"got mixer {mixer!r}")
        if self.pair_input and settings["network"] is not None:
            self._fail(f"protocol {protocol!r} builds a {settings['network']}, which reads one document; this task "
                       f"gives a pair (protocol 'default' builds the two-tower DualEncoderClassifier)")
        if settings["network"] == "RelationNet":
            return _construct(RelationNet, self, options, self.vocab_size, self.num_classes, mixer, dim,
                              max_len=self.max_len, num_heads=num_heads, mixer_options=mixer_options)
        if settings["network"] == "ContextualizerClassifier":
            return _construct(ContextualizerClassifier, self, options, self.vocab_size, self.num_classes, dim,
                              max_len=self.max_len, mixer_options=mixer_options)
        if kind == "masked_lm":
            if options.setdefault("pooling", "tokens") != "tokens":
                self._fail(f"a masked language model predicts every position: pooling must be 'tokens', got "
                           f"{options['pooling']!r}")
            return _construct(SequenceClassifier, self, options, self.vocab_size, self.vocab_size, mixer, dim,
                              depth, num_heads=num_heads, max_len=self.max_len, mixer_options=mixer_options)
        if kind == "classification":
            options.setdefault("pooling", "mean")
            if options["pooling"] == "tokens":
                self._fail("pooling 'tokens' gives logits per position; this task classifies whole sequences")
            network = DualEncoderClassifier if self.pair_input else SequenceClassifier
            return _construct(network, self, options, self.vocab_size, self.num_classes, mixer, dim,
                              depth, num_heads=num_heads, max_len=self.max_len, mixer_options=mixer_options)
        if kind == "language_model":
            return _construct(CausalLM, self, options, self.vocab_size, mixer, dim, depth, self.max_len,
                              num_heads=num_heads, mixer_options=mixer_options)
        c, h, w = self.image_shape
        options.setdefault("patch_size", 4)
        return _construct(ViT, self, options, (h, w), in_chans=c, num_classes=self.num_classes, mixer=mixer,
                          dim=dim, depth=depth, num_heads=num_heads, mixer_options=mixer_options)

    @staticmethod
    def _on_model_device(model: nn.Module, batch: TokenBatch | LMBatch | ImageBatch
                         ) -> TokenBatch | LMBatch | ImageBatch:
        param = next(model.parameters(), None)
        return batch if param is None else to_device(batch, param.device)

    def logits(self, model: nn.Module, batch: TokenBatch | LMBatch | ImageBatch) -> Tensor:
        """The model's output on ``batch``, moved to the model's device first."""
        batch = self._on_model_device(model, batch)
        if isinstance(batch, TokenBatch):
            return model(batch.ids, batch.mask)
        if isinstance(batch, LMBatch):
            return model(batch.ids)
        return model(batch.images)

    def masked_predictions(self, model: nn.Module, batch: TokenBatch) -> tuple[Tensor, Tensor]:
        """A masked language model's logits at the predicted positions (M, vocabulary) and their labels (M,).
        A model with ``pooling="tokens"``, ``encode`` and ``head`` (a ``SequenceClassifier``) applies its head
        to those positions alone (with a large vocabulary the head over every position costs more than the
        encoder); any other model's full output is indexed."""
        batch = self._on_model_device(model, batch)
        chosen = batch.labels != IGNORE_INDEX
        if getattr(model, "pooling", None) == "tokens" and hasattr(model, "encode") and hasattr(model, "head"):
            return model.head(model.encode(batch.ids, batch.mask)[chosen]), batch.labels[chosen]
        return model(batch.ids, batch.mask)[chosen], batch.labels[chosen]

    def scored_predictions(self, model: nn.Module, batch: LMBatch) -> tuple[Tensor, Tensor]:
        """A language-modelling task that scores some positions only (targets elsewhere ``IGNORE_INDEX``, metric
        accuracy: ``mqar``): the logits there (M, vocabulary) and their targets (M,). A model with ``features``
        and ``head`` (a ``CausalLM``) applies its head to those positions alone."""
        batch = self._on_model_device(model, batch)
        scored = batch.targets != IGNORE_INDEX
        if hasattr(model, "features") and hasattr(model, "head"):
            return model.head(model.features(batch.ids)[scored]), batch.targets[scored]
        return model(batch.ids)[scored], batch.targets[scored]

    def _scores_positions(self) -> bool:
        return self.info.kind == "language_model" and self.info.metric != "perplexity"

    def loss(self, model: nn.Module, batch: TokenBatch | LMBatch | ImageBatch) -> Tensor:
        """Mean cross-entropy of the batch (next-token cross-entropy for language modelling; over the masked
        positions for masked language modelling)."""
        if self.info.kind == "masked_lm":
            return F.cross_entropy(*self.masked_predictions(model, batch))
        if self._scores_positions():
            return F.cross_entropy(*self.scored_predictions(model, batch))
        logits = self.logits(model, batch)
        batch = to_device(batch, logits.device)
        if isinstance(batch, LMBatch):
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch.targets.reshape(-1))
        return F.cross_entropy(logits, batch.labels)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str = "val", batch_size: int = 64) -> dict[str, float]:
        """``{"loss": mean loss, metric: value}``: accuracy for classification/images, perplexity for language
        modelling (of the masked positions alone for masked language modelling); a language-modelling task whose
        metric is accuracy (``mqar``) counts the targets that are not ``IGNORE_INDEX``, and so does the loss."""
        was_training = model.training
        model.eval()
        total_loss, correct, count = 0.0, 0, 0
        for batch in self.batches(split, batch_size):
            if self.info.kind == "masked_lm":
                logits, labels = self.masked_predictions(model, batch)
                total_loss += float(F.cross_entropy(logits, labels, reduction="sum"))
                count += labels.numel()
                continue
            if self._scores_positions():
                logits, targets = self.scored_predictions(model, batch)
                total_loss += float(F.cross_entropy(logits, targets, reduction="sum"))
                correct += int((logits.argmax(dim=-1) == targets).sum())
                count += targets.numel()
                continue
            logits = self.logits(model, batch)
            batch = to_device(batch, logits.device)
            if isinstance(batch, LMBatch):
                flat = logits.reshape(-1, logits.shape[-1])
                total_loss += float(F.cross_entropy(flat, batch.targets.reshape(-1), reduction="sum"))
                count += batch.targets.numel()
            else:
                total_loss += float(F.cross_entropy(logits, batch.labels, reduction="sum"))
                correct += int((logits.argmax(dim=-1) == batch.labels).sum())
                count += batch.labels.numel()
        model.train(was_training)
        if count == 0:
            self._fail(f"split {split!r} is empty")
        mean = total_loss / count
        metric = math.exp(mean) if self.info.metric == "perplexity" else correct / count
        return {"loss": mean, self.info.metric: metric}

    def reference_levels(self) -> dict[str, float]:
        """Named levels of the metric to read results against (a chance level, a shortcut's floor); none by
        default."""
        return {}

    def describe(self) -> dict[str, Any]:
        """Split sizes and length statistics, for reports."""
        out: dict[str, Any] = {"task": self.info.name}
        for name, split in self.splits.items():
            out[f"{name}_size"] = len(split)
            if split.lengths is not None and len(split):
                lengths = split.lengths.float()
                out[f"{name}_length_min_mean_max"] = (int(lengths.min()), round(float(lengths.mean()), 1),
                                                      int(lengths.max()))
        return out


class PlannedTask(Task):
    """A registered task as its ``stated_shape`` states it, holding no examples: for planning (the parameter
    counts and step counts of ``tokenmix compare --dry-run``). ``build_model`` and ``split_sizes`` work like
    the task's own; ``batches`` (and so ``evaluate``) raise."""

    def __init__(self, task_class: type[Task], shape: TaskShape) -> None:
        self.info = task_class.info
        self.task_class = task_class
        self.sizes = dict(shape.sizes)
        self.num_classes, self.vocab_size, self.max_len = shape.num_classes, shape.vocab_size, shape.max_len
        self.pad_id, self.image_shape = shape.pad_id, shape.image_shape
        self.pair_input = task_class.pair_input
        self.model_defaults = dict(shape.model_defaults)
        self.splits = {}

    def _fail(self, message: str, error: type[Exception] = ValueError) -> None:
        raise error(f"task {self.info.name!r}: {message}")

    def split_sizes(self) -> dict[str, int | None]:
        """The stated sizes (``None``: only the data can tell)."""
        return dict(self.sizes)

    def batches(self, split: str, batch_size: int, *, shuffle: bool = False, seed: int = 0,
                drop_last: bool = False) -> Iterator[TokenBatch | LMBatch | ImageBatch]:
        self._fail("planned without its data: it has no batches (create_task builds it with its data)")

    def describe(self) -> dict[str, Any]:
        """The stated split sizes."""
        return {"task": self.info.name, **{f"{name}_size": size for name, size in self.sizes.items()}}


def _construct(cls: type, task: Task, options: dict[str, Any], *args: Any, **kwargs: Any) -> nn.Module:
    """``cls(*args, **kwargs, **options)``, with an option ``cls`` does not take (or one the task already
    decides) reported as a ValueError naming it."""
    params = inspect.signature(cls.__init__).parameters
    taken = set(kwargs) | set(list(params)[1:len(args) + 1])
    unknown = sorted(k for k in options if k not in params or k in taken)
    if unknown:
        accepted = sorted(p for p in params if p not in taken and p != "self")
        task._fail(f"{cls.__name__} has no model option(s) {unknown} here; it takes: {', '.join(accepted)}")
    return cls(*args, **kwargs, **options)
