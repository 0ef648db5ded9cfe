"""Settling attempts: decide how each ends (rivet.decisions), have the store apply them in batches.

- The handler returned: Ack -> done, or fenced (the store records the stale write).
- It raised, overran its timeout, or its kind is unknown: Retry with the retry policy's delay,
  or Bury on the last attempt (then the job's ``failed`` hook runs once). ``rivet.Permanent``
  buries at once, whatever attempts remain.
- A heartbeat came back without the lease: the result is never acked; a Fence decision records
  the refused write durably, the evidence that the fence fired.
- A heartbeat reported a cancel: Bury as cancelled (the store buries a cancelled task whatever
  was decided, so a result that raced the heartbeat is not acked either).
- The local lease deadline passed and no heartbeat could confirm the lease: a guarded Retry
  gives the task back at once (fenced, and recorded, if another worker claimed it meanwhile);
  it waits up to one more lease for an unreachable database, then the lease simply lapses.

Batches. A decision is queued, not written: the worker's loop flushes every queued decision in
one store call (``task_settle_and_claim``, one statement on PostgreSQL, together with the next
claim) as soon as the previous flush returned, so a lone task is settled at once and a busy
worker batches by itself. Nothing is counted, logged or signalled as done before the flush
that wrote it returned: the reports run after the commit.

A flush that fails because the database is unreachable is tried again with a short backoff,
without blocking the loop (heartbeats, stops and SIGTERM go on), until one lease past each
attempt's local deadline (every write names its epoch, so a late one is applied or fenced,
never wrong); only then is the attempt left to lapse. Any other store error is not retried:
a batch of several is then written one decision at a time, so one refused row does not take
the others down with it.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from django.db import close_old_connections

from rivet import decisions, logs, signals
from rivet.errors import Permanent, StoreUnavailable
from rivet.failpoints import Failpoints
from rivet.retry import RetryPolicy
from rivet.stores.base import Store
from rivet.validation import clip_error
from rivet.values import Decision, Settled
from rivet.worker.attempt import Attempt, StopKind
from rivet.worker.guard import Guard

#: First wait before a failed write is tried again; it doubles up to WRITE_RETRY_MAX_SECS.
WRITE_RETRY_FIRST_SECS = 0.05
WRITE_RETRY_MAX_SECS = 1.0


@dataclass(frozen=True)
class Outcome:
    """What a handler thread hands back: a result, or the exception it raised."""

    result: Any = None
    error: BaseException | None = None


class Pending(NamedTuple):
    """A decision waiting for the next flush, and how to report what the store did with it."""

    attempt: Attempt
    decision: Decision
    report: Callable[[Settled], None]
    give_up: float  # monotonic: past it, a write the database never answered is abandoned


def describe(error: BaseException) -> str:
    """``<ExcType>: <message>``, the form last_error stores."""
    return f"{type(error).__name__}: {error}"


class Settler:
    """Decides how attempts end and reports what the store did; runs on the loop thread."""

    def __init__(
        self,
        *,
        worker: Any,
        store: Store,
        guard: Guard,
        retry_policy: RetryPolicy,
        failpoints: Failpoints,
        clock: Callable[[], float],
        counts: Counter[str],
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.worker = worker
        self.store = store
        self.guard = guard
        self.retry_policy = retry_policy
        self.failpoints = failpoints
        self.clock = clock
        self.counts = counts
        self.sleep = sleep
        #: Decisions not yet written, in the order they were made.
        self.pending: list[Pending] = []
        self._wait = WRITE_RETRY_FIRST_SECS
        self._retry_at = 0.0

    def settle(self, attempt: Attempt, outcome: Outcome) -> None:
        """The handler returned or raised: ack or fail, unless the guard stopped it."""
        if self.clock() >= attempt.lease_deadline and attempt.stop_kind is None:
            # A late result (the worker was paused?): confirm the lease before writing.
            if not self.guard.heartbeat([attempt]) and attempt.stop_kind is None:
                attempt.stop(StopKind.EXPIRED, "lease deadline passed, no heartbeat", self.clock())
        if attempt.stop_kind is not None:
            self.settle_stopped(attempt)
        elif outcome.error is not None:
            self.fail(attempt, outcome.error)
        else:
            self.ack(attempt, outcome.result)

    def settle_stopped(self, attempt: Attempt) -> None:
        """The guard (or shutdown) stopped the handler; settle by the reason it stopped."""
        kind = attempt.stop_kind
        if kind is StopKind.TIMEOUT:
            self.fail(attempt, TimeoutError(attempt.stop_reason))
        elif kind is StopKind.FENCED:
            self._apply(attempt, decisions.lost(attempt.claimed))
        elif kind is StopKind.CANCELLED:
            self._apply(attempt, decisions.cancelled(attempt.claimed))
        elif kind is StopKind.EXPIRED:
            self._expired(attempt)
        else:  # SHUTDOWN: logged by the worker as abandoned; the lease lapses
            self._done(attempt, "lost")

    def _expired(self, attempt: Attempt) -> None:
        """Give the task back under its epoch: fenced and recorded if another worker has it."""
        reason = attempt.stop_reason
        logs.task_event("lease_expired", attempt.claimed, logging.WARNING, reason=reason)
        decision = decisions.expired(attempt.claimed)

        def report(settled: Settled) -> None:
            if settled is Settled.FENCED:
                self._fenced(attempt, decision)
            else:
                self._done(attempt, "lost")

        self._queue(attempt, decision, report)

    def ack(self, attempt: Attempt, result: Any) -> None:
        try:
            json.dumps(result)
        except (TypeError, ValueError) as exc:
            return self.fail(attempt, TypeError(f"handler result is not JSON-serialisable: {exc}"))
        self.failpoints.fire("after_effect_before_ack")
        self._apply(attempt, decisions.succeeded(attempt.claimed, result), result=result)

    def fail(self, attempt: Attempt, exc: BaseException) -> None:
        self.counts["failed"] += 1
        error = clip_error(describe(exc))
        if isinstance(exc, Permanent):
            decision: Decision = decisions.failed_permanently(attempt.claimed, error)
        else:
            delay = self.retry_policy.delay(attempt.claimed.attempt)
            decision = decisions.failed(attempt.claimed, error, delay)
        self._apply(attempt, decision, error=error, exc=exc)

    # -- queueing and flushing decisions ----------------------------------------------------

    def _apply(self, attempt: Attempt, decision: Decision, **report: Any) -> None:
        def reported(settled: Settled) -> None:
            REPORTS[settled](self, attempt, decision, **report)

        self._queue(attempt, decision, reported)

    def _queue(self, attempt: Attempt, decision: Decision, report: Callable[..., None]) -> None:
        attempt.decided = True
        give_up = max(attempt.lease_deadline, self.clock()) + self.guard.lease_ttl
        self.pending.append(Pending(attempt, decision, report, give_up))

    def due(self) -> list[Decision]:
        """The decisions to send with the next flush: all queued, unless backing off."""
        if not self.pending or self.clock() < self._retry_at:
            return []
        return [item.decision for item in self.pending]

    def next_due(self) -> float | None:
        """When queued decisions may be flushed (a monotonic time), or None: nothing queued."""
        return max(self._retry_at, 0.0) if self.pending else None

    def applied(self, outcomes: Sequence[Settled]) -> None:
        """The flush of ``due()`` committed: report each attempt by what the store did."""
        flushed, self.pending = self.pending[: len(outcomes)], self.pending[len(outcomes) :]
        self._wait, self._retry_at = WRITE_RETRY_FIRST_SECS, 0.0
        for item, settled in zip(flushed, outcomes, strict=True):
            item.report(settled)

    def failed(self, exc: BaseException) -> None:
        """The flush of ``due()`` raised: back off, give up, or write one by one."""
        close_old_connections()
        if not isinstance(exc, StoreUnavailable) and len(self.pending) > 1:
            self._one_by_one()
        else:
            self._back_off(exc)

    def flush_all(self) -> None:
        """Flush until nothing is queued, sleeping through backoffs (at shutdown)."""
        while self.pending:
            self.sleep(max((self.next_due() or 0.0) - self.clock(), 0.0))
            decided = self.due()
            try:
                outcomes = self.store.task_settle(decided)
            except Exception as exc:
                self.failed(exc)
            else:
                self.applied(outcomes)

    def _back_off(self, exc: BaseException) -> None:
        retry = isinstance(exc, StoreUnavailable)
        now, kept = self.clock(), []
        for item in self.pending:
            if not retry or now + self._wait >= item.give_up:
                self._write_failed(item, exc)
                continue
            kept.append(item)
            logs.task_event(
                "write_retry",
                item.attempt.claimed,
                logging.WARNING,
                op=item.decision.op,
                retry_in=self._wait,
                error=describe(exc),
            )
        self.pending = kept
        self._retry_at = now + self._wait
        self._wait = min(self._wait * 2, WRITE_RETRY_MAX_SECS)

    def _one_by_one(self) -> None:
        """Write each queued decision alone: only the ones the store refuses are lost."""
        queued, self.pending = self.pending, []
        for item in queued:
            try:
                (settled,) = self.store.task_settle([item.decision])
            except StoreUnavailable:
                self.pending.append(item)
            except Exception as exc:
                close_old_connections()
                self._write_failed(item, exc)
            else:
                item.report(settled)

    def _write_failed(self, item: Pending, exc: BaseException) -> None:
        self._done(item.attempt, "lost")
        logs.task_event(
            "write_failed",
            item.attempt.claimed,
            logging.ERROR,
            op=item.decision.op,
            error=describe(exc),
        )

    def _acked(self, attempt: Attempt, decision: Decision, result: Any = None) -> None:
        self._done(attempt, "acked")
        logs.task_event("acked", attempt.claimed, self.worker.task_log_level)
        self._send(signals.task_processed, attempt, result=result)
        self.failpoints.fire("after_ack")

    def _retried(self, attempt: Attempt, decision: Any, error: str = "", **_: Any) -> None:
        self._done(attempt, "retried")
        logs.task_event(
            "retry",
            attempt.claimed,
            self.worker.task_log_level,
            error=error,
            retry_in=round(decision.delay, 3),
        )
        self._send(signals.task_released, attempt, error=error, retry_delay=decision.delay)

    def _buried(
        self, attempt: Attempt, decision: Any, error: str = "", exc: Any = None, **_: Any
    ) -> None:
        self._done(attempt, "dead", error=decision.error)
        logs.task_event("dead", attempt.claimed, logging.WARNING, error=decision.error)
        if exc is not None:  # the handler's error (not an operator's cancel)
            self._run_failed_hook(attempt, exc)
            self._send(signals.task_failed, attempt, error=error, exception=exc)

    def _cancelled(self, attempt: Attempt, decision: Decision, **_: Any) -> None:
        self._done(attempt, "cancelled")
        logs.task_event("cancelled", attempt.claimed, logging.WARNING)

    def _fenced(self, attempt: Attempt, decision: Decision, **_: Any) -> None:
        reason = attempt.stop_reason or f"the lease was claimed again before the {decision.op}"
        self._done(attempt, "fenced", op=decision.op, reason=reason)
        logs.task_event("fenced", attempt.claimed, logging.WARNING, op=decision.op, reason=reason)
        self._send(signals.task_fenced, attempt, op=decision.op, reason=reason)

    # -- helpers -----------------------------------------------------------------------------

    def _done(self, attempt: Attempt, count: str, **event: Any) -> None:
        """The attempt ended as ``count``: counted, and its span ended (``event``: the span's)."""
        attempt.mark_settled()
        self.guard.untrack(attempt)
        self.counts[count] += 1
        self.worker.metrics.event(count, attempt.claimed)
        attempt.span.end(count, **event)

    def _run_failed_hook(self, attempt: Attempt, exc: BaseException) -> None:
        hook = attempt.definition.failed if attempt.definition else None
        if hook is None:
            return
        try:
            hook(attempt.context, exc)
        except Exception as hook_error:
            logs.task_event(
                "failed_hook_error", attempt.claimed, logging.ERROR, error=describe(hook_error)
            )

    def _send(self, signal: Any, attempt: Attempt, **extra: Any) -> None:
        send_signal(signal, self.worker, attempt, **extra)


REPORTS: dict[Settled, Callable[..., None]] = {
    Settled.ACKED: Settler._acked,
    Settled.RETRIED: Settler._retried,
    Settled.BURIED: Settler._buried,
    Settled.CANCELLED: Settler._cancelled,
    Settled.FENCED: Settler._fenced,
}


def send_signal(signal: Any, worker: Any, attempt: Attempt, **extra: Any) -> None:
    """Send a worker signal; a receiver's exception is logged, never raised into the worker."""
    responses = signal.send_robust(
        sender=type(worker),
        worker=worker,
        context=attempt.context,
        claimed=attempt.claimed,
        **extra,
    )
    for receiver, response in responses:
        if isinstance(response, Exception):
            logs.task_event(
                "signal_receiver_error",
                attempt.claimed,
                logging.ERROR,
                receiver=getattr(receiver, "__qualname__", str(receiver)),
                error=describe(response),
            )
