"""``tokenmix convert``: a Hugging Face causal language model made linear (:func:`tokenmix.linearize`) on a text."""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from .common import HelpFormatter

__all__ = ["add_parser", "run", "text_batches"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    cv = sub.add_parser("convert", formatter_class=HelpFormatter,
                        help="make a Hugging Face causal LM's softmax attention linear (T2R, Hedgehog, LoLCATs) on a "
                        "text, and save it")
    cv.add_argument("model", help="folder of a transformers causal LM (config.json and weights; save_pretrained's)")
    cv.add_argument("--text", required=True, help="UTF-8 text file to learn from (the last tenth is held out for "
                    "the per-layer gaps)")
    cv.add_argument("--out", required=True, help="folder for the converted model (save_pretrained's: config.json "
                    "with the conversion's record, model.safetensors); tokenmix.load_converted, or transformers' "
                    "AutoModelForCausalLM.from_pretrained(..., trust_remote_code=True), reads it")
    cv.add_argument("--method", choices=["hedgehog", "lolcats", "t2r"], default="hedgehog", help="the recipe")
    cv.add_argument("--mechanism", choices=["linear", "window_linear"], default="linear", help="the mechanism "
                    "converted to: linear attention, or LoLCATs' sliding window + linear attention")
    cv.add_argument("--window", type=int, default=None, help="window_linear: tokens seen exactly (default 64, or "
                    "the model's own sliding window)")
    cv.add_argument("--feature-dim", type=int, default=None, help="features of the learned map per head "
                    "(default head_dim)")
    cv.add_argument("--length", type=int, default=128, help="tokens per training window")
    cv.add_argument("--batch", type=int, default=8, help="windows per step")
    cv.add_argument("--transfer-steps", type=int, default=None, help="attention-transfer steps (feature maps "
                    "alone; default 100, none for t2r)")
    cv.add_argument("--finetune-steps", type=int, default=0, help="steps fine-tuning every weight on next-token "
                    "prediction")
    cv.add_argument("--finetune", choices=["all", "lora"], default="all", help="fine-tune every weight, or "
                    "low-rank adapters on the attention projections (merged into the saved weights)")
    cv.add_argument("--lora-rank", type=int, default=8, help="rank of the adapters (--finetune lora)")
    cv.add_argument("--transfer-lr", type=float, default=1e-2, help="learning rate of the feature maps in the "
                    "transfer (AdamW)")
    cv.add_argument("--finetune-lr", type=float, default=1e-4, help="learning rate of the fine-tuning (AdamW)")
    cv.add_argument("--bytes", action="store_true", help="tokens are the text's UTF-8 bytes (a model with a "
                    "vocabulary of at least 256 and no tokenizer of its own); default: the folder's tokenizer")
    cv.add_argument("--ignore-dropout", action="store_true", help="drop the model's attention dropout, which "
                    "linear attention cannot apply (without it, a model with attention dropout is refused)")
    cv.add_argument("--checkpoint", default=None, help="checkpoint file: written as it goes, resumed from if there")
    cv.add_argument("--seed", type=int, default=0, help="seed of the windows drawn")


def text_batches(ids: list[int], length: int, batch: int, count: int, seed: int) -> list[dict]:
    """``count`` batches of ``batch`` windows of ``length`` token ids drawn (seeded) from ``ids``, each as
    ``{"input_ids", "labels"}`` for a causal LM."""
    import torch

    if len(ids) <= length:
        raise ValueError(f"the text has {len(ids)} tokens, fewer than one window of --length {length}")
    rng = random.Random(seed)
    batches = []
    for _ in range(count):
        starts = [rng.randrange(len(ids) - length) for _ in range(batch)]
        windows = torch.tensor([ids[s:s + length] for s in starts])
        batches.append({"input_ids": windows, "labels": windows})
    return batches


def _token_ids(args: argparse.Namespace, text: str, vocab_size: int) -> tuple[list[int], object | None]:
    if args.bytes:
        if vocab_size < 256:
            raise ValueError(f"--bytes needs a vocabulary of at least 256 tokens; the model has {vocab_size}")
        return list(text.encode("utf-8")), None
    import transformers

    names = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
    if not any((Path(args.model) / name).exists() for name in names):
        raise ValueError(f"no tokenizer in {args.model} (none of {', '.join(names)}); pass --bytes to use the "
                         f"text's bytes")
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    except (OSError, ValueError) as error:
        raise ValueError(f"no tokenizer in {args.model} ({error}); pass --bytes to use the text's bytes") from None
    return tokenizer(text)["input_ids"], tokenizer


def run(args: argparse.Namespace) -> None:
    try:
        import transformers
    except ModuleNotFoundError:
        raise SystemExit("tokenmix convert: needs transformers (pip install 'tokenmix[hf]')") from None
    from ..conversion import linearize
    from ..models.hf_auto import save_converted

    try:
        for what in ("length", "batch"):
            if getattr(args, what) < 1:
                raise ValueError(f"--{what} must be positive, got {getattr(args, what)}")
        model = transformers.AutoModelForCausalLM.from_pretrained(args.model)
        text = Path(args.text).read_text(encoding="utf-8")
        ids, tokenizer = _token_ids(args, text, model.config.vocab_size)
        cut = len(ids) * 9 // 10
        transfer = args.transfer_steps if args.transfer_steps is not None else (0 if args.method == "t2r" else 100)
        train = text_batches(ids[:cut], args.length, args.batch, max(transfer, args.finetune_steps, 1), args.seed)
        held_out = text_batches(ids[cut:], min(args.length, len(ids) - cut - 1), args.batch, 4, args.seed + 1)
        if args.window is not None and args.mechanism != "window_linear":
            raise ValueError("--window sets window_linear's window (--mechanism window_linear)")
        options = {} if args.window is None else {"window": args.window}
        report = linearize(model, args.mechanism, method=args.method, data=train, eval_data=held_out,
                           transfer_steps=args.transfer_steps, finetune_steps=args.finetune_steps,
                           transfer_lr=args.transfer_lr, finetune_lr=args.finetune_lr, feature_dim=args.feature_dim,
                           ignore_dropout=args.ignore_dropout, finetune=args.finetune, lora_rank=args.lora_rank,
                           checkpoint=args.checkpoint, **options)
    except (ValueError, OSError) as error:
        raise SystemExit(f"tokenmix convert: {error}") from None
    save_converted(model, args.out, method=args.method, finetune=args.finetune, source=str(args.model),
                   text=str(args.text), transfer_losses=report.transfer_losses,
                   finetune_losses=report.finetune_losses, gaps=[vars(g) for g in report.layers])
    if tokenizer is not None:
        tokenizer.save_pretrained(args.out)
    print(report.table())
    print(f"\nwrote {args.out} (tokenmix.load_converted({json.dumps(str(args.out))}) reads it)")
