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
