"""The PostgreSQL store's speed paths: how its statements travel, not what they mean.

Each has a plain twin that means the same (``PostgresStore(fast_paths=False)``, or the
environment variable ``RIVET_POSTGRES_PLAIN=1``, runs the store on the twins alone, and the
conformance suite runs every check both ways):

- ``array_text``: the flush's arrays written as PostgreSQL array literals here, typed by their
  class (``ArrayText``), instead of adapted by psycopg element by element;
- ``send_bound``: a statement bound on the server and prepared (unless a transaction pooler
  sits between), through a psycopg cursor kept per thread (``raw_cursor``), instead of quoted
  into the text by Django's cursor and planned anew;
- ``settle_claim_text``: the flush's LIMIT written into its text, one prepared plan per limit;
- ``DIRECT_ENQUEUE``: the single enqueue outside a transaction sent through libpq itself
  (``rivet.stores.direct``), with no Django or psycopg cursor.

The measurements behind each are in docs/decisions/.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import psycopg
from django.db.backends.utils import CursorDebugWrapper
from psycopg.adapt import Dumper
from psycopg.rows import dict_row

from rivet.stores.direct import DirectStatement
from rivet.stores.postgres.queries import QUERIES
from rivet.stores.postgres.session import (
    WORKER_SESSIONS,
    idle_autocommit,
    lost_prepared,
    unsorted,
)

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


#: Each thread's psycopg cursor for the statements rivet binds on the server, by alias.
RAW_CURSORS = threading.local()


def tuple_cursor(alias: str, pg: psycopg.Connection) -> psycopg.Cursor[tuple[Any, ...]]:
    """``raw_cursor`` with rows as tuples: for a statement whose columns the caller knows
    (a single enqueue's id), without a dict built per row."""
    held: dict[str, psycopg.Cursor[Any]] = RAW_CURSORS.__dict__.setdefault("tuples", {})
    raw = held.get(alias)
    if raw is None or raw.connection is not pg or raw.closed:
        raw = held[alias] = psycopg.Cursor(pg)
    return raw


@contextmanager
def in_query_log(connection: Any, raw: Any, sql_text: str, values: Any) -> Iterator[None]:
    """Record a statement rivet sends past Django's cursor as Django's debug cursor records its
    own (its ``debug_sql``: ``connection.queries_log`` and the ``django.db.backends`` logger),
    when the connection logs queries (DEBUG, ``assertNumQueries``, ``CaptureQueriesContext``)."""
    if not connection.queries_logged:
        yield
        return
    with CursorDebugWrapper(raw, connection).debug_sql(sql_text, values):
        yield


def raw_cursor(alias: str, pg: psycopg.Connection) -> psycopg.Cursor[dict[str, Any]]:
    """The thread's cursor on ``pg`` for server-bound statements, kept from one to the next.

    A new psycopg cursor finds again how to send each parameter's type and read each column's,
    a large part of a single enqueue's client CPU (docs/decisions/0007-single-enqueue-path.md).
    One is kept per thread and alias (a Django
    connection belongs to its thread), for the alias's connection of the moment: once Django
    reconnects, the next statement gets a new one and the old one goes with its connection.
    """
    held: dict[str, psycopg.Cursor[dict[str, Any]]] = RAW_CURSORS.__dict__.setdefault("held", {})
    raw = held.get(alias)
    if raw is None or raw.connection is not pg or raw.closed:
        raw = held[alias] = psycopg.Cursor(pg, row_factory=dict_row)
    return raw


@functools.cache
def settle_claim_text(limit: int) -> str:
    """settle_claim with its LIMIT written in: one text (one prepared statement) per limit.

    As a parameter, the LIMIT makes the server's generic plan guess a tenth of the table and
    scan it; written in, the plan of a prepared statement is the one a fresh plan would be,
    and its planning is paid once per limit, not per flush
    (docs/decisions/0002-prepared-flush-limit-in-text.md).
    """
    return QUERIES["settle_claim"].replace("%(limit)s::integer", str(int(limit)))


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


def send_bound(
    connection: Any,
    raw: psycopg.Cursor[Any],
    sql_text: str,
    values: dict[str, Any],
    *,
    prepare: bool,
    generic: bool = False,
    sort_off: bool = False,
    on_lost: Callable[[psycopg.Error], None],
) -> None:
    """Run ``sql_text`` on ``raw`` (a cursor of ``connection``'s psycopg connection) with its
    parameters bound on the server, as a prepared statement when ``prepare`` (not behind a
    transaction pooler), through Django's broken-transaction check and error wrapper and into
    its query log. ``generic``: the statement is the flush, whose connection (a worker's loop)
    gets the worker's session settings once; ``sort_off``: a claim, run with sorting off
    (``unsorted``). ``on_lost`` hears of a prepared statement a pooler lost, before the error
    is raised."""
    pg = raw.connection
    connection.validate_no_broken_transaction()
    with connection.wrap_database_errors:
        if prepare and pg.prepare_threshold is None:
            # Django turns psycopg's preparing off (threshold None), and prepare=True is
            # then ignored too: a threshold no other query reaches prepares only what
            # asks for it.
            pg.prepare_threshold = ONLY_WHEN_ASKED
        if prepare and generic and pg not in WORKER_SESSIONS and idle_autocommit(pg):
            # The flush's connection (a worker's loop): its session's settings, once.
            raw.execute(QUERIES["worker_session"])
            WORKER_SESSIONS.add(pg)
        try:
            with (
                unsorted(pg) if sort_off else nullcontext(),
                in_query_log(connection, raw, sql_text, values),
            ):
                raw.execute(sql_text, values, prepare=prepare)
        except psycopg.Error as exc:
            if prepare and lost_prepared(exc):
                on_lost(exc)
            raise
