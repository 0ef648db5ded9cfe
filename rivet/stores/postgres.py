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
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
from django.db import Error as DjangoDatabaseError
from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorDebugWrapper
from psycopg.adapt import Dumper
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from rivet import logs
from rivet.conf import rivet_settings
from rivet.stores.base import Waiting
from rivet.stores.bulk import BulkEnqueue
from rivet.stores.claim import ClaimPlan, PartlyCommitted, walk_claim
from rivet.stores.direct import DirectStatement
from rivet.stores.floor import FRONT, ClaimFloors, claim_through_floor
from rivet.stores.idle import bound_transaction
from rivet.stores.sqlfile import load_queries
from rivet.stores.sqlrows import burial_rows
from rivet.stores.wakeup import WakeupListener
from rivet.values import ClaimBatch, EnqueueResult, QueueStats, TaskSpec

QUERIES = load_queries(Path(__file__).with_name("postgres.sql"))
#: The single enqueue outside a transaction, sent through libpq (``rivet.stores.direct``).
DIRECT_ENQUEUE = DirectStatement("rivet_enqueue", QUERIES["enqueue"])

SETTLE_COLUMNS = (
    "task_id",
    "epoch",
    "owner",
    "op",
    "state",
    "result",
    "error",
    "cancelled_error",
    "delay",
)
#: The element type of each settle column's array (``array_text``).
SETTLE_TYPES = {"task_id": "int", "epoch": "int", "delay": "float"}
#: Queries run often enough that they are sent as prepared statements (besides settle_claim):
#: a single enqueue spends a large part of its server time parsing and planning.
PREPARED_QUERIES = frozenset({"enqueue"})
#: psycopg's prepare_threshold on a connection rivet prepares on: only statements run with
#: prepare=True (rivet's) are prepared; every other query is left as Django sends it.
ONLY_WHEN_ASKED = 2**31 - 1
#: The direct (not pooled) connections whose session holds the worker's settings
#: (``worker_session``: generic plans, sorting off): they ran a flush outside a transaction.
_WORKER_SESSIONS: weakref.WeakSet[Any] = weakref.WeakSet()
#: The connections whose session waits on queues (``wait_hold``), by connection: the queues,
#: and whether every gate was free once (from then on every enqueue on them notifies).
_WAITERS: weakref.WeakKeyDictionary[Any, tuple[tuple[str, ...], bool]] = weakref.WeakKeyDictionary()
#: What a prepared statement meets behind a transaction pooler: gone from the server connection
#: this transaction got (26000), or another client's of the same name there (42P05).
LOST_PREPARED = (psycopg.errors.InvalidSqlStatementName, psycopg.errors.DuplicatePreparedStatement)


def _idle_autocommit(pg: psycopg.Connection) -> bool:
    """In autocommit with no transaction open: a session setting sent now commits at once."""
    return pg.autocommit and pg.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def keeps_session(pg: psycopg.Connection) -> bool:
    """Whether ``pg``'s session holds the worker's settings or waiter locks."""
    return pg in _WORKER_SESSIONS or pg in _WAITERS


def end_worker_session(pg: psycopg.Connection) -> bool:
    """Take ``worker_session``'s settings (and ``wait_hold``'s locks) back from ``pg`` if its
    session holds them. False
    when they stay: ``pg`` is in a transaction, or the reset failed (then close it rather than
    hand it on). For a connection that another user gets next: one going back to a pool (a
    handler's ORM queries must not run with them), or the test suite's, which outlive each
    test; a worker loop's own connection keeps them while the loop keeps it."""
    if pg not in _WORKER_SESSIONS and pg not in _WAITERS:
        return True
    if not pg.closed:
        if not _idle_autocommit(pg):
            return False
        try:
            if pg in _WORKER_SESSIONS:
                pg.execute(QUERIES["worker_session_end"])
            if pg in _WAITERS:
                pg.execute(QUERIES["wait_release"], {"queues": list(_WAITERS[pg][0])})
        except psycopg.Error:
            return False
    _WORKER_SESSIONS.discard(pg)
    _WAITERS.pop(pg, None)
    return True


