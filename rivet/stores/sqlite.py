"""SqliteStore: the Store semantics on SQLite, through Django's own connection for an alias.

Mirrors ``rivet.stores.memory`` operation by operation; ``rivet.conformance`` is the proof.
Several worker processes may share one database file:

- Every write runs in a transaction that takes SQLite's write lock before it reads anything
  (``BEGIN IMMEDIATE``), so two claimers never both read a row as free. With the alias's
  ``OPTIONS['transaction_mode'] = 'IMMEDIATE'`` (chaos_project's settings) that is Django's
  own ``transaction.atomic``; without it, the store issues ``BEGIN IMMEDIATE`` itself when it
  is not inside an atomic block, so either configuration is safe.
- Inside the caller's ``transaction.atomic()`` the store joins it (a savepoint): an enqueue
  commits or rolls back with the business rows. A caller's transaction that is not IMMEDIATE
  and has already read may then fail with "database is locked"; configure IMMEDIATE.
- Every timestamp is written by SQLite (``strftime('%Y-%m-%d %H:%M:%f', 'now')``, UTC), never
  by Python; the one exception is an explicit ``run_at`` from the producer.

Queries live in ``sqlite.sql`` (named blocks). Driver errors become ``StoreError``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.db import Error as DjangoDatabaseError
from django.db import connections, transaction
from django.utils.dateparse import parse_datetime

from rivet.errors import IdempotencyMismatch, RivetConfigError, StoreError
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
)

#: transaction_mode values under which Django's atomic() already takes the write lock first.
LOCKING_MODES = frozenset({"IMMEDIATE", "EXCLUSIVE"})
QUERIES_PATH = Path(__file__).with_name("sqlite.sql")
QUERIES = load_queries(QUERIES_PATH)


def _offset(secs: float) -> str:
    """A SQLite date modifier moving a time by ``secs`` seconds, e.g. '+30.000000 seconds'."""
    return f"{secs:+.6f} seconds"


def _sql_time(moment: datetime) -> str:
    """An aware datetime as the UTC text Django writes on SQLite (microseconds kept)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def _parse_time(value: str | datetime) -> datetime:
    """A stored timestamp (text, or a datetime Django's converter made) as aware UTC."""
    moment = value if isinstance(value, datetime) else parse_datetime(value)
    if moment is None:
        raise StoreError(f"unreadable timestamp {value!r} in rivet_task")
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _encode(value: Any) -> str | None:
    """JSON text as Django's JSONField stores it on SQLite; None is SQL NULL."""
    return None if value is None else json.dumps(value)


