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
worker batches by itself. Each call that learns how attempts ended (``applied``, ``failed``,
``flush_all``, a stop at shutdown) returns them as typed ``Ended`` values
(``rivet.worker.ending``) for the loop to report: nothing is counted, logged or signalled as
done before the flush that wrote it returned.

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
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from rivet import decisions, logs
from rivet.errors import Permanent, StoreUnavailable
from rivet.failpoints import Failpoints
from rivet.retry import RetryPolicy
from rivet.stores.base import Store
from rivet.validation import clip_error
from rivet.values import Bury, Decision, Retry, Settled
from rivet.worker.attempt import Attempt, StopKind
from rivet.worker.ending import BY_SETTLED, End, Ended, describe
from rivet.worker.guard import Guard
from rivet.worker.pool import tidy_connections

#: First wait before a failed write is tried again; it doubles up to WRITE_RETRY_MAX_SECS.
WRITE_RETRY_FIRST_SECS = 0.05
WRITE_RETRY_MAX_SECS = 1.0


class Outcome(NamedTuple):
    """What a handler thread hands back: a result, or the exception it raised.

    A NamedTuple, not a dataclass: one is made per attempt on the hot path.
    """

    result: Any = None
    error: BaseException | None = None


class Pending(NamedTuple):
    """A decision waiting for the next flush, and what its attempt's report will need.

    A NamedTuple, not a dataclass: one is made per attempt on the hot path.
    """

    attempt: Attempt
    decision: Decision
    give_up: float  # monotonic: past it, a write the database never answered is abandoned
    result: Any = None
    error: str = ""  # the handler's failure, as last_error stores it
    exc: BaseException | None = None
    #: The end when the store applies the decision (None: by what it applied, BY_SETTLED).
    applied_as: End | None = None
    #: It was in a flush whose answer never came (the database became unreachable): that
    #: flush may have committed it, so a refusal now may be its own earlier success.
    resent: bool = False

    def ended(self, settled: Settled, fence_reason: str = "") -> Ended:
        """This attempt's end, now that the store answered ``settled`` (``fence_reason``: why
        the store refused it, when the task's row told)."""
        end = BY_SETTLED[settled]
        if self.applied_as is not None and end is not End.FENCED:
            end = self.applied_as
        decision = self.decision
        return Ended(
            attempt=self.attempt,
            end=end,
            op=decision.op,
            result=self.result,
            error=self.error,
            exc=self.exc,
            retry_in=decision.delay if isinstance(decision, Retry) else 0.0,
            dead_error=decision.error if isinstance(decision, Bury) else "",
            reason=self._fence_reason(fence_reason) if end is End.FENCED else "",
        )

    def _fence_reason(self, found: str) -> str:
        return (
            self.attempt.stop_reason
            or found
            or f"the lease was claimed again before the {self.decision.op}"
        )

    def lost(self, exc: BaseException) -> Ended:
        """This attempt's end when its write failed for good."""
        return Ended(
            attempt=self.attempt,
            end=End.LOST,
            op=self.decision.op,
            exc=self.exc,
            write_error=describe(exc),
        )


