"""How an attempt ended, as the settler hands it to the loop, and how the loop reports it.

The settler (``rivet.worker.settle``) decides and writes; once the store answered, it returns
one ``Ended`` per attempt. The loop gives each to its ``Reporter``, which counts it, logs it,
sends the worker signals and runs the job's ``failed`` hook: nothing is reported as done
before the flush that wrote it returned.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any, NamedTuple

from rivet import logs, signals
from rivet.failpoints import Failpoints
from rivet.values import Settled
from rivet.worker.attempt import Attempt
from rivet.worker.metrics import NoMetrics


class End(enum.StrEnum):
    """How an attempt ended; the value is the name it is counted under."""

    ACKED = "acked"
    RETRIED = "retried"
    DEAD = "dead"
    CANCELLED = "cancelled"
    FENCED = "fenced"
    #: Left to lapse: no heartbeat could confirm the lease, a write failed, or a shutdown.
    LOST = "lost"


#: The ending of an attempt whose decision the store applied as ``Settled``.
BY_SETTLED = {
    Settled.ACKED: End.ACKED,
    Settled.RETRIED: End.RETRIED,
    Settled.BURIED: End.DEAD,
    Settled.CANCELLED: End.CANCELLED,
    Settled.FENCED: End.FENCED,
}


class Ended(NamedTuple):
    """One attempt's end, and what its report needs (a NamedTuple: one per attempt).

    ``exc``: the handler's exception when the attempt failed (it counts as failed; a burial
    runs the ``failed`` hook with it); ``error``: that failure as last_error stores it.
    ``op`` and ``reason``: the write a fence refused, and why; ``write_error``: a write the
    store refused or never answered (the attempt is then lost).
    """

    attempt: Attempt
    end: End
    op: str = ""
    result: Any = None
    error: str = ""
    exc: BaseException | None = None
    retry_in: float = 0.0
    dead_error: str = ""
    reason: str = ""
    write_error: str = ""


#: Runs an async failed hook: (attempt, the hook's awaitable, what to call with its error).
AsyncHookRunner = Callable[[Attempt, Any, Callable[[BaseException], None]], None]


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def describe(error: BaseException) -> str:
    """``<ExcType>: <message>``, the form last_error stores."""
    return f"{type(error).__name__}: {error}"


class Reporter:
    """Counts, logs and signals the ends of attempts, on the loop thread."""

    def __init__(
        self,
        *,
        sender: Any,
        metrics: NoMetrics,
        task_log_level: int,
        failpoints: Failpoints,
    ) -> None:
        self.sender = sender
        self.metrics = metrics
        self.task_log_level = task_log_level
        self.failpoints = failpoints
        #: Attempts by how they ended, and by "failed" when the handler's attempt failed.
        self.counts: Counter[str] = Counter()
        #: Runs an async failed hook on the worker's event loop (set with the loop); without
        #: one, an async hook runs to its end here, on the loop thread, as a sync hook does.
        self.run_async_hook: AsyncHookRunner | None = None

    def report(self, ended: Ended) -> None:
        if ended.exc is not None:
            self.counts["failed"] += 1
        name = ended.end._value_  # the member's value, without the enum's property (per task)
        self.counts[name] += 1
        self.metrics.event(name, ended.attempt.claimed)
        self._end_span(ended)
        match ended.end:
            case End.ACKED:
                self._acked(ended)
            case End.RETRIED:
                self._retried(ended)
            case End.DEAD:
                self._dead(ended)
            case End.CANCELLED:
                logs.task_event("cancelled", ended.attempt.claimed, logging.WARNING)
            case End.FENCED:
                self._fenced(ended)
            case End.LOST if ended.write_error:
                logs.task_event(
                    "write_failed",
                    ended.attempt.claimed,
                    logging.ERROR,
                    op=ended.op,
                    error=ended.write_error,
                )

    @staticmethod
    def _end_span(ended: Ended) -> None:
        """End the attempt's trace span; a dead or fenced ending carries its event's details."""
        if ended.end is End.DEAD:
            ended.attempt.span.end(ended.end.value, error=ended.dead_error)
        elif ended.end is End.FENCED:
            ended.attempt.span.end(ended.end.value, op=ended.op, reason=ended.reason)
        else:
            ended.attempt.span.end(ended.end.value)

    def _acked(self, ended: Ended) -> None:
        logs.task_event("acked", ended.attempt.claimed, self.task_log_level)
        self.send(signals.task_processed, ended.attempt, result=ended.result)
        if self.failpoints.armed:
            self.failpoints.fire("after_ack")

    def _retried(self, ended: Ended) -> None:
        claimed = ended.attempt.claimed
        retry_in = round(ended.retry_in, 3)
        logs.task_event("retry", claimed, self.task_log_level, error=ended.error, retry_in=retry_in)
        self.send(
            signals.task_released, ended.attempt, error=ended.error, retry_delay=ended.retry_in
        )

    def _dead(self, ended: Ended) -> None:
        logs.task_event("dead", ended.attempt.claimed, logging.WARNING, error=ended.dead_error)
        if ended.exc is not None:  # the handler's error (not an operator's cancel)
            self._run_failed_hook(ended.attempt, ended.exc)
            self.send(signals.task_failed, ended.attempt, error=ended.error, exception=ended.exc)

    def _fenced(self, ended: Ended) -> None:
        claimed, op, reason = ended.attempt.claimed, ended.op, ended.reason
        logs.task_event("fenced", claimed, logging.WARNING, op=op, reason=reason)
        self.send(signals.task_fenced, ended.attempt, op=op, reason=reason)

    def _run_failed_hook(self, attempt: Attempt, exc: BaseException) -> None:
        hook = attempt.definition.failed if attempt.definition else None
        if hook is None:
            return

        def hook_failed(hook_error: BaseException) -> None:
            logs.task_event(
                "failed_hook_error", attempt.claimed, logging.ERROR, error=describe(hook_error)
            )

        try:
            answer = hook(attempt.context, exc)
            if inspect.isawaitable(answer):  # an async def failed hook
                if self.run_async_hook is not None:
                    self.run_async_hook(attempt, answer, hook_failed)
                else:
                    asyncio.run(_awaited(answer))
        except Exception as hook_error:
            hook_failed(hook_error)

    def send(self, signal: Any, attempt: Attempt, **extra: Any) -> None:
        """Send a worker signal; a receiver's exception is logged, never raised."""
        if not signal.receivers:
            return  # what send_robust does then, less building its arguments (per task)
        responses = signal.send_robust(
            sender=type(self.sender),
            worker=self.sender,
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
