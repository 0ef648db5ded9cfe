"""What an operation did, or why it did nothing: a machine code and one message for people.

Every refusal has its one wording here; the admin, ``rivet_dlq`` and the HTTP API show it
as it is. The lookups every operation starts with live here too: a task that does not exist
(or is not in the queue the caller named) is ``not_found``, one that is not dead, for an
action on the dead letters, is ``not_dead``.
"""

from __future__ import annotations

from dataclasses import dataclass

from rivet.stores.base import Store
from rivet.values import CancelOutcome, TaskRecord, TaskState

__all__ = [
    "CANCELLED",
    "DONE",
    "FOUND",
    "MARKED",
    "NOTHING_TO_CANCEL",
    "NOT_DEAD",
    "NOT_FOUND",
    "NOT_REQUEUED",
    "PURGED",
    "REFUSALS",
    "REQUEUED",
    "SWEPT",
    "Outcome",
    "find",
    "find_dead",
    "left_meanwhile",
    "no_task",
    "not_dead",
    "not_found",
]

# What an operation did.
FOUND = "found"
REQUEUED = "requeued"
PURGED = "purged"
SWEPT = "swept"
CANCELLED = "cancelled"
MARKED = "marked"
DONE = frozenset({FOUND, REQUEUED, PURGED, SWEPT, CANCELLED, MARKED})

# Why it did nothing.
NOT_FOUND = "not_found"
"""No task has the id (in the queue named, when one was)."""
NOT_DEAD = "not_dead"
"""The task is not in the dead letters: it never was, or it left them meanwhile."""
NOT_REQUEUED = "not_requeued"
"""The task is dead, but a pending task of the same unique job holds its unique key."""
NOTHING_TO_CANCEL = "nothing_to_cancel"
"""The task is done or dead already: there is nothing to cancel."""
REFUSALS = frozenset({NOT_FOUND, NOT_DEAD, NOT_REQUEUED, NOTHING_TO_CANCEL})


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What one operation did (``ok``), or why it did nothing."""

    code: str
    """For programs: one of DONE, or one of REFUSALS."""
    message: str
    """For people: the one wording every surface shows."""
    task: TaskRecord | None = None
    """The task as the operation found it before it acted (None when there was none)."""
    count: int | None = None
    """For an operation on a queue (sweep, purge of a queue): how many tasks it changed."""
    cancel: CancelOutcome | None = None
    """For a cancel: what the store said (``rivet.cancel`` answers the same)."""

    def __post_init__(self) -> None:
        if self.code not in DONE | REFUSALS:
            raise ValueError(f"unknown outcome code {self.code!r}")

    @property
    def ok(self) -> bool:
        """Whether the operation did what was asked (False: refused, nothing changed)."""
        return self.code in DONE


def no_task(task_id: int | str, queue: str | None = None) -> str:
    """The one wording of ``not_found``: no task has that id (in that queue)."""
    where = "" if queue is None else f" in queue {queue}"
    return f"no task with id {task_id}{where}"


def not_found(task_id: int | str, queue: str | None = None) -> Outcome:
    return Outcome(code=NOT_FOUND, message=no_task(task_id, queue))


def find(store: Store, task_id: int, *, queue: str | None = None) -> Outcome:
    """The task (``found``), or ``not_found`` when no task has the id, or it is in another
    queue than ``queue`` (when given)."""
    task = store.task_get(task_id)
    if task is None or (queue is not None and task.queue != queue):
        return not_found(task_id, queue)
    return Outcome(code=FOUND, message=f"task {task_id} is {task.state}", task=task)


def not_dead(task: TaskRecord) -> Outcome:
    """The one wording of a task that is not in the dead letters when it is looked up."""
    return Outcome(
        code=NOT_DEAD, message=f"task {task.id} is {task.state}, not in the dead letters", task=task
    )


def find_dead(store: Store, task_id: int, *, queue: str | None = None) -> Outcome:
    """The task if it is dead (``found``); else ``not_found`` or ``not_dead``."""
    found = find(store, task_id, queue=queue)
    if found.task is not None and found.task.state != TaskState.DEAD:
        return not_dead(found.task)
    return found


def left_meanwhile(store: Store, task: TaskRecord) -> Outcome:
    """The race: ``task`` was dead when looked up and is not now (``not_dead``), read again."""
    now = store.task_get(task.id)
    state = "it was purged" if now is None else f"it is {now.state} now"
    message = f"task {task.id} left the dead letters meanwhile ({state})"
    return Outcome(code=NOT_DEAD, message=message, task=task)
