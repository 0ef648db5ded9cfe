"""The worker runtime: claim into free slots, run handlers on a pool, settle in batches.

One loop thread claims and settles; one guard thread (``rivet.worker.guard``) heartbeats; on
PostgreSQL a listener thread (``rivet.worker.listen``) turns enqueue notifications (LISTEN)
into wake-ups of the loop, which otherwise polls every ``poll_interval``; handlers run on a
fixed pool of ``concurrency`` threads started once (``rivet.worker.pool.HandlerPool``). A claim
asks for as many tasks as there are free slots plus ``prefetch``: up to ``prefetch`` claimed
tasks wait for a handler thread, so a flush that acks a finished task also claims the ones that
run next, and a fast worker settles and claims many tasks per round trip. A waiting task's
lease is heartbeated like a running one's; its job timeout counts from when a thread takes it;
one stopped while it waits (cancelled, fenced, lease lost) is never run. ``prefetch=auto``, the
default, sets how many by the handlers' run times (``rivet.worker.prefetch``): many for short
tasks, none for long ones; ``prefetch=0`` claims only into free slots.

The ``Worker`` is this module (its run, the events handler threads and the guard report, the
drain, the handler threads it abandons) on ``rivet.worker.slots.Slots`` (the slots, the flush
that settles and claims into them, the handler run); what a run did, and the exit code it ends
with, is ``rivet.worker.stats``.

Each attempt ends in exactly one store write (or, when the lease cannot be confirmed, none):
``rivet.worker.settle`` says which, and queues it. The loop flushes every queued decision and
claims into the free slots in one store call (``task_settle_and_claim``: one statement on
PostgreSQL) as soon as the previous one returned: no timer, a lone task settles at once and a
busy worker batches by itself. A handler the guard stopped (lease fenced, local deadline
passed) is never acked.

Handlers that will not return. Python cannot kill a thread. A handler stopped by the guard (or
timed out) is told to stop through ``context.should_stop`` / ``context.check()``; its task is
settled at once, and its thread keeps its slot until it returns, so the worker claims less. A
thread still running ``lease_ttl`` seconds after its stop is *abandoned*: logged, counted, and
if it returns later its slot comes back. When ``max_abandoned`` threads (default: half the
slots, at least one) are abandoned at once, the worker stops claiming, drains, and exits with
code 3 so a supervisor restarts it with fresh slots. At shutdown, handlers still running after
``shutdown_timeout`` are stopped and abandoned (their leases lapse; the tasks are delivered
again) and the worker exits with code 3 instead of 0. Prefetched tasks count as in-flight work:
they run during the drain; those no thread took by ``shutdown_timeout`` are withdrawn, never
run, and their leases lapse (as after a crash), without counting as abandoned.

Database connections (``pool_size``). Django gives each thread its own connection. On
PostgreSQL the ``rivet_worker`` command makes them come from one psycopg pool of at most
``pool_size`` (``rivet.worker.pool``): the loop's (claim, settle), the guard's (heartbeats)
and one for each handler thread that uses the ORM, returned to the pool when the handler ends.
Keep ``pool_size >= concurrency + 2`` (the worker warns otherwise): a heartbeat that waits for a
connection can lose its lease. The store's LISTEN connection is outside the pool. Stale
connections are closed before the loop goes idle and after any database error
(``rivet.worker.pool.tidy_connections``); the loop keeps its own pooled connection while idle,
and one that goes back to the pool gets the server's planner settings back first.
"""

from __future__ import annotations

import logging
import queue as queue_module
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db import connections

from rivet import logs
from rivet.conf import rivet_settings
from rivet.dbwait import DbWaits, Slot
from rivet.failpoints import Failpoints, active
from rivet.jobs import JobRegistry, registry
from rivet.retry import RetryPolicy
from rivet.stores.base import Store, Waiting
from rivet.worker.aio import AsyncRunner, KindMix
from rivet.worker.attempt import Attempt, AttemptState, StopKind
from rivet.worker.config import WorkerConfig
from rivet.worker.ending import Reporter, describe
from rivet.worker.guard import Guard
from rivet.worker.listen import Listener
from rivet.worker.metrics import NO_METRICS, WorkerMetrics
from rivet.worker.options import checked
from rivet.worker.pool import HandlerPool, tidy_connections
from rivet.worker.prefetch import Prefetch
from rivet.worker.process import default_owner
from rivet.worker.prune import Pruner
from rivet.worker.settle import Outcome, Settler
from rivet.worker.slots import Slots
from rivet.worker.stats import EXIT_ABANDONED, EXIT_OK, EXIT_STORE_ERROR, WorkerStats, log_counts

