"""The worker runtime: claim into free slots, run handlers on a pool, settle in batches.

One loop thread claims and settles; one guard thread (``rivet.worker.guard``) heartbeats; on
PostgreSQL a listener thread turns enqueue notifications (LISTEN) into wake-ups of the loop,
which otherwise polls every ``poll_interval``; handlers run on a fixed pool of ``concurrency``
threads started once (``rivet.worker.pool.HandlerPool``). A claim asks for as many tasks as
there are free slots plus ``prefetch``: up to ``prefetch`` claimed tasks wait for a handler
thread, so a flush that acks a finished task also claims the ones that run next, and a fast
worker settles and claims many tasks per round trip. A waiting task's lease is heartbeated like
a running one's; its job timeout counts from when a thread takes it; one stopped while it waits
(cancelled, fenced, lease lost) is never run. ``prefetch=0``, the default, claims only into
free slots: no task waits behind a slow handler.

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
connections are closed between jobs (``close_old_connections`` before the loop goes idle) and
after any database error.
"""

from __future__ import annotations

import logging
import queue as queue_module
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import close_old_connections, connections

from rivet import logs, signals
from rivet.conf import rivet_settings
from rivet.errors import UnknownJob
from rivet.failpoints import Failpoints, active, fired_by
from rivet.jobs import JobRegistry, registry
from rivet.retry import RetryPolicy
from rivet.stores.base import ClaimFailed, Store
from rivet.values import ClaimBatch, Claimed, Settled
from rivet.worker.attempt import Attempt, AttemptState, StopKind
from rivet.worker.config import WorkerConfig
from rivet.worker.ending import Ended, Reporter, describe
from rivet.worker.guard import Guard
from rivet.worker.metrics import NO_METRICS, WorkerMetrics
from rivet.worker.options import checked
from rivet.worker.pool import HandlerPool
from rivet.worker.process import default_owner
from rivet.worker.prune import Pruner
from rivet.worker.settle import Outcome, Settler

if TYPE_CHECKING:
    from rivet.schedules.scheduler import Scheduler

EXIT_OK = 0
EXIT_STORE_ERROR = 1  # --once could not claim: the database failed
EXIT_ABANDONED = 3
LISTEN_SLICE_SECS = 0.5
#: The outcome a handler thread reports for an attempt stopped before it began: nothing ran.
NOT_RUN = Outcome()


@dataclass(frozen=True, kw_only=True)
class WorkerStats:
    """What one run of a worker did."""

    claimed: int = 0
    acked: int = 0
    failed: int = 0  # attempts that ended in an error, a timeout or an unknown kind
    retried: int = 0
    dead: int = 0
    cancelled: int = 0  # attempts an operator cancelled, buried without an ack
    fenced: int = 0
    lost: int = 0  # attempts left to lapse: no heartbeat could confirm the lease, or a write failed
    abandoned: int = 0
    buried: int = 0  # exhausted tasks a claim buried on the way
    exit_code: int = EXIT_OK

    @property
    def processed(self) -> int:
        """Attempts this worker settled, whatever the outcome."""
        return self.acked + self.retried + self.dead + self.cancelled + self.fenced + self.lost


