"""A running worker's database waits: said in its log within the connect timeout.

At start the worker's check (``rivet.dberrors.preflight``) bounds the first statement by
``--connect-timeout-secs``. A running worker needs new connections too: a handler thread's
first query, a reconnect after a dropped connection, the heartbeat's and the LISTEN
connection's. Behind a pooler in session pooling whose every server connection is held by
other clients, the first statement of such a connection waits for one to be free (PgBouncer:
up to ``query_wait_timeout``, two minutes by default), and nothing would be logged meanwhile.

Each thread of the worker that talks to the database has a :class:`Slot`: ``begin(doing)``
before a store call (one clock reading and two attribute writes), ``end()`` after it. A
watchdog thread (:class:`DbWaits`) looks at the slots a few times per connect timeout; a call
that has waited longer than the timeout is logged once (``db_waiting``, a warning), and when
it returns its thread logs how long it waited (``db_wait_over``). The line says why, from what
the wait is on:

- the first statement of a new connection (``WatchedConnection`` knows whether it ever got an
  answer; the worker's pool makes its connections of that class): no server connection is
  free, with the same advice as the start-up check (``NO_FREE_SERVER_CONNECTION``);
- a connection that has answered before: a slow statement (a lock, or a busy server);
- no connection yet: the worker's pool has every connection in use, or a new connection
  gets no answer (a pooler with no free server connection, or an unreachable server).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from rivet import logs
from rivet.dberrors import NO_FREE_SERVER_CONNECTION, where

#: The watchdog looks this many times per connect timeout (at least once a second).
LOOKS_PER_TIMEOUT = 4

#: What a slow wait is on (the ``cause`` field of ``db_waiting``).
NO_FREE_SERVER = "no_free_server_connection"
SLOW_STATEMENT = "slow_statement"
POOL_IN_USE = "pool_in_use"
CONNECTING = "connecting"
WAITING = "waiting"

_first_lock = threading.Lock()
#: Connections waiting now for the answer to their first statement (by id).
_first_waits: dict[int, psycopg.Connection] = {}


class WatchedConnection(psycopg.Connection):
    """psycopg's connection, knowing whether a statement on it was ever answered.

    Every blocking round trip of a psycopg connection goes through ``wait``; after the first
    one returned, this costs one attribute read per round trip.
    """

    rivet_answered = False

    def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
        if self.rivet_answered:
            return super().wait(gen, *args, **kwargs)
        with _first_lock:
            _first_waits[id(self)] = self
        try:
            return super().wait(self._first_answer(gen), *args, **kwargs)
        finally:
            with _first_lock:
                _first_waits.pop(id(self), None)

    def _first_answer(self, gen: Any) -> Any:
        """``gen``, marking the connection answered once it waited on the server and ended.

        Some of psycopg's generators end at once, without a round trip (setting autocommit
        while idle): those say nothing about the server.
        """
        try:
            step = next(gen)
        except StopIteration as done:
            return done.value
        while True:
            ready = yield step
            try:
                step = gen.send(ready)
            except StopIteration as done:
                self.rivet_answered = True
                return done.value


def first_answer_pending() -> bool:
    """True while a new connection of this process waits for its first answer."""
    with _first_lock:
        return bool(_first_waits)


class Slot:
    """One thread's database call in progress (``doing``), since when, and on what."""

    __slots__ = ("waits", "connection", "pinned", "doing", "since", "reported", "lock")

    def __init__(self, waits: DbWaits, connection: Callable[[], Any]) -> None:
        self.waits = waits
        #: The connection the thread's call uses (None: not connected yet).
        self.connection = connection
        #: A connection of the call's own (the LISTEN connection), else ``connection()``'s.
        self.pinned: Any = None
        self.doing: str | None = None
        self.since = 0.0
        self.reported = False
        self.lock = threading.Lock()

    def begin(self, doing: str) -> None:
        self.since = time.monotonic()
        self.doing = doing

    def end(self) -> None:
        self.doing = None
        if self.reported:
            self.waits._over(self)

    def current(self) -> Any:
        return self.pinned if self.pinned is not None else self.connection()

    @contextmanager
    def watching(self, doing: str) -> Iterator[None]:
        self.begin(doing)
        try:
            yield
        finally:
            self.end()

    def execute_wrapper(self, doing: str) -> Callable[..., Any]:
        """A Django execute wrapper that watches every query of the thread's connection."""

        def watched(execute: Callable[..., Any], sql: Any, params: Any, many: bool, context: Any):
            self.begin(doing)
            try:
                return execute(sql, params, many, context)
            finally:
                self.end()

        return watched


_this_thread = threading.local()


def this_thread() -> Slot | None:
    """The calling thread's slot, when a worker watches it (``DbWaits.slot(register=True)``)."""
    return getattr(_this_thread, "slot", None)


