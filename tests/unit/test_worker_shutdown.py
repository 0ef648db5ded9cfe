"""Shutdown: in-flight work finishes; work still running after the timeout is abandoned.

In-process against a MemoryStore (helpers in worker_kit.py).
"""

from __future__ import annotations

import threading

from rivet.jobs import job
from rivet.worker import EXIT_ABANDONED
from tests.unit.worker_kit import (
    Background,
    enqueue,
    make_worker,
)


def test_stop_lets_in_flight_work_finish_and_exits_0(store, jobs):
    gate = threading.Event()
    started = threading.Event()

    @job("gated", registry=jobs)
    def gated(ctx):
        started.set()
        gate.wait(10)
        return "ok"

    task_id = enqueue(store, "gated")
    bg = Background(make_worker(store, jobs, concurrency=1))  # no free slot while it runs
    started.wait(10)
    bg.worker.stop()
    enqueue(store, "gated")  # enqueued after the stop: never claimed
    gate.set()
    stats = bg.stop()
    assert store.task_get(task_id).state == "done"
    assert (stats.acked, stats.claimed, stats.exit_code) == (1, 1, 0)


def test_work_still_running_after_the_shutdown_timeout_is_abandoned_not_acked(store, jobs):
    release = threading.Event()
    started = threading.Event()
    job("stuck", registry=jobs)(lambda ctx: started.set() or release.wait(30))
    task_id = enqueue(store, "stuck")
    bg = Background(make_worker(store, jobs, shutdown_timeout=0.2))
    try:
        started.wait(10)
        stats = bg.stop()
    finally:
        release.set()
    assert stats.exit_code == EXIT_ABANDONED and stats.abandoned == 1
    assert store.task_get(task_id).state == "pending"
