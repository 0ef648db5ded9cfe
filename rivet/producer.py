"""The producer API: ``rivet.enqueue``, ``enqueue_many``, ``get_task`` and ``cancel``.

Defaults come from the registered job of the kind (queue, max_attempts, priority, unique key),
then from ``settings.RIVET`` (QUEUE, MAX_ATTEMPTS); ``rivet.jobs.task_spec`` fills them. A kind
that no installed app registers is refused (UnknownKind, nothing written) unless
``RIVET['ALLOW_UNKNOWN_KINDS']`` is True: a producer whose workers run elsewhere, with job code
this process does not import. A worker that claims a kind it does not know fails the attempt
with an error naming the kind.

On the SQL stores an enqueue runs on Django's own connection, so inside the caller's
``transaction.atomic()`` the task commits or rolls back with the business rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from rivet import tracing
from rivet.errors import BatchKeyClash, InvalidInput, MixedDatabases
from rivet.jobs import ENQUEUE_OPTIONS, task_spec
from rivet.routing import alias_for_queue
from rivet.stores import resolve_store, store_for_queue
from rivet.stores.base import Store
from rivet.validation import Limits
from rivet.values import CancelOutcome, EnqueueResult, TaskRecord, TaskSpec

__all__ = ["cancel", "enqueue", "enqueue_many", "get_task", "resolve_store", "task_spec"]

#: The keys a dict given to enqueue_many may carry.
ITEM_KEYS = ENQUEUE_OPTIONS | {"kind", "payload"}


def enqueue(
    kind: str,
    payload: Any = None,
    *,
    queue: str | None = None,
    idem_key: str | None = None,
    delay: float | timedelta | None = None,
    run_at: datetime | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    unique_key: str | None = None,
    using: str | Store | None = None,
) -> EnqueueResult:
    """Enqueue one task; a key used before with the same work returns it as a duplicate.

    ``idem_key``: 1 to RIVET['MAX_IDEM_KEY_LENGTH'] characters of visible ASCII (0x21-0x7E:
    letters, digits, punctuation; spaces only between them), the rule of the HTTP header,
    so a key means the same task wherever it is sent from; anything else raises InvalidInput.
    ``using`` picks the store: None for the database of the queue (``rivet.routing``), a
    Django database alias, or a Store. Raises InvalidInput (nothing written) for a bad value
    and IdempotencyMismatch when ``idem_key`` already names different work.
    """
    spec = task_spec(
        kind,
        payload,
        queue=queue,
        idem_key=idem_key,
        delay=delay,
        run_at=run_at,
        priority=priority,
        max_attempts=max_attempts,
        unique_key=unique_key,
    )
    return store_for_queue(spec.queue, using).task_enqueue(spec)


def enqueue_many(
    items: Iterable[Mapping[str, Any] | tuple], *, using: str | Store | None = None
) -> list[EnqueueResult]:
    """Enqueue several tasks in one transaction: all are written, or none.

    Each item is a dict of enqueue's arguments (``kind`` required) or a ``(kind, payload)``
    tuple. Every item is validated before anything is written; results keep the given order.
    One batch is one transaction on one database: without ``using``, items whose queues live on
    different databases are refused (MixedDatabases, nothing written).
    """
    limits, trace_context = Limits.read(), tracing.carrier()  # one call, one caller's span
    specs = [_item_spec(index, item, limits, trace_context) for index, item in enumerate(items)]
    if not specs:
        return []
    refuse_key_clash(specs)
    if using is None:
        refuse_mixed_databases(specs)
    return store_for_queue(specs[0].queue, using).task_enqueue_many(specs)


def refuse_mixed_databases(specs: list[TaskSpec]) -> None:
    """Raise MixedDatabases when the batch's queues live on more than one database alias.

    Each queue is routed once: a batch repeats a few queues, and routing one (the routers,
    the settings) cost more than validating its task.
    """
    first_alias = alias_for_queue(specs[0].queue)
    aliases = {specs[0].queue: first_alias}
    for index, spec in enumerate(specs):
        alias = aliases.get(spec.queue)
        if alias is None:
            alias = aliases[spec.queue] = alias_for_queue(spec.queue)
        if alias != first_alias:
            raise MixedDatabases(
                f"item {index}: queue {spec.queue!r} lives on the database {alias!r}, but item "
                f"0's queue {specs[0].queue!r} lives on {first_alias!r}; one batch is one "
                "transaction on one database: send one batch per database",
                index=index,
            )


def refuse_key_clash(specs: list[TaskSpec]) -> None:
    """Raise BatchKeyClash when two items of a batch give one key to different work.

    Caught before anything is written: found by the store, it would name a task of the batch
    that the rollback then removes.
    """
    first: dict[str, int] = {}
    for index, spec in enumerate(specs):
        if spec.idem_key is None:
            continue
        earlier = first.setdefault(spec.idem_key, index)
        other = specs[earlier]
        if (other.queue, other.kind, other.payload_json) != (
            spec.queue,
            spec.kind,
            spec.payload_json,
        ):
            raise BatchKeyClash(
                f"item {index}: idem_key {spec.idem_key!r} is also the key of item {earlier}, "
                "with different work (queue, kind or payload differ); one key names one task",
                index=index,
            )


def cancel(task_id: int, *, using: str | Store | None = None) -> CancelOutcome:
    """Cancel a task: bury it now if it is pending and not leased, else mark it for its worker.

    A leased task's worker stops the handler at its next heartbeat (``should_stop``) and buries
    it; it is never acked. Returns what happened (CANCELLED, MARKED, FINISHED or NOT_FOUND).
    """
    if isinstance(task_id, bool) or not isinstance(task_id, int):
        raise InvalidInput(f"task_id must be an integer, got {task_id!r}")
    return resolve_store(using).task_cancel(task_id)


def get_task(task_id: int, *, using: str | Store | None = None) -> TaskRecord | None:
    """Read back a task by id: its state, attempts, result, last_error and errors; None if unknown.

    An unknown id (never enqueued, or a dead task that was purged) is None, not an error: the
    caller decides whether a missing task is a problem. Raises InvalidInput when ``task_id`` is
    not an integer.
    """
    if isinstance(task_id, bool) or not isinstance(task_id, int):
        raise InvalidInput(f"task_id must be an integer, got {task_id!r}")
    return resolve_store(using).task_get(task_id)


def _item_spec(
    index: int, item: Mapping[str, Any] | tuple, limits: Limits, trace_context: Any
) -> TaskSpec:
    if isinstance(item, tuple):
        if len(item) not in (1, 2):
            raise InvalidInput(f"item {index}: a tuple must be (kind, payload), got {item!r}")
        return task_spec(*item, limits=limits, trace_context=trace_context)
    if type(item) is not dict and not isinstance(item, Mapping):  # a dict, cheaply: the usual
        raise InvalidInput(
            f"item {index}: expected a dict or a (kind, payload) tuple, got {type(item).__name__}"
        )
    if not ITEM_KEYS.issuperset(item):
        unknown = sorted(item.keys() - ITEM_KEYS)
        raise InvalidInput(
            f"item {index}: unknown keys {', '.join(unknown)}; "
            f"known: {', '.join(sorted(ITEM_KEYS))}"
        )
    if "kind" not in item:
        raise InvalidInput(f"item {index}: 'kind' is required")
    # The keys are task_spec's own parameters (checked above): no copy of the item needed.
    return task_spec(limits=limits, trace_context=trace_context, **item)
