"""PostgresStore: the production store, raw SQL on Django's own connection.

Because it uses ``connections[using]``, an enqueue joins the caller's ``transaction.atomic()``:
the business row and its task commit or roll back together. Every other operation is one
statement, so outside a caller's transaction each one is its own short transaction. The
queries live in postgres.sql; the semantics mirror rivet.stores.memory operation by operation.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from django.db import Error as DjangoDatabaseError
from django.db import IntegrityError, connections, transaction
from psycopg import sql

from rivet import logs
from rivet.conf import rivet_settings
from rivet.errors import IdempotencyMismatch, StoreError
from rivet.stores.base import Store
from rivet.stores.sqlfile import load_queries
from rivet.values import (
    HANDLER_ERROR_SUFFIX,
    WORKER_LOST_SUFFIX,
    AckOutcome,
    ClaimBatch,
    Claimed,
    EnqueueResult,
    FailOutcome,
    Lease,
    QueueStats,
    TaskRecord,
    TaskSpec,
    join_error,
)

QUERIES = load_queries(Path(__file__).with_name("postgres.sql"))

#: Rows per INSERT of a bulk enqueue (each is one statement of array parameters).
BULK_CHUNK = 500
#: How often an enqueue re-inserts after its conflicting row vanished (acked or purged).
INSERT_TRIES = 3

R = TypeVar("R")


def _store_errors(method: Callable[..., R]) -> Callable[..., R]:
    """Translate driver errors raised by a store method into StoreError (the cause is kept)."""

    @functools.wraps(method)
    def wrapper(store: PostgresStore, *args: Any, **kwargs: Any) -> R:
        try:
            return method(store, *args, **kwargs)
        except (DjangoDatabaseError, psycopg.Error) as exc:
            store._forget_broken_connection()
            raise StoreError(
                f"PostgreSQL store on alias {store.using!r} failed in {method.__name__}: {exc}"
            ) from exc

    return wrapper


def _json_text(value: Any) -> str | None:
    """A payload or result as jsonb input; None is stored as SQL NULL, as the ORM does."""
    return None if value is None else json.dumps(value, separators=(",", ":"))


def _json_value(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _spec_params(spec: TaskSpec) -> dict[str, Any]:
    return {
        "queue": spec.queue,
        "kind": spec.kind,
        "payload": _json_text(spec.payload),
        "idem_key": spec.idem_key,
        "unique_key": spec.unique_key,
        "max_attempts": spec.max_attempts,
        "run_at": spec.run_at,
        "delay": float(spec.delay_secs),
        "priority": spec.priority,
    }


def _batch_params(task_ids: list[int], specs: Sequence[TaskSpec]) -> dict[str, Any]:
    rows = [_spec_params(spec) for spec in specs]
    return {
        "ids": task_ids,
        **{
            f"{column}s": [row[column] for row in rows]
            for column in ("queue", "kind", "payload", "idem_key", "unique_key", "run_at")
        },
        "max_attempts": [row["max_attempts"] for row in rows],
        "delays": [row["delay"] for row in rows],
        "priorities": [row["priority"] for row in rows],
    }


def _record(columns: Sequence[str], row: Sequence[Any]) -> TaskRecord:
    fields = dict(zip(columns, row, strict=True))
    fields["payload"] = _json_value(fields["payload"])
    fields["result"] = _json_value(fields["result"])
    return TaskRecord(**fields)


class PostgresStore(Store):
    """Tasks in rivet_task on a PostgreSQL database alias; wakes idle workers with NOTIFY."""

    name = "postgres"
    joins_django_transaction = True
    supports_wakeup = True

    def __init__(self, using: str = "default") -> None:
        self.using = using
        self._listener = WakeupListener(self._listener_params)

    @property
    def _channel(self) -> str:
        return rivet_settings.NOTIFY_CHANNEL

    def _cursor(self) -> Any:
        return connections[self.using].cursor()

    def _fetch(self, query: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        with self._cursor() as cursor:
            cursor.execute(QUERIES[query], params)
            return cursor.fetchall()

    def _execute(self, query: str, params: dict[str, Any]) -> int:
        with self._cursor() as cursor:
            cursor.execute(QUERIES[query], params)
            return cursor.rowcount

    def _forget_broken_connection(self) -> None:
        """After a driver error outside any transaction, let Django reconnect next time."""
        connection = connections[self.using]
        if not connection.in_atomic_block:
            with suppress(DjangoDatabaseError):
                connection.close_if_unusable_or_obsolete()

    # -- enqueue -----------------------------------------------------------------------------

    @_store_errors
    def task_enqueue(self, spec: TaskSpec) -> EnqueueResult:
        # A savepoint inside the caller's transaction: a refused enqueue leaves it usable.
        with transaction.atomic(using=self.using):
            return self._enqueue_one(spec)

    @_store_errors
    def task_enqueue_many(self, specs: Sequence[TaskSpec]) -> list[EnqueueResult]:
        results: list[EnqueueResult] = []
        with transaction.atomic(using=self.using):
            for start in range(0, len(specs), BULK_CHUNK):
                results += self._enqueue_chunk(specs[start : start + BULK_CHUNK])
        return results

    def _enqueue_one(self, spec: TaskSpec) -> EnqueueResult:
        params = {**_spec_params(spec), "channel": self._channel}
        for _ in range(INSERT_TRIES):
            inserted = self._fetch("enqueue", params)
            if inserted:
                return EnqueueResult(task_id=inserted[0][0])
            existing = self._find_existing(spec)
            if existing is not None:
                return existing
        raise StoreError(
            f"enqueue of {spec.kind!r} on {spec.queue!r} conflicted {INSERT_TRIES} times with "
            "a task that then disappeared; retry the enqueue"
        )

    def _enqueue_chunk(self, specs: Sequence[TaskSpec]) -> list[EnqueueResult]:
        task_ids = [row[0] for row in self._fetch("reserve_ids", {"count": len(specs)})]
        params = {**_batch_params(task_ids, specs), "channel": self._channel}
        inserted = {row[0] for row in self._fetch("enqueue_many", params)}
        return [
            EnqueueResult(task_id=task_id)
            if task_id in inserted
            else self._find_existing(spec) or self._enqueue_one(spec)
            for task_id, spec in zip(task_ids, specs, strict=True)
        ]

    def _find_existing(self, spec: TaskSpec) -> EnqueueResult | None:
        """The task a key already names (memory's order: idem_key first, then unique job)."""
        params = _spec_params(spec)
        if spec.idem_key is not None:
            for task_id, same_work in self._fetch("find_by_idem_key", params):
                if not same_work:
                    raise IdempotencyMismatch(spec.idem_key, task_id)
                return EnqueueResult(task_id=task_id, duplicate=True)
        if spec.unique_key is not None:
            for (task_id,) in self._fetch("find_pending_unique", params):
                return EnqueueResult(task_id=task_id, duplicate=True)
        return None

    # -- claim and leases --------------------------------------------------------------------

    @_store_errors
    def task_claim(
        self, *, queues: Sequence[str], owner: str, limit: int, lease_ttl: float
    ) -> ClaimBatch:
        claimed: list[Claimed] = []
        buried = 0
        for queue in queues:
            # A claim that buried rows filled fewer slots than it picked: go again, as the
            # memory store buries every exhausted row it meets while filling the batch.
            while len(claimed) < limit:
                leased, dead = self._claim_from(queue, owner, limit - len(claimed), lease_ttl)
                claimed += leased
                buried += dead
                if not dead:
                    break
        return ClaimBatch(claimed=claimed, buried=buried)

    def _claim_from(
        self, queue: str, owner: str, limit: int, lease_ttl: float
    ) -> tuple[list[Claimed], int]:
        params = {
            "queue": queue,
            "limit": limit,
            "owner": owner,
            "ttl": float(lease_ttl),
            "lost_suffix": WORKER_LOST_SUFFIX,
        }
        rows = self._fetch("claim", params)
        leased = [self._claimed(row, owner) for row in rows if row[-1] == "pending"]
        return leased, len(rows) - len(leased)

    @staticmethod
    def _claimed(row: Sequence[Any], owner: str) -> Claimed:
        task_id, queue, kind, payload, idem_key, attempts, max_attempts, epoch, priority, _ = row
        return Claimed(
            task_id=task_id,
            queue=queue,
            kind=kind,
            payload=_json_value(payload),
            idem_key=idem_key,
            attempt=attempts,
            max_attempts=max_attempts,
            epoch=epoch,
            owner=owner,
            priority=priority,
        )

    @_store_errors
    def lease_extend(self, leases: Sequence[Lease], lease_ttl: float) -> set[int]:
        if not leases:
            return set()
        params = {
            "task_ids": [lease.task_id for lease in leases],
            "epochs": [lease.epoch for lease in leases],
            "ttl": float(lease_ttl),
        }
        return {row[0] for row in self._fetch("lease_extend", params)}

    @_store_errors
    def task_ack(self, lease: Lease, result: Any = None, *, owner: str = "") -> AckOutcome:
        params = {**self._lease_params(lease, owner), "result": _json_text(result)}
        (acked,) = self._fetch("ack", params)[0]
        return AckOutcome.ACKED if acked else AckOutcome.FENCED

    @_store_errors
    def task_fail(
        self, lease: Lease, error: str, retry_delay: float, *, owner: str = ""
    ) -> FailOutcome:
        params = {
            **self._lease_params(lease, owner),
            "error": error,
            "buried_error": join_error(error, HANDLER_ERROR_SUFFIX),
            "delay": max(float(retry_delay), 0.0),
            "channel": self._channel,
        }
        rows = self._fetch("fail", params)
        if not rows:
            return FailOutcome.FENCED
        return FailOutcome.DEAD if rows[0][0] == "dead" else FailOutcome.RETRY

    @staticmethod
    def _lease_params(lease: Lease, owner: str) -> dict[str, Any]:
        return {"task_id": lease.task_id, "epoch": lease.epoch, "owner": owner}

    # -- reads -------------------------------------------------------------------------------

    def _records(self, query: str, params: dict[str, Any]) -> list[TaskRecord]:
        with self._cursor() as cursor:
            cursor.execute(QUERIES[query], params)
            columns = [column.name for column in cursor.description]
            return [_record(columns, row) for row in cursor.fetchall()]

    @_store_errors
    def task_get(self, task_id: int) -> TaskRecord | None:
        records = self._records("task_get", {"task_id": task_id})
        return records[0] if records else None

    @_store_errors
    def task_list(
        self, *, queue: str | None = None, state: str | None = None, limit: int = 100
    ) -> list[TaskRecord]:
        return self._records("task_list", {"queue": queue, "state": state, "limit": limit})

    @_store_errors
    def queue_stats(self, queue: str) -> QueueStats:
        with self._cursor() as cursor:
            cursor.execute(QUERIES["queue_stats"], {"queue": queue})
            columns = [column.name for column in cursor.description]
            return QueueStats(queue=queue, **dict(zip(columns, cursor.fetchone(), strict=True)))

    @_store_errors
    def fenced_count(self, queue: str | None = None, op: str | None = None) -> int:
        return self._fetch("fenced_count", {"queue": queue, "op": op})[0][0]

    # -- dead letters ------------------------------------------------------------------------

    @_store_errors
    def dead_requeue(self, queue: str, task_id: int) -> bool:
        params = {"queue": queue, "task_id": task_id, "channel": self._channel}
        try:
            with transaction.atomic(using=self.using):
                return bool(self._fetch("dead_requeue", params))
        except IntegrityError:
            # A unique job's pending task was enqueued between our check and our write.
            return False

    @_store_errors
    def dead_sweep(self, queue: str) -> int:
        return self._execute("dead_sweep", {"queue": queue, "lost_suffix": WORKER_LOST_SUFFIX})

    @_store_errors
    def dead_purge(
        self,
        queue: str,
        *,
        older_than_secs: float | None = None,
        task_ids: Sequence[int] | None = None,
    ) -> int:
        older_than = None if older_than_secs is None else float(older_than_secs)
        ids = None if task_ids is None else [int(task_id) for task_id in task_ids]
        params = {"queue": queue, "older_than": older_than, "task_ids": ids}
        return self._execute("dead_purge", params)

    # -- wake-up -----------------------------------------------------------------------------

    def _listener_params(self) -> dict[str, Any]:
        params = connections[self.using].get_connection_params()
        for django_only in ("cursor_factory", "context"):
            params.pop(django_only, None)
        return params

    def wait_for_work(self, queues: Sequence[str], timeout: float) -> bool:
        return self._listener.wait(queues, timeout, self._channel)

    def close(self) -> None:
        self._listener.close()


class WakeupListener:
    """A dedicated autocommit connection that LISTENs for enqueue notifications.

    It is opened on the first wait and kept, so notifications sent while the worker is busy
    are buffered and wake the next wait at once. Any connection error closes it; the next
    wait reconnects. A wait that cannot listen sleeps out its timeout: polling is the fallback.
    """

    def __init__(self, params: Callable[[], dict[str, Any]]) -> None:
        self._params = params
        self._lock = threading.Lock()
        self._conn: psycopg.Connection | None = None
        self._channel = ""

    def wait(self, queues: Sequence[str], timeout: float, channel: str) -> bool:
        """True when a notification for one of ``queues`` arrives within ``timeout`` seconds."""
        deadline = time.monotonic() + max(float(timeout), 0.0)
        with self._lock:
            try:
                return self._wait_locked(set(queues), deadline, channel)
            except psycopg.Error as exc:
                logs.event(
                    "listener_failed",
                    logging.WARNING,
                    error=" ".join(str(exc).split()),
                    fallback="polling",
                )
                self._close_locked()
        time.sleep(max(deadline - time.monotonic(), 0.0))
        return False

    def _wait_locked(self, queues: set[str], deadline: float, channel: str) -> bool:
        conn = self._connection(channel)
        while True:
            remaining = max(deadline - time.monotonic(), 0.0)
            for note in conn.notifies(timeout=remaining, stop_after=1):
                if note.payload in queues:
                    return True
            if time.monotonic() >= deadline:
                return False

    def _connection(self, channel: str) -> psycopg.Connection:
        if self._conn is not None and (self._conn.closed or self._channel != channel):
            self._close_locked()
        if self._conn is None:
            conn = psycopg.connect(**self._params(), autocommit=True)
            try:
                conn.execute(sql.SQL(QUERIES["listen"]).format(channel=sql.Identifier(channel)))
            except psycopg.Error:
                conn.close()
                raise
            self._conn, self._channel = conn, channel
        return self._conn

    def close(self) -> None:
        """Close the listening connection (a later wait opens a new one)."""
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
