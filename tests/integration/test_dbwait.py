"""rivet.dbwait on the test server: what a connection knows of its answers, why a wait is
named as it is, and one db_waiting line per wait (with db_wait_over when it ends).

The worker processes behind a real PgBouncer are tests/acceptance/test_pgbouncer.py; these
tests drive the watchdog's look() by hand, with a real connection blocked on a real lock.
"""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connections

from rivet import logs
from rivet.dberrors import NO_FREE_SERVER_CONNECTION
from rivet.dbwait import (
    CONNECTING,
    NO_FREE_SERVER,
    SLOW_STATEMENT,
    WAITING,
    DbWaits,
    WatchedConnection,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    """The rivet loggers write JSON lines here for the test; their handlers come back after."""
    loggers = [logging.getLogger(name) for name in ("rivet", *logs.LIBRARY_EVENTS)]
    saved = [(log.handlers[:], log.propagate, log.level) for log in loggers]
    stream = io.StringIO()
    logs.configure("json", stream=stream)
    yield stream
    for log, (handlers, propagate, level) in zip(loggers, saved, strict=True):
        log.handlers[:], log.propagate = handlers, propagate
        log.setLevel(level)


def _params() -> dict:
    params = connections["default"].get_connection_params()
    for django_only in ("cursor_factory", "context", "pool"):
        params.pop(django_only, None)
    return params


def test_a_watched_connection_is_answered_after_its_first_round_trip_only():
    with WatchedConnection.connect(**_params()) as conn:
        conn.autocommit = True  # no round trip: says nothing about the server
        assert conn.rivet_answered is False
        assert conn.execute("SELECT 1").fetchone() == (1,)
        assert conn.rivet_answered is True


def test_a_wait_is_named_by_what_it_waits_on():
    waits = DbWaits("default", 5.0)
    with WatchedConnection.connect(**_params()) as fresh, psycopg.connect(**_params()) as plain:
        cause, note = waits.cause(fresh, "claim", 7.0)
        assert cause == NO_FREE_SERVER
        assert note.endswith(NO_FREE_SERVER_CONNECTION)
        assert "the claim has waited 7 s" in note
        fresh.execute("SELECT 1")
        cause, note = waits.cause(fresh, "heartbeat", 7.0)
        assert cause == SLOW_STATEMENT
        assert "no server connection is free" not in note
        assert waits.cause(plain, "claim", 7.0)[0] == WAITING
    assert waits.cause(None, "claim", 7.0)[0] == CONNECTING  # no pool, nothing connecting


def test_a_wait_on_a_lock_is_logged_once_and_its_end_once(log_stream):
    stream = log_stream
    waits = DbWaits("default", 0.1)
    locked, done = threading.Event(), threading.Event()
    with psycopg.connect(**_params(), autocommit=True) as locker:
        locker.execute("CREATE TABLE IF NOT EXISTS rivet_dbwait_probe (n int)")
        with WatchedConnection.connect(**_params(), autocommit=True) as conn:
            conn.execute("SELECT 1")  # answered before: a wait on it is a slow statement
            slot = waits.slot(lambda: conn)

            def blocked() -> None:
                slot.begin("claim")
                try:
                    locked.wait(10)
                    conn.execute("SELECT count(*) FROM rivet_dbwait_probe")
                finally:
                    slot.end()
                    done.set()

            with locker.transaction():
                locker.execute("LOCK TABLE rivet_dbwait_probe")
                thread = threading.Thread(target=blocked)
                thread.start()
                locked.set()
                _until(lambda: waits.longest() > 0.2)
                waits.look()
                waits.look()  # the same wait: nothing more
                assert waits.longest() > 0
            thread.join(10)
        locker.execute("DROP TABLE rivet_dbwait_probe")
    assert done.is_set()
    waits.look()  # over: nothing to say
    events = [json.loads(line) for line in _lines(stream)]
    assert [e["event"] for e in events] == ["db_waiting", "db_wait_over"], events
    assert events[0]["cause"] == SLOW_STATEMENT and events[0]["doing"] == "claim"
    assert events[1]["alias"] == "default" and "waited" in events[1]
    assert waits.longest() == 0


def _until(predicate) -> None:
    deadline = threading.Event()
    for _ in range(200):
        if predicate():
            return
        deadline.wait(0.05)
    raise AssertionError("gave up waiting")


def _lines(stream: io.StringIO) -> list[str]:
    logs.flush()
    return stream.getvalue().splitlines()
