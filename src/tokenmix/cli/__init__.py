"""The ``tokenmix`` command line.

One module per command, each with ``add_parser(sub)`` (its arguments) and ``run(args)`` (parse nothing more,
call the library, print): :mod:`.listing` (``list``), :mod:`.demo`, :mod:`.train`, :mod:`.compare`,
:mod:`.speed`, :mod:`.count`, :mod:`.steptime`, :mod:`.report`, :mod:`.data` and :mod:`.convert`; :mod:`.common` holds
what they share. A command that fails on bad settings or missing data exits with ``tokenmix <command>: <why>``.
"""

from __future__ import annotations

import argparse
import sys

from . import compare, convert, count, data, demo, listing, report, speed, steptime, train
from .listing import WIDTH

__all__ = ["WIDTH", "build_parser", "main"]

# in the order `tokenmix --help` lists them
_COMMANDS = {"list": listing, "demo": demo, "train": train, "compare": compare, "speed": speed, "count": count,
             "steptime": steptime, "report": report, "data": data, "convert": convert}


def build_parser() -> argparse.ArgumentParser:
    """The ``tokenmix`` argument parser with every subcommand."""
    parser = argparse.ArgumentParser(prog="tokenmix", description="The tokenmix command line.")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in _COMMANDS.values():
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _COMMANDS[args.command].run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
