"""The worker's two pools: its handler threads, and its database connections.

Handler threads. ``HandlerPool`` starts ``concurrency`` daemon threads once; each takes claimed
attempts from one queue and runs them, so no thread is started per task. A handler that will
not return keeps its thread, as it keeps its slot: the worker never hands out more attempts
than it has free slots, and free slots never outnumber idle threads, so no replacement thread
is needed; the worker's abandoned-handler rule (exit 3 when too many are stuck) still decides.

Database connections: ``--pool-size`` connections at most, on PostgreSQL.

Django (5.1+) pools PostgreSQL connections through psycopg_pool when the alias has
``OPTIONS["pool"]``. A worker process sets it, sized by ``pool_size``, unless the alias already
configures its own pool. The loop thread, the heartbeat thread and every handler thread that
uses the ORM then take connections from one pool of at most ``pool_size``, and a handler that
finishes returns its connection instead of closing it, so the next task does not reconnect.

SQLite has no server connections to bound; the option is accepted and ignored there. Without
psycopg_pool (the ``pool`` extra) the worker logs ``pool_unavailable`` and keeps Django's
connection per thread.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from importlib.util import find_spec
from typing import Any

from django.db import connections

from rivet import logs
from rivet.dbwait import WatchedConnection
from rivet.stores.postgres import end_worker_session, keeps_session

POOL_TIMEOUT_SECS = 30.0


def tidy_connections(*, idle: bool = False) -> None:
    """Django's ``close_old_connections``, for the worker loop's thread, whose connection
    carries session state of the store's (``rivet.stores.postgres``: the flush's planner
    settings, ``worker_session``, and the waiter locks of the wake-up gate, ``wait_hold``).

    A connection from a pool that Django would give back gets the server's settings back and
    its locks released first (one that cannot, in a failed transaction, is closed: the pool
    drops it), so the handler that takes it next runs the user's queries as the server plans
    them. ``idle`` (the loop has no task): a connection with no error is kept instead when it
    is pooled or holds that state: the loop waits on it (enqueues notify its session) and its
    next flush would take one again and set it all again. Other connections close as Django
    closes them, and a session ends with its connection.
    """
    for wrapper in connections.all(initialized_only=True):
        pg = wrapper.connection
        if pg is not None and wrapper.vendor == "postgresql":
            pooled = getattr(wrapper, "pool", None) is not None
            if idle and not wrapper.errors_occurred and (pooled or keeps_session(pg)):
                continue
            if pooled and not end_worker_session(pg):
                pg.close()
        wrapper.close_if_unusable_or_obsolete()


def configure_pool(alias: str, pool_size: int, concurrency: int) -> bool:
    """Give ``alias`` a pool of ``pool_size`` connections; False when nothing was changed."""
    connection = connections[alias]
    if connection.vendor != "postgresql":
        return False
    options = connection.settings_dict.setdefault("OPTIONS", {})
    if options.get("pool"):
        if options["pool"] is True:
            options["pool"] = {}
        if isinstance(options["pool"], dict):  # its connections say whether they ever answered
            options["pool"].setdefault("connection_class", WatchedConnection)
        logs.event("pool_external", alias=alias, note="the alias configures its own pool")
        return False
    if find_spec("psycopg_pool") is None:
        logs.event(
            "pool_unavailable",
            alias=alias,
            note="psycopg_pool is not installed: one connection per thread, not a pool of "
            f"{pool_size}; pip install 'django-rivet[pool]'",
        )
        return False
    connection.close()
    options["pool"] = {
        "min_size": 1,
        "max_size": pool_size,
        "timeout": POOL_TIMEOUT_SECS,
        # A connection that knows whether it ever answered: a running worker tells a new
        # connection's first statement held by a full pooler from a slow one (rivet.dbwait).
        "connection_class": WatchedConnection,
    }
    if pool_size < concurrency + 2:
        logs.event(
            "pool_undersized",
            logging.WARNING,
            pool_size=pool_size,
            concurrency=concurrency,
            note="below concurrency + 2 (loop and heartbeat): handlers that use the database "
            "wait for a connection, and a heartbeat that waits too long loses its lease",
        )
    return True


class HandlerPool:
    """``size`` daemon threads that run ``run(item)`` for every item submitted, in turn."""

    def __init__(
        self,
        size: int,
        run: Callable[[Any], None],
        name: str = "rivet-handler",
        setup: Callable[[], None] | None = None,
    ) -> None:
        """``setup``: called first on each thread (the worker watches its database calls)."""
        self.size = size
        self._run = run
        self._name = name
        self._setup = setup
        self._work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        for n in range(self.size):
            thread = threading.Thread(target=self._serve, name=f"{self._name}-{n}", daemon=True)
            thread.start()
            self.threads.append(thread)

    def submit(self, item: Any) -> None:
        self._work.put(item)

    def close(self) -> None:
        """Let every thread end once it is idle; a thread still in a handler ends after it."""
        for _ in self.threads:
            self._work.put(None)

    def _serve(self) -> None:
        if self._setup is not None:
            self._setup()
        while (item := self._work.get()) is not None:
            self._run(item)