#: What the probe found for each way to a server (alias, host, port, database, user), in this
#: process: True when a transaction pooler sits between. A probe that could not tell (the
#: server did not answer) is not kept: the next use probes again.
_PROBED: dict[tuple[str, ...], bool] = {}
_PROBE_LOCK = threading.Lock()
POOLER_NOTE = (
    "a transaction pooler (PgBouncer pool_mode = transaction) sits between; rivet prepares, "
    "SETs, LISTENs and locks nothing in a session from now on. Set "
    "DATABASES[alias]['DISABLE_SERVER_SIDE_CURSORS'] = True to say so (docs/pgbouncer.md)"
)
#: How many times the probe looks: a client of the pooler that takes the released server
#: connection between the probe's two statements hides the pooler from one look.
PROBE_LOOKS = 3


def transaction_pooler_between(params: dict[str, Any]) -> bool | None:
    """Whether a transaction (or statement) pooler sits between this client and the server,
    found without leaving anything in any session; None when the server did not answer.

    Two connections: the first runs one statement outside a transaction, the second then opens
    a transaction. A session pooler or a direct connection keeps the first connection's server
    backend for its whole session, so the second always gets another one. A transaction pooler
    releases it when the statement ends and hands the most recently released server connection
    to the next transaction (PgBouncer's default, ``server_round_robin = 0``): the two see the
    same ``pg_backend_pid()``. Nothing is SET, prepared, listened to or locked.
    """
    try:
        with (
            psycopg.connect(**params, autocommit=True) as first,
            psycopg.connect(**params, autocommit=False) as second,
        ):
            for _ in range(PROBE_LOOKS):
                released = first.execute("SELECT pg_backend_pid()", prepare=False).fetchone()
                held = second.execute("SELECT pg_backend_pid()", prepare=False).fetchone()
                second.rollback()
                if released == held:
                    return True
            return False
    except psycopg.Error:
        return None


#: Seconds the probe may take. A transaction pooler whose every server connection is held
#: (one of them perhaps by this very client, inside the caller's transaction) holds the probe's
#: statements until one is free: past this, the probe stops waiting and rivet keeps nothing in
#: the session, which is right behind any pooler and only slower on a direct connection.
PROBE_TIMEOUT_SECS = 5.0


def _probe_in_time(params: dict[str, Any]) -> tuple[bool | None, str]:
    """``transaction_pooler_between`` within PROBE_TIMEOUT_SECS; None when the server refused
    the connection. No answer by then is taken for a pooler (logged): a direct connection
    answers at once, while a pooler whose every server connection is taken (one of them,
    perhaps, by this client's own open transaction) holds the probe's statements. Returns the
    answer and how it was found."""
    answer: list[bool | None] = []
    probing = threading.Thread(
        target=lambda: answer.append(transaction_pooler_between(params)),
        name="rivet-pooler-probe",
        daemon=True,
    )
    probing.start()
    probing.join(PROBE_TIMEOUT_SECS)
    if answer:
        return answer[0], "two connections were given one server connection in turn"
    return (
        True,
        f"the probe got no answer in {PROBE_TIMEOUT_SECS:g} s: every server connection taken",
    )


def lost_prepared(exc: psycopg.Error) -> bool:
    """Whether ``exc`` says a transaction pooler moved this client's prepared statements: one
    lost or clashing, or another client's of the same name there with other parameters
    ("bind message supplies 15 parameters, but prepared statement "_pg3_0" requires 11")."""
    if isinstance(exc, LOST_PREPARED):
        return True
    return isinstance(exc, psycopg.errors.ProtocolViolation) and "prepared statement" in str(exc)


#: Each thread's psycopg cursor for the statements rivet binds on the server, by alias.
_RAW_CURSORS = threading.local()


def _tuple_cursor(alias: str, pg: psycopg.Connection) -> psycopg.Cursor[tuple[Any, ...]]:
    """``_raw_cursor`` with rows as tuples: for a statement whose columns the caller knows
    (a single enqueue's id), without a dict built per row."""
    held: dict[str, psycopg.Cursor[Any]] = _RAW_CURSORS.__dict__.setdefault("tuples", {})
    raw = held.get(alias)
    if raw is None or raw.connection is not pg or raw.closed:
        raw = held[alias] = psycopg.Cursor(pg)
    return raw


