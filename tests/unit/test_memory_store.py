"""MemoryStore extras, and proof that the conformance checks catch a store that breaks a rule.

Each mutant below is a MemoryStore with one rule broken; the check that guards that rule must
fail on it with a message that says what went wrong.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from rivet.conformance import CHECKS, Harness
from rivet.stores.memory import FakeClock, MemoryStore
from rivet.values import Ack, CancelOutcome, Fence, Lease, Retry


class AckIgnoresEpoch(MemoryStore):
    """Any pending task counts as held, whatever epoch the caller names: no fence."""

    def _held(self, lease: Lease):
        task = self._tasks.get(lease.task_id)
        return task if task is not None and task.state == "pending" else None


class NeverBuries(MemoryStore):
    def _bury(self, task, error, now, owner="") -> None:
        pass


class FencesNotRecorded(MemoryStore):
    def _fence(self, lease: Lease, op: str) -> None:
        pass


class RequeueResetsEpoch(MemoryStore):
    def dead_requeue(self, queue: str, task_id: int) -> bool:
        revived = super().dead_requeue(queue, task_id)
        if revived:
            self._tasks[task_id] = dataclasses.replace(self._tasks[task_id], lease_epoch=0)
        return revived


class IgnoresIdempotencyKeys(MemoryStore):
    def _find_existing(self, spec):
        return None


class ClaimsQueuesBackwards(MemoryStore):
    def task_claim(self, *, queues, owner, limit, lease_ttl):
        return super().task_claim(
            queues=list(reversed(queues)), owner=owner, limit=limit, lease_ttl=lease_ttl
        )


class ClaimsOneTooMany(MemoryStore):
    def task_claim(self, *, queues, owner, limit, lease_ttl):
        return super().task_claim(queues=queues, owner=owner, limit=limit + 1, lease_ttl=lease_ttl)


class ExtendDoesNothing(MemoryStore):
    def lease_extend(self, leases, lease_ttl):
        return {lease.task_id for lease in leases if self._held(lease) is not None}


class RetriesAtOnce(MemoryStore):
    def task_settle(self, decisions):
        return super().task_settle(
            [dataclasses.replace(d, delay=0.0) if isinstance(d, Retry) else d for d in decisions]
        )


class DropsResults(MemoryStore):
    def task_settle(self, decisions):
        return super().task_settle(
            [dataclasses.replace(d, result=None) if isinstance(d, Ack) else d for d in decisions]
        )


class FencesWholeBatch(MemoryStore):
    """One stale row refuses the whole batch: a store that fences per batch, not per row."""

    def task_settle(self, decisions):
        if any(self._held(d.lease) is None for d in decisions):
            return [
                self._settle_one(Fence(lease=d.lease, op=d.op), self.clock()) for d in decisions
            ]
        return super().task_settle(decisions)


class IgnoresCancelMarks(MemoryStore):
    def task_cancel(self, task_id):
        outcome = super().task_cancel(task_id)
        if outcome is CancelOutcome.MARKED:
            self._tasks[task_id] = dataclasses.replace(self._tasks[task_id], cancel_requested=False)
        return outcome


class OverviewInTheOrderAsked(MemoryStore):
    def queue_overview(self, queues=None):
        if queues is None:
            return super().queue_overview()
        return [self._queue_stats(queue, self.clock()) for queue in queues]


MUTANTS = [
    (AckIgnoresEpoch, "stale_ack_is_fenced", "stale-epoch ack"),
    (AckIgnoresEpoch, "stale_fail_is_fenced", "stale-epoch fail"),
    (AckIgnoresEpoch, "stale_lease_extend_is_refused", "stale or unknown epochs"),
    (NeverBuries, "fail_on_last_attempt_buries", "state/attempts after last fail"),
    (NeverBuries, "lapsed_last_attempt_is_buried_by_claim", "buried task"),
    (NeverBuries, "sweep_buries_only_lapsed_exhausted_tasks", "lapsed exhausted task"),
    (FencesNotRecorded, "stale_ack_is_fenced", "fenced_count(queue, 'ack')"),
    (FencesNotRecorded, "queue_stats_counts", "(ready, leased, delayed, done, dead, fenced)"),
    (RequeueResetsEpoch, "requeue_revives_a_dead_task", "requeue must not lower the epoch"),
    (IgnoresIdempotencyKeys, "idempotent_enqueue_returns_existing", "repeat enqueue of a key"),
    (IgnoresIdempotencyKeys, "idempotency_mismatch_is_refused", "IdempotencyMismatch"),
    (IgnoresIdempotencyKeys, "bulk_enqueue", "duplicate flags"),
    (ClaimsQueuesBackwards, "claim_tries_queues_in_order", "takes the first queue"),
    (ClaimsOneTooMany, "claim_respects_limit", "claim of limit 2"),
    (ExtendDoesNothing, "lease_extend_keeps_the_lease", "original ttl of an extended lease"),
    (RetriesAtOnce, "fail_retries_after_delay", "before the retry delay"),
    (DropsResults, "ack_marks_done_with_result", "state and result after ack"),
    (FencesWholeBatch, "batch_settles_each_row_under_its_own_epoch", "one stale epoch"),
    (IgnoresCancelMarks, "cancel_of_a_leased_task_is_never_acked", "heartbeat reports it"),
    (NeverBuries, "cancel_buries_a_pending_task_at_once", "a cancelled task"),
    (OverviewInTheOrderAsked, "queue_overview_names_every_queue", "queues asked for, in order"),
]


@pytest.mark.parametrize(
    ("mutant", "check_name", "message"),
    MUTANTS,
    ids=[f"{m.__name__}-{name}" for m, name, _ in MUTANTS],
)
def test_check_catches_a_broken_store(mutant, check_name: str, message: str) -> None:
    clock = FakeClock()
    h = Harness(store=mutant(clock=clock), advance=clock.advance)
    with pytest.raises(AssertionError) as failure:
        CHECKS[check_name](h)
    assert message in str(failure.value)


def test_fake_clock_moves_only_when_told() -> None:
    start = datetime(2030, 5, 1, tzinfo=UTC)
    clock = FakeClock(start)
    assert clock() == clock() == start
    clock.advance(1.5)
    assert clock() == start + timedelta(seconds=1.5)


def test_shared_store_is_one_instance() -> None:
    assert MemoryStore.shared() is MemoryStore.shared()


def test_stored_payload_is_a_copy() -> None:
    """Changing a payload after enqueue (or after claim) must not change the stored task."""
    from rivet.validation import build_spec

    store = MemoryStore(clock=FakeClock())
    payload = {"items": [1, 2]}
    task_id = store.task_enqueue(build_spec(queue="q", kind="k", payload=payload)).task_id
    payload["items"].append(3)
    (claimed,) = store.task_claim(queues=["q"], owner="w", limit=1, lease_ttl=30).claimed
    claimed.payload["items"].append(4)
    assert store.task_get(task_id).payload == {"items": [1, 2]}
