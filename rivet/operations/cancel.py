"""Cancel a task: bury it now if it is not running, else mark it for its worker to bury.

As ``rivet.cancel`` does, with a lookup first (``not_found``) and a refusal for a task that is
done or dead already (``nothing_to_cancel``); the notes shown beside a cancel live here.
"""

from __future__ import annotations

from rivet.operations.outcome import (
    CANCELLED,
    FOUND,
    MARKED,
    NOTHING_TO_CANCEL,
    Outcome,
    find,
    not_found,
)
from rivet.stores.base import Store
from rivet.values import CANCELLED_SUFFIX, CancelOutcome, TaskRecord, TaskState

__all__ = ["CANCEL_NOTE", "CANCEL_SAYS", "cancel", "cancel_record"]

CANCEL_NOTE = (
    "A cancelled task is never acked. Requeue revives it from the dead letters, with fresh "
    "attempts and its idempotency key."
)
#: What happened to a task the store cancelled (CANCELLED) or marked (MARKED).
CANCEL_SAYS = {
    CancelOutcome.CANCELLED: (
        "not running, so buried now: in the dead letters, the last error ending "
        f"'{CANCELLED_SUFFIX}'"
    ),
    CancelOutcome.MARKED: (
        "running: the worker stops the handler at its next heartbeat and buries the task; it "
        "is never acked"
    ),
}
_CODES = {CancelOutcome.CANCELLED: CANCELLED, CancelOutcome.MARKED: MARKED}
_VERBS = {CancelOutcome.CANCELLED: "cancelled", CancelOutcome.MARKED: "cancelling"}


def cancel(store: Store, task_id: int, *, queue: str | None = None) -> Outcome:
    """Cancel a task (see CANCEL_SAYS).

    :param queue: when given, a task of another queue is ``not_found``.
    :returns: ``cancelled`` or ``marked``; or ``not_found``, ``nothing_to_cancel`` (done or
        dead already). ``cancel`` holds what the store answered.
    """
    found = find(store, task_id, queue=queue)
    if found.code != FOUND or found.task is None:
        return found
    return cancel_record(store, found.task)


def cancel_record(store: Store, task: TaskRecord) -> Outcome:
    """Cancel ``task``, as it was looked up (it may have changed since)."""
    outcome = store.task_cancel(task.id)
    if outcome in CANCEL_SAYS:
        message = f"{_VERBS[outcome]} task {task.id}: {CANCEL_SAYS[outcome]}"
        return Outcome(code=_CODES[outcome], message=message, task=task, cancel=outcome)
    if outcome is CancelOutcome.NOT_FOUND:  # purged since the lookup
        return not_found(task.id)
    now = store.task_get(task.id)
    if now is None:
        return not_found(task.id)
    state = (
        f"is already {now.state}"
        if now.state != TaskState.PENDING
        else "finished, and was requeued since"
    )
    return Outcome(
        code=NOTHING_TO_CANCEL,
        message=f"task {task.id} {state}: nothing to cancel",
        task=task,
        cancel=outcome,
    )
