"""tokenmix's Performer and linear attention against the peer libraries, measured side by side in one run.

    pip install '.[peers]'          # performer-pytorch, linear-attention-transformer (never library deps)
    python benchmarks/peers.py [--lengths 4096,16384] [--threads 2] [--repeats 3] [--out runs/peers]

Whole modules with their projections, batch 1, dim 256 = 4 heads x 64, forward + backward of
``y.square().mean()``, the median of ``--repeats`` timed passes after one warm-up. Each case runs in a fresh
subprocess, so its peak memory (``VmHWM`` above the resident size before the case, :mod:`tokenmix.procmem`)
is its own. The columns:

* Performer: tokenmix ``performer`` (256 features) vs performer-pytorch ``SelfAttention`` (256 features);
* linear: tokenmix ``linear`` (elu+1 features) and ``efficient`` (bidirectional only: softmax feature maps, as
  linear-attention-transformer's bidirectional form) vs linear-attention-transformer ``SelfAttention``
  (compared with ``efficient`` bidirectionally, with ``linear`` causally);
* softmax: tokenmix ``softmax`` (PyTorch SDPA; causal through SDPA's ``is_causal``).

Ratios are taken within this run: peer / tokenmix (> 1: tokenmix is faster), each tokenmix mechanism's
causal time over its bidirectional time, and causal SDPA softmax over causal tokenmix Performer. Issue
targets (N = 16,384): causal performer <= 1.5x its bidirectional time and >= 3x faster than causal SDPA;
causal linear <= 1.3x its bidirectional time and faster than linear-attention-transformer's causal module.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import torch
import torch.nn as nn

DIM, HEADS, FEATURES = 256, 4, 256
# (column, implementation per mode): tokenmix mixers by registry name, peers by package
COLUMNS = {
    "tokenmix performer": {"bidir": "tokenmix:performer", "causal": "tokenmix:performer"},
    "performer-pytorch": {"bidir": "performer_pytorch", "causal": "performer_pytorch"},
    "tokenmix linear": {"bidir": "tokenmix:linear", "causal": "tokenmix:linear"},
    "tokenmix efficient": {"bidir": "tokenmix:efficient"},  # bidirectional only
    "linear-attention-transformer": {"bidir": "linear_attention_transformer",
                                     "causal": "linear_attention_transformer"},
    "tokenmix softmax": {"bidir": "tokenmix:softmax", "causal": "tokenmix:softmax"},
}


def build(implementation: str, causal: bool) -> nn.Module:
    """The module of one implementation at this benchmark's shape; its forward maps (1, N, DIM) to (1, N, DIM)."""
    if implementation.startswith("tokenmix:"):
        import tokenmix

        name = implementation.split(":", 1)[1]
        options = {"nb_features": FEATURES} if name == "performer" else {}
        return tokenmix.create_mixer(name, DIM, num_heads=HEADS, causal=causal, **options)
    if implementation == "performer_pytorch":
        from performer_pytorch import SelfAttention

        return SelfAttention(DIM, causal=causal, heads=HEADS, dim_head=DIM // HEADS, nb_features=FEATURES)
    if implementation == "linear_attention_transformer":
        from linear_attention_transformer.linear_attention_transformer import SelfAttention

        return SelfAttention(DIM, HEADS, causal=causal, dim_head=DIM // HEADS)
    raise ValueError(f"peers: unknown implementation {implementation!r}")


def _timing() -> ModuleType:
    """This checkout's ``tokenmix.timing``, loaded from its file: when PYTHONPATH points ``tokenmix`` at another
    checkout (``--columns``), that checkout's mixers are still timed by this checkout's helper."""
    spec = importlib.util.spec_from_file_location("peers_timing", Path(__file__).resolve().parents[1] / "src" /
                                                  "tokenmix" / "timing" / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def measure(implementation: str, causal: bool, length: int, repeats: int, threads: int) -> dict[str, float]:
    """Median forward + backward time (ms) and peak memory above the start (MiB) of one case, in this process."""
    from tokenmix.procmem import PeakRSS

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    module = build(implementation, causal)
    x = torch.randn(1, length, DIM, requires_grad=True)
    timing = _timing()  # loaded before the peak starts: its imports are not the case's memory
    peak = PeakRSS()
    peak.start()

    def step() -> None:
        x.grad = None
        module.zero_grad(set_to_none=True)
        module(x).square().mean().backward()

    seconds = timing.measure(step, repeats=repeats, warmup=1, threads=threads).median
    return {"time_ms": 1e3 * seconds, "peak_mem_mb": peak.peak_mb()}


def run_case(implementation: str, causal: bool, length: int, repeats: int, threads: int,
             timeout: float) -> dict[str, object]:
    """:func:`measure` in a fresh subprocess; a missing peer package or a failure becomes a status."""
    case = {"implementation": implementation, "causal": causal, "length": length, "repeats": repeats,
            "threads": threads}
    try:
        done = subprocess.run([sys.executable, __file__, "--case", json.dumps(case)], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "timeout"}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"status": "missing" if "ModuleNotFoundError" in last else "error", "detail": last}
    return {"status": "ok", **json.loads(done.stdout.strip().splitlines()[-1])}


def _cell(result: dict[str, object]) -> str:
    if result["status"] != "ok":
        return str(result["status"])
    return f"{result['time_ms']:,.0f} ms, {result['peak_mem_mb']:,.0f} MiB"


def _ratio(a: dict[str, object], b: dict[str, object]) -> str:
    """a's time over b's, or '—' when either did not run."""
    if a["status"] != "ok" or b["status"] != "ok":
        return "—"
    return f"{float(a['time_ms']) / float(b['time_ms']):.2f}"


def report(results: dict[tuple[str, str, int], dict[str, object]], lengths: list[int]) -> str:
    names = list(COLUMNS)
    lines = ["| N | mode | " + " | ".join(names) + " | performer-pytorch / tokenmix | "
             "linear-attention-transformer / tokenmix |", "|---|---|" + "---|" * (len(names) + 2)]
    for n in lengths:
        for mode in ("bidir", "causal"):
            cell = {c: results[(c, mode, n)] for c in names}
            own_linear = cell["tokenmix efficient"] if mode == "bidir" else cell["tokenmix linear"]
            lines.append(f"| {n:,} | {mode} | " + " | ".join(_cell(r) for r in cell.values()) + " | "
                         f"{_ratio(cell['performer-pytorch'], cell['tokenmix performer'])} | "
                         f"{_ratio(cell['linear-attention-transformer'], own_linear)} |")
    lines += ["", "| N | performer causal / bidir | linear causal / bidir | causal softmax / causal performer |",
              "|---|---|---|---|"]
    for n in lengths:
        causal = {c: results[(c, "causal", n)] for c in ("tokenmix performer", "tokenmix linear", "tokenmix softmax")}
        lines.append(f"| {n:,} | {_ratio(causal['tokenmix performer'], results[('tokenmix performer', 'bidir', n)])}"
                     f" | {_ratio(causal['tokenmix linear'], results[('tokenmix linear', 'bidir', n)])}"
                     f" | {_ratio(causal['tokenmix softmax'], causal['tokenmix performer'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="4096,16384", help="comma-separated sequence lengths")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads of every case")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per case (median reported)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per case before 'timeout'")
    parser.add_argument("--columns", default=",".join(COLUMNS),
                        help="comma-separated columns to measure (e.g. only the tokenmix ones, to time another "
                             "checkout of tokenmix with PYTHONPATH); the others are reported 'skipped'")
    parser.add_argument("--out", default="runs/peers", help="folder for peers.csv and peers.md")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # internal: one case, in a subprocess
    args = parser.parse_args(argv)
    if args.case:
        case = json.loads(args.case)
        print(json.dumps(measure(case["implementation"], case["causal"], case["length"], case["repeats"],
                                 case["threads"])))
        return
    lengths = [int(n) for n in args.lengths.split(",")]
    columns = args.columns.split(",")
    unknown = sorted(set(columns) - set(COLUMNS))
    if unknown:
        parser.error(f"unknown column(s) {unknown}; columns: {', '.join(COLUMNS)}")
    results = {}
    for n in lengths:
        for mode in ("bidir", "causal"):
            for column, implementations in COLUMNS.items():
                if column not in columns or mode not in implementations:
                    results[(column, mode, n)] = {"status": "skipped" if column not in columns else "n/a"}
                    continue
                results[(column, mode, n)] = run_case(implementations[mode], mode == "causal", n, args.repeats,
                                                      args.threads, args.timeout)
                print(f"N={n} {mode} {column}: {_cell(results[(column, mode, n)])}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "peers.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, ["column", "mode", "length", "status", "time_ms", "peak_mem_mb", "detail"])
        writer.writeheader()
        for (column, mode, n), r in results.items():
            writer.writerow({"column": column, "mode": mode, "length": n, **r})
    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
               f"{args.threads} threads, float32, batch 1, dim {DIM} = {HEADS} heads x {DIM // HEADS}, "
               f"{FEATURES} Performer features, forward + backward, median of {args.repeats}")
    text = f"{machine}\n\n{report(results, lengths)}\n"
    (out / "peers.md").write_text(text)
    print("\n" + text)


if __name__ == "__main__":
    main()
