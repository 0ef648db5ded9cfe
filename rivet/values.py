"""Frozen value types passed between the job API, the worker and the stores."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import models

HANDLER_ERROR_SUFFIX = "max attempts exceeded (handler error)"
WORKER_LOST_SUFFIX = "max attempts exceeded (no ack, worker lost)"


def join_error(previous: str, suffix: str) -> str:
    """last_error for a burial: the earlier reason, if any, then the fixed suffix."""
    return f"{previous}; {suffix}" if previous else suffix


class TaskState(models.TextChoices):
    PENDING = "pending", "pending"
    """Waiting to run, or running under a lease (visible_at in the future)."""
    DONE = "done", "done"
    """Acked by the worker that held the current lease."""
    DEAD = "dead", "dead"
    """Attempts used up; kept in the dead-letter queue until requeued or purged."""


class AckOutcome(enum.Enum):
    ACKED = "acked"
    """The task is done."""
    FENCED = "fenced"
    """The lease was lost (another claim bumped the epoch); nothing changed."""


class FailOutcome(enum.Enum):
    RETRY = "retry"
    """The task is pending again, visible after the retry delay."""
    DEAD = "dead"
    """That was the last attempt; the task is buried."""
    FENCED = "fenced"
    """The lease was lost; nothing changed."""


@dataclass(frozen=True, kw_only=True)
class TaskSpec:
    """One task to enqueue, already validated."""

    queue: str
    kind: str
    payload: Any = None
    idem_key: str | None = None
    unique_key: str | None = None
    delay_secs: float = 0.0
    run_at: datetime | None = None
    priority: int = 0
    max_attempts: int = 3


@dataclass(frozen=True, kw_only=True)
class EnqueueResult:
    """What an enqueue did: a new task, or the existing one for a key used before."""

    task_id: int
    duplicate: bool = False


@dataclass(frozen=True, kw_only=True)
class Lease:
    """Proof of a claim: the task and the epoch the claim got."""

    task_id: int
    epoch: int


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

    @property
    def lease(self) -> Lease:
        return Lease(task_id=self.task_id, epoch=self.epoch)

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts


@dataclass(frozen=True, kw_only=True)
class TaskRecord:
    """A snapshot of one task row."""

    id: int
    queue: str
    kind: str
    payload: Any
    idem_key: str | None
    unique_key: str | None
    state: str
    attempts: int
    max_attempts: int
    lease_epoch: int
    lease_owner: str | None
    visible_at: datetime
    priority: int
    created_at: datetime
    updated_at: datetime
    last_error: str
    result: Any = None


@dataclass(frozen=True, kw_only=True)
class QueueStats:
    """Counts for one queue, as the database sees them now."""

    queue: str
    ready: int = 0
    leased: int = 0
    delayed: int = 0
    done: int = 0
    dead: int = 0
    oldest_ready_age_secs: float | None = None
    fenced: int = 0

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
        }


@dataclass(frozen=True, kw_only=True)
class ClaimBatch:
    """The tasks a claim leased, and how many exhausted tasks it buried on the way."""

    claimed: list[Claimed] = field(default_factory=list)
    buried: int = 0
