"""Settling against a store whose writes fail: retried while the lease holds, never past it.

The real interruption (pg_terminate_backend) is in tests/integration/test_worker_write_retry.py;
here a MemoryStore raises the errors a SQL store raises, so every branch is driven exactly.
"""

from __future__ import annotations

import pytest

from rivet.errors import StoreError, StoreUnavailable
from rivet.jobs import JobRegistry, job
from rivet.stores.memory import FakeClock, MemoryStore
from rivet.worker.attempt import Attempt, AttemptState, StopKind
from tests.unit.test_worker_unit import enqueue, make_worker


class FlakyStore(MemoryStore):
    """Raises ``error`` on the first ``failures`` settle writes, then behaves."""

    def __init__(self, error: Exception, failures: int) -> None:
        super().__init__(clock=FakeClock())
        self.error, self.failures, self.calls = error, failures, 0

    def task_settle(self, decisions):
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return super().task_settle(decisions)


@pytest.fixture
def jobs() -> JobRegistry:
    registry = JobRegistry()
    job("noop", registry=registry)(lambda ctx: "ok")
    return registry


def test_an_unreachable_database_is_retried_until_the_ack_lands(jobs):
    store = FlakyStore(StoreUnavailable("server closed the connection"), failures=2)
    task_id = enqueue(store, "noop")
    stats = make_worker(store, jobs, once=True, lease_ttl=30.0).run()
    assert (stats.acked, stats.lost, store.calls) == (1, 0, 3)
    assert store.task_get(task_id).state == "done"


def test_any_other_store_error_is_not_retried(jobs):
    store = FlakyStore(StoreError("constraint refused the write"), failures=1)
    task_id = enqueue(store, "noop")
    stats = make_worker(store, jobs, once=True, lease_ttl=30.0).run()
    assert (stats.acked, stats.lost, store.calls) == (0, 1, 1)
    assert store.task_get(task_id).state == "pending"


def test_no_retry_past_the_local_lease_deadline(jobs):
    store = FlakyStore(StoreUnavailable("down"), failures=1000)
    enqueue(store, "noop")
    stats = make_worker(store, jobs, once=True, lease_ttl=0.3).run()
    assert (stats.acked, stats.lost) == (0, 1)
    assert 1 < store.calls < 1000


def test_an_attempt_has_one_state_through_stop_settle_and_return():
    store = MemoryStore(clock=FakeClock())
    enqueue(store, "noop")
    (claimed,) = store.task_claim(queues=["q"], owner="w", limit=1, lease_ttl=30).claimed
    registry = JobRegistry()
    definition = job("noop", registry=registry)(lambda ctx: None)
    attempt = Attempt(
        claimed=claimed, definition=definition, started=0.0, lease_ttl=30, timeout_secs=None
    )
    assert (attempt.state, attempt.busy, attempt.settled) == (AttemptState.RUNNING, True, False)
    assert attempt.stop(StopKind.CANCELLED, "cancelled by an operator", 1.0) is True
    assert attempt.stop(StopKind.FENCED, "again", 2.0) is False
    assert (attempt.state, attempt.context.should_stop) == (AttemptState.STOPPED, True)
    assert attempt.context.stop_reason == "cancelled by an operator"
    attempt.mark_settled()
    assert (attempt.state, attempt.busy, attempt.settled) == (AttemptState.SETTLED, True, True)
    assert attempt.abandon() is True
    attempt.mark_returned()
    assert (attempt.state, attempt.busy) == (AttemptState.FINISHED, False)
