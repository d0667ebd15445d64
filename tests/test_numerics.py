"""Pinned numerics (tokenmix.training.numerics): what a run process computes with, the host it records, the
cause --verify names, and the claims whose compared rows ran with different numerics."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tokenmix.report.confound import confounding, host_sensitive
from tokenmix.training.numerics import (PINNED, PINNED_ENV, host_fingerprint, host_id, numerics,
                                        pinned_environment, same_numerics_key)
from tokenmix.training.sweep import pinned_numerics
from tokenmix.training.verify import cause

PROBE = "from tokenmix.training.numerics import numerics; print(numerics())"


def _probe(env: dict[str, str]) -> str:
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_a_process_started_with_the_pinned_environment_computes_pinned():
    import torch

    if not torch.cpu._is_avx2_supported():
        pytest.skip("the pinned level needs AVX2")
    assert _probe(pinned_environment()) == PINNED


def test_a_process_without_it_says_what_it_computes_with():
    env = {k: v for k, v in os.environ.items() if k not in PINNED_ENV}
    got = _probe(env)
    assert got.startswith("unpinned(aten=") and "mkl=" in got and "onednn=all" in got
    partly = _probe({**env, "ATEN_CPU_CAPABILITY": "avx2"})  # one setting alone is not the pinned level
    assert partly.startswith("unpinned(aten=avx2,")


def test_pinned_numerics_sets_the_environment_for_children_and_restores_it():
    before = {k: os.environ.get(k) for k in PINNED_ENV}
    with pinned_numerics():
        assert all(os.environ[k] == v for k, v in PINNED_ENV.items())
    assert {k: os.environ.get(k) for k in PINNED_ENV} == before


def test_the_host_fingerprint_names_the_isa_and_the_libraries_and_ends_with_a_digest():
    fingerprint = host_fingerprint()
    assert "isa " in fingerprint and "mkl " in fingerprint and "onednn " in fingerprint
    assert len(host_id(fingerprint)) == 10 and fingerprint.endswith("#" + host_id(fingerprint))
    assert numerics() == PINNED or numerics().startswith("unpinned(")


def test_pinned_rows_compare_across_hosts_unpinned_rows_only_on_one():
    a = {"numerics": PINNED, "host": "A #aaaaaaaaaa", "cpu": "AMD EPYC"}
    b = {"numerics": PINNED, "host": "B #bbbbbbbbbb", "cpu": "AMD EPYC"}
    assert same_numerics_key(a) == same_numerics_key(b)
    u1 = {"numerics": "unpinned(aten=avx512,mkl=OFF,onednn=all)", "host": "A #aaaaaaaaaa", "cpu": "AMD EPYC"}
    u2 = {**u1, "host": "B #bbbbbbbbbb"}
    assert same_numerics_key(u1) != same_numerics_key(u2) != same_numerics_key(a)
    legacy = {"cpu": "AMD EPYC"}  # recorded before numerics and hosts were
    assert "host not recorded" in same_numerics_key(legacy)


@pytest.mark.parametrize("row, rerun, want", [
    ({"code": "c1", "numerics": PINNED, "host": "#a"}, {"code": "c2", "numerics": PINNED, "host": "#b"}, "code"),
    ({"code": "c1", "numerics": PINNED, "host": "#a"}, {"code": "c1", "numerics": PINNED, "host": "#b"}, "neither"),
    ({"code": "c1", "numerics": "unpinned(x)", "host": "#a"}, {"code": "c1", "numerics": "unpinned(x)", "host": "#b"},
     "host"),
    ({"code": "c1", "cpu": "AMD EPYC"}, {"code": "c1", "numerics": "unpinned(x)", "host": "#a"}, "host"),
    ({"code": "c1", "cpu": "AMD EPYC"}, {"code": "c2", "numerics": PINNED, "host": "#a"}, "code or host"),
    ({"code": "c1", "numerics": "unpinned(x)", "host": "#a"}, {"code": "c2", "numerics": "unpinned(x)", "host": "#a"},
     "code"),
])
def test_verify_names_the_cause_of_a_difference(row, rerun, want):
    assert cause(row, rerun) == want


def test_a_claim_over_rows_of_different_numerics_is_confounded():
    pinned = [{"label": "a", "seed": "0", "numerics": PINNED, "host": "#x"},
              {"label": "b", "seed": "0", "numerics": PINNED, "host": "#y"}]
    assert confounding(pinned, None) is None
    mixed = pinned[:1] + [{"label": "b", "seed": "0", "numerics": "unpinned(q)", "host": "#y"}]
    assert "different numerics" in confounding(mixed, None)
    intel_amd = [{"label": "a", "seed": "0", "cpu": "Intel Xeon"}, {"label": "b", "seed": "0", "cpu": "AMD EPYC"}]
    assert "different numerics" in confounding(intel_amd, None)
    legacy = [{"label": "a", "seed": "0", "cpu": "AMD EPYC"}, {"label": "b", "seed": "0", "cpu": "AMD EPYC"}]
    assert confounding(legacy, None) is None  # nothing shows that their hosts differ or matter
    assert "shown to change rows" in confounding(legacy, "kerformer seed 0 differed")


def test_host_sensitive_reads_the_verify_ledger():
    by_code = {"label": "x", "seed": "0", "reproduced": "false", "cause": "code", "difference": "value"}
    assert host_sensitive([by_code, {"reproduced": "true"}]) is None
    same_code = {"label": "x", "seed": "1", "reproduced": "false", "row_code": "c", "rerun_code": "c",
                 "difference": "value 0.16 -> 0.35"}
    assert "neither" in host_sensitive([by_code, same_code])
    old = {"label": "x", "seed": "2", "reproduced": "false", "row_code": "c", "rerun_code": "d", "difference": "v"}
    assert "code or host" in host_sensitive([old])  # before causes were recorded: the host was never known


def test_the_report_marks_a_comparison_confounded_but_not_one_label_against_a_constant():
    from tokenmix.report.document import _mark_confounded
    from tokenmix.report.measures import ExperimentData, Run
    from tokenmix.study.claims import Claim
    from tokenmix.study.verdict import CONFOUNDED, HOLDS, Outcome

    runs = [Run("a", 0, {"numerics": PINNED, "host": "#x"}), Run("b", 0, {"numerics": "unpinned(q)", "host": "#y"})]
    found = ExperimentData("e", runs, chance=0.1, harness=None)
    between = Outcome(Claim("a beats b", "p", "a", "b", "value", "greater"), None, None, verdict=HOLDS)
    _mark_confounded(between, found, None)
    assert between.verdict == CONFOUNDED and "different numerics" in between.reason
    against = Outcome(Claim("b beats chance", "p", "b", "chance", "value", "greater"), None, None, verdict=HOLDS)
    _mark_confounded(against, found, "a rerun differed")
    assert against.verdict == HOLDS
