"""The producer API: ``rivet.enqueue``, ``enqueue_many``, ``get_task`` and ``cancel``, and
their awaitable twins ``aenqueue``, ``aenqueue_many``, ``aget_task`` and ``acancel``.

Defaults come from the registered job of the kind (queue, max_attempts, priority, unique key),
then from ``settings.RIVET`` (QUEUE, MAX_ATTEMPTS); ``rivet.jobs.task_spec`` fills them. A kind
that no installed app registers is refused (UnknownKind, nothing written) unless
``RIVET['ALLOW_UNKNOWN_KINDS']`` is True: a producer whose workers run elsewhere, with job code
this process does not import. A worker that claims a kind it does not know fails the attempt
with an error naming the kind.

On the SQL stores an enqueue runs on Django's own connection, so inside the caller's
``transaction.atomic()`` the task commits or rolls back with the business rows.

The awaitable twins take the same arguments and give the same results and errors. Each runs
its twin through asgiref's ``sync_to_async`` with ``thread_sensitive=True``, as Django's own
async ORM methods do: the call runs on the thread that serves the caller's sync database work
(under ASGI, the request's; in a rivet worker's event loop, asgiref's one shared thread), so it
uses the same connection, and a task written inside ``sync_to_async``-wrapped
``transaction.atomic()`` code commits with it. The event loop is never blocked meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, overload

from asgiref.sync import sync_to_async

from rivet import tracing
from rivet.errors import BatchKeyClash, InvalidInput, MixedDatabases
from rivet.jobs import ENQUEUE_OPTIONS, spec_of, task_spec
from rivet.routing import alias_for_queue
from rivet.stores import resolve_store, store_for_queue
from rivet.stores.base import Store
from rivet.validation import Limits
from rivet.values import CancelOutcome, EnqueueResult, TaskRecord, TaskSpec

__all__ = [
    "acancel",
    "aenqueue",
    "aenqueue_many",
    "aget_task",
    "cancel",
    "enqueue",
    "enqueue_many",
    "get_task",
    "resolve_store",
    "task_spec",
]

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

    The task is written on the connection of its queue's database, so it commits or rolls back
    with that database's transaction.

    :param kind: the registered job kind that runs it.
    :param payload: any JSON value (at most ``RIVET["MAX_PAYLOAD_BYTES"]`` encoded).
    :param queue: the queue; default the job's, else ``RIVET["QUEUE"]``.
    :param idem_key: the producer's idempotency key: 1 to ``RIVET["MAX_IDEM_KEY_LENGTH"]``
        characters of visible ASCII (0x21-0x7E) but the comma (spaces only between them), the
        rule of the HTTP header, so a key means the same task wherever it is sent from. The
        same key with the same work (queue, kind, payload) returns the task it names as a
        duplicate.
    :param delay: seconds (or a ``timedelta``) before the task may run; not with ``run_at``.
    :param run_at: an aware ``datetime`` before which the task may not run; not with ``delay``.
    :param priority: -100..100, higher is claimed first; default the job's, else 0.
    :param max_attempts: attempts before the task is dead; default the job's, else
        ``RIVET["MAX_ATTEMPTS"]``.
    :param unique_key: while a pending task of the same kind holds this key, the enqueue
        returns that task as a duplicate instead of adding a second; default the job's
        ``unique`` function of the payload, else none.
    :param using: the store: None for the database of the queue (``rivet.routing``), a Django
        database alias, or a Store.
    :returns: the task's id, and whether it already existed.
    :raises InvalidInput: a value is out of bounds or malformed (nothing is written).
    :raises IdempotencyMismatch: ``idem_key`` already names different work.
    """
    spec = spec_of(
        kind, payload, queue, idem_key, delay, run_at, priority, max_attempts, unique_key
    )
    return store_for_queue(spec.queue, using).task_enqueue(spec)


