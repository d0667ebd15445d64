"""benchmarks/peers.py: the report's ratios come from the measured cells, and a missing peer is a status."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "peers.py"


@pytest.fixture(scope="module")
def peers():
    spec = importlib.util.spec_from_file_location("peers_benchmark", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def fake_results(peers, missing=()):
    times = {"tokenmix performer": 100.0, "performer-pytorch": 300.0, "tokenmix linear": 50.0,
             "tokenmix efficient": 20.0, "linear-attention-transformer": 40.0, "tokenmix softmax": 400.0}
    results = {}
    for column, t in times.items():
        for mode, factor in (("bidir", 1.0), ("causal", 2.0)):
            ok = column not in missing
            results[(column, mode, 1024)] = ({"status": "ok", "time_ms": t * factor, "peak_mem_mb": 1.0} if ok
                                             else {"status": "missing", "detail": "ModuleNotFoundError"})
    return results


def test_the_report_divides_the_right_cells(peers):
    text = peers.report(fake_results(peers), [1024])
    bidir = next(line for line in text.splitlines() if line.startswith("| 1,024 | bidir"))
    causal = next(line for line in text.splitlines() if line.startswith("| 1,024 | causal"))
    assert bidir.endswith("| 3.00 | 2.00 |")  # performer-pytorch / tokenmix; lat / tokenmix efficient
    assert causal.endswith("| 3.00 | 0.80 |")  # lat / tokenmix linear when causal
    ratios = text.splitlines()[-1]
    assert ratios == "| 1,024 | 2.00 | 2.00 | 4.00 |"  # causal/bidir twice, causal softmax / causal performer


def test_a_missing_peer_is_reported_not_divided(peers):
    text = peers.report(fake_results(peers, missing=("performer-pytorch",)), [1024])
    bidir = next(line for line in text.splitlines() if line.startswith("| 1,024 | bidir"))
    assert "| missing |" in bidir and bidir.endswith("| — | 2.00 |")


def test_one_case_measures_a_tokenmix_mixer_in_process(peers):
    result = peers.measure("tokenmix:linear", True, 32, repeats=1, threads=1)
    assert result["time_ms"] > 0 and result["peak_mem_mb"] >= 0
    with pytest.raises(ValueError, match="unknown implementation"):
        peers.build("nonsense", False)
