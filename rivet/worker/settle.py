"""Settling one attempt: decide how it ends (rivet.decisions), have the store apply it, report.

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

A write that fails because the database is unreachable is tried again with a short backoff,
until one lease past the attempt's local deadline (every write names its epoch, so a late one
is applied or fenced, never wrong); only then is the attempt left to lapse.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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


def describe(error: BaseException) -> str:
    """``<ExcType>: <message>``, the form last_error stores."""
    return f"{type(error).__name__}: {error}"


class Settler:
    """Settles attempts for one worker; every method runs on the loop thread."""

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
        settled = self._write(attempt, decision)
        if settled is Settled.FENCED:
            self._fenced(attempt, decision)
        elif settled is not None:
            self._done(attempt, "lost")

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

    # -- applying a decision -----------------------------------------------------------------

    def _apply(self, attempt: Attempt, decision: Decision, **report: Any) -> None:
        settled = self._write(attempt, decision)
        if settled is not None:
            REPORTS[settled](self, attempt, decision, **report)

    def _write(self, attempt: Attempt, decision: Decision) -> Settled | None:
        """The store write of a decision, retried while the database is unreachable.

        Every write names its epoch, so trying it again is safe at any time: landing late, it is
        either applied (nobody took the task) or fenced and recorded. The worker waits for the
        server until one lease past the attempt's local deadline (a restart takes well under a
        lease), then leaves the attempt to lapse.
        """
        wait = WRITE_RETRY_FIRST_SECS
        give_up = max(attempt.lease_deadline, self.clock()) + self.guard.lease_ttl
        while True:
            try:
                return self.store.task_settle([decision])[0]
            except Exception as exc:
                close_old_connections()
                retry = isinstance(exc, StoreUnavailable)
                if not retry or self.clock() + wait >= give_up:
                    self._done(attempt, "lost")
                    logs.task_event(
                        "write_failed",
                        attempt.claimed,
                        logging.ERROR,
                        op=decision.op,
                        error=describe(exc),
                    )
                    return None
                logs.task_event(
                    "write_retry",
                    attempt.claimed,
                    logging.WARNING,
                    op=decision.op,
                    retry_in=wait,
                    error=describe(exc),
                )
                self.sleep(wait)
                wait = min(wait * 2, WRITE_RETRY_MAX_SECS)

    def _acked(self, attempt: Attempt, decision: Decision, result: Any = None) -> None:
        self._done(attempt, "acked")
        logs.task_event("acked", attempt.claimed)
        self._send(signals.task_processed, attempt, result=result)
        self.failpoints.fire("after_ack")

    def _retried(self, attempt: Attempt, decision: Any, error: str = "", **_: Any) -> None:
        self._done(attempt, "retried")
        logs.task_event("retry", attempt.claimed, error=error, retry_in=round(decision.delay, 3))
        self._send(signals.task_released, attempt, error=error, retry_delay=decision.delay)

    def _buried(
        self, attempt: Attempt, decision: Any, error: str = "", exc: Any = None, **_: Any
    ) -> None:
        self._done(attempt, "dead")
        logs.task_event("dead", attempt.claimed, logging.WARNING, error=decision.error)
        if exc is not None:  # the handler's error (not an operator's cancel)
            self._run_failed_hook(attempt, exc)
            self._send(signals.task_failed, attempt, error=error, exception=exc)

    def _cancelled(self, attempt: Attempt, decision: Decision, **_: Any) -> None:
        self._done(attempt, "cancelled")
        logs.task_event("cancelled", attempt.claimed, logging.WARNING)

    def _fenced(self, attempt: Attempt, decision: Decision, **_: Any) -> None:
        reason = attempt.stop_reason or f"the lease was claimed again before the {decision.op}"
        self._done(attempt, "fenced")
        logs.task_event("fenced", attempt.claimed, logging.WARNING, op=decision.op, reason=reason)
        self._send(signals.task_fenced, attempt, op=decision.op, reason=reason)

    # -- helpers -----------------------------------------------------------------------------

    def _done(self, attempt: Attempt, count: str) -> None:
        attempt.mark_settled()
        self.guard.untrack(attempt)
        self.counts[count] += 1
        self.worker.metrics.event(count, attempt.claimed)

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
