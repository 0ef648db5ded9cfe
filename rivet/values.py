"""Frozen value types passed between the job API, the worker and the stores."""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar, TypeVar

from django.db import models

#: The four endings of a dead task's last_error (docs/guarantees.md, "state machine").
HANDLER_ERROR_SUFFIX = "max attempts exceeded (handler error)"
WORKER_LOST_SUFFIX = "max attempts exceeded (no ack, worker lost)"
PERMANENT_SUFFIX = "permanent failure (retrying cannot help)"
CANCELLED_SUFFIX = "cancelled by an operator"


#: Between the earlier reason and the fixed suffix of a burial's last_error.
ENDING_SEPARATOR = "; "


def ending(previous: str, suffix: str) -> str:
    """last_error for a burial: the earlier reason, if any, then the fixed suffix."""
    return f"{previous}{ENDING_SEPARATOR}{suffix}" if previous else suffix


def claim_burial(last_error: str, cancel_requested: bool) -> str:
    """last_error of a task a claim (or a sweep) buries: cancelled, else its worker was lost."""
    return ending(last_error, CANCELLED_SUFFIX if cancel_requested else WORKER_LOST_SUFFIX)


def error_at(at: datetime) -> str:
    """``at`` of an errors entry: ISO 8601 in UTC, always six fraction digits and ``+00:00``.

    Every store writes exactly this shape (``2026-01-01T00:00:00.000000+00:00``); SQLite's
    clock resolves milliseconds, so its last three digits are zeros.
    """
    return at.astimezone(UTC).isoformat(timespec="microseconds")


#: Priorities are -100..100 (rivet.validation); a row written by other means is clamped.
PRIORITY_BOUND = 100


def rank_offset_secs(priority: int, aging_secs: float) -> float:
    """Priority aging: how many seconds a task's claim rank lies from the time it became
    runnable (negative: it ranks as if ready that much earlier). A claim orders by the rank, so
    a task of priority p passes tasks of priority p - k that became ready less than
    k x ``aging_secs`` seconds before it. The rule of the memory and SQLite stores;
    PostgreSQL's ``rivet_claim_rank`` function (migration 0016) is the same on the server."""
    return -max(-PRIORITY_BOUND, min(PRIORITY_BOUND, priority)) * aging_secs


def history_entry(attempt: int, at: datetime, error: str) -> dict[str, Any]:
    """One entry of a task's errors list: the attempt, when it ended (``error_at``), why."""
    return {"attempt": attempt, "at": error_at(at), "error": error}


class TaskState(models.TextChoices):
    PENDING = "pending", "pending"
    """Waiting to run, or running under a lease (visible_at in the future)."""
    DONE = "done", "done"
    """Acked by the worker that held the current lease."""
    DEAD = "dead", "dead"
    """Attempts used up; kept in the dead-letter queue until requeued or purged."""


class Settled(enum.Enum):
    """What a store did with one settle decision."""

    ACKED = "acked"
    """The task is done."""
    RETRIED = "retried"
    """The task is pending again, visible after the retry delay."""
    BURIED = "buried"
    """The task is dead, with the last_error the decision carried."""
    FENCED = "fenced"
    """The lease was lost (another claim bumped the epoch); nothing changed, a fence is recorded."""
    CANCELLED = "cancelled"
    """An operator cancelled the task while it was leased: buried as cancelled, never acked."""


class CancelOutcome(enum.Enum):
    """What ``task_cancel`` did."""

    CANCELLED = "cancelled"
    """The task was pending and not leased: it is dead now, its last_error says cancelled."""
    MARKED = "marked"
    """The task is leased: its worker stops the handler at the next heartbeat and buries it."""
    FINISHED = "finished"
    """The task is already done or dead; nothing changed."""
    NOT_FOUND = "not_found"
    """No task has that id."""


@dataclass(frozen=True, kw_only=True)
class TaskSpec:
    """One task to enqueue, already validated; ``payload_json`` is the payload's one encoding."""

    queue: str
    kind: str
    payload: Any = None
    payload_json: str = ""
    idem_key: str | None = None
    unique_key: str | None = None
    delay_secs: float = 0.0
    run_at: datetime | None = None
    priority: int = 0
    max_attempts: int = 3
    #: The producer's W3C trace context (``traceparent``, ``tracestate``), or None (rivet.tracing).
    trace_context: dict[str, str] | None = None

    def __post_init__(self) -> None:
        if not self.payload_json:  # built by hand, not by rivet.validation.build_spec
            object.__setattr__(self, "payload_json", json.dumps(self.payload))

    @property
    def payload_param(self) -> str | None:
        """The payload as stored: JSON text, or None (SQL NULL) for a None payload."""
        return None if self.payload_json == "null" else self.payload_json


