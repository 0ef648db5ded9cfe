"""The worker's slots: the attempts it holds, the flush that fills the free ones, the handler run.

``Slots`` is the part of ``rivet.worker.loop.Worker`` that counts its slots (``concurrency``
handler threads, plus ``prefetch`` claimed tasks that may wait for one), writes the queued
decisions and claims into the free slots in one store call (``task_settle_and_claim``), starts
each claimed attempt (guarded, handed to the handler pool; an unknown kind fails at once) and,
on a handler thread, runs its handler and hands the outcome back to the loop. The loop's events,
its drain and the threads it abandons are ``rivet.worker.loop``'s.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import queue as queue_module
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from django.db import connections

from rivet import logs, signals, tracing
from rivet.dbwait import Slot
from rivet.errors import UnknownJob
from rivet.failpoints import Failpoints, fired_by
from rivet.jobs import JobRegistry
from rivet.stores.base import ClaimFailed, Store
from rivet.values import ClaimBatch, Claimed, Settled
from rivet.worker.aio import AsyncRunner, KindMix
from rivet.worker.attempt import Attempt, AttemptState
from rivet.worker.config import WorkerConfig
from rivet.worker.ending import Ended, Reporter
from rivet.worker.guard import Guard
from rivet.worker.metrics import NoMetrics
from rivet.worker.pool import HandlerPool, tidy_connections
from rivet.worker.prefetch import ASYNC_WAIT_BUDGET_SECS, AUTO, Prefetch
from rivet.worker.settle import Outcome, Settler


def _sync_returned_coroutine(attempt: Attempt, coroutine: Any) -> TypeError:
    """A plain def that returned a coroutine (it called an async function without awaiting
    it): never run, so closed, and the attempt fails saying why."""
    coroutine.close()
    return TypeError(
        f"the handler of job {attempt.claimed.kind!r} is a plain def but returned a coroutine "
        f"({getattr(coroutine, '__qualname__', coroutine)!r}, never awaited): declare the "
        "handler async def (it then runs on the worker's event loop) or await nothing in it"
    )


#: The outcome a handler thread reports for an attempt stopped before it began: nothing ran.
NOT_RUN = Outcome()


class Slots:
    """Slots, claims and handler runs of a ``Worker``, which sets every attribute below."""

    config: WorkerConfig
    store: Store
    owner: str
    prefetcher: Prefetch
    registry: JobRegistry
    clock: Callable[[], float]
    failpoints: Failpoints
    guard: Guard
    settler: Settler
    reporter: Reporter
    counts: Counter[str]
    metrics: NoMetrics
    handlers: HandlerPool
    _db: Slot
    #: The event loop of async handlers; None while the worker has no async kind.
    aio: AsyncRunner | None
    #: How claims are sized between the two pools (with ``aio`` only).
    mix: KindMix
    #: The attempts this worker holds, by lease, until settled and returned.
    _running: dict[Any, Attempt]
    #: What handler threads and the guard report to the loop: (attempt, outcome) or a wake-up.
    _events: queue_module.SimpleQueue
    #: The last flush wrote a retry: runnable for the next claim, not for that one.
    _requeued: bool
    #: What the last claim found: fewer tasks than it asked for (True: the loop relies on
    #: wake-ups now), as many (False: it has work), or None when no claim was made since.
    _claim_short: bool | None

    # -- slots and claims --------------------------------------------------------------------

    def _unsettled(self) -> int:
        return sum(1 for a in self._running.values() if not a.settled)

    def _busy(self) -> int:
        return sum(1 for a in self._running.values() if a.busy)

    def busy_slots(self) -> int:
        """Thread slots whose handler has not returned; safe to call from another thread (a
        scrape)."""
        return sum(1 for a in list(self._running.values()) if a.busy and a.began and not a.is_async)

    def busy_async(self) -> int:
        """Async handlers started and not returned (the same, for the event loop)."""
        return sum(1 for a in list(self._running.values()) if a.busy and a.began and a.is_async)

    def _free_slots(self) -> int:
        """How many tasks the next claim asks for: free slots and free prefetch room."""
        if self.aio is None:
            free = self.config.concurrency + self.prefetcher.current() - self._busy()
        else:
            free = self._free_both()
        if self.config.max_jobs is not None:
            free = min(free, self.config.max_jobs - self._finished() - self._unsettled())
        return max(free, 0)

    def _free_both(self) -> int:
        """The claim of a worker with both kinds: by each pool's free slots (``KindMix``)."""
        assert self.aio is not None
        sync_busy = async_busy = 0
        for attempt in self._running.values():
            if attempt.busy:
                if attempt.is_async:
                    async_busy += 1
                else:
                    sync_busy += 1
        return self.mix.claim_size(
            self.config.concurrency + self.prefetcher.current() - sync_busy,
            self.config.async_concurrency + self.aio.prefetch.current() - async_busy,
        )

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
        db = self._db
        db.begin(("settle and claim" if wanted > 0 else "settle") if decided else "claim")
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
        finally:
            db.end()
        self._applied(flushed.settled)
        got = self._take(flushed.batch, started)
        if wanted > 0:
            self._claim_short = got < wanted
        return got

    def _applied(self, settled: list[Settled]) -> None:
        """The flush wrote the due decisions: report each attempt's end."""
        # A retry the flush just wrote is runnable for the next claim, not for this one.
        self._requeued = Settled.RETRIED in settled
        if settled:
            ends = self.settler.applied(settled)
            self._report(*ends)
            for ended in ends:  # those whose handler returned: forgotten (not every attempt
                if ended.attempt.state is AttemptState.FINISHED:  # looked at per flush)
                    self._running.pop(ended.attempt.lease, None)

    def _report(self, *ends: Ended | None) -> None:
        for ended in ends:
            if ended is not None:
                self.reporter.report(ended)

    def _claim_failed(self, exc: BaseException) -> None:
        logs.event(
            "claim_failed", logging.ERROR, owner=self.owner, error=f"{type(exc).__name__}: {exc}"
        )
        tidy_connections()

    def _take(self, batch: ClaimBatch, started: float) -> int:
        """Start the tasks a claim leased; count the ones it buried on the way."""
        if batch.buried:
            self.counts["buried"] += batch.buried
            self.metrics.buried(batch.buried)
            logs.event("buried", owner=self.owner, count=batch.buried)
        if batch.claimed:
            # Asked once per claim, not per task: a tracer provider set meanwhile records the
            # spans of the next claim's attempts.
            recording = tracing.recording()
            for claimed in batch.claimed:
                self._start(claimed, started, recording)
        return len(batch.claimed)

    def _forget_finished(self) -> None:
        """Drop the attempts that are settled and whose handler returned."""
        if any(a.state is AttemptState.FINISHED for a in self._running.values()):
            self._running = {
                lease: a
                for lease, a in self._running.items()
                if a.state is not AttemptState.FINISHED
            }

    def _start(self, claimed: Claimed, started: float, recording: bool | None = None) -> None:
        self.counts["claimed"] += 1
        self.metrics.event("claimed", claimed)
        logs.task_event("claimed", claimed, self.reporter.task_log_level)
        if self.failpoints.armed:
            self.failpoints.fire("after_claim")
        definition = self.registry.find(claimed.kind)
        timeout = definition.timeout_secs if definition else None
        attempt = Attempt(
            claimed=claimed,
            definition=definition,
            started=started,
            lease_ttl=self.config.lease_ttl,
            timeout_secs=timeout or self.config.job_timeout,
            recording=recording,
        )
        self._running[attempt.lease] = attempt
        if attempt.span.recorded and claimed.attempt > 1:
            self._trace_previous(attempt)
        if definition is None:
            self._fail_unknown(attempt)
            return
        self.guard.track(attempt)
        if self.aio is None and not attempt.is_async:
            self.handlers.submit(attempt)
            return
        self.mix.observe(attempt.is_async)
        if attempt.is_async:
            self._async_runner().submit(attempt)
        else:
            self.handlers.submit(attempt)

    def _async_runner(self) -> AsyncRunner:
        """The event loop, made and started the first time it is needed."""
        runner = self.aio or self._async_runner_made()
        runner.start()
        return runner

    def _async_runner_made(self) -> AsyncRunner:
        setting = AUTO if self.prefetcher.auto else self.prefetcher.fixed
        prefetch = Prefetch(setting, self.config.async_concurrency, ASYNC_WAIT_BUDGET_SECS)
        self.aio = AsyncRunner(self.config.async_concurrency, self._execute_async, prefetch)
        logs.event(
            "event_loop_started", owner=self.owner, async_concurrency=self.config.async_concurrency
        )
        return self.aio

    def _run_async_hook(self, attempt: Attempt, awaitable: Any, on_error: Any) -> None:
        self._async_runner().run_hook(attempt, awaitable, on_error)

    def _trace_previous(self, attempt: Attempt) -> None:
        """Give a traced attempt the evidence of the one before it when that one never settled.

        A claim raises the epoch by one, so the previous attempt held ``epoch - 1``; every
        settle (ack, retry, burial) writes its epoch as ``settled_epoch``. When the two differ,
        the previous attempt's worker died or lost the database before it wrote anything, and
        its span, if it was ever started, was not exported: this span names it. One read of the
        task, only for attempts after the first and only while spans are recorded; a failed
        read leaves the span without the event and the attempt runs as usual.
        """
        claimed = attempt.claimed
        try:
            record = self.store.task_get(claimed.task_id)
        except Exception as exc:  # tracing never stops an attempt
            logs.event("trace_read_failed", logging.WARNING, task=claimed.task_id, error=repr(exc))
            return
        if record is not None and record.settled_epoch != claimed.epoch - 1:
            attempt.span.previous_lost(
                attempt=claimed.attempt - 1,
                epoch=claimed.epoch - 1,
                settled_epoch=record.settled_epoch,
            )

    def _fail_unknown(self, attempt: Attempt) -> None:
        """An unknown kind is never run: the attempt fails with the error naming the kind."""
        try:
            self.registry.get(attempt.claimed.kind)
        except UnknownJob as exc:
            logs.task_event("unknown_kind", attempt.claimed, logging.ERROR)
            self.settler.fail(attempt, exc)

    def _execute(self, attempt: Attempt) -> None:
        """On a handler thread: run the handler, hand the outcome to the loop."""
        definition = attempt.definition
        assert definition is not None
        if not attempt.begin(self.clock()):
            self._events.put((attempt, NOT_RUN))  # stopped while it waited: never run
            return
        try:
            self.reporter.send(signals.task_processing, attempt)
            if self.failpoints.armed and "before_effect" not in fired_by(definition.handler):
                self.failpoints.fire("before_effect")
            began = time.perf_counter()
            try:
                with attempt.span.current():
                    outcome = Outcome(result=definition(attempt.context))
            finally:
                took = time.perf_counter() - began
                self.metrics.handler_seconds(attempt.claimed, took)
                self.prefetcher.observe(took)
        except BaseException as exc:  # a handler may raise anything; it is the attempt's error
            outcome = Outcome(error=exc)
        finally:
            connections.close_all()  # this thread's connections only
        if inspect.iscoroutine(outcome.result):
            outcome = Outcome(error=_sync_returned_coroutine(attempt, outcome.result))
        self._events.put((attempt, outcome))

    async def _execute_async(self, attempt: Attempt) -> None:
        """On the event loop: run an async handler, hand the outcome to the loop thread.

        Every await is inside the ``try`` that catches what the coroutine raises (a cancel
        included), so the outcome is always handed back.
        """
        definition = attempt.definition
        assert definition is not None and self.aio is not None
        if not attempt.begin(self.clock()):
            self._events.put((attempt, NOT_RUN))  # stopped while it waited: never run
            return
        self.aio.bind(attempt)
        try:
            self.reporter.send(signals.task_processing, attempt)
            if self.failpoints.armed and "before_effect" not in fired_by(definition.handler):
                self.failpoints.fire("before_effect")
            began = time.perf_counter()
            try:
                with attempt.span.current():
                    outcome = Outcome(result=await definition(attempt.context))
            finally:
                took = time.perf_counter() - began
                self.metrics.handler_seconds(attempt.claimed, took)
                self.aio.prefetch.observe(took)
        except BaseException as exc:  # a coroutine may raise anything (CancelledError too)
            outcome = Outcome(error=exc)
        if attempt.stop_kind is not None and not isinstance(outcome.error, asyncio.CancelledError):
            # Told to stop, it went on and ended by itself: said once, as the abandoned are.
            logs.task_event(
                "cancel_ignored", attempt.claimed, logging.WARNING, reason=attempt.stop_reason
            )
        self._events.put((attempt, outcome))