if TYPE_CHECKING:
    from rivet.schedules.scheduler import Scheduler

#: The first wait before claiming again while an enqueue that did not notify may still be open
#: (``Waiting.NOT_YET``); it doubles each time, up to the poll interval.
GATE_RETRY_FIRST_SECS = 0.005


class Worker(Slots):
    """Runs the handlers of claimed tasks until stopped; see the module docstring."""

    def __init__(
        self,
        config: WorkerConfig,
        *,
        store: Store,
        registry: JobRegistry = registry,
        retry_policy: RetryPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
        failpoints: Failpoints | None = None,
        metrics: bool | WorkerMetrics = False,
        pruner: Pruner | None = None,
        scheduler: Scheduler | None = None,
    ) -> None:
        """``config`` says what to do; the rest are the collaborators it is done with.

        ``retry_policy``: the config's unless given (a test's random source); ``metrics``:
        count into Prometheus counters (rivet_worker serves them on --metrics-port), or into the
        ones given (Workers of one process sharing them: ``rivet.worker.group``);
        ``pruner``: retention, on a thread of its own (``rivet.worker.prune``);
        ``scheduler``: enqueues due schedule ticks, on a thread of its own (``rivet.schedules``).
        """
        self.config = config
        self.store = store
        self.owner = config.owner or default_owner()
        #: Claimed tasks that may wait for a handler thread: fixed, or set by run times.
        self.prefetcher = Prefetch(
            default_prefetch() if config.prefetch is None else config.prefetch,
            config.concurrency,
        )
        self.registry = registry
        self.clock = clock
        self.failpoints = failpoints or active()
        self.pruner = pruner
        self.scheduler = scheduler
        #: The database calls of its threads; a wait past the connect timeout is logged.
        self.db_waits = DbWaits(getattr(store, "using", None), config.connect_timeout)
        #: The loop thread's slot in ``db_waits`` (made when run() starts, on that thread).
        self._db = Slot(self.db_waits, lambda: None)
        self.guard = Guard(
            store=store,
            lease_ttl=self.config.lease_ttl,
            clock=clock,
            notify=self._notify,
            failpoints=self.failpoints,
            db_waits=self.db_waits,
        )
        self._events = queue_module.SimpleQueue()
        self._running = {}
        self._stopping = threading.Event()
        if isinstance(metrics, WorkerMetrics):
            self.metrics = metrics
        elif metrics:
            self.metrics = WorkerMetrics(
                slots=self.config.concurrency,
                busy=self.busy_slots,
                busy_async=self.busy_async,
                db_wait=self.db_waits.longest,
            )
        else:
            self.metrics = NO_METRICS
        # Every counter at 0 before the first claim (WorkerMetrics.prime says why).
        self.metrics.prime(self.config.queues, self.registry.names())
        self.reporter = Reporter(
            sender=self,
            metrics=self.metrics,
            task_log_level=logs.LEVELS[config.task_log_level],
            failpoints=self.failpoints,
        )
        #: Attempts by how they ended, claims, burials and abandoned threads.
        self.counts = self.reporter.counts
        self.settler = Settler(
            store=store,
            guard=self.guard,
            retry_policy=retry_policy or config.retry_policy,
            failpoints=self.failpoints,
            clock=clock,
        )
        self.handlers = HandlerPool(
            self.config.concurrency, self._execute, setup=self._watch_handler_thread
        )
        self.mix = KindMix()
        #: The event loop of async handlers, started the first time an async kind is claimed
        #: (or an async failed hook runs): until then, claims are sized as if there were none.
        self.aio: AsyncRunner | None = None
        self.reporter.run_async_hook = self._run_async_hook
        self._gave_up = False
        self._requeued = False
        self._claim_short: bool | None = None
        #: The wait before claiming again while the store says NOT_YET (None: not waiting so).
        self._gate_retry: float | None = None
        self._listener: Listener | None = None
        self._exit_code = EXIT_OK

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self) -> None:
        """Stop claiming; run() finishes in-flight work within shutdown_timeout and returns."""
        self._stopping.set()
        self._events.put(None)

    def run(self) -> WorkerStats:
        """Claim and run tasks until stopped (or --once / --max-jobs says enough)."""
        logs.event(
            "worker_started",
            owner=self.owner,
            queues=",".join(self.config.queues),
            concurrency=self.config.concurrency,
            prefetch=self.prefetcher.describe(),
            lease_ttl=self.config.lease_ttl,
            pool_size=self.config.pool_size,
        )
        self._db = self.db_waits.slot()  # this thread's connection: the loop's
        self.db_waits.start()
        self._server_warnings()
        self.guard.start()
        self.handlers.start()
        if self.pruner is not None:
            self.pruner.db_waits = self.db_waits
            self.pruner.start()
        if self.scheduler is not None:
            self.scheduler.db_waits = self.db_waits
            self.scheduler.start()
        self._listener = listener = self._start_listener()
        try:
            self._loop()
            logs.event("worker_stopping", owner=self.owner, in_flight=self._busy())
            stranded = self._drain()
        finally:
            self.handlers.close()
            if self.aio is not None:
                self.aio.close()
            if listener is not None:
                listener.close()
            self.guard.close()
            if self.pruner is not None:
                self.pruner.close()
            if self.scheduler is not None:
                self.scheduler.close()
            self.db_waits.close()
            tidy_connections()  # the loop's pooled connection goes back without its session's
            connections.close_all()
        code = EXIT_ABANDONED if (stranded or self._gave_up) else self._exit_code
        stats = WorkerStats(**self.counts, exit_code=code)
        summary: dict[str, Any] = log_counts(stats)
        logs.event("worker_stopped", owner=self.owner, exit_code=code, **summary)
        logs.flush()
        return stats

    def _server_warnings(self) -> None:
        """Log what the store finds wrong with the server's settings; never stops the worker."""
        try:
            with self._db.watching("server check"):
                found = self.store.server_warnings()
        except Exception as exc:  # noqa: BLE001 - a check that fails is only logged
            tidy_connections()
            logs.event("server_check_failed", logging.WARNING, error=describe(exc))
            return
        for name, note in found:
            logs.event(name, logging.WARNING, note=note)

    def _start_listener(self) -> Listener | None:
        if not self.store.supports_wakeup or self.config.once:
            return None
        listener = Listener(
            store=self.store,
            queues=self.config.queues,
            poll_interval=self.config.poll_interval,
            wake=self._wake,
            db_waits=self.db_waits,
        )
        listener.start()
        return listener

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._process_events(timeout=0)
            self._check_abandoned()
            if self._enough_jobs():
                return
            got = self._flush()
            if self.config.once and got is None:
                self._exit_code = EXIT_STORE_ERROR
                return
            if self.config.once and not got and not self._unsettled():
                if not self._requeued:
                    return
                # A retry just written may be runnable already (no backoff): claim again now,
                # not a poll interval later, so --once ends with what is runnable at its end.
                continue
            if got and self._claim_short is False and self._free_slots() > 0:
                # The claim came back full and slots are still free: it was sized before it
                # taught the kinds' mix (or started the event loop, or learned the prefetch),
                # so the next, larger claim goes now, not when a handler returns.
                continue
            self._wait()

    def _wait(self) -> None:
        """Until a handler finishes, work is enqueued (LISTEN), a stop, or the poll interval.

        Decisions already queued are flushed at once; ones backing off, when their wait ends.
        A loop whose claim came back short waits on wake-ups only once the store says every
        enqueue that did not notify it is visible (``_wait_for_wakeups``); until then it
        claims again after a short wait, doubled each time up to the poll interval.
        """
        if not self._running:
            tidy_connections(idle=True)
        if self._wait_for_wakeups():
            return  # claim once more before sleeping: what was enqueued before it waited
        self._wait_some(self._gate_retry or self.config.poll_interval)

    def _wait_for_wakeups(self) -> bool:
        """Tell the store whether the loop relies on wake-ups (its last claim came back short)
        or has work; True when the loop should claim again at once."""
        short, self._claim_short = self._claim_short, None
        if short is None or self._listener is None:
            return False  # no claim since (the state stands), or no wake-ups (polling)
        try:
            with self._db.watching("wake-up check"):
                state = self.store.wait_for_wakeups(self.config.queues, short)
        except Exception as exc:  # noqa: BLE001 - a failed wait is only logged; polling covers
            logs.event("wait_for_wakeups_failed", logging.WARNING, error=describe(exc))
            tidy_connections()
            state = Waiting.NOT_YET if short else Waiting.WAITING
        if state is Waiting.NOT_YET:
            doubled = 2 * (self._gate_retry or GATE_RETRY_FIRST_SECS / 2)
            self._gate_retry = min(doubled, self.config.poll_interval)
            return False
        self._gate_retry = None
        return state is Waiting.STARTED

    def _drain(self) -> int:
        """Wait for in-flight handlers up to shutdown_timeout; abandon the rest."""
        deadline = self.clock() + self.config.shutdown_timeout
        while (self._busy() or self.settler.pending) and self.clock() < deadline:
            self._flush(claim=False)
            self._wait_some(min(0.1, max(deadline - self.clock(), 0.0)))
        now = self.clock()
        for attempt in [a for a in self._running.values() if a.busy]:
            if attempt.withdraw(StopKind.SHUTDOWN, "worker shutting down before it ran", now):
                # Prefetched, never taken by a thread: nothing ran; its lease lapses.
                self._report(self.settler.settle_stopped(attempt))
                attempt.mark_returned()
                continue
            attempt.stop(StopKind.SHUTDOWN, "worker shutting down", now)
            if attempt.owes_decision:
                self._report(self.settler.settle_stopped(attempt))
            self._abandon(attempt)
        with self._db.watching("settle"):
            ended = self.settler.flush_all()
        self._report(*ended)
        self._forget_finished()
        return self._busy()

    def _watch_handler_thread(self) -> None:
        """On each handler thread, once: its queries on the worker's alias are watched."""
        alias = self.db_waits.alias
        if alias is None:
            return
        slot = self.db_waits.slot()
        connections[alias].execute_wrappers.append(slot.execute_wrapper("handler query"))

    def _wait_some(self, timeout: float) -> None:
        """Write the held-back log lines, then handle events for up to ``timeout`` seconds."""
        logs.flush()
        due = self.settler.next_due()
        if due is not None:
            timeout = min(timeout, max(due - self.clock(), 0.0))
        self._process_events(timeout=timeout)

    # -- events from handler threads and the guard -------------------------------------------

    def _notify(self, attempt: Attempt) -> None:
        self._events.put((attempt, None))

    def _wake(self) -> None:
        """Work was enqueued (the listener): the loop stops waiting and claims."""
        self._events.put(None)

    def _process_events(self, timeout: float) -> bool:
        """Handle what handler threads and the guard reported; False when nothing came."""
        try:
            item = self._events.get(timeout=timeout) if timeout > 0 else self._events.get_nowait()
        except queue_module.Empty:
            return False
        while True:
            if item is not None:
                self._on_event(*item)
            try:
                item = self._events.get_nowait()
            except queue_module.Empty:
                return True

    def _on_event(self, attempt: Attempt, outcome: Outcome | None) -> None:
        if outcome is not None:
            if attempt.state is AttemptState.ABANDONED:
                logs.task_event("rejoined", attempt.claimed)
            attempt.mark_returned()
        if attempt.owes_decision:
            if outcome is None or attempt.stop_kind is not None:
                self._report(self.settler.settle_stopped(attempt))
            else:
                self._report(self.settler.settle(attempt, outcome))
        if attempt.state is AttemptState.FINISHED:
            self._running.pop(attempt.lease, None)

    def _check_abandoned(self) -> None:
        now = self.clock()
        for attempt in list(self._running.values()):
            late = (
                attempt.stopped_at is not None and now - attempt.stopped_at >= self.config.lease_ttl
            )
            if late and attempt.busy and attempt.began:
                self._abandon(attempt)
        stuck = stuck_async = 0
        for a in self._running.values():
            if a.state is AttemptState.ABANDONED:
                if a.is_async:
                    stuck_async += 1
                else:
                    stuck += 1
        too_many = stuck >= self.config.abandon_limit
        if stuck_async >= self.config.async_abandon_limit:
            too_many, stuck = True, stuck_async
        if too_many and not self._gave_up:
            self._gave_up = True
            logs.event("too_many_abandoned", logging.ERROR, owner=self.owner, abandoned=stuck)
            self.stop()

    def _abandon(self, attempt: Attempt) -> None:
        if attempt.abandon():
            self.counts["abandoned"] += 1
            self.metrics.event("abandoned", attempt.claimed)
            logs.task_event(
                "abandoned", attempt.claimed, logging.WARNING, reason=attempt.stop_reason
            )


def default_prefetch() -> int | str:
    """RIVET['PREFETCH'] ("auto" unless set: by the handlers' run times)."""
    return checked("prefetch", rivet_settings.PREFETCH)