@contextmanager
def _in_query_log(connection: Any, raw: Any, sql_text: str, values: Any) -> Iterator[None]:
    """Record a statement rivet sends past Django's cursor as Django's debug cursor records its
    own (its ``debug_sql``: ``connection.queries_log`` and the ``django.db.backends`` logger),
    when the connection logs queries (DEBUG, ``assertNumQueries``, ``CaptureQueriesContext``)."""
    if not connection.queries_logged:
        yield
        return
    with CursorDebugWrapper(raw, connection).debug_sql(sql_text, values):
        yield


def _raw_cursor(alias: str, pg: psycopg.Connection) -> psycopg.Cursor[dict[str, Any]]:
    """The thread's cursor on ``pg`` for server-bound statements, kept from one to the next.

    A new psycopg cursor finds again how to send each parameter's type and read each column's,
    a large part of a single enqueue's client CPU (docs/decisions/0007-single-enqueue-path.md).
    One is kept per thread and alias (a Django
    connection belongs to its thread), for the alias's connection of the moment: once Django
    reconnects, the next statement gets a new one and the old one goes with its connection.
    """
    held: dict[str, psycopg.Cursor[dict[str, Any]]] = _RAW_CURSORS.__dict__.setdefault("held", {})
    raw = held.get(alias)
    if raw is None or raw.connection is not pg or raw.closed:
        raw = held[alias] = psycopg.Cursor(pg, row_factory=dict_row)
    return raw


#: Claim parameters of a settle_claim statement that only settles.
NO_CLAIM: dict[str, Any] = {"queue": None, "limit": 0, "owner": "", "ttl": 0.0, "seen": [], **FRONT}


@functools.cache
def settle_claim_text(limit: int) -> str:
    """settle_claim with its LIMIT written in: one text (one prepared statement) per limit.

    As a parameter, the LIMIT makes the server's generic plan guess a tenth of the table and
    scan it; written in, the plan of a prepared statement is the one a fresh plan would be,
    and its planning is paid once per limit, not per flush
    (docs/decisions/0002-prepared-flush-limit-in-text.md).
    """
    return QUERIES["settle_claim"].replace("%(limit)s::integer", str(int(limit)))


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


class ArrayText(str):
    """An array parameter written as PostgreSQL's array literal, sent as it is under the oid of
    its class (``ArrayTextDumper``); a plain ``str`` goes as psycopg sends text, untyped."""

    oid = 0


class SmallintArray(ArrayText):
    oid = 1005


class IntegerArray(ArrayText):
    oid = 1007


class BigintArray(ArrayText):
    oid = 1016


class FloatArray(ArrayText):
    oid = 1022


class ArrayTextDumper(Dumper):
    """Sends an ``ArrayText`` as it is, typed by its class (its oid)."""

    def __init__(self, cls: type[ArrayText], context: Any = None) -> None:
        super().__init__(cls, context)
        self.oid = cls.oid

    def dump(self, obj: Any) -> bytes:
        return obj.encode()


for _array in (SmallintArray, IntegerArray, BigintArray, FloatArray):
    psycopg.adapters.register_dumper(_array, ArrayTextDumper)


def array_text(values: list[Any], kind: str) -> str:
    """A list as PostgreSQL's array literal (``{1,2}``, ``{"a",NULL}``), for a parameter the
    statement casts to its array type (every one of settle_claim's does); ``kind`` is that
    type's element: ``int``, ``float`` or ``str``.

    psycopg adapts a list element by element in Python (finding the element type, quoting
    each one): for the flush's ten arrays that costs a busy worker several times what writing
    the literal here does (docs/decisions/0005-worker-python-per-task.md). Integers are
    written bare (``int`` first:
    nothing but a number can reach the text); anything else is double-quoted with ``\\`` and
    ``"`` escaped, which the array parser reads back as the same text (a float's ``repr`` as
    float8 reads it), and None is NULL.

    Each literal is typed as psycopg types the list it stands for (integers by their range,
    floats as float8[], text and empty lists untyped): psycopg keys a prepared statement by its
    text and its parameters' types, so the flush prepares the statements it prepared before,
    when it did, and gets the plans it got (tests/integration/test_stale_statistics.py).
    """
    if not values:
        return "{}"
    if kind == "int":
        numbers = [int(value) for value in values]
        low, high = min(numbers), max(numbers)
        if -(2**15) <= low and high < 2**15:
            typed: type[ArrayText] = SmallintArray
        elif -(2**31) <= low and high < 2**31:
            typed = IntegerArray
        else:
            typed = BigintArray
        return typed("{" + ",".join([str(number) for number in numbers]) + "}")
    text = "{" + ",".join([_element(value) for value in values]) + "}"
    return FloatArray(text) if kind == "float" else text