def _decode(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _copy(value: Any) -> Any:
    """A value as it reads back after a JSON round trip, for comparing payloads."""
    return _decode(_encode(value))


def _dicts(cursor: sqlite3.Cursor) -> list[dict[str, Any]]:
    rows = cursor.fetchall()
    names = [column[0] for column in cursor.description or ()]
    return [dict(zip(names, row, strict=True)) for row in rows]


def _record(row: dict[str, Any]) -> TaskRecord:
    times = {col: _parse_time(row[col]) for col in ("visible_at", "created_at", "updated_at")}
    decoded = {"payload": _decode(row["payload"]), "result": _decode(row["result"])}
    return TaskRecord(**{**row, **times, **decoded})


def _claimed(row: dict[str, Any], owner: str) -> Claimed:
    return Claimed(
        task_id=row["id"],
        queue=row["queue"],
        kind=row["kind"],
        payload=_decode(row["payload"]),
        idem_key=row["idem_key"],
        attempt=row["attempts"],
        max_attempts=row["max_attempts"],
        epoch=row["lease_epoch"],
        owner=owner,
        priority=row["priority"],
    )


def _store_error(alias: str, exc: Exception) -> StoreError:
    message = f"SQLite store on database alias {alias!r} failed: {exc}"
    if "locked" in str(exc):
        message += (
            f" (another connection kept the write lock past DATABASES[{alias!r}]['OPTIONS']"
            "['timeout'] seconds, or a transaction that began DEFERRED and had already read "
            "could not take it; set OPTIONS['transaction_mode'] = 'IMMEDIATE')"
        )
    return StoreError(message)


class SqliteStore(Store):
    """Tasks in the rivet_task table of a SQLite database, on Django's connection for ``using``."""

    name = "sqlite"
    joins_django_transaction = True
    supports_wakeup = False

    def __init__(self, using: str = "default") -> None:
        connection = connections[using]
        if connection.vendor != "sqlite":
            raise RivetConfigError(
                f"SqliteStore needs a SQLite database, but alias {using!r} is "
                f"{connection.vendor}; use PostgresStore or point it at a SQLite alias"
            )
        zone = connection.settings_dict.get("TIME_ZONE")
        if zone not in (None, "UTC"):
            raise RivetConfigError(
                f"DATABASES[{using!r}]['TIME_ZONE'] is {zone!r}; rivet compares the times "
                "SQLite writes (UTC) with Django's, so leave it unset or set it to 'UTC'"
            )
        self.using = using

    # -- connections and transactions --------------------------------------------------------

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except (sqlite3.Error, DjangoDatabaseError) as exc:
            raise _store_error(self.using, exc) from exc

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Cursor]:
        """A cursor for one read statement, in the caller's transaction if there is one."""
        with self._translated():
            connection = connections[self.using]
            connection.ensure_connection()
            cursor = connection.connection.cursor()
            try:
                yield cursor
            finally:
                cursor.close()

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Cursor]:
        """A cursor in a transaction holding the write lock; joins the caller's atomic block."""
        with self._translated():
            connection = connections[self.using]
            connection.ensure_connection()
            if connection.in_atomic_block or connection.transaction_mode in LOCKING_MODES:
                with transaction.atomic(using=self.using), self._reading() as cursor:
                    yield cursor
            else:
                with self._begin_immediate() as cursor:
                    yield cursor

    @contextmanager
    def _begin_immediate(self) -> Iterator[sqlite3.Cursor]:
        """Our own BEGIN IMMEDIATE, for an alias whose atomic() would begin DEFERRED."""
        with self._reading() as cursor:
            cursor.execute(QUERIES["begin_immediate"])
            try:
                yield cursor
                cursor.execute(QUERIES["commit"])
            finally:
                if cursor.connection.in_transaction:  # the body or the commit failed
                    cursor.execute(QUERIES["rollback"])

    # -- enqueue -----------------------------------------------------------------------------

    def task_enqueue(self, spec: TaskSpec) -> EnqueueResult:
        with self._writing() as cursor:
            return self._enqueue_one(cursor, spec)

    def task_enqueue_many(self, specs: Sequence[TaskSpec]) -> list[EnqueueResult]:
        if not specs:
            return []
        with self._writing() as cursor:
            return [self._enqueue_one(cursor, spec) for spec in specs]

    def _enqueue_one(self, cursor: sqlite3.Cursor, spec: TaskSpec) -> EnqueueResult:
        params = {
            "queue": spec.queue,
            "kind": spec.kind,
            "payload": _encode(spec.payload),
            "idem_key": spec.idem_key,
            "unique_key": spec.unique_key,
            "max_attempts": spec.max_attempts,
            "run_at": _sql_time(spec.run_at) if spec.run_at else None,
            "delay": _offset(spec.delay_secs),
            "priority": spec.priority,
        }
        inserted = cursor.execute(QUERIES["enqueue"], params).fetchall()
        if inserted:
            return EnqueueResult(task_id=inserted[0][0])
        return self._existing(cursor, spec)

    def _existing(self, cursor: sqlite3.Cursor, spec: TaskSpec) -> EnqueueResult:
        """The task an enqueue clashed with: same key and work (duplicate), or a mismatch."""
        if spec.idem_key is not None:
            params = {"idem_key": spec.idem_key}
            rows = cursor.execute(QUERIES["find_by_idem_key"], params).fetchall()
            if rows:
                task_id, queue, kind, payload = rows[0]
                if (queue, kind, _decode(payload)) != (spec.queue, spec.kind, _copy(spec.payload)):
                    raise IdempotencyMismatch(spec.idem_key, task_id)
                return EnqueueResult(task_id=task_id, duplicate=True)
        if spec.unique_key is not None:
            params = {"kind": spec.kind, "unique_key": spec.unique_key}
            rows = cursor.execute(QUERIES["find_unique_pending"], params).fetchall()
            if rows:
                return EnqueueResult(task_id=rows[0][0], duplicate=True)
        raise StoreError(f"enqueue of {spec.kind!r} was refused by a constraint of rivet_task")

    # -- claim and leases --------------------------------------------------------------------

    def task_claim(
        self, *, queues: Sequence[str], owner: str, limit: int, lease_ttl: float
    ) -> ClaimBatch:
        claimed: list[Claimed] = []
        buried = 0
        with self._writing() as cursor:
            now = cursor.execute(QUERIES["now"]).fetchone()[0]
            lease = {"now": now, "owner": owner, "ttl": _offset(lease_ttl)}
            for queue in queues:
                if len(claimed) >= limit:
                    break
                got, lost = self._claim_queue(cursor, queue, limit - len(claimed), lease)
                claimed += got
                buried += lost
        return ClaimBatch(claimed=claimed, buried=buried)

    def _claim_queue(
        self, cursor: sqlite3.Cursor, queue: str, limit: int, lease: dict[str, Any]
    ) -> tuple[list[Claimed], int]:
        """Walk one queue in claim order: lease up to ``limit``, burying exhausted tasks met."""
        claimed: list[Claimed] = []
        buried, seen = 0, []
        while len(claimed) < limit:
            wanted = limit - len(claimed)
            pick = {"queue": queue, "now": lease["now"], "seen": json.dumps(seen), "limit": wanted}
            picked = [task_id for (task_id,) in cursor.execute(QUERIES["claim_pick"], pick)]
            if not picked:
                break
            leased = {"ids": json.dumps(picked), "lost_suffix": WORKER_LOST_SUFFIX, **lease}
            rows = {
                row["id"]: row for row in _dicts(cursor.execute(QUERIES["claim_lease"], leased))
            }
            for task_id in picked:
                if rows[task_id]["state"] == "dead":
                    buried += 1
                else:
                    claimed.append(_claimed(rows[task_id], lease["owner"]))
            if len(picked) < wanted:
                break
            seen += picked
        return claimed, buried

    def lease_extend(self, leases: Sequence[Lease], lease_ttl: float) -> set[int]:
        if not leases:
            return set()
        pairs = json.dumps([[lease.task_id, lease.epoch] for lease in leases])
        with self._writing() as cursor:
            held = cursor.execute(
                QUERIES["lease_extend"], {"leases": pairs, "ttl": _offset(lease_ttl)}
            )
            return {task_id for (task_id,) in held.fetchall()}

    def _fence(self, cursor: sqlite3.Cursor, lease: Lease, op: str, owner: str) -> None:
        params = {"id": lease.task_id, "epoch": lease.epoch, "op": op, "owner": owner}
        cursor.execute(QUERIES["fence"], params)

    def task_ack(self, lease: Lease, result: Any = None, *, owner: str = "") -> AckOutcome:
        params = {"id": lease.task_id, "epoch": lease.epoch, "result": _encode(result)}
        with self._writing() as cursor:
            if cursor.execute(QUERIES["ack"], params).rowcount == 1:
                return AckOutcome.ACKED
            self._fence(cursor, lease, "ack", owner)
            return AckOutcome.FENCED

    def task_fail(
        self, lease: Lease, error: str, retry_delay: float, *, owner: str = ""
    ) -> FailOutcome:
        params = {
            "id": lease.task_id,
            "epoch": lease.epoch,
            "error": error,
            "error_suffix": HANDLER_ERROR_SUFFIX,
            "delay": _offset(max(retry_delay, 0.0)),
        }
        with self._writing() as cursor:
            states = cursor.execute(QUERIES["fail"], params).fetchall()
            if not states:
                self._fence(cursor, lease, "fail", owner)
                return FailOutcome.FENCED
            return FailOutcome.DEAD if states[0][0] == "dead" else FailOutcome.RETRY

    # -- reads -------------------------------------------------------------------------------

    def task_get(self, task_id: int) -> TaskRecord | None:
        with self._reading() as cursor:
            rows = _dicts(cursor.execute(QUERIES["task_get"], {"id": task_id}))
        return _record(rows[0]) if rows else None

    def task_list(
        self, *, queue: str | None = None, state: str | None = None, limit: int = 100
    ) -> list[TaskRecord]:
        params = {"queue": queue, "state": state, "limit": max(limit, 0)}
        with self._reading() as cursor:
            rows = _dicts(cursor.execute(QUERIES["task_list"], params))
        return [_record(row) for row in rows]

    def queue_stats(self, queue: str) -> QueueStats:
        with self._reading() as cursor:
            row = cursor.execute(QUERIES["queue_stats"], {"queue": queue}).fetchone()
        now, ready, leased, delayed, done, dead, oldest, fenced = row
        age = (_parse_time(now) - _parse_time(oldest)).total_seconds() if oldest else None
        return QueueStats(
            queue=queue,
            ready=ready,
            leased=leased,
            delayed=delayed,
            done=done,
            dead=dead,
            oldest_ready_age_secs=age,
            fenced=fenced,
        )

    def fenced_count(self, queue: str | None = None, op: str | None = None) -> int:
        with self._reading() as cursor:
            return cursor.execute(QUERIES["fenced_count"], {"queue": queue, "op": op}).fetchone()[0]

    # -- dead letters ------------------------------------------------------------------------

    def dead_requeue(self, queue: str, task_id: int) -> bool:
        params = {"id": task_id, "queue": queue}
        with self._writing() as cursor:
            return cursor.execute(QUERIES["dead_requeue"], params).rowcount == 1

    def dead_sweep(self, queue: str) -> int:
        params = {"queue": queue, "lost_suffix": WORKER_LOST_SUFFIX}
        with self._writing() as cursor:
            return cursor.execute(QUERIES["dead_sweep"], params).rowcount

    def dead_purge(
        self,
        queue: str,
        *,
        older_than_secs: float | None = None,
        task_ids: Sequence[int] | None = None,
    ) -> int:
        age = None if older_than_secs is None else _offset(-older_than_secs)
        ids = None if task_ids is None else json.dumps([int(task_id) for task_id in task_ids])
        params = {"queue": queue, "age": age, "ids": ids}
        with self._writing() as cursor:
            return cursor.execute(QUERIES["dead_purge"], params).rowcount
