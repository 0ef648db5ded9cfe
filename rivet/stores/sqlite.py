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

The semantics are ``rivet.stores.sql``'s; queries live in ``sqlite.sql`` (named blocks).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.db import connections, transaction
from django.utils.dateparse import parse_datetime

from rivet.dberrors import SQLITE_BUSY, SQLITE_LOCKED, sqlite_code
from rivet.errors import RivetConfigError, StoreError
from rivet.stores.sql import SqlStore
from rivet.stores.sqlfile import load_queries
from rivet.stores.sqlrows import BURIAL_OP
from rivet.values import Lease, rank_offset_secs

#: transaction_mode values under which Django's atomic() already takes the write lock first.
LOCKING_MODES = frozenset({"IMMEDIATE", "EXCLUSIVE"})
QUERIES_PATH = Path(__file__).with_name("sqlite.sql")
QUERIES = load_queries(QUERIES_PATH)


def _with_functions(wrapper: Any) -> sqlite3.Connection:
    """Django's open SQLite connection for an alias, with the SQL functions sqlite.sql calls
    registered on it (once per connection: a reconnect gets them again)."""
    raw = wrapper.connection
    if getattr(wrapper, "_rivet_functions_on", None) is not raw:
        raw.create_function("rivet_rank_offset", 2, rank_offset_secs, deterministic=True)
        wrapper._rivet_functions_on = raw
    return raw


def _sql_time(moment: datetime) -> str:
    """An aware datetime as the UTC text Django writes on SQLite (microseconds kept)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def _parse_time(value: str | datetime) -> datetime:
    """A stored timestamp (text, or a datetime Django's converter made) as aware UTC."""
    moment = value if isinstance(value, datetime) else parse_datetime(value)
    if moment is None:
        raise StoreError(f"unreadable timestamp {value!r} in rivet_task")
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


class SqliteStore(SqlStore):
    """Tasks in the rivet_task table of a SQLite database, on Django's connection for ``using``."""

    name = "sqlite"
    supports_wakeup = False
    queries = QUERIES
    driver_errors = (sqlite3.Error,)
    transient_errors = (sqlite3.OperationalError,)

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

    # -- the dialect half --------------------------------------------------------------------

    def _list(self, values: Sequence[Any]) -> str:
        return json.dumps(list(values))

    def _at(self, moment: datetime | None) -> str | None:
        return None if moment is None else _sql_time(moment)

    def _time(self, value: Any) -> datetime:
        return _parse_time(value)

    def _claim_params(self, cursor: Any, owner: str, lease_ttl: float) -> dict[str, Any]:
        # One instant for the whole claim: leases taken by it compare against the same now.
        now = cursor.execute(QUERIES["now"]).fetchone()[0]
        return {"owner": owner, "ttl": float(lease_ttl), "now": now}

    def _claim_rows(self, cursor: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
        picked = self._rows(cursor, "claim_pick", params)
        runnable = [row["id"] for row in picked if not row["doomed"]]
        leased = {}
        if runnable:
            lease = {**params, "ids": self._ids(runnable)}
            leased = {row["id"]: row for row in self._rows(cursor, "claim_lease", lease)}
        return [row if row["doomed"] else {**leased[row["id"]], "doomed": 0} for row in picked]

    def _oldest_ready_age(self, row: dict[str, Any]) -> float | None:
        now, oldest = row.pop("now"), row.pop("oldest_ready_at")
        return None if oldest is None else (_parse_time(now) - _parse_time(oldest)).total_seconds()

    def _error_message(self, exc: Exception) -> str:
        if sqlite_code(exc) not in (SQLITE_BUSY, SQLITE_LOCKED):
            return str(exc)
        return (
            f"{exc} (another connection kept the write lock past DATABASES[{self.using!r}]"
            "['OPTIONS']['timeout'] seconds, or a transaction that began DEFERRED and had "
            "already read could not take it; set OPTIONS['transaction_mode'] = 'IMMEDIATE')"
        )

    def _settle_rows(self, cursor: Any, rows: list[dict[str, Any]]) -> dict[int, bool]:
        applied: dict[int, bool] = {}
        params = self._common_params()
        for position, row in enumerate(rows):
            done = []
            if row["state"] is not None:
                done = cursor.execute(QUERIES["settle"], {**params, **row}).fetchall()
            if done:
                applied[position] = bool(done[0][0])
            elif row["op"] != BURIAL_OP:
                cursor.execute(QUERIES["fence"], row)
        return applied

    def _record_refused_heartbeats(self, cursor: sqlite3.Cursor, refused: list[Lease]) -> None:
        for lease in refused:
            cursor.execute(
                QUERIES["lease_refused"],
                {"task_id": lease.task_id, "epoch": lease.epoch, "owner": lease.owner},
            )

    # -- connections and transactions --------------------------------------------------------

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Cursor]:
        """A cursor for one read statement, in the caller's transaction if there is one."""
        connection = connections[self.using]
        connection.ensure_connection()
        cursor = _with_functions(connection).cursor()
        try:
            yield cursor
        finally:
            cursor.close()

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Cursor]:
        """A cursor in a transaction holding the write lock; joins the caller's atomic block."""
        connection = connections[self.using]
        connection.ensure_connection()
        if (
            connection.in_atomic_block
            or getattr(connection, "transaction_mode", None) in LOCKING_MODES
        ):
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
