"""Settling against a store whose writes fail: retried while the lease holds, never past it.

The real interruption (pg_terminate_backend) is in tests/integration/test_worker_write_retry.py;
here a MemoryStore raises the errors a SQL store raises, so every branch is driven exactly.
"""

from __future__ import annotations

import pytest

from rivet import signals
from rivet.errors import StoreError, StoreUnavailable
from rivet.jobs import JobRegistry, job
from rivet.stores.memory import FakeClock, MemoryStore
from rivet.worker.attempt import Attempt, AttemptState, StopKind
from rivet.worker.ending import End
from tests.unit.worker_kit import enqueue, make_worker


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


def test_a_write_is_given_up_one_lease_past_the_local_deadline(jobs):
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


# -- an attempt stopped at its local lease deadline ---------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def expired_attempt(store: MemoryStore, jobs: JobRegistry, clock: Clock):
    """A claimed noop whose handler the guard stopped as expired; and the Settler to settle it."""

    from rivet.failpoints import Failpoints
    from rivet.retry import RetryPolicy
    from rivet.worker.guard import Guard
    from rivet.worker.settle import Settler

    enqueue(store, "noop")
    (claimed,) = store.task_claim(queues=["q"], owner="w", limit=1, lease_ttl=2).claimed
    attempt = Attempt(
        claimed=claimed, definition=jobs.get("noop"), started=clock(), lease_ttl=2,
        timeout_secs=None,
    )  # fmt: skip
    guard = Guard(store=store, lease_ttl=2, clock=clock, notify=lambda a: None)
    guard.track(attempt)
    clock.now += 3  # paused past the lease
    attempt.stop(StopKind.EXPIRED, "lease deadline passed, no heartbeat", clock())
    settler = Settler(
        store=store, guard=guard, retry_policy=RetryPolicy(backoff_secs=0),
        failpoints=Failpoints(), clock=clock, sleep=lambda s: None,
    )  # fmt: skip
    return claimed, attempt, settler


def test_an_expired_attempt_whose_task_was_claimed_again_records_the_fence(jobs):
    store, clock = MemoryStore(clock=FakeClock()), Clock()
    claimed, attempt, settler = expired_attempt(store, jobs, clock)
    store.clock.advance(3)
    (again,) = store.task_claim(queues=["q"], owner="other", limit=1, lease_ttl=2).claimed
    assert again.epoch == claimed.epoch + 1
    assert settler.settle_stopped(attempt) is None  # a decision is queued
    ended = settler.flush_all()  # the loop (here, the test) writes it
    assert [e.end for e in ended] == [End.FENCED]
    assert store.fenced_count("q") == 1
    assert store.task_get(claimed.task_id).lease_epoch == again.epoch  # untouched


def test_an_expired_attempt_still_holding_its_lease_gives_the_task_back_at_once(jobs):
    from rivet.decisions import EXPIRED_ERROR

    store, clock = MemoryStore(clock=FakeClock()), Clock()
    claimed, attempt, settler = expired_attempt(store, jobs, clock)
    assert settler.settle_stopped(attempt) is None  # a decision is queued
    ended = settler.flush_all()  # the loop (here, the test) writes it
    task = store.task_get(claimed.task_id)
    assert (task.state, task.attempts, task.last_error) == ("pending", 1, EXPIRED_ERROR)
    assert store.queue_stats("q").ready == 1
    assert ([e.end for e in ended], store.fenced_count("q")) == ([End.LOST], 0)


def test_an_expired_attempt_waits_out_a_database_restart_to_record_its_fence(jobs):
    store, clock = FlakyStore(StoreUnavailable("terminating connection"), failures=3), Clock()
    claimed, attempt, settler = expired_attempt(store, jobs, clock)
    store.clock.advance(3)
    store.task_claim(queues=["q"], owner="other", limit=1, lease_ttl=2)
    settler.sleep = lambda secs: setattr(clock, "now", clock.now + secs)
    assert settler.settle_stopped(attempt) is None  # a decision is queued
    ended = settler.flush_all()  # the loop (here, the test) writes it
    assert (store.calls, store.fenced_count("q"), [e.end for e in ended]) == (4, 1, [End.FENCED])


class LostAnswerStore(MemoryStore):
    """Applies the first settle write, then raises as if the connection died before its
    answer came back (a failover): the worker sends the write again."""

    def __init__(self) -> None:
        super().__init__(clock=FakeClock())
        self.calls = 0

    def task_settle(self, decisions):
        self.calls += 1
        outcomes = super().task_settle(decisions)
        if self.calls == 1:
            raise StoreUnavailable("server closed the connection unexpectedly")
        return outcomes


def test_an_ack_whose_answer_was_lost_is_fenced_for_the_true_reason(jobs):
    """The second send of an ack the first send applied is refused; its reason says so, not
    that the lease was claimed again (nobody claimed it)."""
    store = LostAnswerStore()
    task_id = enqueue(store, "noop")
    reasons = []

    def fenced(sender, **kwargs):
        reasons.append(kwargs["reason"])

    signals.task_fenced.connect(fenced)
    try:
        make_worker(store, jobs, once=True, lease_ttl=30.0).run()
    finally:
        signals.task_fenced.disconnect(fenced)
    row = store.task_get(task_id)
    assert (row.state, row.lease_epoch, store.calls) == ("done", 1, 2)
    assert len(reasons) == 1
    assert "claimed again" not in reasons[0]
    assert "had been applied already" in reasons[0]
