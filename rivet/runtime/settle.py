"""Settling one attempt: the single store write that ends it, its log line and its signal.

- The handler returned: ``task_ack`` -> done, or fenced (the store records the stale write).
- It raised, overran its timeout, or its kind is unknown: ``task_fail`` with the retry policy's
  delay -> retry, or dead on the last attempt (then the job's ``failed`` hook runs once), or
  fenced.
- A heartbeat came back without the lease: the result is never acked. The attempt's end is
  reported under its stale epoch (``task_fail``); the store refuses it and records the fenced
  write, the durable evidence that the fence fired.
- The local lease deadline passed and no heartbeat could confirm the lease (the database is
  unreachable), or the write itself failed: nothing more is written; the lease lapses and the
  task is delivered again.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import close_old_connections

from rivet import logs, signals
from rivet.failpoints import Failpoints
from rivet.guard import Guard, Running, StopKind
from rivet.retry import RetryPolicy
from rivet.stores.base import Store
from rivet.validation import clip_error
from rivet.values import AckOutcome, FailOutcome

FENCE_NOTE = "lease lost (fenced)"


@dataclass(frozen=True)
class Outcome:
    """What a handler thread hands back: a result, or the exception it raised."""

    result: Any = None
    error: BaseException | None = None


def describe(error: BaseException) -> str:
    """``<ExcType>: <message>``, the form last_error stores."""
    return f"{type(error).__name__}: {error}"


class Settler:
    """Writes the outcome of attempts for one worker; every method runs on the loop thread."""

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
    ) -> None:
        self.worker = worker
        self.store = store
        self.owner = worker.owner
        self.guard = guard
        self.retry_policy = retry_policy
        self.failpoints = failpoints
        self.clock = clock
        self.counts = counts

    def settle(self, running: Running, outcome: Outcome) -> None:
        """The handler returned or raised: ack or fail, unless the guard stopped it."""
        if self.clock() >= running.lease_deadline and running.stop_kind is None:
            # A late result (the worker was paused?): confirm the lease before writing.
            if not self.guard.heartbeat([running]) and running.stop_kind is None:
                running.stop(StopKind.EXPIRED, "lease deadline passed, no heartbeat", self.clock())
        if running.stop_kind is not None:
            self.settle_stopped(running)
        elif outcome.error is not None:
            self.fail(running, outcome.error)
        else:
            self.ack(running, outcome.result)

    def settle_stopped(self, running: Running) -> None:
        """The guard (or shutdown) stopped the handler; settle by the reason it stopped."""
        kind = running.stop_kind
        if kind is StopKind.TIMEOUT:
            self.fail(running, TimeoutError(running.stop_reason))
        elif kind is StopKind.FENCED:
            self.record_fence(running)
        else:
            self._done(running, "lost")
            if kind is StopKind.EXPIRED:  # SHUTDOWN is logged by the worker as abandoned
                reason = running.stop_reason
                logs.task_event("lease_expired", running.claimed, logging.WARNING, reason=reason)

    def ack(self, running: Running, result: Any) -> None:
        try:
            json.dumps(result)
        except (TypeError, ValueError) as exc:
            return self.fail(running, TypeError(f"handler result is not JSON-serialisable: {exc}"))
        self.failpoints.fire("after_effect_before_ack")
        lease = running.lease
        ack = self._write(
            running, "ack", lambda: self.store.task_ack(lease, result, owner=self.owner)
        )
        if ack is AckOutcome.ACKED:
            self._done(running, "acked")
            logs.task_event("acked", running.claimed)
            self._send(signals.task_processed, running, result=result)
            self.failpoints.fire("after_ack")
        elif ack is AckOutcome.FENCED:
            self._fenced(running, "ack", "the lease was claimed again before the ack")

    def fail(self, running: Running, exc: BaseException) -> None:
        self.counts["failed"] += 1
        delay = self.retry_policy.delay(running.claimed.attempt)
        error = clip_error(describe(exc))
        lease = running.lease
        outcome = self._write(
            running, "fail", lambda: self.store.task_fail(lease, error, delay, owner=self.owner)
        )
        if outcome is FailOutcome.RETRY:
            self._done(running, "retried")
            logs.task_event("retry", running.claimed, error=error, retry_in=round(delay, 3))
            self._send(signals.task_released, running, error=error, retry_delay=delay)
        elif outcome is FailOutcome.DEAD:
            self._done(running, "dead")
            logs.task_event("dead", running.claimed, logging.WARNING, error=error)
            self._run_failed_hook(running, exc)
            self._send(signals.task_failed, running, error=error, exception=exc)
        elif outcome is FailOutcome.FENCED:
            self._fenced(running, "fail", "the lease was claimed again before the fail")

    def record_fence(self, running: Running) -> None:
        """Report a lease a heartbeat found lost; the store refuses and records the write."""
        lease = running.lease
        outcome = self._write(
            running, "fail", lambda: self.store.task_fail(lease, FENCE_NOTE, 0.0, owner=self.owner)
        )
        if outcome is FailOutcome.FENCED:
            self._fenced(running, "fail", running.stop_reason)
        elif outcome is not None:  # the store still held the lease: the attempt ended anyway
            self._done(running, "retried" if outcome is FailOutcome.RETRY else "dead")
            logs.task_event("released", running.claimed, logging.WARNING, outcome=outcome.value)

    # -- helpers -----------------------------------------------------------------------------

    def _done(self, running: Running, count: str) -> None:
        running.settled = True
        self.guard.untrack(running)
        self.counts[count] += 1
        self.worker.metrics.event(count, running.claimed)

    def _write(self, running: Running, op: str, call: Callable[[], Any]) -> Any:
        """A store write for an attempt; on a database error the attempt is left to lapse."""
        try:
            return call()
        except Exception as exc:
            self._done(running, "lost")
            logs.task_event(
                "write_failed", running.claimed, logging.ERROR, op=op, error=describe(exc)
            )
            close_old_connections()
            return None

    def _fenced(self, running: Running, op: str, reason: str) -> None:
        self._done(running, "fenced")
        logs.task_event("fenced", running.claimed, logging.WARNING, op=op, reason=reason)
        self._send(signals.task_fenced, running, op=op, reason=reason)

    def _run_failed_hook(self, running: Running, exc: BaseException) -> None:
        hook = running.definition.failed if running.definition else None
        if hook is None:
            return
        try:
            hook(running.context, exc)
        except Exception as hook_error:
            logs.task_event(
                "failed_hook_error", running.claimed, logging.ERROR, error=describe(hook_error)
            )

    def _send(self, signal: Any, running: Running, **extra: Any) -> None:
        send_signal(signal, self.worker, running, **extra)


def send_signal(signal: Any, worker: Any, running: Running, **extra: Any) -> None:
    """Send a worker signal; a receiver's exception is logged, never raised into the worker."""
    responses = signal.send_robust(
        sender=type(worker),
        worker=worker,
        context=running.context,
        claimed=running.claimed,
        **extra,
    )
    for receiver, response in responses:
        if isinstance(response, Exception):
            logs.task_event(
                "signal_receiver_error",
                running.claimed,
                logging.ERROR,
                receiver=getattr(receiver, "__qualname__", str(receiver)),
                error=describe(response),
            )
