"""Turn a trained softmax-attention model into a linear-attention one: :func:`linearize`.

Three published recipes, each a ``method``:

* ``"t2r"`` (Kasai et al., 2021): each attention becomes linear attention with a learned ReLU feature map
  (``feature_map="t2r"``), its Q/K/V and output weights copied, then the whole model is fine-tuned on the task.
* ``"hedgehog"`` (Zhang et al., 2024): the learned exponential feature maps (``feature_map="hedgehog"``) are first
  trained alone to reproduce each layer's softmax attention *weights* (cross-entropy between the teacher's rows and
  the student's, eq. 3 of their §4.2), the rest frozen, then the model is fine-tuned.
* ``"lolcats"`` (Zhang et al., 2024b, LoLCATs): the same maps trained alone to reproduce each layer's softmax
  attention *outputs* (mean squared error: "attention transfer"), then fine-tuned (all weights, or low-rank adapters
  as LoLCATs does: ``finetune="lora"``). LoLCATs' layer keeps exact softmax attention in a sliding window beside the
  linear attention: ``linearize(model, "window_linear", method="lolcats", window=64)``, its window weights fitted
  with the maps.

During the transfer every swapped layer computes its softmax teacher on its own Q, K, V and passes the teacher's
output on, so each layer learns on the activations the softmax model gives it, as both papers do. After it, the
gap between teacher and student is measured per layer on held-out batches (:class:`LayerGap`).

The model is anything :func:`tokenmix.replace_attention` takes: a PyTorch model built on ``nn.MultiheadAttention``
(weights copied into the mechanism, ``copy_weights=True``) or a Hugging Face ``transformers`` model (its own
projections stay). Data is an iterable of batches, iterated again for each pass, each given to the model as
``model(**batch)`` (a dict), ``model(*batch)`` (a tuple) or ``model(batch)``; the fine-tuning loss is
``loss_fn(model, batch)``, by default ``model(**batch).loss`` (Hugging Face models given ``labels``).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..models.hf import HFMechanism, is_hf_model
from ..models.replace import MixerAttention, replace_attention
from ..registry import list_mixers, mixer_info
from .transfer import METHOD_LOSS, attention_transfer, only_feature_maps, swapped_mechanisms

__all__ = ["linearize", "LinearizeReport", "LayerGap", "METHODS", "swapped_mechanisms", "attention_transfer"]

METHODS = {"t2r": "t2r", "hedgehog": "hedgehog", "lolcats": "hedgehog"}  # method -> its feature map


@dataclass
class LayerGap:
    """Teacher (softmax) against student (the linear mechanism) in one layer, averaged over held-out batches:
    ``weights_kl``, the mean KL divergence of the student's attention rows from the teacher's (0 = the same
    weights), and ``output_error``, the student's output error relative to the teacher's, ``||y_s - y_t|| /
    ||y_t||``; each before and after the transfer."""

    path: str
    weights_kl_before: float
    weights_kl_after: float
    output_error_before: float
    output_error_after: float


@dataclass
class LinearizeReport:
    """What :func:`linearize` did: the swapped layers' gaps, and the loss of each stage per step."""

    method: str
    replaced: int
    layers: list[LayerGap] = field(default_factory=list)
    transfer_losses: list[float] = field(default_factory=list)
    finetune_losses: list[float] = field(default_factory=list)
    gaps_before: dict[str, tuple[float, float]] = field(default_factory=dict)  # path -> (KL, output error)

    def table(self) -> str:
        """The per-layer gaps as a text table."""
        lines = [f"{'layer':<40} {'KL before':>10} {'KL after':>10} {'err before':>11} {'err after':>10}"]
        for g in self.layers:
            lines.append(f"{g.path:<40} {g.weights_kl_before:>10.4f} {g.weights_kl_after:>10.4f} "
                         f"{g.output_error_before:>11.4f} {g.output_error_after:>10.4f}")
        return "\n".join(lines)


def _call(model: nn.Module, batch: Any) -> Any:
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    return model(batch)


def _default_loss(model: nn.Module, batch: Any) -> Tensor:
    out = _call(model, batch)
    loss = getattr(out, "loss", None)
    if loss is None:
        raise ValueError("linearize: the model's output has no .loss; pass loss_fn=(model, batch) -> loss")
    return loss


def _batches(data: Iterable) -> Iterator[Any]:
    """The batches of ``data`` over and over (each pass a fresh iteration)."""
    while True:
        empty = True
        for batch in data:
            empty = False
            yield batch
        if empty:
            raise ValueError("linearize: data gave no batch")


