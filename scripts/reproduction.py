"""Regenerate docs/reproduction.md from the committed CSVs: a thin wrapper around ``tokenmix report``.

    python scripts/reproduction.py [docs/reproduction] [--out docs/reproduction.md] [--no-plots]

Everything lives in :mod:`tokenmix.report`: the claims and the papers' texts are data in the experiment files
(``[[claims]]``, ``[paper]``), the exact tests come from scipy (``pip install 'tokenmix[report]'``). Paths
default to this repository's ``docs/reproduction``, ``docs/reproduction.md`` and ``experiments``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Regenerate docs/reproduction.md (runs `tokenmix report`).")
    parser.add_argument("data", nargs="?", default=str(ROOT / "docs" / "reproduction"),
                        help="folder of the collected CSVs (default docs/reproduction)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "reproduction.md"), help="the document to write")
    parser.add_argument("--experiments", default=str(ROOT / "experiments"), help="folder of the experiment files")
    parser.add_argument("--no-plots", action="store_true", help="do not draw the metric-vs-time plots")
    args = parser.parse_args(argv)
    from tokenmix.cli import main as tokenmix

    command = ["report", "--data", args.data, "--out", args.out, "--experiments", args.experiments]
    return tokenmix(command + (["--no-plots"] if args.no_plots else []))


if __name__ == "__main__":
    raise SystemExit(main())
