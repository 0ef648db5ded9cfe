"""How many claimed tasks a worker may hold waiting for a free slot: fixed, or by itself.

``--prefetch N`` (``RIVET['PREFETCH'] = N``) holds at most N; ``auto``, the default, derives it
from how long this worker's handlers take, so short tasks are claimed (and settled) many to a
round trip and long ones are never held behind a busy slot:

    prefetch = min(cap, floor(concurrency x WAIT_BUDGET_SECS / handler time))

with handler time a moving average (``ALPHA``) of the handlers' run times on this worker, and
cap = max(``AUTO_CAP``, concurrency). A task that waits waits behind at most prefetch /
concurrency handler runs: about ``WAIT_BUDGET_SECS`` (20 ms), which no lease comes near (a
waiting task's lease is heartbeated like a running one's anyway). Until the first handler
returns the worker prefetches nothing, as ``--prefetch 0`` does. Noop-like tasks (well under a
millisecond) reach the cap; 5 ms tasks at concurrency 4 hold 16; 20 ms tasks hold 4; tasks of
80 ms or more at concurrency 4 hold none. The event loop's async tasks have a prefetch of their
own (``rivet.worker.aio``), with the larger budget ``ASYNC_WAIT_BUDGET_SECS``.
"""

from __future__ import annotations

import threading

AUTO = "auto"
#: How long a prefetched task should expect to wait for a slot.
WAIT_BUDGET_SECS = 0.02
#: The same for async tasks (``rivet.worker.aio``): they wait for a slot of the event loop,
#: whose handlers mostly wait on other services; a budget of one flush round trip's worth and
#: more keeps the loop fed while the worker settles and claims.
ASYNC_WAIT_BUDGET_SECS = 0.1
#: The most an automatic prefetch holds, unless concurrency is larger.
AUTO_CAP = 16
#: Weight of the newest handler time in the moving average.
ALPHA = 0.1


class Prefetch:
    """The prefetch of one worker: ``current()`` for each claim, ``observe`` for each run."""

    def __init__(
        self, setting: int | str, concurrency: int, wait_budget: float = WAIT_BUDGET_SECS
    ) -> None:
        """``wait_budget``: how long a prefetched task should expect to wait (auto only)."""
        self.wait_budget = wait_budget
        self.auto = setting == AUTO
        self.fixed = 0 if self.auto else int(setting)
        self.concurrency = concurrency
        self.cap = max(AUTO_CAP, concurrency)
        self._average: float | None = None
        self._lock = threading.Lock()

    def describe(self) -> str | int:
        """What the worker_started line says: the number, or ``auto``."""
        return AUTO if self.auto else self.fixed

    def observe(self, handler_secs: float) -> None:
        """One handler's run time (a handler thread calls this)."""
        if not self.auto:
            return
        with self._lock:
            if self._average is None:
                self._average = handler_secs
            else:
                self._average += ALPHA * (handler_secs - self._average)

    def current(self) -> int:
        """How many claimed tasks may wait for a slot now."""
        if not self.auto:
            return self.fixed
        average = self._average
        if average is None:
            return 0
        if average <= 0:
            return self.cap
        return min(self.cap, int(self.concurrency * self.wait_budget / average))
