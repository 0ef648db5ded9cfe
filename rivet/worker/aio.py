"""The worker's event loop: ``async def`` handlers, many in flight on one thread.

The first time a worker claims a task whose kind is async (``JobDefinition.is_async``), or runs
an async failed hook, it starts one event loop on a thread of its own (``AsyncRunner``) beside
its handler threads, and runs up to ``async_concurrency`` coroutines on it at once. The rest is
the sync jobs': the loop thread claims and settles (the same ``task_settle_and_claim``, every
write naming its lease's epoch), the guard thread heartbeats and keeps the deadlines, and a
coroutine's outcome goes back to the loop thread the way a handler thread's does. A worker
that claims only sync tasks starts no event loop and sizes its claims as it always did.

A claim comes from the same queues for both kinds, and the store cannot tell them apart before
it leases a task, so the claim is sized by both pools (``KindMix``): by the share of async
tasks among the ones this worker claimed lately, as many as should fill the free thread slots
(and the sync prefetch) and the free async slots (and the async prefetch), not more than one
extra of either kind. The async prefetch is set by the async handlers' run times as the sync
one is (``rivet.worker.prefetch``), with a wait budget of ``ASYNC_WAIT_BUDGET_SECS``: a slot
that frees starts a waiting task without a round trip. A task claimed beyond its pool's free
slots waits, leased and heartbeated, as a prefetched task does; its job timeout counts from
when it starts.

Stopping a coroutine. A stop (timeout, cancel, lease fenced or lost, shutdown) sets the
context's ``should_stop`` as for a sync handler, and also cancels the coroutine: the await it
is in raises ``CancelledError``. A coroutine that swallows the cancel and goes on is logged
(``cancel_ignored``) when it returns, and, still running ``lease_ttl`` after its stop, is
abandoned as a stuck handler thread is (``max_abandoned`` counts the two kinds apart).

A blocked loop. Heartbeats run on the guard thread, so a handler that blocks the loop (a sync
call, CPU work) does not lose its leases; it stalls every other coroutine, though. A watchdog
thread sees the loop's own tick fall behind by ``BLOCKED_SECS`` and logs ``event_loop_blocked``
with the task that holds the loop, then ``event_loop_unblocked`` with how long it held it.

Database connections. Django's async ORM methods (``aget``, ``acreate`` ...) and
``sync_to_async`` (thread-sensitive by default) run on asgiref's one shared thread, whose
connection is given back whenever the loop runs no handler. ``sync_to_async(...,
thread_sensitive=False)`` and ``asyncio.to_thread`` run on the loop's own pool of
``EXECUTOR_THREADS`` threads, which give their connection back after every call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from django.db import close_old_connections, connections

from rivet import logs
from rivet.worker.attempt import Attempt
from rivet.worker.prefetch import Prefetch

#: How far behind its own tick the loop may fall before the watchdog reports it blocked.
BLOCKED_SECS = 0.5
#: How often the loop ticks for the watchdog.
TICK_SECS = 0.05
#: Threads of the loop's default executor (``to_thread``, ``thread_sensitive=False``).
EXECUTOR_THREADS = 8
#: How long the loop's close waits for its cancelled tasks to end.
SHUTDOWN_TURN_SECS = 0.5
#: The longest ``close`` waits for failed hooks still running at shutdown.
HOOK_WAIT_SECS = 5.0


class KindMix:
    """How many tasks one claim asks for when a worker runs both kinds (see the docstring).

    ``share`` is a moving average of how many of the claimed tasks were async; it starts at
    one half and moves by ``ALPHA`` per claimed task. It never reaches 0 or 1 (``FLOOR``), so a
    kind that stops coming is still claimed when it comes back.
    """

    ALPHA = 0.05
    FLOOR = 0.01

    def __init__(self) -> None:
        self.share = 0.5

    def observe(self, is_async: bool) -> None:
        self.share += self.ALPHA * ((1.0 if is_async else 0.0) - self.share)

    def claim_size(self, sync_free: int, async_free: int) -> int:
        """``sync_free``/``async_free``: free slots of each pool (negative: tasks waiting)."""
        if sync_free <= 0 and async_free <= 0:
            return 0
        share = min(max(self.share, self.FLOOR), 1.0 - self.FLOOR)
        # The most tasks whose expected count of each kind stays within its free slots + 1.
        wanted = min((sync_free + 1) / (1.0 - share), (async_free + 1) / share)
        return max(0, min(int(wanted), max(sync_free, 0) + max(async_free, 0)))


class _ReturningExecutor(concurrent.futures.ThreadPoolExecutor):
    """The loop's default executor: each call gives its thread's connections back after it."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        def call() -> Any:
            try:
                return fn(*args, **kwargs)
            finally:
                connections.close_all()  # this thread's only: back to the pool, or closed

        return super().submit(call)


