"""The PostgreSQL store's wake-up: a connection of its own that LISTENs for enqueues.

An enqueue (and a retry due at once) calls ``pg_notify`` with its queue's name; an idle worker
waits here instead of polling, and polls again when the connection cannot listen.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import sql

from rivet import logs
from rivet.dbwait import WatchedConnection, this_thread


class WakeupListener:
    """A dedicated autocommit connection that LISTENs for enqueue notifications.

    It is opened on the first wait and kept, so notifications sent while the worker is busy
    are buffered and wake the next wait at once. Any connection error closes it; the next
    wait reconnects. A wait that cannot listen sleeps out its timeout: polling is the fallback.
    """

    def __init__(self, params: Callable[[], dict[str, Any]], listen: str, hold: str) -> None:
        """``params``: psycopg.connect's keyword arguments; ``listen``: the LISTEN query text;
        ``hold``: the query that takes waiter locks (``wait_hold``)."""
        self._params = params
        self._listen = listen
        self._hold = hold
        self._lock = threading.Lock()
        self._conn: psycopg.Connection | None = None
        self._channel = ""
        #: The connection holds the waiter locks of the queues it listens for (``hold``).
        self._holding = False

    @property
    def listening(self) -> bool:
        """A connection is open and listening (read without the lock: a hint, not a promise)."""
        conn = self._conn
        return conn is not None and not conn.closed

    def wait(self, queues: Sequence[str], timeout: float, channel: str, hold: bool = False) -> bool:
        """True when a notification for one of ``queues`` arrives within ``timeout`` seconds.

        ``hold``: the listening connection also holds the queues' waiter locks (``wait_hold``)
        for as long as it is open, so every enqueue on them notifies.
        """
        deadline = time.monotonic() + max(float(timeout), 0.0)
        with self._lock:
            try:
                if hold and not self._holding:
                    conn = self._connection(channel)
                    watch = this_thread()
                    if watch is not None:
                        watch.begin("LISTEN")
                        watch.pinned = conn
                    try:
                        conn.execute(self._hold, {"queues": sorted(set(queues)), "hold": True})
                    finally:
                        if watch is not None:
                            watch.end()
                            watch.pinned = None
                    self._holding = True
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
            # The worker's LISTEN thread watches the connect and the LISTEN (rivet.dbwait): a
            # pooler in session pooling with no free server connection holds the LISTEN.
            watch = this_thread()
            if watch is not None:
                watch.begin("LISTEN")
            try:
                conn = WatchedConnection.connect(**self._params(), autocommit=True)
                if watch is not None:
                    watch.pinned = conn
                try:
                    conn.execute(sql.SQL(self._listen).format(channel=sql.Identifier(channel)))
                except psycopg.Error:
                    conn.close()
                    raise
            finally:
                if watch is not None:
                    watch.end()
                    watch.pinned = None
            self._conn, self._channel = conn, channel
        return self._conn

    def close(self) -> None:
        """Close the listening connection (a later wait opens a new one)."""
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        conn, self._conn, self._holding = self._conn, None, False
        if conn is not None:
            conn.close()
