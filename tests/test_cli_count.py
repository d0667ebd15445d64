"""`tokenmix count` end to end: Table 7 on the command line, CSV output, modes, bad arguments."""

from __future__ import annotations

import csv

import pytest

from tokenmix.cli import main


def test_count_prints_table_7_and_writes_csv(tmp_path, capsys):
    out = tmp_path / "counts.csv"
    main(["count", "--mixers", "softmax,extractor_she,extractor_me", "--no-flops", "--csv", str(out)])
    text = capsys.readouterr().out
    for figure in ("10,502,144", "10,420,096", "16,512", "8,256", "139,476,992", "1,056,768", "2,129,920"):
        assert figure in text
    rows = {r["mixer"]: r for r in csv.DictReader(out.open())}
    assert set(rows) == {"softmax", "extractor_she", "extractor_me"}
    assert int(rows["softmax"]["total"]) == 20_947_008
    assert int(rows["extractor_she"]["total"]) == 278_888_448
    assert int(rows["extractor_me"]["params"]) == 128
    assert rows["softmax"]["mode"] == "causal"


def test_count_32_heads_and_flops_column(capsys):
    main(["count", "--mixers", "softmax", "--heads", "32", "--dim", "128", "--max-len", "128"])
    text = capsys.readouterr().out
    assert "528,384" in text and "264,192" in text and "21,710,848" in text
    assert "FlopCounterMode" in text


def test_count_bidirectional_mode_skips_causal_only_mixers(capsys):
    main(["count", "--mixers", "linear,extractor_we", "--mode", "bidir", "--dim", "16", "--max-len", "32"])
    text = capsys.readouterr().out
    assert "linear" in text and "bidir" in text
    assert "skipped (no bidir mode): extractor_we" in text


def test_count_rejects_unknown_mixers_and_bad_sizes():
    with pytest.raises(SystemExit, match="unknown mixer"):
        main(["count", "--mixers", "nope"])
    with pytest.raises(SystemExit, match="dim"):
        main(["count", "--mixers", "linear", "--dim", "0"])


def test_count_paper_000_mode_prints_section_4_2(tmp_path, capsys):
    """000 §4.2 at N = 512, m = 128, d = 64: linear 2Nd^2 + 3Ndm, Relation Nd^2 + 2Ndm + Nd multiplications."""
    out = tmp_path / "paper.csv"
    main(["count", "--mode", "paper-000", "--dim", "128", "--inner-dim", "64", "--length", "512", "--no-flops",
          "--csv", str(out)])
    text = capsys.readouterr().out
    n, m, d = 512, 128, 64
    linear, relation = 2 * n * d * d + 3 * n * d * m, n * d * d + 2 * n * d * m + n * d
    assert f"= {linear:,}; tokenmix mults {linear:,} (equal)" in text
    assert f"= {relation:,}; tokenmix mults {relation:,} (equal)" in text
    rows = {r["mixer"]: r for r in csv.DictReader(out.open())}
    assert set(rows) == {"softmax", "linear", "relation"}
    assert int(rows["linear"]["mults"]) == linear and int(rows["relation"]["mults"]) == relation
    assert int(rows["linear"]["params"]) == 3 * m * d and int(rows["relation"]["params"]) == 2 * m * d + d * d
    assert {r["mode"] for r in rows.values()} == {"bidir"} and {r["heads"] for r in rows.values()} == {"1"}


def test_count_paper_000_rejects_options_that_do_not_apply():
    with pytest.raises(SystemExit, match="--mixers"):
        main(["count", "--mode", "paper-000", "--mixers", "linear"])
    with pytest.raises(SystemExit, match="--heads"):
        main(["count", "--mode", "paper-000", "--heads", "2"])
    with pytest.raises(SystemExit, match="inner_dim"):
        main(["count", "--mode", "paper-000", "--inner-dim", "0", "--no-flops"])
    with pytest.raises(SystemExit, match="--inner-dim is for --mode paper-000"):
        main(["count", "--mixers", "linear", "--inner-dim", "8"])
