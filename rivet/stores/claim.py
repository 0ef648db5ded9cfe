"""The claim walk every SQL store shares: queues tried in order until the batch is full.

A claim statement leases up to N runnable tasks of one queue; a statement that met fewer rows
than it asked for exhausted its queue, and the walk moves to the next. A doomed row (attempts
used up, or cancelled) is not leased: the statement buries it itself (PostgreSQL) or hands it
back for the store to bury in the same transaction (SQLite).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rivet.errors import StoreError
from rivet.values import ClaimBatch, Claimed


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

    ``doomed``: rows no claim may run (attempts used up, or cancelled), for the caller to bury
    in the same transaction; ``buried``: how many the statement buried itself.
    """

    claimed: list[Claimed]
    doomed: list[dict[str, Any]]
    buried: int
    ids: list[int]

    @classmethod
    def of(cls, rows: list[dict[str, Any]], owner: str) -> Met:
        claimed, doomed, buried = [], [], 0
        for row in rows:
            if row.get("buried"):
                buried += 1
            elif row["doomed"]:
                doomed.append(row)
            else:
                row = {
                    **row,
                    "payload": _json(row["payload"]),
                    "trace_context": _json(row["trace_context"]),
                }
                claimed.append(Claimed.from_row(row, owner))
        return cls(claimed=claimed, doomed=doomed, buried=buried, ids=[r["id"] for r in rows])


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


#: One claim statement: its pick parameters in, the rows it met (in claim order) out.
ClaimStatement = Callable[[dict[str, Any]], list[dict[str, Any]]]


def walk_claim(plan: ClaimPlan, statement: ClaimStatement) -> tuple[ClaimBatch, list[dict]]:
    """Claim statements until ``plan.limit`` tasks are leased or every queue is exhausted.

    A statement that met fewer rows than it asked for exhausted its queue. Returns the batch
    and the doomed rows the caller must bury (counted in the batch as buried).
    """
    claimed: list[Claimed] = []
    doomed: list[dict[str, Any]] = []
    buried = 0
    queues, seen = list(plan.queues), list(plan.exclude)
    while queues and (wanted := plan.limit - len(claimed)) > 0:
        rows = statement(plan.pick(queues[0], wanted, seen))
        met = Met.of(rows, plan.owner)
        claimed += met.claimed
        doomed += met.doomed
        buried += met.buried
        seen += met.ids
        if len(rows) < wanted:
            queues.pop(0)
            seen = list(plan.exclude)
    return ClaimBatch(claimed=claimed, buried=buried + len(doomed)), doomed
