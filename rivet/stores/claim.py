"""The claim walk every SQL store shares: queues tried in order until the batch is full.

A claim statement leases up to N runnable tasks of one queue; a statement that met fewer rows
than it asked for exhausted its queue, and the walk moves to the next. A doomed row (attempts
used up, or cancelled) is not leased: the statement hands it back, and the store buries it with
the text ``rivet.values.claim_burial`` gives, in the same transaction (SQLite), or with the
walk's next statement, or one more after its last (PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rivet.errors import StoreError
from rivet.stores.jsontext import json_value
from rivet.values import Claimed


class PartlyCommitted(Exception):  # noqa: N818 - internal, always turned into ClaimFailed
    """A dialect's claim statement failed after an earlier one committed the settle rows."""

    def __init__(self, applied: dict[int, bool], error: StoreError) -> None:
        super().__init__(str(error))
        self.applied = applied
        self.error = error


@dataclass(frozen=True, kw_only=True)
class ClaimPlan:
    """What one claim asks for: up to ``limit`` tasks for ``owner``, queues in the order given.

    ``exclude``: tasks the same flush settles; its claim never leases them (the next may).
    """

    queues: tuple[str, ...]
    limit: int
    owner: str
    exclude: tuple[int, ...] = ()

    def pick(self, queue: str, wanted: int, seen: Sequence[int]) -> dict[str, Any]:
        """The parameters of one claim statement (``seen``: ids it must skip)."""
        return {"queue": queue, "limit": wanted, "seen": list(seen)}


@dataclass(frozen=True, kw_only=True)
class Met:
    """The rows one claim statement met, sorted out in claim order.

    ``doomed``: rows no claim may run (attempts used up, or cancelled), with ``lease_epoch``,
    ``last_error`` and ``cancel_requested``, for the store to bury.
    """

    claimed: list[Claimed]
    doomed: list[dict[str, Any]]
    ids: list[int]

    @classmethod
    def of(cls, rows: list[dict[str, Any]], owner: str) -> Met:
        claimed, doomed = [], []
        for row in rows:
            if row["doomed"]:
                doomed.append(row)
            else:
                row = {
                    **row,
                    "payload": json_value(row["payload"]),
                    "trace_context": json_value(row["trace_context"]),
                }
                claimed.append(Claimed.from_row(row, owner))
        return cls(claimed=claimed, doomed=doomed, ids=[r["id"] for r in rows])


#: One claim statement: its pick parameters in, the rows it met (in claim order) out.
ClaimStatement = Callable[[dict[str, Any]], list[dict[str, Any]]]


def walk_claim(
    plan: ClaimPlan, statement: ClaimStatement
) -> tuple[list[Claimed], list[dict[str, Any]]]:
    """Claim statements until ``plan.limit`` tasks are leased or every queue is exhausted.

    A statement that met fewer rows than it asked for exhausted its queue. Returns the tasks
    leased and the doomed rows met, which the caller must bury.
    """
    claimed: list[Claimed] = []
    doomed: list[dict[str, Any]] = []
    queues, seen = list(plan.queues), list(plan.exclude)
    while queues and (wanted := plan.limit - len(claimed)) > 0:
        rows = statement(plan.pick(queues[0], wanted, seen))
        met = Met.of(rows, plan.owner)
        claimed += met.claimed
        doomed += met.doomed
        seen += met.ids
        if len(rows) < wanted:
            queues.pop(0)
            seen = list(plan.exclude)
    return claimed, doomed
