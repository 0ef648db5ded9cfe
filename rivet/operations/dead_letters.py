"""The dead letters: requeue a task, purge a task or a queue's, sweep a queue into them.

Each action looks its task up first (``not_found``, ``not_dead``), then calls the store. When
the store changes nothing although the task was dead at the lookup, the task is read again to
say why: it left the dead letters meanwhile (requeued, purged, or revived by another operator:
``not_dead``), or, for a requeue, a pending task of the same unique job holds its unique key
(``not_requeued``). The notes shown beside these actions live here too.
"""

from __future__ import annotations

from rivet.operations.outcome import (
    FOUND,
    NOT_REQUEUED,
    PURGED,
    REQUEUED,
    SWEPT,
    Outcome,
    find_dead,
    left_meanwhile,
)
from rivet.stores.base import Store
from rivet.values import TaskRecord, TaskState

__all__ = [
    "NO_KEY_NOTE",
    "PURGE_CAVEAT",
    "REQUEUE_NOTE",
    "SWEEP_NOTE",
    "purge",
    "purge_queue",
    "purge_record",
    "purge_scope",
    "requeue",
    "requeue_record",
    "sweep",
]

REQUEUE_NOTE = (
    "A requeued task keeps its idempotency key. If its effect already happened, the new "
    "attempt gets a replay of the first answer: the effect does not happen a second time."
)
NO_KEY_NOTE = "It has no idempotency key, so its handler's effect is not protected."
PURGE_CAVEAT = (
    "A purge deletes the rows, so it releases their idempotency keys. Purge only tasks older "
    "than the dedup retention of the effect service; sooner, the same key can make a second "
    "effect."
)
SWEEP_NOTE = (
    "A sweep buries the pending tasks of the queue whose attempts are used up and whose lease "
    "lapsed, as the next claim would. It is needed only when no worker polls the queue."
)


def requeue(store: Store, task_id: int, *, queue: str | None = None) -> Outcome:
    """Make a dead task pending again with fresh attempts; it keeps its idempotency key.

    :param queue: when given, a task of another queue is ``not_found``.
    :returns: ``requeued``; or ``not_found``, ``not_dead`` (also when it left the dead letters
        meanwhile), ``not_requeued`` (a pending task of the same unique job holds its key).
    """
    found = find_dead(store, task_id, queue=queue)
    if found.code != FOUND or found.task is None:
        return found
    return requeue_record(store, found.task)


def requeue_record(store: Store, task: TaskRecord) -> Outcome:
    """Requeue ``task``, a dead task as it was looked up (it may have changed since)."""
    if store.dead_requeue(task.queue, task.id):
        key = f" (idempotency key {task.idem_key!r})" if task.idem_key else ""
        note = REQUEUE_NOTE if task.idem_key else NO_KEY_NOTE
        message = f"requeued task {task.id} with fresh attempts{key}. {note}"
        return Outcome(code=REQUEUED, message=message, task=task)
    now = store.task_get(task.id)
    if now is None or now.state != TaskState.DEAD or task.unique_key is None:
        return left_meanwhile(store, task)
    return Outcome(
        code=NOT_REQUEUED,
        message=(
            f"task {task.id} was not requeued: a pending task of kind {task.kind!r} holds its "
            f"unique key {task.unique_key!r}"
        ),
        task=task,
    )


def purge(store: Store, task_id: int, *, queue: str | None = None) -> Outcome:
    """Delete one dead task, releasing its idempotency key (see PURGE_CAVEAT).

    :returns: ``purged``; or ``not_found``, ``not_dead`` (also when it left the dead letters
        meanwhile).
    """
    found = find_dead(store, task_id, queue=queue)
    if found.code != FOUND or found.task is None:
        return found
    return purge_record(store, found.task)


def purge_record(store: Store, task: TaskRecord) -> Outcome:
    """Purge ``task``, a dead task as it was looked up (it may have changed since)."""
    if not store.dead_purge(task.queue, task_ids=[task.id]):
        return left_meanwhile(store, task)
    key = f", releasing its idempotency key {task.idem_key!r}" if task.idem_key else ""
    return Outcome(code=PURGED, message=f"purged task {task.id}{key}", task=task)


def purge_scope(queue: str, older_than_secs: float | None = None) -> str:
    """The tasks a purge of a queue deletes, in words (its prompt and its report say them)."""
    age = "" if older_than_secs is None else f" dead for at least {older_than_secs:g}s"
    return f"dead tasks of queue {queue}{age}"


def purge_queue(store: Store, queue: str, *, older_than_secs: float | None = None) -> Outcome:
    """Delete the dead tasks of ``queue`` (those dead for at least ``older_than_secs``)."""
    count = store.dead_purge(queue, older_than_secs=older_than_secs)
    message = f"purged {count} {purge_scope(queue, older_than_secs)}"
    return Outcome(code=PURGED, message=message, count=count)


def sweep(store: Store, queue: str) -> Outcome:
    """Bury the pending tasks of ``queue`` whose attempts are used up and whose lease lapsed
    (see SWEEP_NOTE)."""
    count = store.dead_sweep(queue)
    message = f"swept {count} task(s) of queue {queue} with no attempts left into the dead letters"
    return Outcome(code=SWEPT, message=message, count=count)
