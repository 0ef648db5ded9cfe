"""``async def`` jobs in real worker processes on PostgreSQL: beside sync jobs, the async ORM
from hundreds of concurrent handlers within the pool, SIGTERM draining coroutines."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from rivet.values import TaskState

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def test_async_and_sync_jobs_drain_from_one_queue_in_one_worker(workers):
    ids = [workers.enqueue("async_sleep" if n % 2 else "noop", {"ms": 20}) for n in range(40)]
    worker = workers.start(
        "--queue", "demo", "--once", "--log-format", "json", "--async-concurrency", "30"
    )  # fmt: skip
    assert worker.wait() == 0, worker.log
    for n, task_id in enumerate(ids):
        task = workers.task(task_id)
        assert task.state == TaskState.DONE, (task_id, task.last_error)
        assert task.result == ({"slept_ms": 20} if n % 2 else None)
    (started,) = worker.events("event_loop_started")
    assert started["async_concurrency"] == 30


def test_an_idle_worker_fills_every_async_slot_before_a_handler_returns(workers):
    """A backlog of async tasks reaches the event loop in one go: the first claim, sized
    before the worker knew its tasks were async, is followed at once by the rest, not a
    handler's run later (each handler here waits, up to 20 s, for all 200 to be in flight)."""
    ids = [workers.enqueue("async_crowd", {"n": 200, "ms": 20_000}) for _ in range(200)]
    worker = workers.start(
        "--queue", "demo", "--once", "--log-format", "json", "--async-concurrency", "200"
    )  # fmt: skip
    assert worker.wait() == 0, worker.log
    crowds = [workers.task(task_id).result["crowd"] for task_id in ids]
    assert min(crowds) == 200, sorted(crowds)[:5]


class ConnectionCount:
    """The most server connections to the test database opened while a worker runs: those
    seen beyond the ones open before it started (this process's)."""

    def __init__(self) -> None:
        self.most = 0
        self._baseline: int | None = None
        self._ready = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> ConnectionCount:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(timeout=10)

    def _sample(self) -> None:
        from django.db import connections

        try:
            with connections["default"].cursor() as cursor:
                while not self._done.wait(0.02):
                    cursor.execute(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    )
                    (now,) = cursor.fetchone()
                    if self._baseline is None:
                        self._baseline = now
                        self._ready.set()
                    self.most = max(self.most, now - self._baseline)
        finally:
            connections.close_all()


def test_hundreds_of_concurrent_async_orm_handlers_stay_within_the_pool(workers):
    pool_size = 8
    ids = [
        workers.enqueue("async_orm", {"ms": 50, "threads": n % 2 == 1}, max_attempts=1)
        for n in range(400)
    ]
    with ConnectionCount() as seen:
        worker = workers.start(
            "--queue", "demo", "--once", "--log-format", "json", "--concurrency", "2",
            "--async-concurrency", "200", "--pool-size", str(pool_size),
        )  # fmt: skip
        assert worker.wait() == 0, worker.log
    for task_id in ids:
        task = workers.task(task_id)
        assert task.state == TaskState.DONE, (task_id, task.last_error)
        assert task.result == {"attempts": 1, "found": 1}
    assert 0 < seen.most <= pool_size, seen.most
    assert not worker.events("pool_undersized")


def test_sigterm_drains_in_flight_coroutines_and_exits_0(workers):
    ids = [workers.enqueue("async_sleep", {"ms": 1500}) for _ in range(50)]
    worker = workers.start(
        "--queue", "demo", "--log-format", "json", "--async-concurrency", "100",
        "--shutdown-timeout", "30",
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while len(worker.events("claimed")) < 50 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(worker.events("claimed")) == 50, worker.log
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.log
    assert {workers.task(t).state for t in ids} == {TaskState.DONE}
    (stopped,) = worker.events("worker_stopped")
    assert (stopped["acked"], stopped["abandoned"]) == (50, 0)


def test_a_coroutine_past_its_timeout_is_cancelled_and_retried(workers):
    task_id = workers.enqueue("async_sleep", {"ms": 60_000}, max_attempts=2)
    worker = workers.start(
        "--queue", "demo", "--log-format", "json", "--job-timeout", "0.5",
        "--max-jobs", "2", "--retry-backoff-secs", "0", "--retry-backoff-cap-secs", "0",
    )  # fmt: skip
    assert worker.wait() == 0, worker.log
    task = workers.task(task_id)
    assert (task.state, task.attempts) == (TaskState.DEAD, 2)
    assert "timed out after 0.5s" in task.last_error
    assert [e["attempt"] for e in worker.events("claimed")] == [1, 2]
