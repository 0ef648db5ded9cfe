"""MemoryStore: the Store semantics in pure Python, thread-safe, with an injectable clock.

It mirrors the SQL stores operation by operation; ``rivet.conformance`` is the proof. The tasks
and the writes of an attempt (claim, heartbeat, settle, cancel) are ``rivet.stores.memoryleases``;
here are enqueue, the reads, dead letters and retention, and the clock tests move by hand.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import ClassVar

from rivet import values as v
from rivet.errors import IdempotencyMismatch
from rivet.stores.jsontext import json_copy
from rivet.stores.memoryleases import MemoryLeases, claim_rank, doom_ending, is_doomed


class FakeClock:
    """A clock for tests: starts at a fixed instant and moves only when told."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, secs: float) -> None:
        self.now += timedelta(seconds=secs)


class MemoryStore(MemoryLeases):
    """Tasks in a dict under one lock. Good for unit tests and the testing fake."""

    name = "memory"
    _shared: ClassVar[MemoryStore | None] = None

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
            trace_context=json_copy(spec.trace_context),
        )
        self._ranks[task_id] = claim_rank(visible, spec.priority)
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
                lease_epoch=task.lease_epoch + 1,  # a new life: the old lease's writes fenced
                last_error="",
                lease_owner=None,
                visible_at=now,
                updated_at=now,
                cancel_requested=False,
            )
            self._ranks[task_id] = claim_rank(now, task.priority)
            self._wakeup.notify_all()
            return True

    def dead_sweep(self, queue: str) -> int:
        with self._lock:
            now = self.clock()
            exhausted = [
                t
                for t in self._tasks.values()
                if t.queue == queue
                and t.state == "pending"
                and t.visible_at <= now
                and is_doomed(t)
            ]
            for task in exhausted:
                self._bury(task, doom_ending(task), now)
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
                self._ranks.pop(task_id, None)
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
                self._ranks.pop(task_id, None)
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
