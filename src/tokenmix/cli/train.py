"""``tokenmix train``: one mixer on one task, with what it saved and where."""

from __future__ import annotations

import argparse

import torch

from .common import HelpFormatter

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    from ..protocols import MODEL_PROTOCOLS, TRAIN_PRESETS
    from ..training.experiment import DEFAULT_EXPERIMENT  # the defaults are the default experiment's, declared there

    model = DEFAULT_EXPERIMENT["model"]
    tr = sub.add_parser("train", help="train one mixer on one task", formatter_class=HelpFormatter)
    tr.add_argument("--task", required=True, help="task name (tokenmix list shows them)")
    tr.add_argument("--mixer", required=True, help="mixer name, or a layer pattern 'a,b' (e.g. twins_lsa,twins_gsa), "
                    "each entry with inline options (e.g. swin,swin:shift=True,window_size=2: a comma before "
                    "option=value continues the entry)")
    tr.add_argument("--seed", type=int, default=0, help="seed of the weights, dropout and batch order")
    length = tr.add_mutually_exclusive_group()
    length.add_argument("--epochs", type=int, help="training length in epochs")
    length.add_argument("--max-steps", type=int, help="training length in optimiser steps")
    tr.add_argument("--out", help="folder for the checkpoint, logs and best weights")
    tr.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    tr.add_argument("--preset", default="quick", help="the task's data preset (quick or paper)")
    tr.add_argument("--protocol", default=model["protocol"], choices=list(MODEL_PROTOCOLS),
                    help="model protocol (paper-*: a paper's own network)")
    tr.add_argument("--train-preset", default=DEFAULT_EXPERIMENT["train"]["preset"], choices=list(TRAIN_PRESETS),
                    help="training preset (paper-*: a paper's optimiser, lr, schedule, batch)")
    tr.add_argument("--dim", type=int, default=model["dim"], help="model width")
    tr.add_argument("--depth", type=int, default=model["depth"], help="layers")
    tr.add_argument("--heads", type=int, default=model["heads"], help="heads of the mixers that have heads")
    tr.add_argument("--batch-size", type=int, help="batch size (default: the training preset's)")
    tr.add_argument("--lr", type=float, help="learning rate (default: the training preset's)")
    tr.add_argument("--eval-every", type=int, help="steps between evaluations (default: once per epoch)")
    tr.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's default)")
    tr.add_argument("--bf16", action="store_true", help="train and evaluate under bfloat16 autocast")
    tr.add_argument("--flush-denormal", action="store_true", help="flush subnormal floats to zero on the CPU: "
                    "faster where activations grow (Performer, softmax), other results where a subnormal occurs")
    tr.add_argument("--tensorboard", action="store_true", help="also write tensorboard scalars to "
                    "<out>/tensorboard (needs --out and the tensorboard package)")
    tr.add_argument("--device", default="cpu", help="where the model trains, e.g. cpu, cuda or cuda:1")


def run(args: argparse.Namespace) -> None:
    import json
    from dataclasses import asdict
    from pathlib import Path

    from ..models.patterns import split_mixer_list
    from ..tasks import create_task
    from ..training.config import TrainConfig
    from ..training.loop import flushed_denormals, train
    from ..training.sweep import RESULT_FILE

    given = {k: v for k, v in (("batch_size", args.batch_size), ("lr", args.lr)) if v is not None}
    try:
        if args.threads is not None and args.threads < 1:
            raise ValueError(f"--threads must be a positive int, got {args.threads}")
        if args.tensorboard and args.out is None:
            raise ValueError("--tensorboard needs --out (the scalars go to <out>/tensorboard)")
        entries = split_mixer_list(args.mixer, "--mixer")
        mixer = entries[0] if len(entries) == 1 else entries
        with flushed_denormals(args.flush_denormal):  # before the first operation, so every intra-op thread flushes
            if args.threads is not None:
                torch.set_num_threads(args.threads)
            task = create_task(args.task, preset=args.preset, seed=0)
            torch.manual_seed(args.seed)
            model = task.build_model(mixer, dim=args.dim, depth=args.depth, num_heads=args.heads,
                                     protocol=args.protocol)
            config = TrainConfig.preset(args.train_preset, max_steps=args.max_steps, epochs=args.epochs,
                                        eval_every=args.eval_every, seed=args.seed, out_dir=args.out,
                                        resume=args.resume, bf16=args.bf16, flush_denormal=args.flush_denormal,
                                        tensorboard=args.tensorboard, device=args.device, **given)
            result = train(task, model, config)
    except (ValueError, ImportError) as error:  # bad settings, or tensorboard not installed
        raise SystemExit(f"tokenmix train: {error}") from None
    print(f"{args.task} / {args.mixer} / seed {args.seed}: best val {result.metric_name} {result.best_metric:.4f} "
          f"at epoch {result.best_epoch:.2f}; test {result.test_metric}; {result.time_per_epoch_s:.2f} s/epoch; "
          f"{result.tokens_per_s:.0f} tokens/s")
    if args.out is None:
        print("nothing saved: pass --out DIR to keep the best weights, the logs and the result")
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / RESULT_FILE).write_text(json.dumps(asdict(result)))
    saved = [(f, what) for f, what in (("best.safetensors", "the best-validation weights"),
                                       ("log.jsonl", "one record per evaluation"), ("log.csv", "the same as CSV"),
                                       (RESULT_FILE, "this result and its history"),
                                       ("checkpoint", "the last checkpoint, for --resume"),
                                       ("tensorboard", "tensorboard scalars")) if (out / f).exists()]
    print(f"saved in {out}/: " + "; ".join(f"{f} ({what})" for f, what in saved))
