"""The Worker's loop: claims into free slots, queue order, retries, dead tasks, --max-jobs.

In-process against a MemoryStore (helpers in worker_kit.py).
"""

from __future__ import annotations

import time

from rivet.jobs import job
from rivet.retry import RetryPolicy
from rivet.values import HANDLER_ERROR_SUFFIX
from tests.unit.worker_kit import (
    Background,
    enqueue,
    make_worker,
)


def test_once_runs_every_runnable_task_then_returns(store, jobs):
    seen: list[int] = []
    job("echo", registry=jobs)(lambda ctx: seen.append(ctx.payload) or {"got": ctx.payload})
    ids = [enqueue(store, "echo", n) for n in range(5)]
    stats = make_worker(store, jobs, once=True).run()
    assert sorted(seen) == list(range(5))
    assert [store.task_get(i).state for i in ids] == ["done"] * 5
    assert store.task_get(ids[3]).result == {"got": 3}
    assert (stats.acked, stats.processed, stats.exit_code) == (5, 5, 0)


def test_a_claim_never_asks_for_more_than_the_free_slots(store, jobs):
    leased_seen: list[int] = []

    @job("count", registry=jobs)
    def count(ctx):
        leased_seen.append(store.queue_stats("q").leased)
        time.sleep(0.01)

    for _ in range(9):
        enqueue(store, "count")
    make_worker(store, jobs, once=True, concurrency=3).run()
    assert len(leased_seen) == 9
    assert max(leased_seen) <= 3


def test_queues_are_tried_in_the_order_given(store, jobs):
    order: list[str] = []
    job("mark", registry=jobs)(lambda ctx: order.append(ctx.queue))
    for _ in range(2):
        enqueue(store, "mark", queue="low")
    for _ in range(2):
        enqueue(store, "mark", queue="high")
    make_worker(store, jobs, queues=["high", "low"], concurrency=1, once=True).run()
    assert order == ["high", "high", "low", "low"]


def test_a_failing_task_retries_with_the_policy_delay_then_dies_and_runs_its_hook(store, jobs):
    bounds: list[tuple[float, float]] = []
    policy = RetryPolicy(
        backoff_secs=1.0, cap_secs=60.0, uniform=lambda a, b: bounds.append((a, b)) or 0.0
    )
    hooked: list[tuple[int, str]] = []

    def on_failed(ctx, error):
        hooked.append((ctx.attempt, str(error)))
        raise RuntimeError("a broken hook must not stop the worker")

    @job("boom", registry=jobs, max_attempts=3, failed=on_failed)
    def boom(ctx):
        raise ValueError(f"bad input on attempt {ctx.attempt}")

    task_id = enqueue(store, "boom", max_attempts=3)
    stats = make_worker(store, jobs, once=True, retry_policy=policy).run()
    task = store.task_get(task_id)
    assert task.state == "dead"
    assert task.attempts == 3
    assert task.last_error == f"ValueError: bad input on attempt 3; {HANDLER_ERROR_SUFFIX}"
    assert bounds == [(0.0, 2.0), (0.0, 4.0), (0.0, 8.0)]
    assert hooked == [(3, "bad input on attempt 3")]
    assert (stats.failed, stats.retried, stats.dead) == (3, 2, 1)


def test_a_retry_is_not_claimed_before_its_delay(store, jobs):
    runs: list[int] = []
    job("flaky", registry=jobs)(lambda ctx: runs.append(ctx.attempt) or 1 / 0)
    task_id = enqueue(store, "flaky")
    policy = RetryPolicy(backoff_secs=10.0, cap_secs=10.0, uniform=lambda a, b: b)
    make_worker(store, jobs, once=True, retry_policy=policy).run()
    assert runs == [1]
    task = store.task_get(task_id)
    assert task.state == "pending" and task.last_error == "ZeroDivisionError: division by zero"
    store.clock.advance(20.0)
    make_worker(store, jobs, once=True, retry_policy=policy).run()
    assert runs == [1, 2]


def test_an_unknown_kind_is_never_run_and_fails_naming_the_kind(store, jobs):
    ran: list[int] = []
    job("known", registry=jobs)(lambda ctx: ran.append(1))
    task_id = enqueue(store, "billing.mystery", max_attempts=2)
    stats = make_worker(store, jobs, once=True).run()
    task = store.task_get(task_id)
    assert ran == []
    assert task.state == "dead" and task.attempts == 2
    assert task.last_error.startswith("UnknownJob: unknown job kind 'billing.mystery'")
    assert stats.failed == 2


def test_a_result_that_is_not_json_fails_the_attempt(store, jobs):
    job("weird", registry=jobs)(lambda ctx: {1, 2})
    task_id = enqueue(store, "weird", max_attempts=1)
    make_worker(store, jobs, once=True).run()
    task = store.task_get(task_id)
    assert task.state == "dead"
    assert task.last_error.startswith("TypeError: handler result is not JSON-serialisable")


def test_max_jobs_stops_after_that_many_attempts(store, jobs):
    job("noop", registry=jobs)(lambda ctx: None)
    ids = [enqueue(store, "noop") for _ in range(5)]
    bg = Background(make_worker(store, jobs, max_jobs=2, concurrency=4))
    bg.thread.join(timeout=10)
    assert not bg.thread.is_alive(), "--max-jobs 2 must stop the worker by itself"
    assert bg.stats.acked == 2
    assert sum(store.task_get(i).state == "done" for i in ids) == 2
