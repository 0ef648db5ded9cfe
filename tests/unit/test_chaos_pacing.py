"""The pacer releases tasks by what finished, never more than the window outstanding."""

from __future__ import annotations

import pytest

from chaos_project.chaos.pacing import Pacer


def test_the_first_tick_fills_the_window() -> None:
    pacer = Pacer(total=100, window=16)
    assert pacer.take(outstanding=0) == range(0, 16)
    assert pacer.released == 16


def test_later_ticks_release_only_what_finished() -> None:
    pacer = Pacer(total=100, window=16)
    pacer.take(outstanding=0)
    assert pacer.take(outstanding=16) == range(16, 16)  # nothing finished: nothing released
    assert pacer.take(outstanding=11) == range(16, 21)  # five finished: five more


def test_a_slow_machine_gets_a_short_backlog_not_a_long_one() -> None:
    pacer = Pacer(total=5000, window=16)
    outstanding = 0
    for _ in range(1000):  # the workers finish one task per tick, whatever a tick lasts
        outstanding += len(pacer.take(outstanding))
        assert outstanding <= 16
        outstanding -= 1
    assert pacer.released == 16 + 999


def test_never_more_than_the_total_and_done_when_all_are_out() -> None:
    pacer = Pacer(total=20, window=16)
    assert len(pacer.take(0)) == 16
    assert not pacer.finished_releasing
    assert pacer.take(0) == range(16, 20)
    assert pacer.finished_releasing
    assert pacer.take(0) == range(20, 20)


def test_more_outstanding_than_the_window_releases_nothing() -> None:
    pacer = Pacer(total=100, window=16)
    assert pacer.due(outstanding=40) == 0  # e.g. retries and a stopped worker's leases


def test_a_window_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="window must be >= 1"):
        Pacer(total=10, window=0)


def test_with_a_spread_releases_keep_to_the_schedule_of_the_chaos() -> None:
    pacer = Pacer(total=500, window=16, spread=15.0)
    assert len(pacer.take(outstanding=0, now=0.0)) == 16  # the window: the workers start
    assert len(pacer.take(outstanding=0, now=0.1)) == 3  # 16 + 500 * 0.1 / 15 = 19 by now
    assert pacer.take(outstanding=0, now=0.1) == range(19, 19)  # fast workers wait
    for _ in range(100):  # each tick the workers claimed all that was ready
        pacer.take(outstanding=0, now=7.5)
    assert pacer.released == 16 + 250  # half the chaos: half the tasks (and the window)
    pacer.take(outstanding=0, now=15.0)
    assert pacer.released == 16 + 250 + 16  # past the spread only the window limits
    for _ in range(100):
        pacer.take(outstanding=0, now=20.0)
    assert pacer.finished_releasing
