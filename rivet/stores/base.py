"""The Store interface: every operation the job API and the worker need from a queue database.

Rules every implementation keeps (``rivet.conformance`` checks each one):

- Three states: pending, done, dead. A claimed task is pending with visible_at in the future.
- Every timestamp (visible_at, created_at, updated_at) comes from the store's own clock: the
  database server's ``now()`` for SQL stores, the injected clock for the memory store.
- last_error is the current life's: a retry or burial sets it, an ack or a requeue clears it.
  Every retry and burial also appends {attempt, at (the store's clock), error} to the task's
  errors list, keeping the newest RIVET['MAX_ERRORS_KEPT']; a requeue keeps the list.
- A claim increments attempts and lease_epoch and sets visible_at = now + lease_ttl. A claim
  that meets a pending task whose attempts are used up buries it instead, with last_error
  ending in WORKER_LOST_SUFFIX.
- The store decides nothing about how an attempt ends: the worker does, from the attempt it
  claimed, and hands ``task_settle`` decisions (Ack, Retry, Bury, Fence), many at a time.
  Each row is guarded by its own epoch; a stale row changes nothing, is recorded durably as
  a fenced write and reported as FENCED, and the other rows of the batch still apply.
  ``task_settle_and_claim`` settles a batch and claims the next tasks together (on PostgreSQL
  in one statement); nothing of a batch is applied unless all of it is.
- Retention deletes only done tasks (``task_prune``) and fenced-write records
  (``fenced_prune``) last written ``older_than_secs`` ago or earlier, at most ``limit`` rows
  per call, each call one short statement. Deleting a done task releases its keys.
- A task an operator cancelled while leased (``task_cancel``) is never acked or retried:
  whatever decision its worker sends, it is buried as cancelled (CANCELLED).
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from rivet import values as v
from rivet.errors import StoreError


class ClaimFailed(StoreError):
    """A flush's decisions were committed, then its claim failed (the driver error is the
    __cause__); ``settled`` holds the committed decisions' outcomes, in the order given."""

    def __init__(self, message: str, *, settled: list[v.Settled]) -> None:
        super().__init__(message)
        self.settled = settled


class Waiting(enum.Enum):
    """Where a worker stands that relies on wake-ups for its queues (``Store.wait_for_wakeups``)."""

    #: Every enqueue on the queues wakes it from now on, and every earlier one is visible to
    #: its next claim; nothing to do (or the store notifies every enqueue).
    WAITING = "waiting"
    #: Waiting from now on: claim once more before sleeping, for what was enqueued before.
    STARTED = "started"
    #: An enqueue that did not notify may not have ended yet: claim again shortly, then ask
    #: again.
    NOT_YET = "not yet"


