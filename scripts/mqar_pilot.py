"""Collect the MQAR pilot runs (ad-hoc `tokenmix compare` folders, one seed each) into one CSV: what was tried
before the main job and the recall sweep were fixed, with each run's test accuracy read from its result.json.

    python scripts/mqar_pilot.py OUT.csv FOLDER:NOTE [FOLDER:NOTE ...]

NOTE says what the folder's config.toml cannot (e.g. that token embeddings were still scaled by sqrt(dim), the
model default of the code the run used). A run stopped before its end gives the steps it took and its best
validation accuracy, no test accuracy.
"""

from __future__ import annotations

import csv
import json
import sys
import tomllib
from pathlib import Path

COLUMNS = ["folder", "label", "layers", "seq_len", "num_pairs", "vocab_size", "dim", "heads", "batch_size", "steps",
           "lr", "model_settings", "test_accuracy", "best_val", "note"]
QUICK = {"seq_len": 64, "num_pairs": 8, "vocab_size": 256}  # the mqar task's quick preset


def rows(folder: Path, note: str) -> list[dict]:
    config = tomllib.loads((folder / "config.toml").read_text())
    task, model, train = config["task"], config["model"], config["train"]
    entries = {e["label"] if isinstance(e, dict) else e: e for e in config["mixers"]}
    out = []
    for run in sorted(folder.glob("runs/*/seed0")):
        label = run.parent.name
        entry = entries.get(label, label)
        layers = "+".join(entry.get("pattern", [entry.get("name", label)])) if isinstance(entry, dict) else entry
        r = _result(run)
        if r is None:
            continue
        settings = {k: v for k, v in model.items() if k not in ("protocol", "dim", "depth", "heads")}
        out.append({"folder": folder.name, "label": label, "layers": layers,
                    **{k: task.get(k, QUICK[k]) for k in QUICK}, "dim": model["dim"], "heads": model.get("heads"),
                    "batch_size": train["batch_size"], "steps": r["steps"],
                    "lr": (entry.get("train", {}) if isinstance(entry, dict) else {}).get("lr", train.get("lr")),
                    "model_settings": " ".join(f"{k}={v}" for k, v in settings.items()),
                    "test_accuracy": "" if r["test_metric"] is None else round(r["test_metric"], 6),
                    "best_val": round(r["best_metric"], 6), "note": note})
    return out


def _result(run: Path) -> dict | None:
    """The run's result.json, or for a run stopped before its end its log: the steps it took and its best
    validation metric (no test metric)."""
    if (run / "result.json").exists():
        return json.loads((run / "result.json").read_text())
    if not (run / "log.csv").exists():
        return None
    with open(run / "log.csv") as f:
        log = list(csv.DictReader(f))
    if not log:
        return None
    return {"steps": int(log[-1]["step"]), "test_metric": None, "best_metric": max(float(r["val_metric"]) for r in log)}


def main(argv: list[str]) -> None:
    out, specs = Path(argv[0]), argv[1:]
    table = [row for spec in specs for row in rows(Path(spec.split(":", 1)[0]), spec.split(":", 1)[1])]
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        writer.writerows(table)
    print(f"{len(table)} runs -> {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