@dataclass(frozen=True, kw_only=True)
class EnqueueResult:
    """What an enqueue did: a new task, or the existing one for a key used before."""

    task_id: int
    """The task's id, numbered by the database that holds it (``get_task(task_id)``)."""
    duplicate: bool = False
    """True when the idempotency key already named this work: nothing new was written, and
    ``task_id`` is the task the key named first."""


_T = TypeVar("_T")


def frozen_instance(cls: type[_T], **fields: Any) -> _T:
    """An instance of the frozen dataclass ``cls`` with ``fields``, which must name every field.

    What its ``__init__`` makes (equal, same repr, same hash), without the
    ``object.__setattr__`` per field a frozen dataclass's ``__init__`` calls: a worker makes a
    ``Claimed`` and a ``JobContext`` per task, and an ``enqueue_many`` a ``TaskSpec`` per item,
    so the per-field calls are per-task cost (docs/decisions/0005-worker-python-per-task.md).
    For classes with no ``__slots__``, no field made by a default factory that is not given,
    and no ``__post_init__`` the given fields need (TaskSpec's encodes a ``payload_json`` not
    given; ``rivet.validation.build_spec`` gives it); ``tests/unit/test_values.py`` checks the
    users.
    """
    instance = object.__new__(cls)
    instance.__dict__.update(fields)
    return instance


@dataclass(frozen=True, kw_only=True)
class Lease:
    """Proof of a claim: the task, the epoch the claim got, and the owner that holds it."""

    task_id: int
    epoch: int
    owner: str = ""


class Held(set[int]):
    """The task ids a heartbeat found still leased; ``cancelled`` are those an operator marked."""

    def __init__(self, held: Iterable[int] = (), cancelled: Iterable[int] = ()) -> None:
        super().__init__(held)
        self.cancelled = frozenset(cancelled) & self


@dataclass(frozen=True, kw_only=True)
class Ack:
    """Decision: the attempt succeeded; mark the task done with ``result``."""

    lease: Lease
    result: Any = None
    op: ClassVar[str] = "ack"

    @property
    def cancelled_error(self) -> str:
        """last_error when the task turns out cancelled at settle: buried as cancelled."""
        return CANCELLED_SUFFIX


@dataclass(frozen=True, kw_only=True)
class Retry:
    """Decision: the attempt failed and attempts remain; run it again after ``delay`` seconds."""

    lease: Lease
    error: str
    delay: float = 0.0
    op: ClassVar[str] = "fail"

    @property
    def cancelled_error(self) -> str:
        """last_error when the task turns out cancelled at settle: buried as cancelled."""
        return CANCELLED_SUFFIX


@dataclass(frozen=True, kw_only=True)
class Bury:
    """Decision: the task is dead; ``error`` is its whole last_error (see ``ending``)."""

    lease: Lease
    error: str
    op: ClassVar[str] = "fail"

    @property
    def cancelled_error(self) -> str:
        """A burial stays as decided when the task turns out cancelled: its reason is kept."""
        return self.error


@dataclass(frozen=True, kw_only=True)
class Fence:
    """Decision: the lease is known lost; change nothing, record the refused ``op`` durably."""

    lease: Lease
    op: str = "fail"


Decision = Ack | Retry | Bury | Fence


@dataclass(frozen=True, kw_only=True)
class Claimed:
    """A task handed to a worker under a lease."""

    task_id: int
    queue: str
    kind: str
    payload: Any
    idem_key: str | None
    attempt: int
    max_attempts: int
    epoch: int
    owner: str
    priority: int = 0
    #: The producer's W3C trace context, the parent of the attempt's span (rivet.tracing).
    trace_context: dict[str, str] | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any], owner: str) -> Claimed:
        """The task a claim leased, from its row (columns named as in rivet_task).

        Made with ``frozen_instance`` (a worker makes one per task): every field is given.
        """
        return frozen_instance(
            cls,
            task_id=row["id"],
            queue=row["queue"],
            kind=row["kind"],
            payload=row["payload"],
            idem_key=row["idem_key"],
            attempt=row["attempts"],
            max_attempts=row["max_attempts"],
            epoch=row["lease_epoch"],
            owner=owner,
            priority=row["priority"],
            trace_context=row.get("trace_context"),
        )

    @property
    def lease(self) -> Lease:
        """Built once: a worker reads it several times per task (its dicts are keyed by it).

        Kept in the instance's own dict, as ``functools.cached_property`` keeps it, without
        the lock Python 3.11's takes on every first read (gone in 3.12): two threads that race
        to the first read make two equal leases, which is harmless.
        """
        lease = self.__dict__.get("_lease")
        if lease is None:
            lease = self.__dict__["_lease"] = frozen_instance(
                Lease, task_id=self.task_id, epoch=self.epoch, owner=self.owner
            )
        return lease

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts


@dataclass(frozen=True, kw_only=True)
class TaskRecord:
    """A snapshot of one task row, as ``rivet.get_task`` reads it."""

    id: int
    """The task's id, numbered by the database that holds it."""
    queue: str
    """The queue it waits in."""
    kind: str
    """The job kind (the registered wire name) that runs it."""
    payload: Any
    """The JSON value given at enqueue (None when none was given)."""
    idem_key: str | None
    """The producer's idempotency key, or None."""
    unique_key: str | None
    """The key that keeps a second pending task of the same kind out, or None."""
    state: str
    """``pending`` (waiting, or running under a lease), ``done`` or ``dead``."""
    attempts: int
    """Attempts started so far (a claim counts one)."""
    max_attempts: int
    """Attempts allowed before the task is dead."""
    lease_epoch: int
    """Bumped by every claim: a worker's writes count only under the epoch it claimed."""
    lease_owner: str | None
    """The worker that claimed it last (``host:pid``), or None before any claim."""
    visible_at: datetime
    """When a pending task may be claimed (the end of its delay, retry wait or lease)."""
    priority: int
    """-100..100: a higher priority is claimed first among the runnable tasks of its queue."""
    created_at: datetime
    """When it was enqueued."""
    updated_at: datetime
    """When the row last changed."""
    last_error: str
    """Why the latest failed attempt failed ("" if none, cleared by a requeue)."""
    result: Any = None
    """What the handler returned (JSON), for a done task; None otherwise."""
    cancel_requested: bool = False
    """An operator cancelled it while it ran: its worker buries it at the next heartbeat."""
    errors: list[dict[str, Any]] = field(default_factory=list)
    """The failed attempts of the task's whole life, oldest first: each a dict of ``attempt``,
    ``at`` (ISO 8601, UTC) and ``error``; a requeue keeps them."""
    trace_context: dict[str, str] | None = None
    """The producer's W3C trace context (``traceparent``, ``tracestate``), or None."""
    settled_epoch: int | None = None
    """The lease epoch of the last decision (ack, retry, burial) applied to it; None: none yet."""
    settled_by: str | None = None
    """The worker whose decision that was; None: none yet."""


#: A queue's done tasks are counted up to this many; past it a store may give the database's
#: estimate instead (``QueueStats.done_estimated``): done is the count that grows without end.
DONE_COUNT_LIMIT = 10_000


@dataclass(frozen=True, kw_only=True)
class QueueStats:
    """Counts for one queue, as the database sees them now (``Store.queue_overview``)."""

    queue: str
    ready: int = 0
    leased: int = 0
    delayed: int = 0
    done: int = 0
    dead: int = 0
    oldest_ready_age_secs: float | None = None
    fenced: int = 0
    #: True when ``done`` is past DONE_COUNT_LIMIT and the database's estimate, not a count.
    done_estimated: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "ready": self.ready,
            "leased": self.leased,
            "delayed": self.delayed,
            "done": self.done,
            "dead": self.dead,
            "oldest_ready_age_secs": self.oldest_ready_age_secs,
            "fenced": self.fenced,
            "done_estimated": self.done_estimated,
        }

    @property
    def done_text(self) -> str:
        """done as a person reads it: ``~1 234 567`` when it is an estimate."""
        return f"~{self.done:,}".replace(",", " ") if self.done_estimated else str(self.done)

    @property
    def oldest_ready_age(self) -> str:
        return format_age(self.oldest_ready_age_secs)


def format_age(secs: float | None) -> str:
    """An age as an operator reads it: '-', '4.2s', '3m 5s', '2h 10m', '3d 4h'."""
    if secs is None:
        return "-"
    secs = max(secs, 0.0)
    if secs < 60:
        return f"{secs:.1f}s"
    whole = int(secs)
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60)):
        if whole >= size:
            return f"{whole // size}{unit} {whole % size // sub_size}{sub}"
    return f"{whole // 60}m {whole % 60}s"


@dataclass(frozen=True, kw_only=True)
class ClaimBatch:
    """The tasks a claim leased, and how many exhausted tasks it buried on the way."""

    claimed: list[Claimed] = field(default_factory=list)
    buried: int = 0


@dataclass(frozen=True, kw_only=True)
class Flushed:
    """What one ``task_settle_and_claim`` did: the decisions' outcomes, in order, and the claim."""

    settled: list[Settled] = field(default_factory=list)
    batch: ClaimBatch = field(default_factory=ClaimBatch)


@dataclass(frozen=True, kw_only=True)
class Pruned:
    """Rows a retention prune deleted (or, in a dry run, would delete)."""

    tasks: int = 0
    fenced: int = 0