class Worker:
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
        metrics: bool = False,
        pruner: Pruner | None = None,
        scheduler: Scheduler | None = None,
    ) -> None:
        """``config`` says what to do; the rest are the collaborators it is done with.

        ``retry_policy``: the config's unless given (a test's random source); ``metrics``:
        count into Prometheus counters (rivet_worker serves them on --metrics-port);
        ``pruner``: retention, on a thread of its own (``rivet.worker.prune``);
        ``scheduler``: enqueues due schedule ticks, on a thread of its own (``rivet.schedules``).
        """
        self.config = config
        self.store = store
        self.owner = config.owner or default_owner()
        #: Claimed tasks that may wait for a handler thread.
        self.prefetch = default_prefetch() if config.prefetch is None else config.prefetch
        self.registry = registry
        self.clock = clock
        self.failpoints = failpoints or active()
        self.pruner = pruner
        self.scheduler = scheduler
        self.guard = Guard(
            store=store,
            lease_ttl=self.config.lease_ttl,
            clock=clock,
            notify=self._notify,
            failpoints=self.failpoints,
        )
        self._events: queue_module.SimpleQueue = queue_module.SimpleQueue()
        self._running: dict[Any, Attempt] = {}
        self._stopping = threading.Event()
        self._listener_done = threading.Event()
        self.metrics = (
            WorkerMetrics(slots=self.config.concurrency, busy=self.busy_slots)
            if metrics
            else NO_METRICS
        )
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
        self.handlers = HandlerPool(self.config.concurrency, self._execute)
        self._gave_up = False
        self._requeued = False
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
            prefetch=self.prefetch,
            lease_ttl=self.config.lease_ttl,
            pool_size=self.config.pool_size,
        )
        self._server_warnings()
        self.guard.start()
        self.handlers.start()
        if self.pruner is not None:
            self.pruner.start()
        if self.scheduler is not None:
            self.scheduler.start()
        listener = self._start_listener()
        try:
            self._loop()
            logs.event("worker_stopping", owner=self.owner, in_flight=self._busy())
            stranded = self._drain()
        finally:
            self.handlers.close()
            self._listener_done.set()
            if listener is not None:
                listener.join(timeout=LISTEN_SLICE_SECS * 4)
            self.guard.close()
            if self.pruner is not None:
                self.pruner.close()
            if self.scheduler is not None:
                self.scheduler.close()
            connections.close_all()
        code = EXIT_ABANDONED if (stranded or self._gave_up) else self._exit_code
        stats = WorkerStats(**self.counts, exit_code=code)
        summary: dict[str, Any] = _summary(stats)
        logs.event("worker_stopped", owner=self.owner, exit_code=code, **summary)
        logs.flush()
        return stats

    def _server_warnings(self) -> None:
        """Log what the store finds wrong with the server's settings; never stops the worker."""
        try:
            found = self.store.server_warnings()
        except Exception as exc:  # noqa: BLE001 - a check that fails is only logged
            close_old_connections()
            logs.event("server_check_failed", logging.WARNING, error=describe(exc))
            return
        for name, note in found:
            logs.event(name, logging.WARNING, note=note)

    def _start_listener(self) -> threading.Thread | None:
        if not self.store.supports_wakeup or self.config.once:
            return None
        listener = threading.Thread(target=self._listen, name="rivet-listen", daemon=True)
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
            self._wait()

    def _wait(self) -> None:
        """Until a handler finishes, work is enqueued (LISTEN), a stop, or the poll interval.

        Decisions already queued are flushed at once; ones backing off, when their wait ends.
        """
        if not self._running:
            close_old_connections()
        self._wait_some(self.config.poll_interval)

    def _listen(self) -> None:
        """The wake-up thread: turn each enqueue notification into a wake-up of the loop."""
        while not self._listener_done.is_set():
            try:
                if self.store.wait_for_work(self.config.queues, LISTEN_SLICE_SECS):
                    self._events.put(None)
            except Exception as exc:
                logs.event("listen_failed", logging.WARNING, error=f"{type(exc).__name__}: {exc}")
                self._listener_done.wait(self.config.poll_interval)

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
        self._report(*self.settler.flush_all())
        self._forget_finished()
        return self._busy()

    def _wait_some(self, timeout: float) -> None:
        """Write the held-back log lines, then handle events for up to ``timeout`` seconds."""
        logs.flush()
        due = self.settler.next_due()
        if due is not None:
            timeout = min(timeout, max(due - self.clock(), 0.0))
        self._process_events(timeout=timeout)

    # -- slots and claims --------------------------------------------------------------------

    def _unsettled(self) -> int:
        return sum(1 for a in self._running.values() if not a.settled)

    def _busy(self) -> int:
        return sum(1 for a in self._running.values() if a.busy)

    def busy_slots(self) -> int:
        """Slots whose handler has not returned; safe to call from another thread (a scrape)."""
        return sum(1 for a in list(self._running.values()) if a.busy and a.began)

    def _free_slots(self) -> int:
        """How many tasks the next claim asks for: free slots and free prefetch room."""
        free = self.config.concurrency + self.prefetch - self._busy()
        if self.config.max_jobs is not None:
            free = min(free, self.config.max_jobs - self._finished() - self._unsettled())
        return max(free, 0)

    def _finished(self) -> int:
        settled = ("acked", "retried", "dead", "cancelled", "fenced", "lost")
        return sum(self.counts[k] for k in settled)

    def _enough_jobs(self) -> bool:
        return self.config.max_jobs is not None and self._finished() >= self.config.max_jobs

    def _flush(self, claim: bool = True) -> int | None:
        """Write the queued decisions and claim into the free slots, in one store call.

        Returns how many tasks were claimed; None when a claim (with nothing to write) failed.
        While queued decisions back off after a failed write, nothing is claimed either.
        """
        decided = self.settler.due()
        self._requeued = False
        if self.settler.pending and not decided:
            return 0
        wanted = self._free_slots() if claim else 0
        if not decided and wanted <= 0:
            return 0
        if len(decided) > 1 and self.failpoints.armed:
            self.failpoints.fire("before_flush", tasks=[d.lease.task_id for d in decided])
        started = self.clock()
        try:
            flushed = self.store.task_settle_and_claim(
                decided,
                queues=self.config.queues,
                owner=self.owner,
                limit=wanted,
                lease_ttl=self.config.lease_ttl,
            )
        except ClaimFailed as exc:  # the decisions were committed, the claim was not
            self._applied(exc.settled)
            self._claim_failed(exc)
            return 0
        except Exception as exc:
            if decided:
                self._report(*self.settler.failed(exc))
                self._forget_finished()
                return 0
            self._claim_failed(exc)
            return None
        self._applied(flushed.settled)
        return self._take(flushed.batch, started)

    def _applied(self, settled: list[Settled]) -> None:
        """The flush wrote the due decisions: report each attempt's end."""
        # A retry the flush just wrote is runnable for the next claim, not for this one.
        self._requeued = Settled.RETRIED in settled
        if settled:
            self._report(*self.settler.applied(settled))
            self._forget_finished()

    def _report(self, *ends: Ended | None) -> None:
        for ended in ends:
            if ended is not None:
                self.reporter.report(ended)

    def _claim_failed(self, exc: BaseException) -> None:
        logs.event(
            "claim_failed", logging.ERROR, owner=self.owner, error=f"{type(exc).__name__}: {exc}"
        )
        close_old_connections()

    def _take(self, batch: ClaimBatch, started: float) -> int:
        """Start the tasks a claim leased; count the ones it buried on the way."""
        if batch.buried:
            self.counts["buried"] += batch.buried
            self.metrics.buried(batch.buried)
            logs.event("buried", owner=self.owner, count=batch.buried)
        for claimed in batch.claimed:
            self._start(claimed, started)
        return len(batch.claimed)

    def _forget_finished(self) -> None:
        """Drop the attempts that are settled and whose handler returned."""
        if any(a.state is AttemptState.FINISHED for a in self._running.values()):
            self._running = {
                lease: a
                for lease, a in self._running.items()
                if a.state is not AttemptState.FINISHED
            }

    def _start(self, claimed: Claimed, started: float) -> None:
        self.counts["claimed"] += 1
        self.metrics.event("claimed", claimed)
        logs.task_event("claimed", claimed, self.reporter.task_log_level)
        self.failpoints.fire("after_claim")
        definition = self.registry.find(claimed.kind)
        timeout = definition.timeout_secs if definition else None
        attempt = Attempt(
            claimed=claimed,
            definition=definition,
            started=started,
            lease_ttl=self.config.lease_ttl,
            timeout_secs=timeout or self.config.job_timeout,
        )
        self._running[attempt.lease] = attempt
        if definition is None:
            self._fail_unknown(attempt)
            return
        self.guard.track(attempt)
        self.handlers.submit(attempt)

    def _execute(self, attempt: Attempt) -> None:
        """On a handler thread: run the handler, hand the outcome to the loop."""
        definition = attempt.definition
        assert definition is not None
        if not attempt.begin(self.clock()):
            self._events.put((attempt, NOT_RUN))  # stopped while it waited: never run
            return
        try:
            self.reporter.send(signals.task_processing, attempt)
            if "before_effect" not in fired_by(definition.handler):
                self.failpoints.fire("before_effect")
            began = time.perf_counter()
            try:
                with attempt.span.current():
                    outcome = Outcome(result=definition(attempt.context))
            finally:
                self.metrics.handler_seconds(attempt.claimed, time.perf_counter() - began)
        except BaseException as exc:  # a handler may raise anything; it is the attempt's error
            outcome = Outcome(error=exc)
        finally:
            connections.close_all()  # this thread's connections only
        self._events.put((attempt, outcome))

    # -- events from handler threads and the guard -------------------------------------------

    def _notify(self, attempt: Attempt) -> None:
        self._events.put((attempt, None))

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
        stuck = sum(1 for a in self._running.values() if a.state is AttemptState.ABANDONED)
        if stuck >= self.config.abandon_limit and not self._gave_up:
            self._gave_up = True
            logs.event("too_many_abandoned", logging.ERROR, owner=self.owner, abandoned=stuck)
            self.stop()

    def _fail_unknown(self, attempt: Attempt) -> None:
        """An unknown kind is never run: the attempt fails with the error naming the kind."""
        try:
            self.registry.get(attempt.claimed.kind)
        except UnknownJob as exc:
            logs.task_event("unknown_kind", attempt.claimed, logging.ERROR)
            self.settler.fail(attempt, exc)

    def _abandon(self, attempt: Attempt) -> None:
        if attempt.abandon():
            self.counts["abandoned"] += 1
            self.metrics.event("abandoned", attempt.claimed)
            logs.task_event(
                "abandoned", attempt.claimed, logging.WARNING, reason=attempt.stop_reason
            )


def default_prefetch() -> int:
    """RIVET['PREFETCH'] (0 unless set: claim only into free slots)."""
    return checked("prefetch", rivet_settings.PREFETCH)


def _summary(stats: WorkerStats) -> dict[str, int]:
    fields: tuple[str, ...] = ("claimed", "acked", "failed", "retried", "dead", "cancelled")
    fields += ("fenced", "lost", "abandoned")
    return {name: getattr(stats, name) for name in fields}