def _gaps(model: nn.Module, data: Iterable, batches: int) -> tuple[dict[str, float], dict[str, float]]:
    was_training = model.training
    model.eval()
    with torch.no_grad(), attention_transfer(model) as transfer:
        for batch in itertools.islice(data, batches):
            _call(model, batch)
    model.train(was_training)
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
    return ({p: mean(v) for p, v in transfer.kl.items()}, {p: mean(v) for p, v in transfer.error.items()})


def _save(path: Path, stage: str, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
          report: LinearizeReport) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save({"stage": stage, "step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "transfer_losses": report.transfer_losses, "finetune_losses": report.finetune_losses,
                "gaps_before": report.gaps_before}, tmp)
    os.replace(tmp, path)


def _load(path: Path | None) -> dict[str, Any] | None:
    if path is None or not path.exists():
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # a damaged checkpoint: say so, start over
        raise ValueError(f"linearize: the checkpoint {path} cannot be read ({error}); move it aside to start "
                         f"over") from error


def _stage(name: str, model: nn.Module, params: list[nn.Parameter], steps: int, lr: float, data: Iterable,
           loss_of: Callable[[Any], Tensor], losses: list[float], checkpoint: Path | None, every: int,
           report: LinearizeReport, progress: bool) -> None:
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    start = 0
    saved = _load(checkpoint)
    if saved is not None and saved["stage"] == name:
        optimizer.load_state_dict(saved["optimizer"])
        start = saved["step"]
    elif saved is not None and saved["stage"] == "finetune" and name == "transfer":
        return  # the transfer finished before the checkpoint was written
    batches = _batches(data)
    for _ in range(start):  # the same batches as an uninterrupted run would see next
        next(batches)
    model.train()
    for step in _progress(range(start, steps), desc=f"linearize: {name}", disable=not progress, initial=start,
                     total=steps):
        loss = loss_of(next(batches))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if checkpoint is not None and ((step + 1) % every == 0 or step + 1 == steps):
            _save(checkpoint, name, step + 1, model, optimizer, report)


def linearize(model: nn.Module, name: str = "linear", *, method: str = "hedgehog", data: Iterable,
              eval_data: Iterable | None = None, loss_fn: Callable[[nn.Module, Any], Tensor] | None = None,
              transfer_steps: int | None = None, finetune_steps: int = 0, transfer_lr: float = 1e-2,
              finetune_lr: float = 1e-4, eval_batches: int = 4, causal: bool | Callable[[str], bool] = False,
              max_len: int | None = None, filter: Callable[[str], bool] | None = None, feature_dim: int | None = None,
              ignore_dropout: bool = False, finetune: str = "all", lora_rank: int = 8,
              checkpoint: str | Path | None = None, checkpoint_every: int = 50,
              progress: bool = True, **options: Any) -> LinearizeReport:
    """Swap each softmax attention of ``model`` (in place) for ``name`` with the learned feature map of ``method``
    (``"t2r"``, ``"hedgehog"``, ``"lolcats"``: see :mod:`tokenmix.conversion.linearize`), train the feature maps
    alone on the teacher for ``transfer_steps`` (hedgehog, lolcats: default 100; T2R has no such stage), then
    fine-tune for ``finetune_steps`` with ``loss_fn`` (``finetune="all"``: every weight; ``"lora"``: low-rank
    adapters of rank ``lora_rank`` on the attention projections alone, through ``peft``, merged into the weights
    at the end, as LoLCATs fine-tunes); return the per-layer teacher/student gaps
    before and after the transfer, measured on ``eval_batches`` batches of ``eval_data`` (default ``data``), and
    the losses.

    ``causal``, ``max_len``, ``filter`` and ``ignore_dropout`` are :func:`tokenmix.replace_attention`'s
    (``causal`` for PyTorch models only). ``checkpoint``: a file written every ``checkpoint_every`` steps (model,
    optimizer, stage, step); a call with the same arguments finding it resumes where it stopped. The mechanisms
    with learned feature maps: ``"linear"``, and ``"window_linear"`` (LoLCATs' sliding window + linear attention,
    whose window weights are fitted with the maps); the gated mechanisms (``"deltanet"``, ``"gated_deltanet"``,
    ``"gla"``, ``"retention"``, ``"mamba2"``) fit their gates and output norm instead (``"lolcats"``'s loss on the
    outputs, or ``"t2r"``: they form no weights for Hedgehog's); any other Q/K/V mechanism (``"performer"``,
    ``"cosformer"``, ...) takes ``"t2r"``'s recipe without a map: swapped in, then the model fine-tuned; ``options``
    are the mechanism's own (``window=64``, ...)."""
    transfer_steps = _checked(method, name, transfer_steps, finetune_steps, eval_batches, checkpoint_every, finetune,
                              lora_rank)
    checkpoint = Path(checkpoint) if checkpoint is not None else None
    replaced = _swap(model, name, method, feature_dim, causal=causal, max_len=max_len, filter=filter,
                     ignore_dropout=ignore_dropout, options=options)
    report = LinearizeReport(method=method, replaced=replaced)
    saved = _load(checkpoint)
    if saved is not None and saved["stage"] == "finetune" and finetune == "lora":
        _add_adapters(model, lora_rank)  # the checkpoint holds them
    if saved is not None:
        model.load_state_dict(saved["model"])
        report.transfer_losses = list(saved["transfer_losses"])
        report.finetune_losses = list(saved["finetune_losses"])
        report.gaps_before = dict(saved["gaps_before"])  # those of the swap itself, not of the checkpoint
    eval_data = data if eval_data is None else eval_data
    if not report.gaps_before:
        kl, error = _gaps(model, eval_data, eval_batches)
        report.gaps_before = {path: (kl[path], error[path]) for path in kl}
    if method in METHOD_LOSS and transfer_steps:
        _transfer(model, method, transfer_steps, transfer_lr, data, checkpoint, checkpoint_every, report, progress)
    kl_after, error_after = _gaps(model, eval_data, eval_batches)
    report.layers = [LayerGap(p, report.gaps_before[p][0], kl_after[p], report.gaps_before[p][1], error_after[p])
                     for p in kl_after]
    if finetune_steps:
        _finetune(model, finetune, lora_rank, loss_fn, finetune_steps, finetune_lr, data, checkpoint,
                  checkpoint_every, report, progress)
    return report