class AsyncRunner:
    """One event loop thread running up to ``size`` coroutines of ``execute(attempt)``."""

    def __init__(
        self,
        size: int,
        execute: Callable[[Attempt], Coroutine[Any, Any, None]],
        prefetch: Prefetch | None = None,
        *,
        name: str = "rivet-async",
    ) -> None:
        """``prefetch``: claimed async tasks that may wait for a free async slot (none when
        not given), set as the worker's thread slots' prefetch is (``rivet.worker.prefetch``)
        by the async handlers' own run times."""
        self.size = size
        self.prefetch = prefetch or Prefetch(0, size)
        self._execute = execute
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._watch: threading.Thread | None = None
        self._closed = threading.Event()
        self._lock = threading.Lock()
        #: Attempts handed over and not started yet; ``_admit`` starts them on the loop.
        self._incoming: deque[Attempt] = deque()
        self._admit_scheduled = False
        #: Running coroutines (on the loop thread only) and their attempts.
        self._tasks: dict[asyncio.Task[None], Attempt] = {}
        self._hooks: set[concurrent.futures.Future[Any]] = set()
        self._tick = time.monotonic()
        self._ticking: asyncio.Task[None] | None = None
        self._blocked_since: float | None = None
        self._executor = _ReturningExecutor(EXECUTOR_THREADS, thread_name_prefix=f"{name}-sync")

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    # -- lifecycle (the worker's loop thread) -------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, args=(ready,), name=self._name, daemon=True
        )
        self._thread.start()
        ready.wait()
        self._watch = threading.Thread(
            target=self._watchdog, name=f"{self._name}-watch", daemon=True
        )
        self._watch.start()

    def close(self, timeout: float = HOOK_WAIT_SECS) -> None:
        """Wait (up to ``timeout``) for failed hooks still running, cancel what is left, give
        the async ORM thread's connection back and stop the loop."""
        loop = self._loop
        if loop is None or self._thread is None:
            return
        if self._hooks:
            concurrent.futures.wait(list(self._hooks), timeout=timeout)
        self._closed.set()
        try:
            done = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
            done.result(timeout=timeout)
        except (concurrent.futures.TimeoutError, RuntimeError):
            logs.event("event_loop_close_timeout", logging.WARNING, in_flight=self.in_flight)
        self._thread.join(timeout=timeout)
        if self._watch is not None:
            self._watch.join(timeout=timeout)
        self._look()  # a block that ended just before the close is reported as ended too
        self._executor.shutdown(wait=False, cancel_futures=True)

    def submit(self, attempt: Attempt) -> None:
        """Hand a claimed attempt to the loop; it starts once an async slot is free."""
        with self._lock:
            self._incoming.append(attempt)
            if self._admit_scheduled:
                return  # one wake-up per claim batch, not per task
            self._admit_scheduled = True
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._admit)

    def run_hook(
        self, attempt: Attempt, awaitable: Any, on_error: Callable[[BaseException], None]
    ) -> None:
        """Run an async failed hook on the loop, without waiting for it; ``on_error`` is
        called (on the loop thread) with what it raised."""
        assert self._loop is not None

        async def hook() -> None:
            try:
                await awaitable
            except Exception as exc:  # a hook's error is logged, never raised
                on_error(exc)

        future = asyncio.run_coroutine_threadsafe(hook(), self._loop)
        self._hooks.add(future)
        future.add_done_callback(self._hooks.discard)

    # -- on the loop thread --------------------------------------------------------------------

    def _serve(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        loop.set_default_executor(self._executor)
        self._loop = loop
        asyncio.set_event_loop(loop)
        self._ticking = loop.create_task(self._ticker())
        ready.set()
        try:
            loop.run_forever()
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
                connections.close_all()

    async def _ticker(self) -> None:
        while True:
            self._tick = time.monotonic()
            await asyncio.sleep(TICK_SECS)

    def _admit(self) -> None:
        """Start waiting attempts while async slots are free."""
        loop = self._loop
        assert loop is not None
        with self._lock:
            self._admit_scheduled = False
            while self._incoming and len(self._tasks) < self.size:
                attempt = self._incoming.popleft()
                task = loop.create_task(self._execute(attempt))
                self._tasks[task] = attempt
                task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            logs.event("async_runner_error", logging.ERROR, error=repr(task.exception()))
        if self._incoming:
            self._admit()
        elif not self._tasks and not self._closed.is_set():
            # Idle: the async ORM thread's connection goes back, as a handler thread's does.
            asyncio.ensure_future(self._tidy_orm_thread())

    async def _tidy_orm_thread(self) -> None:
        from asgiref.sync import sync_to_async

        try:
            await sync_to_async(close_old_connections, thread_sensitive=True)()
        except Exception as exc:  # noqa: BLE001 - tidying is best effort; logged
            logs.event("async_tidy_failed", logging.WARNING, error=repr(exc))

    async def _shutdown(self) -> None:
        from asgiref.sync import sync_to_async

        self._tick = time.monotonic()  # the loop runs this: it is not blocked now
        # Every task on the loop: the handlers', the ticker, and any a handler or a library
        # started (a client's pool closes its connections when cancelled).
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        if others:  # a short turn for the cancelled to end (the abandoned will not)
            await asyncio.wait(others, timeout=SHUTDOWN_TURN_SECS)
        await sync_to_async(connections.close_all, thread_sensitive=True)()
        loop = asyncio.get_running_loop()
        loop.call_soon(loop.stop)

    def bind(self, attempt: Attempt) -> None:
        """Make a stop of ``attempt`` cancel the running coroutine (called by it, once begun)."""
        task = asyncio.current_task()
        loop = self._loop
        assert task is not None and loop is not None

        def cancel() -> None:
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # the loop is closed: nothing left to cancel
                pass

        attempt.on_stop = cancel
        if attempt.stop_kind is not None:  # stopped between begin and now
            task.cancel()

    # -- the watchdog thread -----------------------------------------------------------------

    def _watchdog(self) -> None:
        awake = time.monotonic()
        while not self._closed.wait(TICK_SECS * 2):
            now = time.monotonic()
            # Late itself: the whole process was paused (SIGSTOP, a stalled VM), not the loop
            # by a handler; the loop gets the time to tick again before it is judged.
            paused = now - awake >= BLOCKED_SECS
            awake = now
            if not paused:
                self._look()

    def _look(self) -> None:
        late = time.monotonic() - self._tick
        if late >= BLOCKED_SECS and self._blocked_since is None:
            self._blocked_since = self._tick
            self._report_blocked(late)
        elif late < BLOCKED_SECS and self._blocked_since is not None:
            held = self._tick - self._blocked_since
            self._blocked_since = None
            logs.event("event_loop_unblocked", logging.WARNING, blocked_secs=round(held, 3))

    def _report_blocked(self, late: float) -> None:
        current = asyncio.current_task(self._loop) if self._loop is not None else None
        attempt = self._tasks.get(current) if current is not None else None
        fields: dict[str, Any] = {"blocked_secs": round(late, 3), "in_flight": self.in_flight}
        if attempt is not None:
            logs.task_event("event_loop_blocked", attempt.claimed, logging.WARNING, **fields)
        else:
            logs.event("event_loop_blocked", logging.WARNING, **fields)
