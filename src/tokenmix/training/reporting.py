"""What a training run shows and writes besides its checkpoint (:class:`Reporter`): ``out_dir/log.jsonl`` and
``out_dir/log.csv`` (one record per evaluation), tensorboard scalars under ``out_dir/tensorboard`` and a tqdm
progress bar."""

from __future__ import annotations

import csv
import json
import os
import sys
from dataclasses import asdict, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import EvalRecord, TrainConfig

__all__ = ["Reporter"]

LOG_JSONL = "log.jsonl"
LOG_CSV = "log.csv"


class Reporter:
    """The logs, tensorboard scalars and progress bar of one rank (all off unless ``enabled``: rank 0).

    The logs are rewritten from ``history`` at the start, so a resumed run drops the records written after its
    checkpoint, and appended to at every evaluation: no record is duplicated."""

    def __init__(self, config: TrainConfig, *, enabled: bool, metric: str, total_steps: int, step: int,
                 history: list[EvalRecord], record_type: type) -> None:
        self.metric = metric
        self.out_dir = str(config.out_dir) if enabled and config.out_dir is not None else None
        if self.out_dir is not None:
            _write_logs(self.out_dir, record_type, history)
        self.writer = _make_writer(str(config.out_dir)) if enabled and config.tensorboard else None
        show = config.progress if config.progress is not None else sys.stderr.isatty()
        self.bar = _make_progress(total_steps, step) if enabled and show else None

    def stepped(self) -> None:
        """One optimiser step was taken."""
        if self.bar is not None:
            self.bar.update(1)

    def evaluated(self, rec: EvalRecord) -> None:
        """Log the evaluation ``rec``."""
        if self.out_dir is not None:
            _append_log(self.out_dir, rec)
        if self.writer is not None:
            for key in ("train_loss", "val_loss", "val_metric"):
                self.writer.add_scalar(key if key != "val_metric" else f"val_{self.metric}", getattr(rec, key),
                                       rec.step)
            self.writer.flush()
        if self.bar is not None:
            self.bar.set_postfix(val_loss=f"{rec.val_loss:.4f}", **{self.metric: f"{rec.val_metric:.4f}"})

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.writer is not None:
            self.writer.close()


def _write_logs(out_dir: str, record_type: type, history: list[Any]) -> None:
    """Rewrite both logs from ``history`` (atomically, file by file)."""
    names = [f.name for f in fields(record_type)]
    for fname, writer in ((LOG_JSONL, "jsonl"), (LOG_CSV, "csv")):
        path = os.path.join(out_dir, fname)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "w", newline="") as fh:
            if writer == "jsonl":
                for rec in history:
                    fh.write(json.dumps(asdict(rec)) + "\n")
            else:
                w = csv.writer(fh)
                w.writerow(names)
                for rec in history:
                    w.writerow([getattr(rec, n) for n in names])
        os.replace(tmp, path)


def _append_log(out_dir: str, rec: Any) -> None:
    names = [f.name for f in fields(rec)]
    with open(os.path.join(out_dir, LOG_JSONL), "a") as fh:
        fh.write(json.dumps(asdict(rec)) + "\n")
    csv_path = os.path.join(out_dir, LOG_CSV)
    new = not os.path.exists(csv_path) or os.path.getsize(csv_path) == 0
    with open(csv_path, "a", newline="") as fh:
        w = csv.writer(fh)
        if new:
            w.writerow(names)
        w.writerow([getattr(rec, n) for n in names])


def _make_progress(total_steps: int, step: int) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total_steps, initial=step, unit="step", dynamic_ncols=True)


def _make_writer(out_dir: str) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as err:
        raise ImportError("TrainConfig.tensorboard=True needs the 'tensorboard' package "
                          f"(pip install tensorboard): {err}") from err
    return SummaryWriter(os.path.join(out_dir, "tensorboard"))
