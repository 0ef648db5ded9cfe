"""One attempt in this worker: the claimed task, its handler's context, its deadlines, its state.

An attempt has one state (``AttemptState``), moved by the loop thread (returned, settled,
abandoned) and by the guard thread (stopped). Two things end independently: the handler thread
returns, and the outcome is settled (written, or left to lapse). The slot is free once the
handler returned; the attempt is forgotten once both happened (FINISHED).

A claimed task may wait for a handler thread (the worker's prefetch): its lease is held and
heartbeated from the claim, but its job timeout counts from ``begin``, when a handler thread
takes it. One stopped before it began is never run.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable

from rivet import tracing
from rivet.jobs import JobContext, JobDefinition, StopSignal
from rivet.values import Claimed, Lease


class StopKind(enum.Enum):
    """Why the worker stopped a handler before it returned."""

    FENCED = "fenced"
    """A heartbeat showed the lease belongs to a newer claim."""
    EXPIRED = "expired"
    """The local lease deadline passed and no heartbeat could confirm the lease."""
    TIMEOUT = "timeout"
    """The handler ran longer than its job timeout."""
    CANCELLED = "cancelled"
    """An operator cancelled the task; a heartbeat reported the mark."""
    SHUTDOWN = "shutdown"
    """The worker gave up waiting for the handler at shutdown."""


class AttemptState(enum.Enum):
    RUNNING = "running"
    """The handler runs; nothing is settled."""
    STOPPED = "stopped"
    """The worker told the handler to stop (see ``stop_kind``); not settled yet."""
    RETURNED = "returned"
    """The handler returned or raised; its outcome is not settled yet. The slot is free."""
    SETTLED = "settled"
    """The outcome is settled, but the (stopped) handler has not returned: it holds its slot."""
    ABANDONED = "abandoned"
    """Settled, and the stopped handler outlived its lease: logged, counted, still waited for."""
    FINISHED = "finished"
    """Settled and returned: the worker forgets the attempt."""


#: States in which the handler thread still holds a slot.
BUSY = frozenset(
    {AttemptState.RUNNING, AttemptState.STOPPED, AttemptState.SETTLED, AttemptState.ABANDONED}
)
#: States in which the outcome is still to be settled.
UNSETTLED = frozenset({AttemptState.RUNNING, AttemptState.STOPPED, AttemptState.RETURNED})


class Attempt:
    """One claimed task being run by this worker."""

    def __init__(
        self,
        *,
        claimed: Claimed,
        definition: JobDefinition | None,
        started: float,
        lease_ttl: float,
        timeout_secs: float | None,
        recording: bool | None = None,
    ) -> None:
        """``recording``: whether a span started now is recorded (``tracing.recording()``,
        asked once per claim batch by the worker); None: ask."""
        self.claimed = claimed
        #: The lease this attempt holds (the worker's dicts are keyed by it).
        self.lease: Lease = claimed.lease
        self.definition = definition
        #: Run on the worker's event loop (an ``async def`` handler), not on a handler thread.
        self.is_async = definition is not None and definition.is_async
        #: Called (on the stopping thread) once the attempt is stopped after it began: the
        #: event loop sets it to cancel the coroutine (``rivet.worker.aio``).
        self.on_stop: Callable[[], None] | None = None
        self._signal = StopSignal()
        self.context = JobContext.for_claimed(claimed, self._signal)
        # started: the monotonic reading taken before the claim was sent.
        self.lease_deadline = started + lease_ttl
        self.timeout_secs = timeout_secs
        #: Set by ``begin``: the job timeout counts from when a handler thread takes the task.
        self.job_deadline: float | None = None
        #: A handler thread took the attempt (prefetched attempts wait for one).
        self.began = False
        self.stop_kind: StopKind | None = None
        self.stopped_at: float | None = None
        self.state = AttemptState.RUNNING if definition is not None else AttemptState.RETURNED
        #: A decision is queued for the next flush: later stops do not decide again.
        self.decided = False
        self._lock = threading.Lock()
        #: The attempt's trace span (a child of the producer's context), ended when settled.
        self.span = tracing.start_attempt(
            task_id=claimed.task_id,
            queue=claimed.queue,
            kind=claimed.kind,
            attempt=claimed.attempt,
            epoch=claimed.epoch,
            trace_context=claimed.trace_context,
            is_recording=recording,
        )

    @property
    def busy(self) -> bool:
        return self.state in BUSY

    @property
    def settled(self) -> bool:
        return self.state not in UNSETTLED

    @property
    def owes_decision(self) -> bool:
        """Nothing is settled or queued for this attempt yet."""
        return not self.decided and self.state in UNSETTLED

    @property
    def stop_reason(self) -> str:
        return self._signal.reason

    def stop(self, kind: StopKind, reason: str, now: float) -> bool:
        """Tell the handler to stop, once; False when it was already stopped."""
        with self._lock:
            if self.stop_kind is not None:
                return False
            self.stop_kind, self.stopped_at = kind, now
            if self.state is AttemptState.RUNNING:
                self.state = AttemptState.STOPPED
        self._signal.set(reason)
        on_stop = self.on_stop
        if on_stop is not None:
            on_stop()
        return True

    def begin(self, now: float) -> bool:
        """On the handler thread, before the handler: False when it was stopped while waiting."""
        with self._lock:
            if self.stop_kind is not None:
                return False
            self.began = True
            if self.timeout_secs is not None:
                self.job_deadline = now + self.timeout_secs
            return True

    def withdraw(self, kind: StopKind, reason: str, now: float) -> bool:
        """Stop an attempt no handler thread has taken yet; False when one has (or it stopped).

        A withdrawn attempt is never run: the thread that takes it later skips it.
        """
        with self._lock:
            if self.began or self.stop_kind is not None:
                return False
            self.stop_kind, self.stopped_at = kind, now
            self.state = AttemptState.STOPPED
        self._signal.set(reason)
        return True

    def mark_returned(self) -> None:
        with self._lock:
            self.state = AttemptState.FINISHED if self.settled else AttemptState.RETURNED

    def mark_settled(self) -> None:
        with self._lock:
            if self.state is AttemptState.RETURNED:
                self.state = AttemptState.FINISHED
            elif self.state in UNSETTLED:
                self.state = AttemptState.SETTLED

    def abandon(self) -> bool:
        """Give up waiting for a stopped handler; False when it returned or was abandoned."""
        with self._lock:
            if self.state not in (AttemptState.STOPPED, AttemptState.SETTLED):
                return False
            self.state = AttemptState.ABANDONED
            return True
