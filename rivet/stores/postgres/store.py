"""PostgresStore: the production store, raw SQL on Django's own connection.

Because it uses ``connections[using]``, an enqueue joins the caller's ``transaction.atomic()``:
the business row and its task commit or roll back together. Every write is one short
transaction (a savepoint inside the caller's). The semantics are ``rivet.stores.sql``'s; this
module keeps what is PostgreSQL's own: the queries (postgres.sql), a flush as one statement
(the settle batch over ``unnest`` of arrays, and the next claim), the bulk enqueue (``bulk``),
and the LISTEN wake-up (``wakeup``).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import psycopg
from django.db import Error as DjangoDatabaseError
from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from psycopg.conninfo import conninfo_to_dict

from rivet import logs
from rivet.conf import rivet_settings
from rivet.stores.base import Waiting
from rivet.stores.bulk import BulkEnqueue
from rivet.stores.claim import ClaimPlan, PartlyCommitted, walk_claim
from rivet.stores.floor import FRONT, ClaimFloors, claim_through_floor
from rivet.stores.idle import bound_transaction
from rivet.stores.postgres.queries import QUERIES
from rivet.stores.postgres.session import (
    POOLER_NOTE,
    WAITERS,
    lost_prepared,
    pooler_between,
    probed,
)
from rivet.stores.postgres.wire import (
    DIRECT_ENQUEUE,
    PREPARED_QUERIES,
    SETTLE_COLUMNS,
    SETTLE_TYPES,
    array_text,
    raw_cursor,
    send_bound,
    settle_claim_text,
    tuple_cursor,
)
from rivet.stores.sqlrows import burial_rows
from rivet.stores.wakeup import WakeupListener
from rivet.values import ClaimBatch, EnqueueResult, QueueStats, TaskSpec

#: ``RIVET_POSTGRES_PLAIN=1``: stores made without ``fast_paths`` send every statement the
#: plain way (``rivet.stores.postgres.wire``), to rule the speed paths out of a problem.
PLAIN_ENV = "RIVET_POSTGRES_PLAIN"


#: Claim parameters of a settle_claim statement that only settles.
NO_CLAIM: dict[str, Any] = {"queue": None, "limit": 0, "owner": "", "ttl": 0.0, "seen": [], **FRONT}


@dataclass(frozen=True)
class FlushRows:
    """What one settle_claim statement answered, sorted out by each row's ``position``.

    ``applied``: {position of a settle row: cancelled} of the rows applied (a fenced row is
    absent); ``met``: the rows the claim met, in claim order, the doomed ones flagged.
    """

    applied: dict[int, bool]
    met: list[dict[str, Any]]

    @classmethod
    def of(cls, rows: list[dict[str, Any]]) -> FlushRows:
        applied: dict[int, bool] = {}
        met: list[dict[str, Any]] = []
        for row in rows:
            position = row["position"]
            if position is None:  # met by the claim: leased, or doomed
                met.append(row)
            else:  # a settle row, 1-based
                applied[position - 1] = row["cancel_requested"]
        # RETURNING has no order: claim order is claim_rank (priority aging), then id.
        met.sort(key=claim_order)
        return cls(applied=applied, met=met)


def claim_order(row: dict[str, Any]) -> tuple:
    """Claim order of the rows one statement met (doomed ones, not leased, go last)."""
    if row["doomed"]:
        return (1, 0, row["id"])
    return (0, row["rank_us"], row["id"])


class PostgresStore(BulkEnqueue):
    """Tasks in rivet_task on a PostgreSQL database alias; wakes idle workers with NOTIFY."""

    name = "postgres"
    queries = QUERIES
    DIALECT_SETTINGS = (("channel", "NOTIFY_CHANNEL"),)
    driver_errors = (psycopg.Error,)
    transient_errors = (psycopg.OperationalError, psycopg.InterfaceError)

    def __init__(self, using: str = "default", *, fast_paths: bool | None = None) -> None:
        """``fast_paths``: send statements the fast way (``rivet.stores.postgres.wire``); False
        sends each the plain way, through Django's cursor, with the same meaning; None: the
        fast way unless the environment says ``RIVET_POSTGRES_PLAIN=1``."""
        self.using = using
        if fast_paths is None:
            fast_paths = os.environ.get(PLAIN_ENV, "").strip() not in ("1", "true", "yes")
        self.fast_paths = fast_paths
        #: A prepared statement vanished or clashed: a transaction pooler the alias did not name.
        self.pooler_detected = False

    # The listener and the floors are made on first use: an enqueue makes a store on every call
    # (``rivet.stores.store_for_queue``) and uses neither; only a worker's loop does.

    @functools.cached_property
    def _listener(self) -> WakeupListener:
        """The connection a waiting worker LISTENs on (opened on its first wait)."""
        return WakeupListener(self._listener_params, QUERIES["listen"], QUERIES["wait_hold"])

    @functools.cached_property
    def floors(self) -> ClaimFloors:
        """Where this store's next claim in each queue starts reading (rivet.stores.floor)."""
        return ClaimFloors()

    @property
    def pooled(self) -> bool:
        """True when a transaction pooler (PgBouncer's ``pool_mode = transaction``) sits between.

        The alias says so with Django's own switch for that case,
        ``DATABASES[alias]["DISABLE_SERVER_SIDE_CURSORS"] = True``: then a server connection
        serves this client for one transaction only, so rivet keeps no state in the session
        (no prepared statements, no session SET, no session temporary table, no LISTEN).
        Without it, a prepared statement the server lost or already had (what a transaction
        pooler does to them) fails that one statement, and the store is pooled from then on
        (``pooler_detected``, logged once as ``transaction_pooler_detected``).
        """
        return self._pooled_on(connections[self.using])

    def _pooled_on(self, connection: Any) -> bool:
        """``pooled``, for the alias's connection already at hand.

        An alias that does not say so is probed once per process, before rivet sends anything
        that would stay in a session (``transaction_pooler_between``): a transaction pooler
        found so is logged once as ``transaction_pooler_detected`` and treated as named.
        """
        if self.pooler_detected:
            return True
        settings_dict = connection.settings_dict
        if settings_dict.get("DISABLE_SERVER_SIDE_CURSORS"):
            return True
        way = (self.using,) + tuple(
            str(settings_dict.get(key) or "") for key in ("HOST", "PORT", "NAME", "USER")
        )
        found = probed(way)
        if found is None:
            found = pooler_between(connection, way, self.using)
        if found and probed(way) is not None:
            self.pooler_detected = True
        return found

    @property
    def supports_wakeup(self) -> bool:  # type: ignore[override]
        """LISTEN works unless a transaction pooler sits between and no bypass is configured."""
        return not self.pooled or bool(rivet_settings.LISTEN_DATABASE_URL)

    @contextmanager
    def _reading(self) -> Iterator[Any]:
        with connections[self.using].cursor() as cursor:
            yield cursor

    @contextmanager
    def _writing(self) -> Iterator[Any]:
        connection = connections[self.using]
        outermost = not connection.in_atomic_block
        with transaction.atomic(using=self.using), self._reading() as cursor:
            if outermost:  # a transaction of rivet's own: a stalled process frees its locks
                bound_transaction(cursor, "postgresql")
            yield cursor

    def _one_statement(self) -> AbstractContextManager[Any]:
        # One statement is atomic by itself: outside the caller's transaction it autocommits,
        # one round trip instead of three (BEGIN is implicit, then COMMIT).
        if connections[self.using].in_atomic_block:
            return self._writing()
        return self._reading()

    def _after_error(self) -> None:
        """After a driver error outside any transaction, let Django reconnect next time."""
        connection = connections[self.using]
        if not connection.in_atomic_block:
            with suppress(DjangoDatabaseError):
                connection.close_if_unusable_or_obsolete()

    # -- queue counts ------------------------------------------------------------------------

    @contextmanager
    def _overview_reading(self) -> Iterator[Any]:
        with self._writing() as cursor:
            cursor.execute(self.queries["jit_off"])
            yield cursor

    def _queue_stats(self, cursor: Any, row: dict[str, Any]) -> QueueStats:
        if row["done"] <= self.done_count_limit:
            return super()._queue_stats(cursor, row)
        (answer,) = self._rows(cursor, "done_estimate", {"queue": row["queue"]})
        (plan,) = answer.values()
        plan = json.loads(plan) if isinstance(plan, str) else plan
        estimate = max(int(plan[0]["Plan"]["Plan Rows"]), row["done"])
        return replace(super()._queue_stats(cursor, row), done=estimate, done_estimated=True)

    # -- settle and claim: one statement ----------------------------------------------------

    def _settle_claim(
        self, rows: list[dict[str, Any]], plan: ClaimPlan, ttl: float
    ) -> tuple[dict[int, bool], ClaimBatch]:
        """The settle rows and the first claim in one statement; more claims only if needed.

        Outside the caller's transaction each statement commits by itself (one round trip):
        when a later claim statement fails, the first one's decisions are committed, and the
        error says so (PartlyCommitted, raised to the caller as ClaimFailed).
        """
        atomic = connections[self.using].in_atomic_block  # then a savepoint around it all
        with self._writing() if atomic else self._reading() as cursor:
            if not plan.queues:
                return self._statement(cursor, rows, None).applied, ClaimBatch()
            return self._walk_from(cursor, rows, plan, ttl)

    def _walk_from(
        self, cursor: Any, rows: list[dict[str, Any]], plan: ClaimPlan, ttl: float
    ) -> tuple[dict[int, bool], ClaimBatch]:
        """Walk the claim; its first statement also applies the settle rows.

        The doomed rows a statement met are buried, with the texts ``rivet.values.claim_burial``
        composes from them, by the walk's next statement, or by one more after the last: a
        claim that met none (the hot path) sends no more statements than it leases with.
        """
        claim = {"owner": plan.owner, "ttl": ttl}
        first: list[FlushRows] = []
        unburied: list[dict[str, Any]] = []
        buried = 0

        def statement(pick: dict[str, Any] | None) -> list[dict[str, Any]]:
            nonlocal buried
            if first:
                burials = burial_rows(unburied)
                unburied.clear()
                flushed = self._later_statement(cursor, burials, pick, first[0].applied, len(rows))
                buried += len(flushed.applied)
            else:
                flushed = self._statement(cursor, rows, pick)
                first.append(flushed)
            unburied.extend(row for row in flushed.met if row["doomed"])
            return flushed.met

        def claim_rows(pick: dict[str, Any]) -> list[dict[str, Any]]:
            return claim_through_floor(self.floors, {**claim, **pick}, statement, order=claim_order)

        claimed, _ = walk_claim(plan, claim_rows)
        if unburied:
            statement(None)
        return first[0].applied, ClaimBatch(claimed=claimed, buried=buried)

    def _later_statement(
        self,
        cursor: Any,
        rows: list[dict[str, Any]],
        pick: dict[str, Any] | None,
        applied: dict[int, bool],
        settled: int,
    ) -> FlushRows:
        """A statement after the first; outside a transaction the first is committed."""
        try:
            return self._statement(cursor, rows, pick)
        except (DjangoDatabaseError, psycopg.Error) as exc:
            if connections[self.using].in_atomic_block or not settled:
                raise
            raise PartlyCommitted(applied, self._store_error("task_settle_and_claim", exc)) from exc

    def _statement(
        self, cursor: Any, rows: list[dict[str, Any]], pick: dict[str, Any] | None
    ) -> FlushRows:
        """Run settle_claim: the settle rows applied and the rows its claim met."""
        params: dict[str, Any]
        if not self.fast_paths:  # the plain way: lists as psycopg adapts them, Django's cursor
            params = {f"{column}s": [row[column] for row in rows] for column in SETTLE_COLUMNS}
            params.update(pick or NO_CLAIM)
            return FlushRows.of(super()._rows(cursor, "settle_claim", params))
        params = {
            f"{column}s": array_text([row[column] for row in rows], SETTLE_TYPES.get(column, "str"))
            for column in SETTLE_COLUMNS
        }
        params.update(pick or NO_CLAIM)
        params["seen"] = array_text(params["seen"], "int")
        text = settle_claim_text(params["limit"])
        claims = params["queue"] is not None and params["limit"] > 0
        return FlushRows.of(self._bound_rows(cursor, text, params, generic=True, sort_off=claims))

    def _rows(self, cursor: Any, query: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        if query in PREPARED_QUERIES and self.fast_paths:
            return self._bound_rows(cursor, self.queries[query], params)
        return super()._rows(cursor, query, params)

    def _bound_rows(
        self,
        cursor: Any,
        sql_text: str,
        params: dict[str, Any],
        generic: bool = False,
        sort_off: bool = False,
    ) -> list[dict]:
        """Run ``sql_text`` bound on the server (``wire.send_bound``), as a prepared statement
        unless a transaction pooler sits between (``pooled``: PgBouncer before 1.21 loses
        prepared statements, and a session SET would stay on a server connection other clients
        get next). Pooled, it is the unnamed statement of the extended protocol, parsed and run
        in one round trip, and the plan_cache_mode SET is not sent.

        Django's cursor binds on the client: it quotes every parameter into the text, dear for
        the flush's arrays, and the server parses and plans the text anew each time
        (docs/decisions/0002-prepared-flush-limit-in-text.md). This cursor shares the Django
        connection (its transaction, its type adapters) and goes through what Django's own
        execute does: the connection's execute wrappers (``connection.execute_wrapper``, as
        tracing tools use), the broken-transaction check, and the error wrapper that marks the
        connection for a check after an error. Every parameter of these statements carries its
        own cast, so sending them typed changes no meaning.

        With ``sort_off`` (a statement that claims), the statement is planned and run with
        sorting off for its transaction only (``session.unsorted``): the claim's plan is the
        claim index read in order, whatever the table's statistics say.
        """
        connection = connections[self.using]
        raw = raw_cursor(self.using, cursor.cursor.connection)

        def execute(sql_text: str, values: Any, many: bool, context: dict) -> None:
            self._send_bound(connection, raw, sql_text, values, generic, sort_off)

        executor: Callable[..., None] = execute
        for wrapper in reversed(connection.execute_wrappers):
            executor = partial(wrapper, executor)
        context = {"connection": connection, "cursor": cursor}
        executor(sql_text, {**self._common_params(), **params}, False, context)
        return raw.fetchall() if raw.pgresult and raw.pgresult.nfields else []

    def _send_bound(
        self,
        connection: Any,
        raw: psycopg.Cursor[Any],
        sql_text: str,
        values: dict[str, Any],
        generic: bool = False,
        sort_off: bool = False,
    ) -> None:
        """``wire.send_bound``, prepared unless a pooler sits between."""
        send_bound(
            connection,
            raw,
            sql_text,
            values,
            prepare=not self._pooled_on(connection),
            generic=generic,
            sort_off=sort_off,
            on_lost=self._detected_pooler,
        )

    def _detected_pooler(self, exc: psycopg.Error) -> None:
        """A prepared statement was lost or clashed: a transaction pooler sits between."""
        if not self.pooler_detected:
            self.pooler_detected = True
            logs.event(
                "transaction_pooler_detected",
                logging.WARNING,
                alias=self.using,
                error=" ".join(str(exc).split()),
                note="a prepared statement was lost between transactions: " + POOLER_NOTE,
            )

    def _claim_rows(self, cursor: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
        return self._statement(cursor, [], params).met

    def _settle_rows(self, cursor: Any, rows: list[dict[str, Any]]) -> dict[int, bool]:
        return self._statement(cursor, rows, None).applied

    # -- enqueue -----------------------------------------------------------------------------

    def task_enqueue(self, spec: TaskSpec) -> EnqueueResult:
        # Outside the caller's transaction the INSERT (and its NOTIFY) commits by itself: one
        # round trip instead of BEGIN, INSERT, COMMIT. A conflict is then read back by a
        # second statement, which sees the committed row it conflicted with (the retry loop
        # of _enqueue_one covers a row that vanished in between). Inside the caller's
        # transaction, a savepoint keeps a refused statement from aborting it.
        connection = connections[self.using]
        if connection.in_atomic_block or connection.execute_wrappers or not self.fast_paths:
            # A savepoint in the caller's transaction; or execute wrappers (tracing tools),
            # whose context gets the Django cursor the statement runs for.
            with self._translated("task_enqueue"), self._one_statement() as cursor:
                return self._enqueue_one(cursor, spec)
        # The usual web request's enqueue: no Django cursor is made (its making is a good part
        # of the call: docs/decisions/0007-single-enqueue-path.md), the statement goes straight
        # to the connection, handed down in the cursor's place; and no context manager:
        # _translated's ``except``.
        try:
            return self._enqueue_one(connection, spec)
        except (DjangoDatabaseError, *self.driver_errors) as exc:
            raise self._store_error("task_enqueue", exc) from exc

    def _insert_one(self, cursor: Any, params: dict[str, Any]) -> int | None:
        """``cursor``: a Django cursor, or the alias's connection itself (task_enqueue outside a
        transaction and without execute wrappers), which the statement goes straight to."""
        if not isinstance(cursor, BaseDatabaseWrapper):
            return super()._insert_one(cursor, params)
        # What Django's cursor() does first (the thread check, the health check, connecting),
        # then the statement.
        connection = cursor
        connection.validate_thread_sharing()
        connection.close_if_health_check_failed()
        connection.ensure_connection()
        pg = connection.connection
        values = {**self._common_params(), **params}
        if not (self._pooled_on(connection) or connection.queries_logged):
            # Through libpq itself (``rivet.stores.direct``): less client CPU than psycopg's
            # cursor (docs/decisions/0007-single-enqueue-path.md). None: a value or a state it
            # does not send; psycopg does.
            # With queries logged (DEBUG, assertNumQueries) it goes the logged way below.
            connection.validate_no_broken_transaction()
            try:
                rows = DIRECT_ENQUEUE.run(pg, values)
            except psycopg.Error as exc:
                if lost_prepared(exc):
                    DIRECT_ENQUEUE.forget(pg)
                    self._detected_pooler(exc)
                with connection.wrap_database_errors:  # raised as Django's error, from this one
                    raise
            if rows is not None:
                return int(rows[0][0]) if rows else None
        raw = tuple_cursor(self.using, pg)
        self._send_bound(connection, raw, self.queries["enqueue"], values)
        row = raw.fetchone()
        return None if row is None else row[0]

    def _find_existing(self, cursor: Any, spec: TaskSpec) -> EnqueueResult | None:
        if isinstance(cursor, BaseDatabaseWrapper):  # the insert without a cursor met a key
            with self._reading() as cursor:
                return super()._find_existing(cursor, spec)
        return super()._find_existing(cursor, spec)

    # -- wake-up -----------------------------------------------------------------------------

    def _listener_params(self) -> dict[str, Any]:
        """The LISTEN connection's parameters: the alias's, with LISTEN_DATABASE_URL's on top.

        ``RIVET['LISTEN_DATABASE_URL']`` names a way to the server that bypasses the pooler
        (``postgres://db-primary:5432``); the keys it gives (host, port, user, ...) replace the
        alias's, the others (the database name, the password) stay the alias's.
        """
        params = connections[self.using].get_connection_params()
        for django_only in ("cursor_factory", "context"):
            params.pop(django_only, None)
        if rivet_settings.LISTEN_DATABASE_URL:
            params.update(conninfo_to_dict(rivet_settings.LISTEN_DATABASE_URL))
        return params

    def server_warnings(self) -> list[tuple[str, str]]:
        with self._reading() as cursor:
            cursor.execute(self.queries["autovacuum_setting"])
            (autovacuum,) = cursor.fetchone()
        warnings = []
        if self.pooled and not self.supports_wakeup:
            warnings.append(
                (
                    "wakeup_polling",
                    f"database alias {self.using!r} goes through a transaction pooler "
                    "(DISABLE_SERVER_SIDE_CURSORS) and RIVET['LISTEN_DATABASE_URL'] is not set: "
                    "idle workers poll every POLL_INTERVAL_SECS instead of waking on enqueues; "
                    "set it to a URL that bypasses the pooler to LISTEN",
                )
            )
        if autovacuum != "off":
            return warnings
        return [
            *warnings,
            (
                "autovacuum_off",
                "this PostgreSQL server runs with autovacuum = off: nothing reclaims rivet_task's "
                "dead rows, so the table and its indexes grow as tasks churn and what reads them "
                "slows with them (a claim from a queue's front, the admin's and the metrics' "
                "counts); turn it on, or VACUUM rivet_task often",
            ),
        ]

    def wait_for_work(self, queues: Sequence[str], timeout: float) -> bool:
        if not self.supports_wakeup:  # a LISTEN through a transaction pooler hears nothing
            self._listener.close()  # one opened before a pooler was detected
            time.sleep(max(float(timeout), 0.0))  # a wait, as the listener's own fallback
            return False
        # Behind a transaction pooler the loop's session is not its own: the listening
        # connection (which bypasses the pooler) holds the waiter locks for as long as it
        # listens, so every enqueue on the queues notifies, as before the gate.
        return self._listener.wait(queues, timeout, rivet_settings.NOTIFY_CHANNEL, hold=self.pooled)

    def wait_for_wakeups(self, queues: Sequence[str], waiting: bool) -> Waiting:
        """An enqueue notifies only while a session holds its queue's waiter lock (migration
        0017's ``rivet_wake``): a notifying commit holds a lock every other notifying commit
        waits for, so enqueues that each notified committed one at a time. The loop's
        connection takes the locks when its claim came back short and gives them back when a
        claim filled it; in between it tries the queues' gates, free once every enqueue that
        saw no waiter has ended, and only then does a claim see all that will not notify.
        """
        if self.pooled or not self.supports_wakeup:
            return Waiting.WAITING  # the listener holds them (above), or nothing listens
        connection = connections[self.using]
        if not waiting:
            self._release_waits(connection.connection)
            return Waiting.WAITING
        if not self._listener.listening:
            return Waiting.NOT_YET  # a notification now would reach nobody
        names = tuple(sorted(set(queues)))
        connection.ensure_connection()
        pg = connection.connection
        held, free = WAITERS.get(pg, ((), False))
        if held == names and free:
            return Waiting.WAITING
        if held and held != names:
            self._release_waits(pg)
            held = ()
        with self._translated("wait_hold"), self._reading() as cursor:
            cursor.execute(self.queries["wait_hold"], {"queues": list(names), "hold": not held})
            (free,) = cursor.fetchone()
        WAITERS[pg] = (names, free)
        return Waiting.STARTED if free else Waiting.NOT_YET

    def _release_waits(self, pg: Any) -> None:
        """Give back the waiter locks this connection holds, if any (``wait_release``)."""
        if pg is None or pg not in WAITERS:
            return
        with self._translated("wait_release"), self._reading() as cursor:
            cursor.execute(self.queries["wait_release"], {"queues": list(WAITERS[pg][0])})
        WAITERS.pop(pg, None)

    def close(self) -> None:
        listener = self.__dict__.get("_listener")  # none made: nothing to close
        if listener is not None:
            listener.close()