class DbWaits:
    """The slots of one worker's threads, and the watchdog thread that reports long waits."""

    def __init__(self, alias: str | None, timeout: float) -> None:
        self.alias = alias
        self.timeout = timeout
        self._slots: list[Slot] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def slot(self, connection: Callable[[], Any] | None = None, *, register: bool = False) -> Slot:
        """A slot for the calling thread; its connection is the thread's Django connection of
        the alias unless ``connection`` says otherwise. ``register``: ``this_thread()`` finds
        it (code below the worker, such as the store's LISTEN connection, watches through it)."""
        if connection is None:
            connection = self._django_connection()
        made = Slot(self, connection)
        with self._lock:
            self._slots.append(made)
        if register:
            _this_thread.slot = made
        return made

    def _django_connection(self) -> Callable[[], Any]:
        if self.alias is None:
            return lambda: None
        from django.db import connections

        wrapper = connections[self.alias]  # the calling thread's own
        return lambda: wrapper.connection

    def start(self) -> None:
        if self.alias is None:
            return
        self._thread = threading.Thread(target=self._watch, name="rivet-dbwait", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def longest(self) -> float:
        """Seconds the longest database call in progress has waited so far (0: none)."""
        now = time.monotonic()
        with self._lock:
            slots = list(self._slots)
        return max((now - s.since for s in slots if s.doing is not None), default=0.0)

    def _watch(self) -> None:
        step = min(1.0, self.timeout / LOOKS_PER_TIMEOUT)
        while not self._closed.wait(step):
            try:
                self.look()
            except Exception:  # noqa: BLE001 - the watchdog must outlive a surprise
                logs.event("db_wait_watch_failed", logging.ERROR, exc_info=True)

    def look(self) -> None:
        """Report each call that has waited longer than the timeout and is not reported yet."""
        now = time.monotonic()
        with self._lock:
            slots = list(self._slots)
        for slot in slots:
            doing, since = slot.doing, slot.since
            if doing is None or slot.reported or now - since < self.timeout:
                continue
            with slot.lock:
                if slot.doing is None or slot.since != since:
                    continue  # it returned meanwhile
                slot.reported = True
                if slot.doing is None or slot.since != since:
                    slot.reported = False  # it returned meanwhile: its end() saw it, or not
                    continue
                cause, note = self.cause(slot.current(), doing, now - since)
                logs.event(
                    "db_waiting",
                    logging.WARNING,
                    alias=self.alias,
                    doing=doing,
                    waited=round(now - since, 1),
                    cause=cause,
                    note=note,
                )

    def _over(self, slot: Slot) -> None:
        with slot.lock:
            if slot.reported:
                slot.reported = False
                logs.event(
                    "db_wait_over",
                    alias=self.alias,
                    waited=round(time.monotonic() - slot.since, 1),
                )

    def cause(self, connection: Any, doing: str, waited: float) -> tuple[str, str]:
        """Why a call that has ``waited`` seconds on ``connection`` waits, in one sentence."""
        place = where(self.alias) if self.alias else "the database"
        so_far = f"the {doing} has waited {waited:.0f} s (--connect-timeout-secs: {self.timeout:g})"
        answered = getattr(connection, "rivet_answered", None)  # None: not a WatchedConnection
        if answered is False or (connection is None and first_answer_pending()):
            return NO_FREE_SERVER, (
                f"{place} accepted a new connection but has not answered its first statement: "
                f"{so_far}: {NO_FREE_SERVER_CONNECTION}"
            )
        if answered:
            return SLOW_STATEMENT, (
                f"{so_far} for {place} to answer a statement on a connection that has answered "
                "before: a lock another session holds, or a slow or overloaded server "
                "(pg_stat_activity shows what it waits for)"
            )
        if connection is not None:  # a connection not of the worker's pool: its past is unknown
            return WAITING, (
                f"{so_far} for {place} to answer: a lock another session holds, a slow server, "
                "or, on a new connection behind a pooler in session pooling, no free server "
                "connection"
            )
        in_use = self._pool_in_use()
        if in_use is not None:
            return POOL_IN_USE, (
                f"{so_far} for a connection: every one of the worker's pool ({in_use}, "
                "--pool-size) is in use by its other threads"
            )
        return CONNECTING, f"{so_far} for a new connection to {place}: the server has not answered"

    def _pool_in_use(self) -> int | None:
        """The size of the alias's pool when every connection of it is taken, else None."""
        from django.db import connections

        pool = getattr(connections[self.alias], "pool", None) if self.alias else None
        if pool is None:
            return None
        stats = pool.get_stats()
        if stats.get("pool_available", 0) == 0 and stats.get("pool_size", 0) >= pool.max_size:
            return pool.max_size
        return None
