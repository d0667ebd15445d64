"""Does a pinned row reproduce bitwise on a host without AVX-512? The evidence behind pinned numerics.

    python scripts/cross_host_check.py --config experiments/001-kerformer-listops.toml --label linear --seed 0 \
        [--steps 60 --eval-every 20] [--ledger docs/reproduction/numerics-verify.csv]

Trains one run of an experiment file four times with the documented command (`tokenmix compare`): on this host
and on an emulated AMD processor with AVX2 and no AVX-512 (scripts/emulated_host.py, qemu user mode), each with
pinned numerics and with the host's own (`--no-pin`). It compares each pair's ``result.json`` bitwise: the test
metric, the best validation metric and every evaluation's training and validation loss at full precision. It
appends one ledger line per pair: which run against which, both hosts' fingerprints and numerics, and whether
they are identical (else the first difference). A run already in ``--out`` is compared, not trained again.
``--steps`` shortens the runs (emulation costs tens of times the
native time); without it they run the file's own budget.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ["experiment", "label", "seed", "steps", "first", "second", "first_numerics", "second_numerics",
           "first_host", "second_host", "identical", "difference", "code", "date"]


def _train(config: str, label: str, seed: int, steps: int | None, eval_every: int | None, out: Path,
           emulated: bool, pin: bool) -> dict:
    result = out / "runs" / label / f"seed{seed}" / "result.json"
    if result.exists():  # trained by an earlier call into the same --out: compared again, not retrained
        return json.loads(result.read_text())
    command = ["compare", "--config", config, "--mixers", label, "--seeds", str(seed), "--jobs", "1",
               "--set", "report.baseline=false", "--out", str(out)]
    if steps:
        command += ["--max-steps", str(steps)]
    if eval_every:
        command += ["--eval-every", str(eval_every)]
    if not pin:
        command.append("--no-pin")
    if emulated:
        argv = [sys.executable, str(ROOT / "scripts" / "emulated_host.py"), "--", *command]
    else:
        argv = [sys.executable, "-m", "tokenmix.cli", *command]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return json.loads(result.read_text())


def _fingerprint(result: dict) -> list[tuple[str, object]]:
    values: list[tuple[str, object]] = [("test_metric", result["test_metric"]), ("best_metric", result["best_metric"])]
    for h in result["history"]:
        values += [(f"step {h['step']} train_loss", h["train_loss"]), (f"step {h['step']} val_loss", h["val_loss"])]
    return values


def difference(a: dict, b: dict) -> str | None:
    """The first value that differs between two results (full precision), or None when they are identical."""
    for (name, x), (_, y) in zip(_fingerprint(a), _fingerprint(b)):
        if x != y:
            return f"{name}: {x!r} vs {y!r}"
    return None if len(a["history"]) == len(b["history"]) else "number of evaluations"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--label", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--eval-every", type=int, default=None)
    parser.add_argument("--out", default="runs/cross-host")
    parser.add_argument("--ledger", default=str(ROOT / "docs" / "reproduction" / "numerics-verify.csv"))
    args = parser.parse_args()
    name = Path(args.config).stem
    runs = {}
    for emulated in (False, True):
        for pin in (True, False):
            key = ("emulated AVX2" if emulated else "native") + (" pinned" if pin else " host kernels")
            folder = Path(args.out) / name / f"{args.label}-seed{args.seed}" / key.replace(" ", "-")
            runs[key] = _train(args.config, args.label, args.seed, args.steps, args.eval_every, folder, emulated, pin)
            print(f"{key}: {runs[key]['test_metric']} ({runs[key]['provenance']['numerics']})", flush=True)
    pairs = [("native pinned", "emulated AVX2 pinned"), ("native host kernels", "emulated AVX2 host kernels"),
             ("native pinned", "native host kernels")]
    lines = []
    for first, second in pairs:
        a, b = runs[first], runs[second]
        diff = difference(a, b)
        lines.append({"experiment": name, "label": args.label, "seed": args.seed, "steps": a["steps"],
                      "first": first, "second": second, "first_numerics": a["provenance"]["numerics"],
                      "second_numerics": b["provenance"]["numerics"], "first_host": a["provenance"]["host"],
                      "second_host": b["provenance"]["host"], "identical": "true" if diff is None else "false",
                      "difference": diff or "", "code": a["provenance"]["code"],
                      "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")})
        print(f"{first} vs {second}: " + ("identical" if diff is None else f"DIFFER: {diff}"), flush=True)
    ledger = Path(args.ledger)
    new = not ledger.exists()
    with ledger.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        if new:
            writer.writeheader()
        writer.writerows(lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
