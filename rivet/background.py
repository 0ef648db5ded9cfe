"""A daemon thread beside a worker's loop that does one piece of work, waits, and goes again.

The pruner (``rivet.worker.prune.Pruner``) and the scheduler (``rivet.schedules.scheduler``)
are both one: ``start`` runs the thread, ``close`` stops it after the work in progress. Each
round of work runs on the thread's own connections, which go back to the pool before it waits;
a failure is logged, never raised.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from django.db import connections

from rivet import logs
from rivet.dbwait import DbWaits, Slot

T = TypeVar("T")


class Periodic:
    """A daemon thread that calls ``_step`` until closed, waiting the seconds it returns.

    ``_step`` returns None to go again at once. Subclasses set ``thread_name``, ``owner`` and
    ``doing`` (what its work is called in a ``db_waiting`` line: ``rivet.dbwait``).
    """

    thread_name = "rivet-periodic"
    owner = ""
    doing = "periodic pass"

    def __init__(self) -> None:
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        #: The worker's database waits (it sets them before start): each round is watched.
        self.db_waits: DbWaits | None = None
        self._db: Slot | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()

    def close(self, timeout: float = 10.0) -> None:
        """Stop after the work in progress (each round is short)."""
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def _run(self) -> None:
        if self.db_waits is not None:
            self._db = self.db_waits.slot()  # this thread's connection
        while not self._done.is_set():
            pause = self._step()
            if pause is not None:
                self._done.wait(pause)

    def _step(self) -> float | None:
        raise NotImplementedError

    def _guarded(self, failed: str, work: Callable[[], T]) -> T | None:
        """``work()`` on this thread's connections, then back to the pool; None if it failed.

        A failure is logged as the event ``failed`` (WARNING, with the owner and the error).
        """
        db = self._db
        if db is not None:
            db.begin(self.doing)
        try:
            return work()
        except Exception as exc:
            logs.event(
                failed,
                logging.WARNING,
                owner=self.owner,
                error=f"{type(exc).__name__}: {exc}",
            )
            return None
        finally:
            if db is not None:
                db.end()
            connections.close_all()  # this thread's connections only: back to the pool
