"""MemoryStore: the Store semantics in pure Python, thread-safe, with an injectable clock.

It mirrors the SQL stores operation by operation; ``rivet.conformance`` is the proof.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from django.utils import timezone

from rivet import values as v
from rivet.conf import rivet_settings
from rivet.errors import IdempotencyMismatch
from rivet.stores.base import Store


class FakeClock:
    """A clock for tests: starts at a fixed instant and moves only when told."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, secs: float) -> None:
        self.now += timedelta(seconds=secs)


def _copy(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _doomed(task: v.TaskRecord) -> bool:
    """A pending task no claim may run: attempts used up, or cancelled while it was leased."""
    return task.attempts >= task.max_attempts or task.cancel_requested


def _errors(task: v.TaskRecord, error: str, now: datetime) -> list[dict[str, Any]]:
    """The task's errors list with this attempt's failure appended, cut to the newest kept."""
    kept = rivet_settings.MAX_ERRORS_KEPT
    return [*task.errors, v.history_entry(task.attempts, now, error)][-kept:]


def _doom_ending(task: v.TaskRecord) -> str:
    return v.claim_burial(task.last_error, task.cancel_requested)


class MemoryStore(Store):
    """Tasks in a dict under one lock. Good for unit tests and the testing fake."""

    name = "memory"
    _shared: ClassVar[MemoryStore | None] = None

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self.clock = clock or timezone.now
        self._lock = threading.RLock()
        self._tasks: dict[int, v.TaskRecord] = {}
        self._ids = itertools.count(1)
        self._fences: list[tuple[int, str, str, datetime]] = []  # (task_id, queue, op, at)
        self._beats: set[tuple[int, int]] = set()  # (task_id, epoch) of recorded refused heartbeats
        self._wakeup = threading.Condition(self._lock)

    @classmethod
    def shared(cls) -> MemoryStore:
        """One process-wide instance, for RIVET['STORE'] = 'memory'."""
        if cls._shared is None:
            cls._shared = cls()
        return cls._shared

    # -- enqueue -----------------------------------------------------------------------------

    def task_enqueue(self, spec: v.TaskSpec) -> v.EnqueueResult:
        with self._lock:
            return self._enqueue_locked(spec)

    def task_enqueue_many(self, specs: Sequence[v.TaskSpec]) -> list[v.EnqueueResult]:
        with self._lock:
            snapshot = (dict(self._tasks), self._ids)
            try:
                return [self._enqueue_locked(spec) for spec in specs]
            except Exception:
                self._tasks, self._ids = snapshot
                raise

    def _enqueue_locked(self, spec: v.TaskSpec) -> v.EnqueueResult:
        existing = self._find_existing(spec)
        if existing is not None:
            return existing
        now = self.clock()
        visible = spec.run_at or now + timedelta(seconds=spec.delay_secs)
        task_id = next(self._ids)
        self._tasks[task_id] = v.TaskRecord(
            id=task_id,
            queue=spec.queue,
            kind=spec.kind,
            payload=json.loads(spec.payload_json),
            idem_key=spec.idem_key,
            unique_key=spec.unique_key,
            state="pending",
            attempts=0,
            max_attempts=spec.max_attempts,
            lease_epoch=0,
            lease_owner=None,
            visible_at=visible,
            priority=spec.priority,
            created_at=now,
            updated_at=now,
            last_error="",
            trace_context=_copy(spec.trace_context),
        )
        self._wakeup.notify_all()
        return v.EnqueueResult(task_id=task_id)

    def _find_existing(self, spec: v.TaskSpec) -> v.EnqueueResult | None:
        for task in self._tasks.values():
            if spec.idem_key is not None and task.idem_key == spec.idem_key:
                same = (task.queue, task.kind, task.payload) == (
                    spec.queue,
                    spec.kind,
                    json.loads(spec.payload_json),
                )
                if not same:
                    raise IdempotencyMismatch(spec.idem_key, task.id)
                return v.EnqueueResult(task_id=task.id, duplicate=True)
        for task in self._tasks.values():
            if (
                spec.unique_key is not None
                and task.state == "pending"
                and (task.kind, task.unique_key) == (spec.kind, spec.unique_key)
            ):
                return v.EnqueueResult(task_id=task.id, duplicate=True)
        return None

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
                    key=lambda t: (-t.priority, t.visible_at, t.id),
                )
                for task in runnable:
                    if len(claimed) >= limit:
                        break
                    if _doomed(task):
                        self._bury(task, _doom_ending(task), now)
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
        row = {**vars(task), "payload": _copy(task.payload)}
        return v.Claimed.from_row({**row, "trace_context": _copy(task.trace_context)}, owner)

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
                task, state="done", result=_copy(decision.result), last_error="", updated_at=now
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

    # -- reads -------------------------------------------------------------------------------

    def task_get(self, task_id: int) -> v.TaskRecord | None:
        with self._lock:
            return self._tasks.get(task_id)

    def task_list(
        self, *, queue: str | None = None, state: str | None = None, limit: int = 100
    ) -> list[v.TaskRecord]:
        with self._lock:
            rows = [
                t
                for t in sorted(self._tasks.values(), key=lambda t: t.id)
                if (queue is None or t.queue == queue) and (state is None or t.state == state)
            ]
        return rows[:limit]

    def queue_overview(self, queues: Sequence[str] | None = None) -> list[v.QueueStats]:
        with self._lock:
            names = set(queues) if queues is not None else self._queue_names()
            return [self._queue_stats(queue, self.clock()) for queue in sorted(names)]

    def _queue_names(self) -> set[str]:
        """Every queue that holds a task or a fenced write."""
        fenced = {queue for _, queue, _, _ in self._fences if queue}
        return {task.queue for task in self._tasks.values()} | fenced

    def _queue_stats(self, queue: str, now: datetime) -> v.QueueStats:
        tasks = [t for t in self._tasks.values() if t.queue == queue]
        pending = [t for t in tasks if t.state == "pending"]
        ready = [t for t in pending if t.visible_at <= now]
        future = [t for t in pending if t.visible_at > now]
        oldest = min((t.visible_at for t in ready), default=None)
        return v.QueueStats(
            queue=queue,
            ready=len(ready),
            leased=sum(1 for t in future if t.lease_owner is not None),
            delayed=sum(1 for t in future if t.lease_owner is None),
            done=sum(1 for t in tasks if t.state == "done"),
            dead=sum(1 for t in tasks if t.state == "dead"),
            oldest_ready_age_secs=(now - oldest).total_seconds() if oldest else None,
            fenced=sum(1 for f in self._fences if f[1] == queue),
        )

    def fenced_count(self, queue: str | None = None, op: str | None = None) -> int:
        with self._lock:
            return sum(
                1
                for f in self._fences
                if (queue is None or f[1] == queue) and (op is None or f[2] == op)
            )

    # -- dead letters ------------------------------------------------------------------------

    def dead_requeue(self, queue: str, task_id: int) -> bool:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None or task.queue != queue or task.state != "dead":
                return False
            if task.unique_key is not None and any(
                t.state == "pending" and (t.kind, t.unique_key) == (task.kind, task.unique_key)
                for t in self._tasks.values()
            ):
                return False
            now = self.clock()
            self._tasks[task_id] = dataclasses.replace(
                task,
                state="pending",
                attempts=0,
                last_error="",
                lease_owner=None,
                visible_at=now,
                updated_at=now,
                cancel_requested=False,
            )
            self._wakeup.notify_all()
            return True

    def dead_sweep(self, queue: str) -> int:
        with self._lock:
            now = self.clock()
            exhausted = [
                t
                for t in self._tasks.values()
                if t.queue == queue and t.state == "pending" and t.visible_at <= now and _doomed(t)
            ]
            for task in exhausted:
                self._bury(task, _doom_ending(task), now)
            return len(exhausted)

    def _purge_dead(self, queue: str, older_than: float | None, ids: list[int] | None) -> int:
        wanted = None if ids is None else set(ids)
        with self._lock:
            now = self.clock()
            doomed = [
                t.id
                for t in self._tasks.values()
                if t.queue == queue
                and t.state == "dead"
                and (wanted is None or t.id in wanted)
                and (older_than is None or t.updated_at <= now - timedelta(seconds=older_than))
            ]
            for task_id in doomed:
                del self._tasks[task_id]
            return len(doomed)

    # -- retention ---------------------------------------------------------------------------

    def _old_done(self, older_than_secs: float, queue: str | None) -> list[int]:
        cutoff = self.clock() - timedelta(seconds=older_than_secs)
        return [
            t.id
            for t in self._tasks.values()
            if t.state == "done" and t.updated_at <= cutoff and queue in (None, t.queue)
        ]

    def _old_fences(self, older_than_secs: float, queue: str | None) -> list[int]:
        cutoff = self.clock() - timedelta(seconds=older_than_secs)
        return [i for i, f in enumerate(self._fences) if f[3] <= cutoff and queue in (None, f[1])]

    def task_prune(self, older_than_secs: float, limit: int, queue: str | None = None) -> int:
        with self._lock:
            doomed = self._old_done(older_than_secs, queue)[: max(limit, 0)]
            for task_id in doomed:
                del self._tasks[task_id]
            return len(doomed)

    def fenced_prune(self, older_than_secs: float, limit: int, queue: str | None = None) -> int:
        with self._lock:
            doomed = set(self._old_fences(older_than_secs, queue)[: max(limit, 0)])
            self._fences = [f for i, f in enumerate(self._fences) if i not in doomed]
            return len(doomed)

    def prunable(self, older_than_secs: float, queue: str | None = None) -> v.Pruned:
        with self._lock:
            return v.Pruned(
                tasks=len(self._old_done(older_than_secs, queue)),
                fenced=len(self._old_fences(older_than_secs, queue)),
            )

    def wait_for_work(self, queues: Sequence[str], timeout: float) -> bool:
        with self._wakeup:
            return self._wakeup.wait(timeout)
