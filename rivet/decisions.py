"""How an attempt ends, decided from the attempt the worker claimed; the store only applies it.

Attempt and max_attempts of a ``Claimed`` are exact while its epoch holds the lease (a write
under any other epoch is fenced), so the worker can decide retry-or-bury by itself and every
store applies the same decision. Each burial's last_error is composed by ``values.ending``.
"""

from __future__ import annotations

from typing import Any

from rivet.values import (
    CANCELLED_SUFFIX,
    HANDLER_ERROR_SUFFIX,
    PERMANENT_SUFFIX,
    Ack,
    Bury,
    Claimed,
    Fence,
    Retry,
    ending,
)

#: last_error of an attempt whose worker stopped it at its local lease deadline.
EXPIRED_ERROR = "lease expired on the worker: no heartbeat was answered before its deadline"


def succeeded(claimed: Claimed, result: Any) -> Ack:
    """The handler returned: the task is done with its result."""
    return Ack(lease=claimed.lease, result=result)


def failed(claimed: Claimed, error: str, delay: float) -> Retry | Bury:
    """The attempt failed: retry after ``delay``, or bury when it was the last attempt."""
    if claimed.is_last_attempt:
        return Bury(lease=claimed.lease, error=ending(error, HANDLER_ERROR_SUFFIX))
    return Retry(lease=claimed.lease, error=error, delay=delay)


def failed_permanently(claimed: Claimed, error: str) -> Bury:
    """The handler raised rivet.Permanent: retrying cannot help, bury at once."""
    return Bury(lease=claimed.lease, error=ending(error, PERMANENT_SUFFIX))


def cancelled(claimed: Claimed) -> Bury:
    """An operator cancelled the task while this attempt held it."""
    return Bury(lease=claimed.lease, error=ending("", CANCELLED_SUFFIX))


def expired(claimed: Claimed) -> Retry:
    """The local lease deadline passed with no heartbeat answered: give the task back now.

    Guarded like every write: if another worker claimed the task meanwhile it is fenced (and
    recorded); if not, the task is runnable again at once. Never a burial: a claim that finds the
    attempts used up buries it as worker lost, as it would after a crash.
    """
    return Retry(lease=claimed.lease, error=EXPIRED_ERROR, delay=0.0)


def lost(claimed: Claimed, op: str = "fail") -> Fence:
    """A heartbeat found the lease taken by a newer claim: record the refused write."""
    return Fence(lease=claimed.lease, op=op)