def enqueue_many(
    items: Iterable[Mapping[str, Any] | tuple], *, using: str | Store | None = None
) -> list[EnqueueResult]:
    """Enqueue several tasks in one transaction: all are written, or none.

    Every item is validated before the batch commits, and an invalid item (or a key two items
    give to different work) writes nothing. One batch is one transaction on one database.

    :param items: each a dict of ``enqueue``'s arguments but ``using`` (``kind`` required), or
        a ``(kind, payload)`` tuple.
    :param using: the store for the whole batch: None for the database of the queues (which
        must all be one: else ``MixedDatabases``, nothing written), an alias, or a Store.
    :returns: one result per item, in the order given.
    :raises InvalidInput: an item is invalid (its message names its index); nothing is written.
    :raises IdempotencyMismatch: an item's key already names different work.
    """
    limits, trace_context = Limits.read(), tracing.carrier()  # one call, one caller's span
    batch = SpecBatch(list(items), limits, trace_context, one_database=using is None)
    if not batch:
        return []
    store = store_for_queue(batch.first().queue, using)
    return store.task_enqueue_many(batch if store.streams_bulk else list(batch))


class SpecBatch(Sequence[TaskSpec]):
    """An enqueue_many batch, each item validated when it is first read, in order.

    Reading an item validates it and every one before it and makes the batch's checks as each
    arrives: an idem_key another item gave to different work (BatchKeyClash) and, with
    ``one_database``, a queue living on another database than item 0's (MixedDatabases). Both
    checks name the later item, as a check over the whole list would. A store that streams
    (``streams_bulk``: the PostgreSQL store's COPY) reads the batch inside its transaction, so
    the server writes the first tasks while Python validates the rest, and an error rolls the
    batch back; every other store gets the list, read whole before anything is written.

    Indexing keeps what it validates: an item read by index is validated once. Iterating
    keeps nothing past what indexing kept, only what the checks need (each idem_key's work,
    item 0's queue): a streamed batch of thousands leaves no TaskSpec behind it for the
    garbage collector to walk in its full collections, which are a bulk enqueue's cost
    otherwise (docs/decisions/0006-bulk-enqueue-copy.md).
    An item iterated past and indexed later is validated again (an equal TaskSpec).
    """

    def __init__(
        self,
        items: list[Mapping[str, Any] | tuple],
        limits: Limits,
        trace_context: Any,
        *,
        one_database: bool,
    ) -> None:
        self._items = items
        self._limits = limits
        self._trace_context = trace_context
        self._specs: list[TaskSpec] = []  # items 0.. as indexing read them
        self._checked = 0  # items validated and checked so far
        # Each key's first item and its work (queue, kind, payload_json).
        self._keys: dict[str, tuple[int, str, str, str]] = {}
        # Each queue is routed once: a batch repeats a few queues, and routing one (the
        # routers, the settings) costs more than validating its task.
        self._aliases: dict[str, str] | None = {} if one_database else None
        self._first_queue = ""

    def __len__(self) -> int:
        return len(self._items)

    def first(self) -> TaskSpec:
        return self[0]

    @overload
    def __getitem__(self, index: int) -> TaskSpec: ...

    @overload
    def __getitem__(self, index: slice) -> list[TaskSpec]: ...

    def __getitem__(self, index: int | slice) -> TaskSpec | list[TaskSpec]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self._items)))]
        if index < 0:
            index += len(self._items)
        if not 0 <= index < len(self._items):
            raise IndexError(f"item {index} of a batch of {len(self._items)}")
        specs = self._specs
        while len(specs) <= index:
            specs.append(self._read(len(specs)))
        return specs[index]

    def __iter__(self) -> Iterator[TaskSpec]:
        specs = self._specs  # the store's COPY reads this once per task: no __getitem__ here
        for index in range(len(self._items)):
            yield specs[index] if index < len(specs) else self._read(index)

    def _read(self, index: int) -> TaskSpec:
        """Item ``index`` validated, and checked against the items before it the first time."""
        spec = self._validated(index)
        if index == self._checked:
            if spec.idem_key is not None:
                self._refuse_key_clash(index, spec, spec.idem_key)
            if self._aliases is not None:
                self._refuse_other_database(index, spec)
            self._checked += 1  # a refused item stays unchecked: read again, it is refused again
        return spec

    def _validated(self, index: int) -> TaskSpec:
        try:
            return _item_spec(index, self._items[index], self._limits, self._trace_context)
        except InvalidInput as exc:  # name the item in a batch of thousands, keep the type
            if not str(exc).startswith(f"item {index}: "):
                exc.args = (f"item {index}: {exc}", *exc.args[1:])
            raise

    def _refuse_key_clash(self, index: int, spec: TaskSpec, key: str) -> None:
        """Raise BatchKeyClash when an earlier item gave this key to different work.

        Caught before the batch commits: found by the store, it would name a task of the
        batch that the rollback then removes.
        """
        work = (spec.queue, spec.kind, spec.payload_json)
        earlier, *earlier_work = self._keys.setdefault(key, (index, *work))
        if earlier != index and tuple(earlier_work) != work:
            raise BatchKeyClash(
                f"item {index}: idem_key {key!r} is also the key of item {earlier}, "
                "with different work (queue, kind or payload differ); one key names one task",
                index=index,
            )

    def _refuse_other_database(self, index: int, spec: TaskSpec) -> None:
        """Raise MixedDatabases when this item's queue lives on another database than item
        0's."""
        assert self._aliases is not None
        alias = self._aliases.get(spec.queue)
        if alias is None:
            alias = self._aliases[spec.queue] = alias_for_queue(spec.queue)
        if index == 0:
            self._first_queue = spec.queue
        first_alias = self._aliases[self._first_queue]
        if alias != first_alias:
            raise MixedDatabases(
                f"item {index}: queue {spec.queue!r} lives on the database {alias!r}, but item "
                f"0's queue {self._first_queue!r} lives on {first_alias!r}; one batch is one "
                "transaction on one database: send one batch per database",
                index=index,
            )


