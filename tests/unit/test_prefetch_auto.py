"""rivet.worker.prefetch: the automatic prefetch from the handlers' run times, and the fixed one."""

from __future__ import annotations

import pytest

from rivet.errors import InvalidInput
from rivet.worker.config import WorkerConfig
from rivet.worker.prefetch import AUTO_CAP, Prefetch


def auto(concurrency: int, *runs: float) -> int:
    prefetch = Prefetch("auto", concurrency)
    for secs in runs:
        prefetch.observe(secs)
    return prefetch.current()


def test_nothing_is_prefetched_before_a_handler_returned():
    assert auto(4) == 0


@pytest.mark.parametrize(
    ("concurrency", "handler_secs", "expected"),
    [
        (4, 0.0001, AUTO_CAP),  # a noop: the cap
        (4, 0.005, 16),  # 4 x 0.02 / 0.005
        (4, 0.02, 4),
        (4, 0.05, 1),
        (4, 0.08, 1),  # 4 x 0.02 / 0.08 = 1.0
        (4, 0.1, 0),
        (1, 0.005, 4),
        (64, 0.0001, 64),  # the cap is at least the concurrency
        (4, 0.0, AUTO_CAP),
    ],
)
def test_auto_holds_what_waits_about_20_ms(concurrency, handler_secs, expected):
    assert auto(concurrency, handler_secs) == expected


def test_the_average_moves_towards_new_run_times():
    prefetch = Prefetch("auto", 4)
    prefetch.observe(0.001)
    assert prefetch.current() == AUTO_CAP
    for _ in range(60):  # the tasks became slow: a second each
        prefetch.observe(1.0)
    assert prefetch.current() == 0


def test_a_fixed_prefetch_ignores_run_times():
    prefetch = Prefetch(3, 4)
    prefetch.observe(10.0)
    assert (prefetch.current(), prefetch.describe()) == (3, 3)


@pytest.mark.parametrize("value", ["auto", "AUTO", " auto "])
def test_the_option_takes_auto(value):
    assert WorkerConfig(queues=("q",), prefetch=value).prefetch == "auto"


@pytest.mark.parametrize("value", ["sometimes", -1, 4097, 1.5])
def test_a_bad_prefetch_says_what_is_expected(value):
    with pytest.raises(InvalidInput, match="an integer from 0 to 4096, or auto"):
        WorkerConfig(queues=("q",), prefetch=value)
