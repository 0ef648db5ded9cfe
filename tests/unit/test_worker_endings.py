"""The two endings the worker adds to the max-attempts ones: a permanent failure and a cancel.

Driven in-process against a MemoryStore, with the helpers of worker_kit.py.
"""

from __future__ import annotations

import threading

import rivet
from rivet import signals
from rivet.errors import Permanent
from rivet.jobs import JobContext, job
from rivet.values import CANCELLED_SUFFIX, PERMANENT_SUFFIX, CancelOutcome
from tests.unit.worker_kit import Background, enqueue, make_worker, wait_until


def test_a_permanent_failure_is_buried_at_once_and_runs_the_failed_hook(store, jobs):
    hooked: list[str] = []

    @job("charge", registry=jobs, failed=lambda ctx, exc: hooked.append(type(exc).__name__))
    def charge(ctx: JobContext):
        raise Permanent("card declined")

    task_id = enqueue(store, "charge", max_attempts=5)
    stats = make_worker(store, jobs, once=True).run()
    task = store.task_get(task_id)
    assert (task.state, task.attempts) == ("dead", 1)
    assert task.last_error == f"Permanent: card declined; {PERMANENT_SUFFIX}"
    assert (stats.dead, stats.retried, hooked) == (1, 0, ["Permanent"])


def test_an_ordinary_error_with_attempts_left_is_retried_not_buried(store, jobs):
    job("flaky", registry=jobs)(lambda ctx: 1 / 0)
    task_id = enqueue(store, "flaky", max_attempts=5)
    stats = make_worker(store, jobs, once=True, max_jobs=1).run()
    assert store.task_get(task_id).state == "pending"
    assert stats.retried == 1


def test_cancelling_a_running_task_stops_its_handler_and_buries_it_never_acked(store, jobs):
    started, reasons = threading.Event(), []
    processed: list[int] = []

    @job("long", registry=jobs)
    def long(ctx: JobContext):
        started.set()
        ctx.wait(30)
        reasons.append((ctx.should_stop, ctx.stop_reason))
        return "finished anyway"

    def on_processed(sender, claimed, **kwargs):
        processed.append(claimed.task_id)

    signals.task_processed.connect(on_processed)
    try:
        task_id = enqueue(store, "long")
        bg = Background(make_worker(store, jobs, lease_ttl=0.3))
        assert started.wait(10), "the handler did not start"
        assert rivet.cancel(task_id, using=store) is CancelOutcome.MARKED
        wait_until(lambda: store.task_get(task_id).state == "dead", "the burial")
        stats = bg.stop()
    finally:
        signals.task_processed.disconnect(on_processed)
    task = store.task_get(task_id)
    assert (task.last_error, task.result) == (CANCELLED_SUFFIX, None)
    assert reasons == [(True, CANCELLED_SUFFIX)]
    assert (stats.cancelled, stats.acked, processed) == (1, 0, [])


def test_a_requeued_cancelled_task_runs_again(store, jobs):
    job("noop", registry=jobs)(lambda ctx: "ok")
    task_id = enqueue(store, "noop")
    assert rivet.cancel(task_id, using=store) is CancelOutcome.CANCELLED
    assert make_worker(store, jobs, once=True).run().claimed == 0
    assert store.dead_requeue("q", task_id) is True
    assert make_worker(store, jobs, once=True).run().acked == 1
    assert store.task_get(task_id).state == "done"
