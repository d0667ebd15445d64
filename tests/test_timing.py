"""Tests of tokenmix.timing.measure itself: how many calls and samples each way takes, that the statistics
belong to the samples, the thread setting, and that a deadline stops it by count. Nothing asserts how long
anything takes."""

from __future__ import annotations

import statistics

import pytest
import torch

from tokenmix.timing import Deadline, DeadlinePassed, Timing, measure


class Counter:
    """A function that counts its calls (and the torch threads each ran under)."""

    def __init__(self) -> None:
        self.calls = 0
        self.threads: list[int] = []

    def __call__(self) -> None:
        self.calls += 1
        self.threads.append(torch.get_num_threads())
        sum(range(200))


def test_by_count_calls_warmup_plus_repeats_and_keeps_one_sample_each():
    fn = Counter()
    timing = measure(fn, repeats=5, warmup=2)
    assert fn.calls == 7
    assert timing.runs == len(timing.times) == 5 and timing.number_per_run == 1
    assert min(timing.times) <= timing.median <= max(timing.times)
    assert timing.median == statistics.median(timing.times) and timing.mean == statistics.fmean(timing.times)
    assert all(t > 0 for t in timing.times) and timing.iqr >= 0


def test_by_time_the_samples_are_blocks_per_call():
    fn = Counter()
    timing = measure(fn, min_run_time=1e-3, warmup=1)
    assert timing.runs == len(timing.times) >= 1 and timing.number_per_run >= 1
    assert fn.calls >= 1 + timing.runs * timing.number_per_run  # warm-up and the blocks (plus the Timer's sizing)
    assert min(timing.times) <= timing.median <= max(timing.times)


def test_statistics_of_known_samples():
    timing = Timing.of([4.0, 1.0, 3.0, 2.0])
    assert (timing.median, timing.mean, timing.iqr, timing.runs) == (2.5, 2.5, 1.5, 4)
    assert Timing.of([2.0]).iqr == 0 and Timing.of([2.0]).median == 2.0
    with pytest.raises(ValueError):
        Timing.of([])


def test_threads_are_set_for_every_call_and_restored():
    before = torch.get_num_threads()
    fn = Counter()
    measure(fn, repeats=2, warmup=1, threads=1)
    assert fn.threads == [1, 1, 1] and torch.get_num_threads() == before
    fn = Counter()
    measure(fn, repeats=2, threads=None)
    assert fn.threads == [before, before]


def test_a_passed_deadline_stops_after_the_first_call():
    for warmup in (0, 2):
        fn = Counter()
        with pytest.raises(DeadlinePassed, match="past the 0 s budget after 1 "):
            measure(fn, repeats=5, warmup=warmup, deadline=Deadline(0))
        assert fn.calls == 1


def test_a_far_deadline_lets_every_call_run():
    fn = Counter()
    timing = measure(fn, repeats=4, warmup=1, deadline=Deadline(3600))
    assert fn.calls == 5 and timing.runs == 4


def test_a_passed_deadline_stops_timing_by_time_after_the_first_block():
    fn = Counter()
    with pytest.raises(DeadlinePassed, match="after 1 timed block"):
        measure(fn, min_run_time=60, deadline=Deadline(0))


def test_deadline_check_and_passed():
    assert Deadline(0).passed and not Deadline(3600).passed
    Deadline(3600).check("nothing")
    with pytest.raises(DeadlinePassed, match="budget after the cold pass"):
        Deadline(0).check("the cold pass")


@pytest.mark.parametrize("options", [{"repeats": 0}, {"repeats": 1.5}, {"repeats": True}, {"min_run_time": 0},
                                     {"threads": 0}, {"warmup": -1}])
def test_bad_options_are_refused_before_any_call(options):
    fn = Counter()
    with pytest.raises(ValueError):
        measure(fn, **options)
    assert fn.calls == 0