def cancel(
    task_id: int, *, idem_key: str | None = None, using: str | Store | None = None
) -> CancelOutcome:
    """Cancel a task: bury it now if it is pending and not leased, else mark it for its worker.

    A leased task's worker stops the handler at its next heartbeat (``should_stop``) and buries
    it; it is never acked.

    :param task_id: the task's id.
    :param idem_key: the key the task was enqueued with: then only that task is cancelled, and
        an id that names a task with another key (or none) is NOT_FOUND, nothing changed (see
        ``get_task``).
    :param using: the store: None for ``RIVET["DATABASE_ALIAS"]``, an alias, or a Store.
    :returns: what happened: CANCELLED, MARKED, FINISHED or NOT_FOUND.
    :raises InvalidInput: ``task_id`` is not an integer, or ``idem_key`` is not a non-empty
        string.
    """
    _check_task_id(task_id)
    store = resolve_store(using)
    if idem_key is not None and _same_task(store.task_get(task_id), idem_key) is None:
        return CancelOutcome.NOT_FOUND
    return store.task_cancel(task_id)


def get_task(
    task_id: int, *, idem_key: str | None = None, using: str | Store | None = None
) -> TaskRecord | None:
    """Read back a task by id: its state, attempts, result, last_error and errors; None if unknown.

    An unknown id (never enqueued, or a dead task that was purged) is None, not an error: the
    caller decides whether a missing task is a problem.

    Ids are unique within one database's history, but after an asynchronous failover the new
    primary's id sequence can restart behind the old primary's and hand an id kept from before
    the failover to another task; the key, which the producer chose, tells the two apart.

    :param task_id: the task's id, as ``enqueue`` returned it.
    :param idem_key: the key the task was enqueued with: then the task only if it is still that
        one, None when the id names a task with another key, or none.
    :param using: the store: None for ``RIVET["DATABASE_ALIAS"]``, an alias, or a Store (task
        ids are numbered by each database).
    :returns: the task as it is now, or None.
    :raises InvalidInput: ``task_id`` is not an integer, or ``idem_key`` is not a non-empty
        string.
    """
    _check_task_id(task_id)
    return _same_task(resolve_store(using).task_get(task_id), idem_key)


def _check_task_id(task_id: Any) -> None:
    if isinstance(task_id, bool) or not isinstance(task_id, int):
        raise InvalidInput(f"task_id must be an integer, got {task_id!r}")