def _checked(method: str, name: str, transfer_steps: int | None, finetune_steps: int, eval_batches: int,
             checkpoint_every: int, finetune: str, lora_rank: int) -> int:
    """The arguments of :func:`linearize` checked; the transfer steps (its default filled in)."""
    if method not in METHODS:
        raise ValueError(f"linearize: method must be one of {', '.join(METHODS)}; got {method!r}")
    info = mixer_info(name)
    if not (info.qkv or info.hidden) or info.spatial:
        raise ValueError(f"linearize: {name!r} does not compute on a model's Q, K and V (mixer_info(name).qkv and "
                         f".hidden are False): it cannot take a softmax attention's place")
    if "feature_map" not in info.options and not info.hidden and method in METHOD_LOSS:
        with_maps = [n for n in list_mixers() if "feature_map" in mixer_info(n).options or mixer_info(n).hidden]
        raise ValueError(f"linearize: {name!r} has no learned feature map or gates to fit; the methods train those "
                         f"of {', '.join(repr(n) for n in with_maps)}; method='t2r' swaps {name!r} in and "
                         f"fine-tunes the model")
    if info.hidden and METHOD_LOSS.get(method) == "weights":
        raise ValueError(f"linearize: {name!r} forms no attention weights for {method}'s loss on them; use "
                         f"method='lolcats' (its outputs) or 't2r'")
    if transfer_steps is None:
        transfer_steps = 100 if method in METHOD_LOSS else 0
    if method not in METHOD_LOSS and transfer_steps:
        raise ValueError("linearize: T2R has no attention-transfer stage (it fine-tunes everything from the swap); "
                         "transfer_steps does not apply")
    for what, value in (("transfer_steps", transfer_steps), ("finetune_steps", finetune_steps),
                        ("eval_batches", eval_batches), ("checkpoint_every", checkpoint_every)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if what == "checkpoint_every" else 0):
            raise ValueError(f"linearize: {what} must be a non-negative int (checkpoint_every positive), got {value!r}")
    if finetune not in ("all", "lora"):
        raise ValueError(f"linearize: finetune must be 'all' or 'lora', got {finetune!r}")
    if finetune == "lora" and (isinstance(lora_rank, bool) or not isinstance(lora_rank, int) or lora_rank < 1):
        raise ValueError(f"linearize: lora_rank must be a positive int, got {lora_rank!r}")
    return transfer_steps