class Settler:
    """Decides how attempts end; returns their ends once the store wrote them (loop thread)."""

    def __init__(
        self,
        *,
        store: Store,
        guard: Guard,
        retry_policy: RetryPolicy,
        failpoints: Failpoints,
        clock: Callable[[], float],
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.store = store
        self.guard = guard
        self.retry_policy = retry_policy
        self.failpoints = failpoints
        self.clock = clock
        self.sleep = sleep
        #: Decisions not yet written, in the order they were made.
        self.pending: list[Pending] = []
        self._wait = WRITE_RETRY_FIRST_SECS
        self._retry_at = 0.0

    def settle(self, attempt: Attempt, outcome: Outcome) -> Ended | None:
        """The handler returned or raised: ack or fail, unless the guard stopped it."""
        if self.clock() >= attempt.lease_deadline and attempt.stop_kind is None:
            # A late result (the worker was paused?): confirm the lease before writing.
            if not self.guard.heartbeat([attempt]) and attempt.stop_kind is None:
                attempt.stop(StopKind.EXPIRED, "lease deadline passed, no heartbeat", self.clock())
        if attempt.stop_kind is not None:
            return self.settle_stopped(attempt)
        if outcome.error is not None:
            self.fail(attempt, outcome.error)
        else:
            self.ack(attempt, outcome.result)
        return None

    def settle_stopped(self, attempt: Attempt) -> Ended | None:
        """The guard (or shutdown) stopped the handler: queue the decision its reason calls
        for; a shutdown writes nothing and ends the attempt at once (its lease lapses)."""
        kind = attempt.stop_kind
        if kind is StopKind.TIMEOUT:
            self.fail(attempt, TimeoutError(attempt.stop_reason))
        elif kind is StopKind.FENCED:
            self._queue(attempt, decisions.lost(attempt.claimed))
        elif kind is StopKind.CANCELLED:
            self._queue(attempt, decisions.cancelled(attempt.claimed))
        elif kind is StopKind.EXPIRED:
            self._expired(attempt)
        else:  # SHUTDOWN: logged by the worker as abandoned; the lease lapses
            return self._ended(Ended(attempt=attempt, end=End.LOST))
        return None

    def _expired(self, attempt: Attempt) -> None:
        """Give the task back under its epoch: fenced and recorded if another worker has it."""
        reason = attempt.stop_reason
        logs.task_event("lease_expired", attempt.claimed, logging.WARNING, reason=reason)
        self._queue(attempt, decisions.expired(attempt.claimed), applied_as=End.LOST)

    def ack(self, attempt: Attempt, result: Any) -> None:
        try:
            if result is not None:  # None is (most handlers' result, and) serialisable
                json.dumps(result)
        except (TypeError, ValueError) as exc:
            return self.fail(attempt, TypeError(f"handler result is not JSON-serialisable: {exc}"))
        if self.failpoints.armed:
            self.failpoints.fire("after_effect_before_ack", task=attempt.claimed.task_id)
        self._queue(attempt, decisions.succeeded(attempt.claimed, result), result=result)

    def fail(self, attempt: Attempt, exc: BaseException) -> None:
        error = clip_error(describe(exc))
        if isinstance(exc, Permanent):
            decision: Decision = decisions.failed_permanently(attempt.claimed, error)
        else:
            delay = self.retry_policy.delay(attempt.claimed.attempt)
            decision = decisions.failed(attempt.claimed, error, delay)
        task = attempt.claimed.task_id
        self.failpoints.fire("after_error_before_fail", task=task)
        if self.failpoints.armed:
            claimed = attempt.claimed
            if not isinstance(decision, Bury):
                self.failpoints.fire("after_error_before_retry", task=task)
            elif claimed.attempt < claimed.max_attempts:
                self.failpoints.fire("after_error_before_bury", task=task)
        self._queue(attempt, decision, error=error, exc=exc)

    # -- queueing and flushing decisions ----------------------------------------------------

    def _queue(
        self,
        attempt: Attempt,
        decision: Decision,
        *,
        result: Any = None,
        error: str = "",
        exc: BaseException | None = None,
        applied_as: End | None = None,
    ) -> None:
        attempt.decided = True
        give_up = max(attempt.lease_deadline, self.clock()) + self.guard.lease_ttl
        item = Pending(
            attempt=attempt,
            decision=decision,
            give_up=give_up,
            result=result,
            error=error,
            exc=exc,
            applied_as=applied_as,
        )
        self.pending.append(item)

    def due(self) -> list[Decision]:
        """The decisions to send with the next flush: all queued, unless backing off (or held
        back for a batch, see ``_batch_hold_until``)."""
        if not self.pending or self.clock() < max(self._retry_at, self._batch_hold_until()):
            return []
        return [item.decision for item in self.pending]

    def next_due(self) -> float | None:
        """When queued decisions may be flushed (a monotonic time), or None: nothing queued."""
        if not self.pending:
            return None
        return max(self._retry_at, self._batch_hold_until(), 0.0)

    def _batch_hold_until(self) -> float:
        """While the ``before_flush`` failpoint is armed (a test run that wants a batch of two
        or more decisions to stop at), a lone decision waits for a second one, at most until
        half the lease it had when it was decided is left; otherwise nothing is held (0.0)."""
        if len(self.pending) != 1 or "before_flush" not in self.failpoints.armed:
            return 0.0
        # give_up is the lease deadline when it was queued plus a lease: fixed then, so the
        # heartbeats that go on extending the lease do not extend the hold.
        return self.pending[0].give_up - 1.5 * self.guard.lease_ttl

    def applied(self, outcomes: Sequence[Settled]) -> list[Ended]:
        """The flush of ``due()`` committed: each attempt's end by what the store did."""
        flushed, self.pending = self.pending[: len(outcomes)], self.pending[len(outcomes) :]
        self._wait, self._retry_at = WRITE_RETRY_FIRST_SECS, 0.0
        return [
            self._ended(item.ended(settled, self._refused_because(item, settled)))
            for item, settled in zip(flushed, outcomes, strict=True)
        ]

    def _refused_because(self, item: Pending, settled: Settled) -> str:
        """Why the store refused a decision that was sent again after a write whose answer never
        came (``resent``): read from the task's row, since that first write may have been
        applied. "" for any other outcome: a write sent once and refused was claimed again
        (the epoch guard), or its attempt's stop reason says why."""
        if settled is not Settled.FENCED or not item.resent or item.attempt.stop_reason:
            return ""
        decision, lease = item.decision, item.decision.lease
        try:
            row = self.store.task_get(lease.task_id)
        except Exception as exc:  # noqa: BLE001 - the reason is a report; the fence stands
            return (
                f"the {decision.op} was refused when sent again after a write whose answer was "
                f"lost; the task could not be read to say why ({describe(exc)})"
            )
        if row is None:
            return f"the task was gone when the {decision.op} was sent again"
        if row.lease_epoch > lease.epoch:
            return f"the lease was claimed again before the {decision.op}"
        if (row.settled_epoch, row.settled_by) == (lease.epoch, lease.owner):
            return (
                f"the {decision.op} had been applied already: an earlier send of it committed "
                f"and its answer was lost (the task is {row.state} under this lease)"
            )
        return (
            f"the task was finished under this lease by another write before the "
            f"{decision.op} (it is {row.state}: a cancel or a claim's burial)"
        )

    def failed(self, exc: BaseException) -> list[Ended]:
        """The flush of ``due()`` raised: back off, give up, or write one by one."""
        tidy_connections()
        if not isinstance(exc, StoreUnavailable) and len(self.pending) > 1:
            return self._one_by_one()
        return self._back_off(exc)

    def flush_all(self) -> list[Ended]:
        """Flush until nothing is queued, sleeping through backoffs (at shutdown)."""
        ended: list[Ended] = []
        while self.pending:
            self.sleep(max((self.next_due() or 0.0) - self.clock(), 0.0))
            decided = self.due()
            try:
                outcomes = self.store.task_settle(decided)
            except Exception as exc:
                ended += self.failed(exc)
            else:
                ended += self.applied(outcomes)
        return ended

    def _back_off(self, exc: BaseException) -> list[Ended]:
        retry = isinstance(exc, StoreUnavailable)
        now, kept, ended = self.clock(), [], []
        for item in self.pending:
            if not retry or now + self._wait >= item.give_up:
                ended.append(self._ended(item.lost(exc)))
                continue
            kept.append(item._replace(resent=True))
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
        return ended

    def _one_by_one(self) -> list[Ended]:
        """Write each queued decision alone: only the ones the store refuses are lost."""
        queued, self.pending, ended = self.pending, [], []
        for item in queued:
            try:
                (settled,) = self.store.task_settle([item.decision])
            except StoreUnavailable:
                self.pending.append(item._replace(resent=True))
            except Exception as exc:
                tidy_connections()
                ended.append(self._ended(item.lost(exc)))
            else:
                ended.append(self._ended(item.ended(settled, self._refused_because(item, settled))))
        return ended

    def _ended(self, ended: Ended) -> Ended:
        """The attempt owes no more writes: the guard stops heartbeating it."""
        ended.attempt.mark_settled()
        self.guard.untrack(ended.attempt)
        return ended
