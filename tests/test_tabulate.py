"""tokenmix.tabulate: the one table writer (text and markdown) of the CLI, sweeps, counts, speed and leaderboard."""

from __future__ import annotations

import pytest

from tokenmix.tabulate import MIN_CUT_WIDTH, markdown_table, text_table

HEADER = ["name", "n"]
ROWS = [["softmax", "1,024"], ["mlp", "8"]]


def test_text_columns_are_padded_two_apart_with_a_rule_under_the_header() -> None:
    assert text_table(HEADER, ROWS).split("\n") == [
        "name     n",
        "-" * 14,
        "softmax  1,024",
        "mlp      8",
    ]


def test_text_alignment_per_column() -> None:
    assert text_table(HEADER, ROWS, align="lr").split("\n") == [
        "name         n",
        "-" * 14,
        "softmax  1,024",
        "mlp          8",
    ]
    assert text_table(HEADER, ROWS, align="rl").split("\n")[2:] == ["softmax  1,024", "    mlp  8"]


def test_the_rule_character_or_none() -> None:
    assert text_table(HEADER, ROWS, rule="=").split("\n")[1] == "=" * 14
    assert text_table(HEADER, ROWS, rule="").split("\n") == ["name     n", "softmax  1,024", "mlp      8"]


def test_lines_carry_no_trailing_spaces() -> None:
    assert all(line == line.rstrip() for line in text_table(["a", "bb"], [["xxxxxx", ""], ["", "y"]]).split("\n"))


def test_empty_rows_give_the_header_and_its_rule() -> None:
    assert text_table(HEADER, []) == "name  n\n-------"
    assert markdown_table(HEADER, []) == "| name | n |\n|---|---|"


def test_max_width_cuts_the_widest_column_with_an_ellipsis() -> None:
    header = ["mixer", "paper"]
    rows = [["softmax", "Attention Is All You Need, Vaswani et al. 2017"], ["mlp", "short"]]
    lines = text_table(header, rows, max_width=30).split("\n")
    assert max(map(len, lines)) == 30
    assert lines[2] == "softmax  Attention Is All You…"
    assert lines[3] == "mlp      short"  # short cells are kept whole
    assert text_table(header, rows, max_width=200) == text_table(header, rows)  # fits already: unchanged


def test_max_width_cuts_no_column_below_the_minimum() -> None:
    rows = [["a" * 40, "b" * 40]]
    lines = text_table(["x", "y"], rows, max_width=10).split("\n")
    assert lines[2] == "a" * (MIN_CUT_WIDTH - 1) + "…  " + "b" * (MIN_CUT_WIDTH - 1) + "…"


def test_markdown_table_and_right_alignment() -> None:
    assert markdown_table(HEADER, ROWS).split("\n") == ["| name | n |", "|---|---|", "| softmax | 1,024 |",
                                                         "| mlp | 8 |"]
    assert markdown_table(HEADER, ROWS, align="lr").split("\n")[1] == "|---|---:|"


def test_markdown_escapes_pipes_and_line_breaks() -> None:
    assert markdown_table(["a|b"], [["x | y"], ["two\nlines"]]).split("\n") == [
        "| a\\|b |", "|---|", "| x \\| y |", "| two lines |"]


def test_ragged_rows_and_bad_alignments_raise() -> None:
    with pytest.raises(ValueError, match="row 1 has 1 cells"):
        text_table(HEADER, [["a", "b"], ["c"]])
    with pytest.raises(ValueError, match="align"):
        markdown_table(HEADER, ROWS, align="l")
    with pytest.raises(ValueError, match="align"):
        text_table(HEADER, ROWS, align="lc")


def test_a_rule_per_column() -> None:
    assert text_table(HEADER, ROWS, rule_per_column=True).split("\n")[1] == "-------  -----"
