"""Train a small ViT on Fashion-MNIST with each token mixer, and compare them.

    python benchmarks/train_vit_fashion.py --mixers softmax,linear --steps 300
    python benchmarks/train_vit_fashion.py --mixers all-spatial

For each mixer: the same seed, ``ViT(28, patch, 1, 10, mixer, dim, depth)``, AdamW, ``--steps`` steps on
shuffled training batches (the same batches in the same order for every mixer), then the accuracy on
the first ``--eval-size`` test images. Prints the mean training loss of the first and last 50 steps,
the test accuracy and the wall time per mixer, and a table at the end.

``--pooling`` defaults to ``mean`` for every mixer, so that 1-D and spatial mixers (which cannot take a
CLS token) are compared with the same head, and so that point-wise mixers such as ``mlp`` (which never
let a CLS token see the patches) are not handicapped; ``--pooling auto`` keeps the model's default
(CLS for 1-D mixers, mean for spatial ones).

The data come from :func:`tokenmix.data.load_fashion_mnist` (``apt-get install dataset-fashion-mnist``,
or ``--data DIR`` / ``$TOKENMIX_DATA`` pointing at the four IDX files).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

import tokenmix
from tokenmix.data import load_fashion_mnist, normalize_images
from tokenmix.models import ViT
from tokenmix.timing import measure

WINDOW = 50  # steps averaged for the "first" and "last" training loss


def select_mixers(spec: str) -> list[str]:
    """``all``: every registered mixer; ``all-spatial``: the spatial ones; ``default``: every mixer that
    can run bidirectionally; else a comma-separated list of names."""
    public = [n for n in tokenmix.list_mixers() if not n.startswith("_")]
    if spec == "all":
        return public
    if spec == "all-spatial":
        return [n for n in public if tokenmix.mixer_info(n).spatial]
    if spec == "default":
        return [n for n in public if tokenmix.mixer_info(n).bidirectional]
    names = [n.strip() for n in spec.split(",") if n.strip()]
    for name in names:
        tokenmix.mixer_info(name)  # ValueError listing the registered names if unknown
    return names


def batch_order(n_train: int, steps: int, batch: int, seed: int) -> list[torch.Tensor]:
    """Index batches of shuffled epochs, drawn once from a generator seeded with ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    batches, perm, pos = [], torch.randperm(n_train, generator=generator), 0
    for _ in range(steps):
        if pos + batch > n_train:
            perm, pos = torch.randperm(n_train, generator=generator), 0
        batches.append(perm[pos:pos + batch])
        pos += batch
    return batches


@torch.no_grad()
def accuracy(model: ViT, images: torch.Tensor, labels: torch.Tensor, chunk: int = 500) -> float:
    model.eval()
    correct = 0
    for i in range(0, len(labels), chunk):
        logits = model(normalize_images(images[i:i + chunk]))
        correct += int((logits.argmax(dim=-1) == labels[i:i + chunk]).sum())
    return correct / len(labels)


def run_one(name: str, args: argparse.Namespace, data: tuple, batches: list[torch.Tensor]) -> dict | None:
    info = tokenmix.mixer_info(name)
    if not info.bidirectional:
        print(f"{name}: skipped (causal only: it cannot run bidirectionally over image patches)")
        return None
    train_x, train_y, test_x, test_y = data
    torch.manual_seed(args.seed)
    pooling = None if args.pooling == "auto" else args.pooling
    try:
        model = ViT(28, args.patch, 1, 10, name, args.dim, args.depth,
                    args.heads if info.multihead else None, pooling=pooling)
    except ValueError as error:
        print(f"{name}: skipped ({error})")
        return None
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    losses, accuracies = [], []

    def train_and_test() -> None:
        model.train()
        for idx in batches:
            loss = F.cross_entropy(model(normalize_images(train_x[idx])), train_y[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        accuracies.append(accuracy(model, test_x, test_y))

    seconds = measure(train_and_test, repeats=1, threads=None).median  # one call: the wall time of the run
    acc = accuracies[0]
    first = sum(losses[:WINDOW]) / len(losses[:WINDOW])
    last = sum(losses[-WINDOW:]) / len(losses[-WINDOW:])
    print(f"{name}: {params:,} params, pooling {model.pooling}; loss first-{WINDOW} {first:.4f}, "
          f"last-{WINDOW} {last:.4f}; test acc {acc:.4f} ({len(test_y)} images); {seconds:.1f} s")
    return dict(mixer=name, params=params, first=first, last=last, acc=acc, seconds=seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixers", default="default",
                        help="comma-separated names, 'all-spatial', 'all', or 'default' (every mixer that "
                             "can run bidirectionally)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--patch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4, help="heads, for the mixers that have heads")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--eval-size", type=int, default=2000)
    parser.add_argument("--pooling", choices=("mean", "cls", "auto"), default="mean")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--data", default=None, help="directory with the IDX files (default: see module doc)")
    args = parser.parse_args()
    if args.steps <= 0 or args.batch <= 0 or args.eval_size <= 0:
        parser.error("--steps, --batch and --eval-size must be positive")
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    names = select_mixers(args.mixers)
    train_x, train_y = load_fashion_mnist(args.data, "train")
    test_x, test_y = load_fashion_mnist(args.data, "test")
    test_x, test_y = test_x[:args.eval_size], test_y[:args.eval_size]
    batches = batch_order(len(train_y), args.steps, args.batch, args.seed)
    print(f"ViT on Fashion-MNIST: patch {args.patch}, dim {args.dim}, depth {args.depth}, heads {args.heads} "
          f"(multihead mixers), pooling {args.pooling}; {args.steps} steps of batch {args.batch}, AdamW lr "
          f"{args.lr}, seed {args.seed}; torch {torch.__version__}, {torch.get_num_threads()} threads")

    results = [r for name in names if (r := run_one(name, args, (train_x, train_y, test_x, test_y), batches))]
    if not results:
        return
    print()
    first, last = f"loss first-{WINDOW}", f"loss last-{WINDOW}"
    print(f"{'mixer':16s} {'params':>9s} {first:>14s} {last:>13s} {'test acc':>9s} {'seconds':>8s}")
    for r in results:
        print(f"{r['mixer']:16s} {r['params']:9,d} {r['first']:14.4f} {r['last']:13.4f} {r['acc']:9.4f} "
              f"{r['seconds']:8.1f}")


if __name__ == "__main__":
    main()
