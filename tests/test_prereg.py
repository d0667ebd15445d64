"""tokenmix.report.prereg: a claim's test fixed in git before the first result row it judges, on tiny git
repositories built here with fixed dates (a claim's test changed after rows, seeds extended, rows replaced, a
claim added in the same commit as its rows, uncommitted edits, no git)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tokenmix.report.prereg import WORKING_TREE, Registration, registration_note, registrations

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

EXP, CSV = "experiments/001-toy.toml", "docs/reproduction/001-toy.csv"
BEATS = "Kerformer is more accurate than Performer"
SLOPE = "Kerformer's step time grows linearly with N (log-log slope ≤ 1.2)"
FAR = "Kerformer is far more accurate than Performer"

_CLAIM = '''
[[claims]]
text = "{text}"
paper = "Table 5"
a = "kerformer"
b = "performer"
measure = "value"
kind = "greater"
'''

_SLOPE_CLAIM = f'''
[[claims]]
text = "{SLOPE}"
paper = "eqs. 7-9"
a = "kerformer"
b = 1.2
measure = "time_slope"
kind = "less"
lengths = [256, 4096]
added = true
'''


def _toml(seeds: int, equivalence: float | None = None, extra: str = "") -> str:
    beats = _CLAIM.format(text=BEATS)
    if equivalence is not None:
        beats += f'equivalence = {equivalence}\nequivalence_reason = "below the paper\'s smallest gain"\n'
    return (f'name = "001-toy"\ndescription = "a toy"\nseeds = {list(range(seeds))}\n\n'
            f'[task]\nname = "listops"\npreset = "quick"\n\n[report]\nbaseline = false\n\n'
            f'[[mixers]]\nlabel = "kerformer"\nname = "kerformer"\n\n[[mixers]]\nlabel = "performer"\n'
            f'name = "performer"\n{beats}{_SLOPE_CLAIM}{extra}')


def _csv(seeds: range, value: float = 0.36, migrated: bool = False) -> str:
    """Two labels' rows; ``migrated``: a provenance column added and the values rewritten ("0.361000" -> "0.361")."""
    head = "experiment,task,label,mixer,seed,value" + (",provenance" if migrated else "")
    rows = [f"001-toy,listops,{label},{label},{seed},"
            + (f"{value + seed / 1000:g},x" if migrated else f"{value + seed / 1000:.6f}")
            for label in ("kerformer", "performer") for seed in seeds]
    return "\n".join([head, *rows]) + "\n"


class Repo:
    """A git repository in a temporary folder; every commit at noon of a given date."""

    def __init__(self, path: Path):
        self.path = path
        path.mkdir()
        self.git("init", "-q")

    def git(self, *args: str, date: str | None = None) -> str:
        env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
               "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}
        if date:
            env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = f"{date}T12:00:00+00:00"
        return subprocess.run(["git", *args], cwd=self.path, env=env, check=True, capture_output=True,
                              text=True).stdout.strip()

    def write(self, files: dict[str, str]) -> None:
        for name, text in files.items():
            (self.path / name).parent.mkdir(parents=True, exist_ok=True)
            (self.path / name).write_text(text, encoding="utf-8")

    def commit(self, date: str, files: dict[str, str]) -> str:
        self.write(files)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", f"on {date}", date=date)
        return self.git("rev-parse", "HEAD")

    def registrations(self) -> dict[str, Registration]:
        return registrations(self.path, EXP, CSV)


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Repo:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # never the checkout around tmp_path
    return Repo(tmp_path / "repo")


