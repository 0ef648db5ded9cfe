"""The worker's wake-up thread: each enqueue notification the store delivers wakes the loop.

On a store with wake-ups (PostgreSQL's LISTEN, ``Store.supports_wakeup``) the loop waits for
work instead of polling every ``poll_interval``; this thread waits on the store in slices of
``LISTEN_SLICE_SECS`` and calls ``wake`` for each notification. A wait that fails is logged
(``listen_failed``) and tried again a poll interval later; the loop's polling goes on meanwhile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from rivet import logs
from rivet.dbwait import DbWaits
from rivet.stores.base import Store

LISTEN_SLICE_SECS = 0.5


class Listener:
    """A daemon thread that calls ``wake`` each time the store reports work on ``queues``."""

    def __init__(
        self,
        *,
        store: Store,
        queues: Sequence[str],
        poll_interval: float,
        wake: Callable[[], None],
        db_waits: DbWaits | None = None,
    ) -> None:
        """``db_waits``: the worker's; the LISTEN connection's connect and first statements are
        watched through this thread's slot (``rivet.dbwait``)."""
        self.store = store
        self.db_waits = db_waits
        self.queues = queues
        self.poll_interval = poll_interval
        self.wake = wake
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._listen, name="rivet-listen", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop listening; wait a little for the thread to see it."""
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=LISTEN_SLICE_SECS * 4)

    def _listen(self) -> None:
        if self.db_waits is not None:
            self.db_waits.slot(lambda: None, register=True)  # the store pins its connection
        while not self._done.is_set():
            try:
                if self.store.wait_for_work(self.queues, LISTEN_SLICE_SECS):
                    self.wake()
            except Exception as exc:
                logs.event("listen_failed", logging.WARNING, error=f"{type(exc).__name__}: {exc}")
                self._done.wait(self.poll_interval)
