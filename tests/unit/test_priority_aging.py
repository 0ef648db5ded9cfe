"""Priority aging's stated bound, on the memory store with a fake clock.

A task of priority p_low, enqueued at t0 under a continuous stream of priority p_high tasks, is
claimed at the latest (p_high - p_low) x PRIORITY_AGING_SECS seconds after t0, plus the time
the workers take to claim the backlog ranked ahead of it then: every p_high task enqueued after
t0 + (p_high - p_low) x PRIORITY_AGING_SECS ranks behind it (docs/jobs.md, "Priority and
aging"). Without aging (None) the same stream starves it.
"""

from __future__ import annotations

import pytest

from rivet.stores.memory import FakeClock, MemoryStore
from rivet.validation import build_spec

#: Tasks already waiting ahead of the low-priority task when it is enqueued.
BACKLOG = 10


def aging(settings, step):
    settings.RIVET = {**getattr(settings, "RIVET", {}), "PRIORITY_AGING_SECS": step}


def wait_under_stream(p_low: int, p_high: int, horizon: float) -> float | None:
    """Seconds from the low task's enqueue to its claim, under a stream of p_high tasks: one
    arrives and one is claimed (and acked) every second, so the backlog never shrinks. None
    when it is not claimed within ``horizon`` seconds."""
    clock = FakeClock()
    store = MemoryStore(clock=clock)

    def enqueue(priority: int) -> int:
        return store.task_enqueue(build_spec(queue="q", kind="k", priority=priority)).task_id

    for _ in range(BACKLOG):
        enqueue(p_high)
    low, start = enqueue(p_low), clock()
    while (clock() - start).total_seconds() <= horizon:
        enqueue(p_high)
        (leased,) = store.task_claim(queues=["q"], owner="w", limit=1, lease_ttl=30).claimed
        if leased.task_id == low:
            return (clock() - start).total_seconds()
        store.task_ack(leased.lease)
        clock.advance(1)
    return None


@pytest.mark.parametrize(
    ("p_low", "p_high", "step"), [(0, 1, 60.0), (0, 5, 60.0), (-3, 2, 30.0), (-100, 100, 1.5)]
)
def test_a_low_priority_task_is_claimed_within_the_bound(settings, p_low, p_high, step):
    aging(settings, step)
    gap = (p_high - p_low) * step
    # One claim a second: the backlog ahead of it at t0 + gap is BACKLOG tasks plus the gap's
    # arrivals, less the gap's claims: BACKLOG seconds of claims.
    wait = wait_under_stream(p_low, p_high, horizon=gap + BACKLOG + 10)
    assert wait is not None, "the low-priority task starved"
    assert wait <= gap + BACKLOG, f"claimed after {wait}s, above the bound {gap} + {BACKLOG}"
    assert wait >= gap, f"claimed after {wait}s, before its wait was worth the gap ({gap}s)"


def test_a_shorter_step_ages_faster(settings):
    aging(settings, 5.0)
    assert wait_under_stream(0, 4, horizon=100) == 4 * 5.0 + BACKLOG


def test_without_aging_the_stream_starves_it(settings):
    aging(settings, None)
    assert wait_under_stream(0, 1, horizon=10 * (60 + BACKLOG)) is None
