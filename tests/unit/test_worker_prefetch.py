"""Prefetch: claimed tasks that wait for a handler thread.

A worker claims up to ``concurrency + prefetch`` tasks; the waiting ones hold heartbeated
leases, their job timeout counts from when a thread takes them, one stopped while it waits is
never run, and at shutdown the ones no thread took are withdrawn, not abandoned.
In-process against a MemoryStore (helpers in worker_kit.py).
"""

from __future__ import annotations

import threading
import time

from django.test import override_settings

from rivet.jobs import job
from rivet.worker import EXIT_ABANDONED
from tests.unit.worker_kit import Background, blocking_job, enqueue, make_worker, wait_until


def leased(store, ids) -> list[int]:
    return [i for i in ids if store.task_get(i).attempts > 0]


def test_a_claim_asks_for_the_free_slots_and_the_prefetch_room(store, jobs):
    release = blocking_job(jobs)
    ids = [enqueue(store, "block") for _ in range(10)]
    bg = Background(make_worker(store, jobs, concurrency=2, prefetch=3))
    try:
        wait_until(lambda: len(leased(store, ids)) == 5, "five tasks leased")
        time.sleep(0.2)  # more polls: still no more than slots + prefetch
        assert len(leased(store, ids)) == 5
        assert bg.worker.busy_slots() == 2  # the waiting three hold no slot
    finally:
        release.set()
    wait_until(lambda: all(store.task_get(i).state == "done" for i in ids), "all done")
    assert bg.stop().acked == 10


def test_before_any_handler_returned_auto_claims_only_into_free_slots(store, jobs):
    release = blocking_job(jobs)
    ids = [enqueue(store, "block") for _ in range(5)]
    assert make_worker(store, jobs, prefetch=None).prefetcher.describe() == "auto"  # default
    bg = Background(make_worker(store, jobs, concurrency=2, prefetch=None))
    try:
        wait_until(lambda: len(leased(store, ids)) == 2, "two tasks leased")
        time.sleep(0.2)
        assert len(leased(store, ids)) == 2
    finally:
        release.set()
    wait_until(lambda: all(store.task_get(i).state == "done" for i in ids), "all done")
    bg.stop()


def test_the_prefetch_setting_is_the_default(store, jobs):
    with override_settings(RIVET={"PREFETCH": 7}):
        assert make_worker(store, jobs, prefetch=None).prefetcher.describe() == 7
    with override_settings(RIVET={"PREFETCH": "auto"}):
        assert make_worker(store, jobs, prefetch=None).prefetcher.describe() == "auto"


def test_with_prefetch_0_a_claim_asks_only_for_the_free_slots_after_runs_too(store, jobs):
    job("quick", registry=jobs)(lambda ctx: None)
    for _ in range(20):
        enqueue(store, "quick")
    worker = make_worker(store, jobs, concurrency=2, prefetch=0, once=True)
    worker.run()
    assert worker.prefetcher.current() == 0


def test_auto_prefetch_grows_with_quick_handlers_and_stays_0_with_slow_ones(store, jobs):
    job("quick", registry=jobs)(lambda ctx: None)
    for _ in range(20):
        enqueue(store, "quick")
    quick = make_worker(store, jobs, concurrency=2, prefetch="auto", once=True)
    quick.run()
    assert quick.prefetcher.current() == 16  # handlers of microseconds: the cap

    job("slow", registry=jobs)(lambda ctx: time.sleep(0.1))
    ids = [enqueue(store, "slow") for _ in range(4)]
    slow = Background(make_worker(store, jobs, concurrency=1, prefetch="auto"))
    seen = 0
    while not all(store.task_get(i).state == "done" for i in ids):
        held = sum(
            1 for i in ids if store.task_get(i).state == "pending" and store.task_get(i).attempts
        )
        seen = max(seen, held)
        time.sleep(0.01)
    assert slow.worker.prefetcher.current() == 0  # 0.1 s handlers: 1 x 0.02 / 0.1 < 1
    assert seen == 1  # never a task held waiting behind the busy slot
    slow.stop()


def test_a_task_cancelled_while_it_waits_is_never_run(store, jobs):
    release = blocking_job(jobs)
    ran: list[int] = []
    job("count", registry=jobs)(lambda ctx: ran.append(ctx.task_id))
    first = enqueue(store, "block")
    waiting = enqueue(store, "count")
    bg = Background(make_worker(store, jobs, concurrency=1, prefetch=1, lease_ttl=0.6))
    try:
        wait_until(lambda: len(leased(store, [first, waiting])) == 2, "both leased")
        store.task_cancel(waiting)
        # The next heartbeat (every lease_ttl / 3) reports the mark and stops the waiting one.
        wait_until(lambda: store.task_get(waiting).state == "dead", "the waiting task buried")
    finally:
        release.set()
    wait_until(lambda: store.task_get(first).state == "done", "the first task acked")
    stats = bg.stop()
    assert ran == []
    assert (stats.acked, stats.cancelled, stats.abandoned) == (1, 1, 0)


def test_the_job_timeout_counts_from_when_a_thread_takes_the_task(store, jobs):
    # From the claim, the second task would have waited 1.5 s and run 1.0 s: past 2.0 s.
    job("slow", registry=jobs)(lambda ctx: time.sleep(1.5))
    job("quick", registry=jobs)(lambda ctx: time.sleep(1.0))
    first = enqueue(store, "slow", priority=1)
    second = enqueue(store, "quick")
    bg = Background(make_worker(store, jobs, concurrency=1, prefetch=1, job_timeout=2.0))
    wait_until(lambda: store.task_get(second).state == "done", "the second task acked")
    stats = bg.stop()
    assert store.task_get(first).state == "done"
    assert (stats.acked, stats.failed) == (2, 0)


def test_waiting_tasks_run_during_the_shutdown_drain(store, jobs):
    gate = threading.Event()
    job("gated", registry=jobs)(lambda ctx: gate.wait(10) and "ok")
    ids = [enqueue(store, "gated") for _ in range(3)]
    bg = Background(make_worker(store, jobs, concurrency=1, prefetch=2))
    wait_until(lambda: len(leased(store, ids)) == 3, "three leased")
    bg.worker.stop()
    gate.set()
    stats = bg.stop()
    assert [store.task_get(i).state for i in ids] == ["done"] * 3
    assert (stats.acked, stats.exit_code) == (3, 0)


def test_waiting_tasks_no_thread_took_by_the_timeout_are_withdrawn_not_abandoned(store, jobs):
    release = threading.Event()
    job("stuck", registry=jobs)(lambda ctx: release.wait(30))  # ignores the stop
    ran: list[int] = []
    job("count", registry=jobs)(lambda ctx: ran.append(ctx.task_id))
    stuck = enqueue(store, "stuck", priority=1)
    waiting = [enqueue(store, "count") for _ in range(2)]
    worker = make_worker(store, jobs, concurrency=1, prefetch=2, shutdown_timeout=0.2)
    bg = Background(worker)
    try:
        wait_until(lambda: len(leased(store, [stuck, *waiting])) == 3, "three leased")
        stats = bg.stop()
    finally:
        release.set()
    time.sleep(0.1)  # the freed thread skips the withdrawn ones
    assert ran == []
    assert stats.exit_code == EXIT_ABANDONED
    assert (stats.abandoned, stats.lost) == (1, 3)
    # Nothing was written for them: their leases lapse and they are delivered again.
    assert [store.task_get(i).state for i in waiting] == ["pending", "pending"]
