"""The guard: heartbeats keep a lease, a lost lease is fenced, deadlines and timeouts end work.

In-process against a MemoryStore (helpers in worker_kit.py).
"""

from __future__ import annotations

import threading

from rivet import signals
from rivet.decisions import EXPIRED_ERROR
from rivet.jobs import JobContext, job
from rivet.stores.memory import MemoryStore
from rivet.values import HANDLER_ERROR_SUFFIX
from rivet.worker import EXIT_ABANDONED
from tests.unit.worker_kit import (
    Background,
    blocking_job,
    counted,
    enqueue,
    make_worker,
    wait_until,
)


def test_heartbeats_keep_a_long_task_leased(store, jobs):
    release = blocking_job(jobs)
    task_id = enqueue(store, "block")
    bg = Background(make_worker(store, jobs, lease_ttl=0.3))
    wait_until(lambda: store.task_get(task_id).attempts == 1, "the claim")
    first = store.task_get(task_id).updated_at
    store.clock.advance(0.2)
    wait_until(lambda: store.task_get(task_id).updated_at > first, "a heartbeat")
    store.clock.advance(0.2)  # past the first lease: only the heartbeat kept it
    assert store.task_claim(queues=["q"], owner="other", limit=1, lease_ttl=1).claimed == []
    release.set()
    wait_until(lambda: store.task_get(task_id).state == "done", "the ack")
    assert bg.stop().acked == 1


def test_a_heartbeat_that_finds_the_lease_taken_stops_the_handler_and_records_the_fence(
    store, jobs
):
    stopped: list[str] = []
    fenced: list[dict] = []

    @job("block", registry=jobs)
    def block(ctx: JobContext):
        ctx.wait(10)
        stopped.append(ctx.stop_reason)
        return "too late"

    def on_fenced(sender, **kwargs):
        fenced.append(kwargs)

    signals.task_fenced.connect(on_fenced)
    try:
        task_id = enqueue(store, "block")
        bg = Background(make_worker(store, jobs, lease_ttl=0.3))
        wait_until(lambda: store.task_get(task_id).attempts == 1, "the claim")
        store.clock.advance(1.0)  # the lease lapses in the store's time
        taken = store.task_claim(queues=["q"], owner="thief", limit=1, lease_ttl=60)
        assert [c.epoch for c in taken.claimed] == [2]
        wait_until(lambda: stopped, "the handler to be stopped")
        wait_until(lambda: store.fenced_count("q", "fail") == 1, "the fence record")
        stats = bg.stop()
    finally:
        signals.task_fenced.disconnect(on_fenced)
    assert stopped == ["lease lost (fenced)"]
    task = store.task_get(task_id)
    assert (task.state, task.lease_epoch, task.lease_owner) == ("pending", 2, "thief")
    assert stats.fenced == 1 and stats.acked == 0
    assert fenced[0]["context"].epoch == 1 and fenced[0]["op"] == "fail"


def test_an_ack_with_a_stale_epoch_is_fenced_not_applied(store, jobs):
    gate = threading.Event()

    @job("slow", registry=jobs)
    def slow(ctx):
        gate.wait(10)
        return "stale result"

    class SlowHeartbeats(MemoryStore):
        def lease_extend(self, leases, lease_ttl):
            return {lease.task_id for lease in leases}  # pretends every lease is still held

    slow_store = SlowHeartbeats(clock=store.clock)
    task_id = enqueue(slow_store, "slow")
    bg = Background(make_worker(slow_store, jobs, metrics=True))
    wait_until(lambda: slow_store.task_get(task_id).attempts == 1, "the claim")
    slow_store.clock.advance(10)
    slow_store.task_claim(queues=["q"], owner="thief", limit=1, lease_ttl=60)
    gate.set()
    wait_until(lambda: slow_store.fenced_count("q", "ack") == 1, "the fenced ack")
    stats = bg.stop()
    assert slow_store.task_get(task_id).state == "pending"
    assert stats.fenced == 1
    assert counted(bg.worker, "rivet_worker_fenced_total", kind="slow") == 1
    assert counted(bg.worker, "rivet_worker_acks_total", kind="slow") == 0


def test_a_lapsed_local_deadline_stops_the_handler_and_gives_the_task_back(store, jobs):
    class DeadHeartbeats(MemoryStore):
        def lease_extend(self, leases, lease_ttl):
            raise ConnectionError("database unreachable")

    broken = DeadHeartbeats(clock=store.clock)
    blocking_job(jobs)
    task_id = enqueue(broken, "block")
    bg = Background(make_worker(broken, jobs, lease_ttl=0.2, metrics=True, max_jobs=1))
    wait_until(lambda: bg.worker.counts["lost"] == 1, "the lease to expire locally")
    stats = bg.stop()
    task = broken.task_get(task_id)
    # Never acked: handed back under its epoch, runnable at once, saying why.
    assert (task.state, task.attempts, task.last_error) == ("pending", 1, EXPIRED_ERROR)
    assert task.visible_at <= broken.clock()
    assert stats.acked == 0 and stats.lost == 1
    assert counted(bg.worker, "rivet_worker_lost_total", kind="block") == 1


def test_a_job_timeout_fails_the_attempt_with_the_retry_policy(store, jobs):
    blocking_job(jobs, timeout=0.1)
    task_id = enqueue(store, "block", max_attempts=1)
    stats = make_worker(store, jobs, once=True).run()
    task = store.task_get(task_id)
    assert task.state == "dead"
    assert task.last_error == f"TimeoutError: timed out after 0.1s; {HANDLER_ERROR_SUFFIX}"
    assert stats.failed == 1 and stats.abandoned == 0


def test_a_handler_that_will_not_return_is_abandoned_and_the_worker_exits_3(store, jobs):
    release = threading.Event()
    job("stuck", registry=jobs)(lambda ctx: release.wait(30))
    task_id = enqueue(store, "stuck")
    worker = make_worker(
        store,
        jobs,
        concurrency=1,
        lease_ttl=0.2,
        job_timeout=0.1,
        shutdown_timeout=0.2,
        metrics=True,
    )
    try:
        bg = Background(worker)
        bg.thread.join(timeout=10)
        assert not bg.thread.is_alive(), "a worker whose every slot is stuck must give up"
    finally:
        release.set()
    assert bg.stats.abandoned == 1
    assert counted(worker, "rivet_worker_abandoned_total", kind="stuck") == 1
    assert bg.stats.exit_code == EXIT_ABANDONED
    assert store.task_get(task_id).last_error == "TimeoutError: timed out after 0.1s"