def _element(value: Any) -> str:
    if value is None:
        return "NULL"
    text = value if type(value) is str else repr(value) if type(value) is float else str(value)
    if "\\" in text or '"' in text:
        text = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


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

    def __init__(self, using: str = "default") -> None:
        self.using = using
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
        found = _PROBED.get(way)
        if found is None:
            found = self._probe(connection, way)
        if found and way in _PROBED:
            self.pooler_detected = True
        return found

    def _probe(self, connection: Any, way: tuple[str, ...]) -> bool:
        """Probe the alias's way to the server (once per process; ``_pooled_on``)."""
        with _PROBE_LOCK:
            if way in _PROBED:
                return _PROBED[way]
            params = connection.get_connection_params()
            for django_only in ("cursor_factory", "context"):
                params.pop(django_only, None)
            found, how = _probe_in_time(params)
            if found is None:  # refused: unknown, so keep nothing in the session for now
                return True
            _PROBED[way] = found
        if found:
            logs.event(
                "transaction_pooler_detected",
                logging.WARNING,
                alias=self.using,
                how=how,
                note=POOLER_NOTE,
            )
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
        params: dict[str, Any] = {
            f"{column}s": array_text([row[column] for row in rows], SETTLE_TYPES.get(column, "str"))
            for column in SETTLE_COLUMNS
        }
        params.update(pick or NO_CLAIM)
        params["seen"] = array_text(params["seen"], "int")
        text = settle_claim_text(params["limit"])
        claims = params["queue"] is not None and params["limit"] > 0
        return FlushRows.of(self._bound_rows(cursor, text, params, generic=True, unsorted=claims))

    def _rows(self, cursor: Any, query: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        if query in PREPARED_QUERIES:
            return self._bound_rows(cursor, self.queries[query], params)
        return super()._rows(cursor, query, params)

    def _bound_rows(
        self,
        cursor: Any,
        sql_text: str,
        params: dict[str, Any],
        generic: bool = False,
        unsorted: bool = False,
    ) -> list[dict]:
        """Run ``sql_text`` with its parameters sent apart from the text (server-side binding),
        as a prepared statement unless a transaction pooler sits between (``pooled``: PgBouncer
        before 1.21 loses prepared statements, and a session SET would stay on a server
        connection other clients get next). Pooled, it is the unnamed statement of the extended
        protocol, parsed and run in one round trip, and the plan_cache_mode SET is not sent.

        Django's cursor binds on the client: it quotes every parameter into the text, dear for
        the flush's arrays, and the server parses and plans the text anew each time
        (docs/decisions/0002-prepared-flush-limit-in-text.md). This cursor shares the Django
        connection (its transaction, its type adapters) and goes through what Django's own
        execute does: the connection's execute wrappers (``connection.execute_wrapper``, as
        tracing tools use), the broken-transaction check, and the error wrapper that marks the
        connection for a check after an error. Every parameter of these statements carries its
        own cast, so sending them typed changes no meaning.

        With ``unsorted`` (a statement that claims), the statement is planned and run with
        sorting off for its transaction only (``_unsorted``): the claim's plan is the claim
        index read in order, whatever the table's statistics say.
        """
        connection = connections[self.using]
        pg = cursor.cursor.connection
        raw = _raw_cursor(self.using, pg)

        def execute(sql_text: str, values: Any, many: bool, context: dict) -> None:
            self._send_bound(connection, pg, raw, sql_text, values, generic, unsorted)

        executor: Callable[..., None] = execute
        for wrapper in reversed(connection.execute_wrappers):
            executor = partial(wrapper, executor)
        context = {"connection": connection, "cursor": cursor}
        executor(sql_text, {**self._common_params(), **params}, False, context)
        return raw.fetchall() if raw.pgresult and raw.pgresult.nfields else []

    def _send_bound(
        self,
        connection: Any,
        pg: psycopg.Connection,
        raw: psycopg.Cursor[Any],
        sql_text: str,
        values: dict[str, Any],
        generic: bool = False,
        unsorted: bool = False,
    ) -> None:
        """Run ``sql_text`` on ``raw`` as ``_bound_rows`` does, past the execute wrappers:
        Django's broken-transaction check and error wrapper, prepared unless pooled."""
        prepare = not self._pooled_on(connection)
        connection.validate_no_broken_transaction()
        with connection.wrap_database_errors:
            if prepare and pg.prepare_threshold is None:
                # Django turns psycopg's preparing off (threshold None), and prepare=True is
                # then ignored too: a threshold no other query reaches prepares only what
                # asks for it.
                pg.prepare_threshold = ONLY_WHEN_ASKED
            if prepare and generic and pg not in _WORKER_SESSIONS and _idle_autocommit(pg):
                # The flush's connection (a worker's loop): its session's settings, once.
                raw.execute(self.queries["worker_session"])
                _WORKER_SESSIONS.add(pg)
            try:
                with (
                    self._unsorted(pg) if unsorted else nullcontext(),
                    _in_query_log(connection, raw, sql_text, values),
                ):
                    raw.execute(sql_text, values, prepare=prepare)
            except psycopg.Error as exc:
                if prepare and lost_prepared(exc):
                    self._detected_pooler(exc)
                raise

    @contextmanager
    def _unsorted(self, pg: psycopg.Connection) -> Iterator[None]:
        """Sorting off (claim_unsorted) for the statement run inside.

        A worker's flush on a direct connection (autocommit, no transaction open): its session
        has the setting already (``worker_session``, sent once with plan_cache_mode), so
        nothing more is sent per flush; the worker's loop connection runs rivet's own
        statements only. Inside a transaction (the caller's, or the savepoint of a flush in
        one; whatever opened it) the setting is put back after the statement; after an error
        the savepoint's rollback puts it back. Behind a transaction pooler, outside a
        transaction, the statement gets a transaction of its own (BEGIN, the setting, the
        statement and COMMIT sent as one pipeline: one round trip, where libpq has pipelines),
        where the setting ends with it, so it never reaches the server connection's next
        client.
        """
        if pg in _WORKER_SESSIONS:
            yield
            return
        idle = pg.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        if not (pg.autocommit and idle):  # in a transaction, or psycopg opens one (Django's)
            replaced = pg.execute(self.queries["claim_unsorted"]).fetchone()
            assert replaced is not None  # one row: the settings before, the settings now
            yield
            pg.execute(
                self.queries["claim_sorted_again"],
                {"was": replaced[0], "was_seqscan": replaced[1]},
            )
            return
        try:
            if psycopg.Pipeline.is_supported():  # all four sent at once: one round trip
                with pg.pipeline():
                    pg.execute("BEGIN")
                    pg.execute(self.queries["claim_unsorted"])
                    yield
                    pg.execute("COMMIT")
            else:
                pg.execute("BEGIN; " + self.queries["claim_unsorted"])
                yield
                pg.execute("COMMIT")
        except BaseException:
            if pg.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                with suppress(psycopg.Error):
                    pg.execute("ROLLBACK")
            raise

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
        if connection.in_atomic_block or connection.execute_wrappers:
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
        raw = _tuple_cursor(self.using, pg)
        self._send_bound(connection, pg, raw, self.queries["enqueue"], values)
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
        held, free = _WAITERS.get(pg, ((), False))
        if held == names and free:
            return Waiting.WAITING
        if held and held != names:
            self._release_waits(pg)
            held = ()
        with self._translated("wait_hold"), self._reading() as cursor:
            cursor.execute(self.queries["wait_hold"], {"queues": list(names), "hold": not held})
            (free,) = cursor.fetchone()
        _WAITERS[pg] = (names, free)
        return Waiting.STARTED if free else Waiting.NOT_YET

    def _release_waits(self, pg: Any) -> None:
        """Give back the waiter locks this connection holds, if any (``wait_release``)."""
        if pg is None or pg not in _WAITERS:
            return
        with self._translated("wait_release"), self._reading() as cursor:
            cursor.execute(self.queries["wait_release"], {"queues": list(_WAITERS[pg][0])})
        _WAITERS.pop(pg, None)

    def close(self) -> None:
        listener = self.__dict__.get("_listener")  # none made: nothing to close
        if listener is not None:
            listener.close()