def _same_task(record: TaskRecord | None, idem_key: str | None) -> TaskRecord | None:
    """``record``, unless ``idem_key`` is given and is not the record's key."""
    if idem_key is None:
        return record
    if not isinstance(idem_key, str) or not idem_key:
        raise InvalidInput(
            f"idem_key must be the non-empty key the task was enqueued with, got {idem_key!r}",
            field="idem_key",
        )
    if record is None or record.idem_key != idem_key:
        return None
    return record


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


# -- the awaitable twins (see the module docstring) ------------------------------------------


async def aenqueue(
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
    """``enqueue`` from async code: the same arguments, result and errors.

    :param kind: the registered job kind that runs it.
    :param payload: any JSON value (at most ``RIVET["MAX_PAYLOAD_BYTES"]`` encoded).
    :param queue: the queue; default the job's, else ``RIVET["QUEUE"]``.
    :param idem_key: the producer's idempotency key (``enqueue``'s rule): the same key with
        the same work returns the task it names as a duplicate.
    :param delay: seconds (or a ``timedelta``) before the task may run; not with ``run_at``.
    :param run_at: an aware ``datetime`` before which the task may not run; not with ``delay``.
    :param priority: -100..100, higher is claimed first; default the job's, else 0.
    :param max_attempts: attempts before the task is dead; default the job's, else
        ``RIVET["MAX_ATTEMPTS"]``.
    :param unique_key: while a pending task of the same kind holds this key, the enqueue
        returns that task as a duplicate; default the job's ``unique`` function, else none.
    :param using: the store: None for the database of the queue, an alias, or a Store.
    :returns: the task's id, and whether it already existed.
    :raises InvalidInput: a value is out of bounds or malformed (nothing is written).
    :raises IdempotencyMismatch: ``idem_key`` already names different work.
    """
    return await sync_to_async(enqueue, thread_sensitive=True)(
        kind,
        payload,
        queue=queue,
        idem_key=idem_key,
        delay=delay,
        run_at=run_at,
        priority=priority,
        max_attempts=max_attempts,
        unique_key=unique_key,
        using=using,
    )


async def aenqueue_many(
    items: Iterable[Mapping[str, Any] | tuple], *, using: str | Store | None = None
) -> list[EnqueueResult]:
    """``enqueue_many`` from async code: the same arguments, result and errors.

    :param items: each a dict of ``enqueue``'s arguments but ``using`` (``kind`` required), or
        a ``(kind, payload)`` tuple.
    :param using: the store for the whole batch: None for the database of the queues, an
        alias, or a Store.
    :returns: one result per item, in the order given.
    :raises InvalidInput: an item is invalid (its message names its index); nothing is written.
    :raises IdempotencyMismatch: an item's key already names different work.
    """
    return await sync_to_async(enqueue_many, thread_sensitive=True)(items, using=using)


async def aget_task(
    task_id: int, *, idem_key: str | None = None, using: str | Store | None = None
) -> TaskRecord | None:
    """``get_task`` from async code: the same arguments, result and errors.

    :param task_id: the task's id, as ``enqueue`` returned it.
    :param idem_key: the key the task was enqueued with: a task with another key (or none) is
        None (see ``get_task``).
    :param using: the store: None for ``RIVET["DATABASE_ALIAS"]``, an alias, or a Store.
    :returns: the task as it is now, or None.
    :raises InvalidInput: ``task_id`` is not an integer.
    """
    return await sync_to_async(get_task, thread_sensitive=True)(
        task_id, idem_key=idem_key, using=using
    )


async def acancel(
    task_id: int, *, idem_key: str | None = None, using: str | Store | None = None
) -> CancelOutcome:
    """``cancel`` from async code: the same arguments, result and errors.

    :param task_id: the task's id.
    :param idem_key: the key the task was enqueued with: a task with another key (or none) is
        NOT_FOUND, nothing changed (see ``cancel``).
    :param using: the store: None for ``RIVET["DATABASE_ALIAS"]``, an alias, or a Store.
    :returns: what happened: CANCELLED, MARKED, FINISHED or NOT_FOUND.
    :raises InvalidInput: ``task_id`` is not an integer.
    """
    return await sync_to_async(cancel, thread_sensitive=True)(
        task_id, idem_key=idem_key, using=using
    )
