"""The two failpoints that fire at a write of several tasks: before_flush and before_heartbeat.

The chaos harness pauses workers at them (RIVET_FAILPOINT_ACTION=stop) so that a batch of late
decisions, or a late heartbeat, meets the store's guards; here a MemoryStore worker shows where
they fire and what they name.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from rivet.failpoints import Failpoints
from rivet.jobs import job
from tests.unit.worker_kit import Aborted, RecordingAbort, enqueue, make_worker


class RecordingFailpoints(Failpoints):
    """Failpoints that note each firing point and its fields before acting."""

    def __init__(self, armed: dict[str, float], abort: RecordingAbort) -> None:
        super().__init__(armed, abort=abort)
        self.fired: list[tuple[str, dict[str, Any]]] = []

    def fire(self, name: str, **fields: Any) -> None:
        if self.should_fire(name):
            self.fired.append((name, fields))
            self._abort()


def test_before_flush_holds_a_lone_decision_and_fires_at_the_batch_of_two(store, jobs):
    job("quick", registry=jobs)(lambda ctx: None)
    job("slower", registry=jobs)(lambda ctx: time.sleep(0.2))
    quick, slower = enqueue(store, "quick"), enqueue(store, "slower")
    abort = RecordingAbort(raise_it=True)
    points = RecordingFailpoints({"before_flush": 1.0}, abort)
    worker = make_worker(store, jobs, failpoints=points, concurrency=2, lease_ttl=30.0)
    with pytest.raises(Aborted):
        worker.run()
    worker.guard.close()
    # The quick task's ack waited for the slower one's: one flush of two, stopped before it.
    assert points.fired == [("before_flush", {"tasks": [quick, slower]})]
    assert [store.task_get(t).state for t in (quick, slower)] == ["pending", "pending"]


def test_a_lone_decision_is_held_at_most_until_half_its_lease_is_left(store, jobs):
    job("quick", registry=jobs)(lambda ctx: None)
    task_id = enqueue(store, "quick")
    abort = RecordingAbort(raise_it=True)
    points = RecordingFailpoints({"before_flush": 1.0}, abort)
    stats = make_worker(store, jobs, failpoints=points, once=True, lease_ttl=0.4).run()
    assert (stats.acked, points.fired) == (1, [])  # written alone, once the hold ran out
    assert store.task_get(task_id).state == "done"


def test_before_heartbeat_names_the_tasks_in_flight(store, jobs):
    job("waits", registry=jobs)(lambda ctx: ctx.wait(0.5))
    task_id = enqueue(store, "waits")
    abort = RecordingAbort(raise_it=False)
    points = RecordingFailpoints({"before_heartbeat": 1.0}, abort)
    stats = make_worker(store, jobs, failpoints=points, once=True, lease_ttl=0.3).run()
    assert stats.acked == 1
    assert points.fired and all(
        f == ("before_heartbeat", {"tasks": [task_id]}) for f in points.fired
    )


def test_the_retry_and_bury_points_fire_only_for_their_own_kind_of_decision(store, jobs):
    from rivet.errors import Permanent

    def permanent(ctx):
        raise Permanent("never")

    def flaky(ctx):
        raise RuntimeError("not now")

    job("permanent", registry=jobs)(permanent)
    job("flaky", registry=jobs, max_attempts=3)(flaky)
    buried, retried = enqueue(store, "permanent"), enqueue(store, "flaky")
    abort = RecordingAbort(raise_it=False)
    armed = {"after_error_before_retry": 1.0, "after_error_before_bury": 1.0}
    points = RecordingFailpoints(armed, abort)
    make_worker(store, jobs, failpoints=points, once=True, concurrency=1).run()
    fired = {(name, fields["task"]) for name, fields in points.fired}
    assert ("after_error_before_bury", buried) in fired
    assert ("after_error_before_retry", retried) in fired
    assert ("after_error_before_retry", buried) not in fired
    # Its third and last attempt is buried, but a claim would bury it too: not a pause point.
    assert ("after_error_before_bury", retried) not in fired