class Store(ABC):
    """A queue database. Methods are entity-then-verb; each is one atomic operation."""

    #: Short name used in test ids and logs: "memory", "sqlite", "postgres".
    name: str = ""
    #: True when an enqueue joins the caller's transaction.atomic() on the Django connection.
    joins_django_transaction: bool = False
    #: True when idle workers can sleep on a wake-up (LISTEN) instead of polling.
    supports_wakeup: bool = False
    #: True when ``task_enqueue_many`` may be given ``rivet.producer.SpecBatch`` itself, read
    #: while writing (an item it cannot validate raises inside the store's transaction); False:
    #: the producer hands it the list, validated whole before the call.
    streams_bulk: bool = False
    #: The Django database alias that holds the store's rows (None: a store without one).
    using: str | None = None

    @abstractmethod
    def task_enqueue(self, spec: v.TaskSpec) -> v.EnqueueResult:
        """Insert a task, or return the existing one for a key used before with the same work."""

    @abstractmethod
    def task_enqueue_many(self, specs: Sequence[v.TaskSpec]) -> list[v.EnqueueResult]:
        """Enqueue several tasks in one transaction; results are in the order given."""

    @abstractmethod
    def task_claim(
        self, *, queues: Sequence[str], owner: str, limit: int, lease_ttl: float
    ) -> v.ClaimBatch:
        """Lease up to ``limit`` runnable tasks, trying queues in the order given.

        Within a queue, in claim order (priority aging): the lowest claim rank first, the time
        the task became runnable less priority x ``RIVET['PRIORITY_AGING_SECS']`` (written when
        it became runnable: enqueue, retry, requeue; kept through a lapsed lease), then the
        lowest id. ``rivet.conformance.aging`` checks it.
        """

    @abstractmethod
    def lease_extend(self, leases: Sequence[v.Lease], lease_ttl: float) -> v.Held:
        """Push visible_at to now + lease_ttl for each lease still held; return their task ids."""

    @abstractmethod
    def task_settle(self, decisions: Sequence[v.Decision]) -> list[v.Settled]:
        """Apply decisions in one transaction, each fenced by its own epoch; outcomes in order."""

    @abstractmethod
    def task_settle_and_claim(
        self,
        decisions: Sequence[v.Decision],
        *,
        queues: Sequence[str],
        owner: str,
        limit: int,
        lease_ttl: float,
    ) -> v.Flushed:
        """Settle ``decisions``, then lease up to ``limit`` tasks; a store may do both at once.

        The worker's hot path: one call per flush. The decisions are applied exactly as
        ``task_settle`` applies them; when that fails nothing was applied and the error is
        raised. The claim never leases a task the decisions name (the next claim may). A
        claim that fails raises; when the decisions were committed before it failed, the
        error is ClaimFailed, which carries their outcomes.
        """

    @abstractmethod
    def task_cancel(self, task_id: int) -> v.CancelOutcome:
        """Bury a pending task that is not leased, or mark a leased one for its worker to bury."""

    def task_ack(self, lease: v.Lease, result: Any = None) -> v.Settled:
        """Mark the task done with its result, if the lease is still held."""
        return self.task_settle([v.Ack(lease=lease, result=result)])[0]

    def task_retry(self, lease: v.Lease, error: str, delay: float = 0.0) -> v.Settled:
        """Make the task pending again after ``delay`` seconds, if the lease is still held."""
        return self.task_settle([v.Retry(lease=lease, error=error, delay=delay)])[0]

    def task_bury(self, lease: v.Lease, error: str) -> v.Settled:
        """Make the task dead with ``error`` as its last_error, if the lease is still held."""
        return self.task_settle([v.Bury(lease=lease, error=error)])[0]

    def task_fence(self, lease: v.Lease, op: str = "fail") -> v.Settled:
        """Record that a write under a lost lease was refused; changes no task."""
        return self.task_settle([v.Fence(lease=lease, op=op)])[0]

    @abstractmethod
    def task_get(self, task_id: int) -> v.TaskRecord | None:
        """One task by id, or None."""

    @abstractmethod
    def task_list(
        self, *, queue: str | None = None, state: str | None = None, limit: int = 100
    ) -> list[v.TaskRecord]:
        """Tasks filtered by queue and state, oldest id first."""

    @abstractmethod
    def queue_overview(self, queues: Sequence[str] | None = None) -> list[v.QueueStats]:
        """Counts of each of ``queues`` (zeros for an empty one), or of every queue that holds
        a task or a fenced write; in queue order. Cheap on a big table: done is counted up to
        DONE_COUNT_LIMIT, past it a store may answer the database's estimate (done_estimated)."""

    def queue_stats(self, queue: str) -> v.QueueStats:
        """Ready, leased, delayed, done, dead, oldest-ready age and fenced writes for a queue."""
        return self.queue_overview([queue])[0]

    @abstractmethod
    def dead_requeue(self, queue: str, task_id: int) -> bool:
        """Make a dead task pending again with fresh attempts; keeps its idempotency key."""

    @abstractmethod
    def dead_sweep(self, queue: str) -> int:
        """Bury pending tasks whose attempts are used up and whose lease lapsed; return count."""

    def dead_purge(
        self,
        queue: str,
        *,
        older_than_secs: float | None = None,
        task_ids: Sequence[int] | None = None,
    ) -> int:
        """Delete dead tasks of a queue (only ``task_ids`` if given), releasing their keys."""
        older_than = None if older_than_secs is None else float(older_than_secs)
        ids = None if task_ids is None else [int(task_id) for task_id in task_ids]
        return self._purge_dead(queue, older_than, ids)

    @abstractmethod
    def _purge_dead(self, queue: str, older_than: float | None, ids: list[int] | None) -> int:
        """dead_purge with its arguments checked: seconds as a float, ids as a list."""

    @abstractmethod
    def task_prune(self, older_than_secs: float, limit: int, queue: str | None = None) -> int:
        """Delete up to ``limit`` done tasks last updated ``older_than_secs`` ago or earlier."""

    @abstractmethod
    def fenced_prune(self, older_than_secs: float, limit: int, queue: str | None = None) -> int:
        """Delete up to ``limit`` fenced-write records written ``older_than_secs`` ago or more."""

    @abstractmethod
    def prunable(self, older_than_secs: float, queue: str | None = None) -> v.Pruned:
        """How many done tasks and fenced-write records a prune would delete now."""

    @abstractmethod
    def fenced_count(self, queue: str | None = None, op: str | None = None) -> int:
        """How many fenced writes were recorded, for one queue or all."""

    def dead_list(self, queue: str, limit: int = 100) -> list[v.TaskRecord]:
        """Dead tasks of a queue, oldest first."""
        return self.task_list(queue=queue, state="dead", limit=limit)

    def wait_for_work(self, queues: Sequence[str], timeout: float) -> bool:
        """Block up to ``timeout`` seconds for an enqueue signal; False when none came."""
        return False

    def wait_for_wakeups(self, queues: Sequence[str], waiting: bool) -> Waiting:
        """A worker's loop says whether it relies on wake-ups for ``queues`` (``waiting``: its
        last claim found fewer tasks than it asked for) or has work (False). A store whose
        enqueues wake only waiting workers (PostgreSQL's) registers it and says when its next
        claim sees every enqueue that did not notify; the others notify every enqueue, or
        none, and answer WAITING."""
        return Waiting.WAITING

    def server_warnings(self) -> list[tuple[str, str]]:
        """(event, note) pairs about the database server that a worker should log at start:
        settings under which the queue degrades (none by default)."""
        return []

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections the store opened itself."""
