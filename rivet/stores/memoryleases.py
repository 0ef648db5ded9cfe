"""The memory store's tasks and the writes of an attempt: claim, heartbeat, settle, cancel.

``MemoryLeases`` owns the state: the tasks in a dict under one lock, the fenced writes, the
refused heartbeats already recorded, and the condition an idle worker waits on. On it, it
leases runnable tasks (burying the doomed ones a claim meets, with
``rivet.values.claim_burial``'s text), extends leases, settles decisions (fencing stale ones)
and cancels. ``rivet.stores.memory.MemoryStore`` builds enqueue, reads, dead letters and
retention on it.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from rivet import values as v
from rivet.conf import priority_aging_secs, rivet_settings
from rivet.stores.base import Store
from rivet.stores.jsontext import json_copy


def is_doomed(task: v.TaskRecord) -> bool:
    """A pending task no claim may run: attempts used up, or cancelled while it was leased."""
    return task.attempts >= task.max_attempts or task.cancel_requested


def doom_ending(task: v.TaskRecord) -> str:
    """The error a doomed task is buried with (by a claim, or a sweep)."""
    return v.claim_burial(task.last_error, task.cancel_requested)


def claim_rank(ready_at: datetime, priority: int) -> datetime:
    """Where a task runnable from ``ready_at`` ranks in claim order (priority aging)."""
    return ready_at + timedelta(seconds=v.rank_offset_secs(priority, priority_aging_secs()))


def _errors(task: v.TaskRecord, error: str, now: datetime) -> list[dict[str, Any]]:
    """The task's errors list with this attempt's failure appended, cut to the newest kept."""
    kept = rivet_settings.MAX_ERRORS_KEPT
    return [*task.errors, v.history_entry(task.attempts, now, error)][-kept:]


class MemoryLeases(Store):
    """The tasks under one lock, and the claim, heartbeat, settle and cancel of the Store."""

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self.clock = clock or timezone.now
        self._lock = threading.RLock()
        self._tasks: dict[int, v.TaskRecord] = {}
        self._ids = itertools.count(1)
        self._fences: list[tuple[int, str, str, datetime]] = []  # (task_id, queue, op, at)
        self._beats: set[tuple[int, int]] = set()  # (task_id, epoch) of recorded refused heartbeats
        # Each task's claim_rank, written when it becomes runnable (enqueue, retry, requeue).
        self._ranks: dict[int, datetime] = {}
        self._wakeup = threading.Condition(self._lock)

    # -- claim and leases --------------------------------------------------------------------

    def task_claim(
        self, *, queues: Sequence[str], owner: str, limit: int, lease_ttl: float
    ) -> v.ClaimBatch:
        return self._claim(queues, owner, limit, lease_ttl, exclude=frozenset())

    def task_settle_and_claim(
        self,
        decisions: Sequence[v.Decision],
        *,
        queues: Sequence[str],
        owner: str,
        limit: int,
        lease_ttl: float,
    ) -> v.Flushed:
        with self._lock:
            settled = self.task_settle(decisions) if decisions else []
            exclude = frozenset(decision.lease.task_id for decision in decisions)
            batch = self._claim(queues, owner, limit, lease_ttl, exclude=exclude)
        return v.Flushed(settled=settled, batch=batch)

    def _claim(
        self,
        queues: Sequence[str],
        owner: str,
        limit: int,
        lease_ttl: float,
        exclude: frozenset[int],
    ) -> v.ClaimBatch:
        claimed: list[v.Claimed] = []
        buried = 0
        with self._lock:
            now = self.clock()
            for queue in queues:
                runnable = sorted(
                    (
                        t
                        for t in self._tasks.values()
                        if t.queue == queue
                        and t.state == "pending"
                        and t.visible_at <= now
                        and t.id not in exclude
                    ),
                    key=lambda t: (self._ranks.get(t.id, t.created_at), t.id),
                )
                for task in runnable:
                    if len(claimed) >= limit:
                        break
                    if is_doomed(task):
                        self._bury(task, doom_ending(task), now)
                        buried += 1
                        continue
                    claimed.append(self._lease(task, owner, lease_ttl, now))
        return v.ClaimBatch(claimed=claimed, buried=buried)

    def _lease(self, task: v.TaskRecord, owner: str, ttl: float, now: datetime) -> v.Claimed:
        task = dataclasses.replace(
            task,
            attempts=task.attempts + 1,
            lease_epoch=task.lease_epoch + 1,
            lease_owner=owner,
            visible_at=now + timedelta(seconds=ttl),
            updated_at=now,
        )
        self._tasks[task.id] = task
        row = {**vars(task), "payload": json_copy(task.payload)}
        return v.Claimed.from_row({**row, "trace_context": json_copy(task.trace_context)}, owner)

    def _bury(self, task: v.TaskRecord, error: str, now: datetime, owner: str = "") -> None:
        self._tasks[task.id] = dataclasses.replace(
            task,
            state="dead",
            last_error=error,
            errors=_errors(task, error, now),
            updated_at=now,
            settled_epoch=task.lease_epoch,
            settled_by=owner,
        )

    def _held(self, lease: v.Lease) -> v.TaskRecord | None:
        task = self._tasks.get(lease.task_id)
        if task is None or task.state != "pending" or task.lease_epoch != lease.epoch:
            return None
        return task

    def lease_extend(self, leases: Sequence[v.Lease], lease_ttl: float) -> v.Held:
        held: set[int] = set()
        with self._lock:
            now = self.clock()
            for lease in leases:
                task = self._held(lease)
                if task is not None:
                    self._tasks[task.id] = dataclasses.replace(
                        task, visible_at=now + timedelta(seconds=lease_ttl), updated_at=now
                    )
                    held.add(task.id)
                elif self._taken_by_another_claim(lease):
                    self._beats.add((lease.task_id, lease.epoch))
                    self._fence(lease, "beat")
            cancelled = {i for i in held if self._tasks[i].cancel_requested}
        return v.Held(held, cancelled)

    def _taken_by_another_claim(self, lease: v.Lease) -> bool:
        """Another claim took the task, and this lease's refused heartbeat is not yet recorded."""
        task = self._tasks.get(lease.task_id)
        if task is None or task.lease_epoch <= lease.epoch:
            return False
        return (lease.task_id, lease.epoch) not in self._beats

    def _fence(self, lease: v.Lease, op: str) -> None:
        task = self._tasks.get(lease.task_id)
        self._fences.append((lease.task_id, task.queue if task else "", op, self.clock()))

    def task_settle(self, decisions: Sequence[v.Decision]) -> list[v.Settled]:
        with self._lock:
            return [self._settle_one(decision, self.clock()) for decision in decisions]

    def _settle_one(self, decision: v.Decision, now: datetime) -> v.Settled:
        lease = decision.lease
        task = None if isinstance(decision, v.Fence) else self._held(lease)
        if task is None or isinstance(decision, v.Fence):
            self._fence(lease, decision.op)
            return v.Settled.FENCED
        if task.cancel_requested:
            self._bury(task, decision.cancelled_error, now, lease.owner)
            return v.Settled.CANCELLED
        if isinstance(decision, v.Bury):
            self._bury(task, decision.error, now, lease.owner)
            return v.Settled.BURIED
        task = dataclasses.replace(task, settled_epoch=lease.epoch, settled_by=lease.owner)
        if isinstance(decision, v.Ack):
            self._tasks[task.id] = dataclasses.replace(
                task, state="done", result=json_copy(decision.result), last_error="", updated_at=now
            )
            return v.Settled.ACKED
        assert isinstance(decision, v.Retry)
        self._tasks[task.id] = dataclasses.replace(
            task,
            last_error=decision.error,
            errors=_errors(task, decision.error, now),
            lease_owner=None,
            visible_at=now + timedelta(seconds=max(decision.delay, 0.0)),
            updated_at=now,
        )
        self._ranks[task.id] = claim_rank(self._tasks[task.id].visible_at, task.priority)
        self._wakeup.notify_all()
        return v.Settled.RETRIED

    def task_cancel(self, task_id: int) -> v.CancelOutcome:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None:
                return v.CancelOutcome.NOT_FOUND
            if task.state != "pending":
                return v.CancelOutcome.FINISHED
            now = self.clock()
            if task.lease_owner is not None and task.visible_at > now:
                self._tasks[task_id] = dataclasses.replace(task, cancel_requested=True)
                return v.CancelOutcome.MARKED
            self._bury(task, v.ending(task.last_error, v.CANCELLED_SUFFIX), now)
            return v.CancelOutcome.CANCELLED
