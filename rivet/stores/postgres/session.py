"""What the PostgreSQL store keeps in a server session, and how it finds a pooler that would
carry that state to another client.

A worker's loop connection holds two kinds of session state (``worker_session``'s planner
settings; ``wait_hold``'s waiter locks): ``keeps_session`` tells a pool whether a connection
holds them, and ``end_worker_session`` takes them back before another user gets it. A
transaction pooler (PgBouncer's ``pool_mode = transaction``) hands a server connection to a
client for one transaction only, so behind one rivet keeps nothing in a session: the store
asks ``pooler_between`` once per process and way to the server, and ``lost_prepared`` reads
what a pooler the probe missed does to prepared statements. ``unsorted`` runs a claim with
sorting off for its own statement only, wherever the connection stands.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psycopg

from rivet import logs
from rivet.stores.postgres.queries import QUERIES

#: The direct (not pooled) connections whose session holds the worker's settings
#: (``worker_session``: generic plans, sorting off): they ran a flush outside a transaction.
WORKER_SESSIONS: weakref.WeakSet[Any] = weakref.WeakSet()
#: The connections whose session waits on queues (``wait_hold``), by connection: the queues,
#: and whether every gate was free once (from then on every enqueue on them notifies).
WAITERS: weakref.WeakKeyDictionary[Any, tuple[tuple[str, ...], bool]] = weakref.WeakKeyDictionary()
#: What a prepared statement meets behind a transaction pooler: gone from the server connection
#: this transaction got (26000), or another client's of the same name there (42P05).
LOST_PREPARED = (psycopg.errors.InvalidSqlStatementName, psycopg.errors.DuplicatePreparedStatement)


def idle_autocommit(pg: psycopg.Connection) -> bool:
    """In autocommit with no transaction open: a session setting sent now commits at once."""
    return pg.autocommit and pg.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def keeps_session(pg: psycopg.Connection) -> bool:
    """Whether ``pg``'s session holds the worker's settings or waiter locks."""
    return pg in WORKER_SESSIONS or pg in WAITERS


def end_worker_session(pg: psycopg.Connection) -> bool:
    """Take ``worker_session``'s settings (and ``wait_hold``'s locks) back from ``pg`` if its
    session holds them. False
    when they stay: ``pg`` is in a transaction, or the reset failed (then close it rather than
    hand it on). For a connection that another user gets next: one going back to a pool (a
    handler's ORM queries must not run with them), or the test suite's, which outlive each
    test; a worker loop's own connection keeps them while the loop keeps it."""
    if pg not in WORKER_SESSIONS and pg not in WAITERS:
        return True
    if not pg.closed:
        if not idle_autocommit(pg):
            return False
        try:
            if pg in WORKER_SESSIONS:
                pg.execute(QUERIES["worker_session_end"])
            if pg in WAITERS:
                pg.execute(QUERIES["wait_release"], {"queues": list(WAITERS[pg][0])})
        except psycopg.Error:
            return False
    WORKER_SESSIONS.discard(pg)
    WAITERS.pop(pg, None)
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


def probe_in_time(params: dict[str, Any]) -> tuple[bool | None, str]:
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


def pooler_between(connection: Any, way: tuple[str, ...], alias: str) -> bool:
    """Whether a transaction pooler sits on ``way`` (alias, host, port, database, user) to the
    server of ``connection``: probed once per process and way (``transaction_pooler_between``
    within PROBE_TIMEOUT_SECS), a pooler found logged once as ``transaction_pooler_detected``.
    A server that refused the probe's connection is taken for a pooler for now and not kept:
    keeping nothing in the session is right behind any pooler, and the next use asks again."""
    with _PROBE_LOCK:
        if way in _PROBED:
            return _PROBED[way]
        params = connection.get_connection_params()
        for django_only in ("cursor_factory", "context"):
            params.pop(django_only, None)
        found, how = probe_in_time(params)
        if found is None:
            return True
        _PROBED[way] = found
    if found:
        logs.event(
            "transaction_pooler_detected",
            logging.WARNING,
            alias=alias,
            how=how,
            note=POOLER_NOTE,
        )
    return found


def probed(way: tuple[str, ...]) -> bool | None:
    """What the probe found for ``way`` in this process; None when it has not found out."""
    return _PROBED.get(way)


@contextmanager
def unsorted(pg: psycopg.Connection) -> Iterator[None]:
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
    if pg in WORKER_SESSIONS:
        yield
        return
    idle = pg.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    if not (pg.autocommit and idle):  # in a transaction, or psycopg opens one (Django's)
        replaced = pg.execute(QUERIES["claim_unsorted"]).fetchone()
        assert replaced is not None  # one row: the settings before, the settings now
        yield
        pg.execute(
            QUERIES["claim_sorted_again"],
            {"was": replaced[0], "was_seqscan": replaced[1]},
        )
        return
    try:
        if psycopg.Pipeline.is_supported():  # all four sent at once: one round trip
            with pg.pipeline():
                pg.execute("BEGIN")
                pg.execute(QUERIES["claim_unsorted"])
                yield
                pg.execute("COMMIT")
        else:
            pg.execute("BEGIN; " + QUERIES["claim_unsorted"])
            yield
            pg.execute("COMMIT")
    except BaseException:
        if pg.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            with suppress(psycopg.Error):
                pg.execute("ROLLBACK")
        raise