def _swap(model: nn.Module, name: str, method: str, feature_dim: int | None, *, causal: bool | Callable[[str], bool],
          max_len: int | None, filter: Callable[[str], bool] | None, ignore_dropout: bool,
          options: dict[str, Any]) -> int:
    """Each softmax attention of ``model`` swapped for ``name`` with ``method``'s feature map; how many."""
    if "feature_map" in mixer_info(name).options:  # the gated mechanisms fit their gates instead
        options = {**options, "feature_map": METHODS[method]}
    elif feature_dim is not None:
        raise ValueError(f"linearize: {name!r} has no feature map; feature_dim does not apply")
    if feature_dim is not None:
        options["feature_dim"] = feature_dim
    if is_hf_model(model):
        if causal is not False:
            raise ValueError("linearize: a Hugging Face model's modules decide causality; causal= does not apply")
        return replace_attention(model, name, max_len=max_len, filter=filter, ignore_dropout=ignore_dropout,
                                 **options)
    return replace_attention(model, name, causal=causal, max_len=max_len, filter=filter, copy_weights=True,
                             ignore_dropout=ignore_dropout, **options)


def _transfer(model: nn.Module, method: str, steps: int, lr: float, data: Iterable, checkpoint: Path | None,
              checkpoint_every: int, report: LinearizeReport, progress: bool) -> None:
    """Train the feature maps alone to match the teacher's attention (``method``'s transfer loss)."""
    def transfer_loss(batch: Any) -> Tensor:
        with attention_transfer(model, METHOD_LOSS[method]) as transfer:
            _call(model, batch)
        return torch.stack(transfer.losses).mean()

    with only_feature_maps(model) as maps:
        _stage("transfer", model, maps, steps, lr, data, transfer_loss, report.transfer_losses, checkpoint,
               checkpoint_every, report, progress)


def _finetune(model: nn.Module, finetune: str, lora_rank: int, loss_fn: Callable[[nn.Module, Any], Tensor] | None,
              steps: int, lr: float, data: Iterable, checkpoint: Path | None, checkpoint_every: int,
              report: LinearizeReport, progress: bool) -> None:
    """Fine-tune every weight (``"all"``) or LoRA adapters on the attention projections, merged at the end."""
    loss_of = (lambda batch: loss_fn(model, batch)) if loss_fn is not None else (
        lambda batch: _default_loss(model, batch))
    if finetune == "lora" and not _adapters(model):
        _add_adapters(model, lora_rank)
    trained = [p for n, p in model.named_parameters() if p.requires_grad and (finetune == "all" or "lora_" in n)]
    _stage("finetune", model, trained, steps, lr, data, loss_of, report.finetune_losses, checkpoint,
           checkpoint_every, report, progress)
    if finetune == "lora":
        _merge_adapters(model)


def _progress(steps: range, **options: Any) -> Iterable[int]:
    """``steps`` under tqdm's bar where tqdm is installed (it is no dependency of the core), plain otherwise."""
    try:
        from tqdm.auto import tqdm
    except ModuleNotFoundError:
        return steps
    return tqdm(steps, **options)

def _projections(model: nn.Module) -> list[str]:
    """The names of the Q/K/V and output projections of every swapped attention (LoRA's targets): the linear
    layers of each Hugging Face attention module, or the projections of each mechanism in an adapter."""
    names = []
    for path, module in model.named_modules():
        if isinstance(module, MixerAttention):
            names += [f"{path}.mixer.{p}" for p in ("q_proj", "k_proj", "v_proj", "proj")
                      if isinstance(getattr(module.mixer, p, None), nn.Linear)]
        elif isinstance(getattr(module, "tokenmix", None), HFMechanism):
            names += [f"{path}.{child}" for child, sub in module.named_children()
                      if isinstance(sub, nn.Linear) or type(sub).__name__ == "Conv1D"]
    return names


def _add_adapters(model: nn.Module, rank: int) -> None:
    try:
        from peft import LoraConfig, inject_adapter_in_model
    except ModuleNotFoundError:
        raise ValueError("linearize: finetune='lora' needs peft (pip install 'tokenmix[hf]')") from None
    targets = _projections(model)
    fan_in_fan_out = any(type(m).__name__ == "Conv1D" for n, m in model.named_modules() if n in targets)
    inject_adapter_in_model(LoraConfig(r=rank, lora_alpha=rank, target_modules=targets, fan_in_fan_out=fan_in_fan_out),
                            model)


def _adapters(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(n, m) for n, m in model.named_modules() if hasattr(m, "lora_A") and hasattr(m, "get_base_layer")]


def _merge_adapters(model: nn.Module) -> None:
    """Fold each low-rank adapter into its weight and put the plain layer back (the model as it was, updated)."""
    for name, layer in _adapters(model):
        layer.merge()
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, layer.get_base_layer())
    for p in model.parameters():
        p.requires_grad_(True)