def test_a_test_fixed_before_the_rows_is_preregistered_and_a_later_change_is_not(repo):
    c1 = repo.commit("2026-11-20", {EXP: _toml(3)})
    r = repo.registrations()[BEATS]
    assert r == Registration(BEATS, f"{c1[:12]} 2026-11-20", None, True, [], [])
    assert registration_note(r) == f"pre-registered (test fixed 2026-11-20 {c1[:7]}, no rows yet)"

    c2 = repo.commit("2026-11-21", {CSV: _csv(range(3))})
    r = repo.registrations()[BEATS]
    assert (r.fixed_at, r.first_rows_at, r.preregistered) == (f"{c1[:12]} 2026-11-20", f"{c2[:12]} 2026-11-21", True)
    assert registration_note(r) == f"pre-registered (test fixed 2026-11-20 {c1[:7]}, before the first row)"

    c3 = repo.commit("2026-11-22", {EXP: _toml(3, equivalence=0.02)})
    c4 = repo.commit("2026-11-23", {EXP: _toml(5, equivalence=0.02)})
    repo.commit("2026-11-24", {CSV: _csv(range(5))})
    regs = repo.registrations()
    r = regs[BEATS]
    margin = f"equivalence margin ±2 % added on 2026-11-22 ({c3[:7]}) after seeds 0-2 were in"
    seeds = f"seeds 3 → 5 on 2026-11-23 ({c4[:7]}) after seeds 0-2 were in"
    assert r == Registration(BEATS, f"{c4[:12]} 2026-11-23", f"{c2[:12]} 2026-11-21", False, [margin], [seeds],
                             frozenset({0, 1, 2}))  # the seeds looked at before the last change
    assert registration_note(r) == f"**not pre-registered**: {margin}; {seeds}"
    # the harness claim reads [report] harness_rounds, not the seeds, and has no harness rows yet
    assert regs[SLOPE] == Registration(SLOPE, f"{c1[:12]} 2026-11-20", None, True, [], [])

    # a claim added once rows of its labels were in, with the test it came with
    far = _CLAIM.format(text=FAR) + "factor = 2.0\n"
    c6 = repo.commit("2026-11-25", {EXP: _toml(5, equivalence=0.02, extra=far)})
    r = repo.registrations()[FAR]
    assert r.preregistered is False and r.fixed_at == f"{c6[:12]} 2026-11-25"
    assert r.changes == [f"claim first in the file (with factor 2) on 2026-11-25 ({c6[:7]}) after seeds 0-4 were in"]
    assert r.seeds_extended == []


def test_uncommitted_edits_are_the_last_state(repo):
    c1 = repo.commit("2026-11-20", {EXP: _toml(3)})
    repo.write({EXP: _toml(3, equivalence=0.05)})
    r = repo.registrations()[BEATS]
    assert (r.fixed_at, r.first_rows_at, r.preregistered, r.changes) == (WORKING_TREE, None, None, [])
    assert "not pre-registered yet" in registration_note(r)

    repo.git("checkout", "--", EXP)
    repo.commit("2026-11-21", {CSV: _csv(range(3))})
    repo.write({EXP: _toml(3, equivalence=0.05)})
    r = repo.registrations()[BEATS]
    assert (r.fixed_at, r.preregistered) == (WORKING_TREE, False)
    assert r.changes == ["equivalence margin ±5 % added in the working tree (uncommitted) after seeds 0-2 were in"]
    repo.write({EXP: _toml(3, extra=_CLAIM.format(text=FAR))})
    r = repo.registrations()[FAR]
    assert (r.fixed_at, r.preregistered) == (None, False)  # never in git, and its rows are
    assert repo.registrations()[BEATS].fixed_at == f"{c1[:12]} 2026-11-20"


def test_only_the_rows_judged_now_count(repo):
    """Rows since replaced (a rerun at another budget: other values) are not the claim's data; rows whose other
    columns a migration rewrote are the same rows. A commit where the file does not parse changes nothing."""
    repo.commit("2026-11-20", {EXP: _toml(3)})
    repo.commit("2026-11-21", {CSV: _csv(range(3), value=0.20)})  # the first budget's runs
    c3 = repo.commit("2026-11-22", {EXP: _toml(3, equivalence=0.02)})
    repo.commit("2026-11-23", {EXP: "this = is not [toml"})
    repo.commit("2026-11-24", {EXP: _toml(3, equivalence=0.02)})
    c6 = repo.commit("2026-11-25", {CSV: _csv(range(3), value=0.36)})  # the runs at the budget judged
    repo.commit("2026-11-26", {CSV: _csv(range(3), value=0.36, migrated=True)})
    r = repo.registrations()[BEATS]
    assert r == Registration(BEATS, f"{c3[:12]} 2026-11-22", f"{c6[:12]} 2026-11-25", True, [], [])


