"""What the commands share: a help formatter that shows each option's default, printing a table, and the
arguments that name an experiment file and override its settings."""

from __future__ import annotations

import argparse

from ..tabulate import text_table

__all__ = ["HelpFormatter", "print_table", "add_experiment_arguments"]


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Help text that shows each option's default (from the parser, so it is declared once), unless the
    default is None or the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False or "default" in (action.help or ""):
            return action.help or ""
        return super()._get_help_string(action)


def print_table(headers: list[str], rows: list[list[str]], max_width: int | None = None) -> None:
    print(text_table(headers, rows, max_width=max_width))


def add_experiment_arguments(parser: argparse.ArgumentParser) -> None:
    """``--config`` (an experiment file; none: the embedded default) and ``--set KEY=VALUE`` (repeatable)."""
    parser.add_argument("--config", help="experiment file (TOML, see experiments/); default: the embedded default")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a setting of the file, dotted key and TOML value, e.g. train.lr=1e-3 or "
                        "seeds=[0,1,2] (repeatable)")