def test_a_test_committed_with_its_rows_is_not_shown_first(repo):
    c1 = repo.commit("2026-11-20", {EXP: _toml(2), CSV: _csv(range(2))})
    r = repo.registrations()[BEATS]
    assert (r.fixed_at, r.first_rows_at, r.preregistered) == (f"{c1[:12]} 2026-11-20",) * 2 + (False,)
    assert r.changes == [f"claim first in the file on 2026-11-20 ({c1[:7]}) in the same commit as the first rows "
                         f"(seeds 0-1)"]


def test_harness_rounds_changed_after_harness_rows(repo):
    scaling = "docs/reproduction/001-toy-scaling.csv"  # found beside the results CSV
    rows = "experiment,label,kind,length,batch,round,step_s,threads\n" + "".join(
        f"001-toy,kerformer,scaling,{n},8,{k},{0.001 * n + k / 1e6:.6f},1\n" for n in (256, 4096) for k in range(1, 4))
    repo.commit("2026-11-20", {EXP: _toml(3)})
    repo.commit("2026-11-21", {scaling: rows})
    hundred = _toml(3).replace("baseline = false", "baseline = false\nharness_rounds = 100")
    c3 = repo.commit("2026-11-22", {EXP: hundred})
    r = repo.registrations()[SLOPE]
    assert r.preregistered is False and r.changes == []
    assert r.seeds_extended == [f"harness rounds 10 → 100 on 2026-11-22 ({c3[:7]}) after rounds 1-3 were in"]
    assert repo.registrations()[BEATS].preregistered is True  # the seeds did not change
    assert registrations(repo.path, str(repo.path / EXP), str(repo.path / CSV)) == repo.registrations()


def test_a_claim_on_longer_lengths_is_judged_on_its_own_lengths(repo):
    """A growth claim over N = 8,192-16,384 added after rows at 256-4,096 existed is pre-registered when its own
    lengths come after it; the shorter lengths were never its data (its looked rounds stay empty)."""
    longer = SLOPE.replace("(log-log", "at the longest doubling (log-log")
    claim = _SLOPE_CLAIM.replace(SLOPE, longer).replace("[256, 4096]", "[8192, 16384]")
    scaling = "docs/reproduction/001-toy-scaling.csv"

    def rows(lengths):
        return "experiment,label,kind,length,batch,round,step_s,threads\n" + "".join(
            f"001-toy,kerformer,scaling,{n},8,{k},{0.001 * n + k / 1e6:.6f},1\n" for n in lengths for k in range(1, 4))

    repo.commit("2026-11-20", {EXP: _toml(3)})
    repo.commit("2026-11-21", {scaling: rows((256, 4096))})
    repo.commit("2026-11-22", {EXP: _toml(3, extra=claim)})
    assert repo.registrations()[longer].first_rows_at is None  # no row at its lengths yet
    repo.commit("2026-11-23", {scaling: rows((256, 4096, 8192, 16384))})
    r = repo.registrations()[longer]
    assert r.preregistered is True and r.changes == [] and r.looked == frozenset()
    assert repo.registrations()[SLOPE].preregistered is True  # its own rows, 256-4,096, are unchanged


def test_outside_git_there_is_nothing_to_check(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    (tmp_path / "experiments").mkdir()
    (tmp_path / EXP).write_text(_toml(3))
    assert registrations(tmp_path, EXP, CSV) == {}
    assert registration_note(Registration(BEATS, None, None, None, [], [])) == \
        "pre-registration unknown (the claim is not in git)"
