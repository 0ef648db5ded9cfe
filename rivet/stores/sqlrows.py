"""Rows as the SQL stores' statements take and give them: decisions in, outcomes out.

A decision becomes a settle row (the columns a settle statement takes), a doomed row a claim met
becomes a burial with ``rivet.values.claim_burial``'s text, and the rows a settle applied become
each decision's ``Settled``. Shared by every SQL dialect (``rivet.stores.sql``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rivet.errors import IdempotencyMismatch
from rivet.stores.jsontext import json_text, json_value
from rivet.values import (
    Ack,
    Bury,
    Decision,
    EnqueueResult,
    Fence,
    Lease,
    Retry,
    Settled,
    TaskSpec,
    claim_burial,
)

#: The op of a doomed row's burial (a claim's, a sweep's). Such a burial is refused only when
#: another claim or a cancel buried the row first, which is no stale write: it is not recorded
#: as fenced.
BURIAL_OP = "bury"


def rows_of(cursor: Any) -> list[dict[str, Any]]:
    """Every row of the last statement as {column: value}; none for a statement without rows."""
    description = cursor.description  # built anew on each access: read it once
    if not description:
        return []
    names = [column[0] for column in description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def same_work(spec: TaskSpec, row: dict[str, Any]) -> EnqueueResult:
    """The duplicate a key used before names, or IdempotencyMismatch when the work differs."""
    work = (row["queue"], row["kind"], json_value(row["payload"]))
    if work != (spec.queue, spec.kind, json.loads(spec.payload_json)):
        raise IdempotencyMismatch(spec.idem_key or "", row["id"])
    return EnqueueResult(task_id=row["id"], duplicate=True)


def settle_row(decision: Decision) -> dict[str, Any]:
    """One decision as the columns a settle statement takes (state None: a fence only)."""
    lease = decision.lease
    row = {
        "task_id": lease.task_id,
        "epoch": lease.epoch,
        "owner": lease.owner,
        "op": decision.op,
        "state": None,
        "result": None,
        "error": None,
        "cancelled_error": None,
        "delay": 0.0,
    }
    if isinstance(decision, Ack):
        row.update(state="done", result=json_text(decision.result))
    elif isinstance(decision, Retry):
        row.update(state="pending", error=decision.error, delay=max(float(decision.delay), 0.0))
    elif isinstance(decision, Bury):
        row.update(state="dead", error=decision.error)
    if not isinstance(decision, Fence):
        row["cancelled_error"] = decision.cancelled_error
    return row


def burial_rows(doomed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Settle rows burying rows no claim may run, under their epoch, with claim_burial's text."""
    burials = (
        Bury(
            lease=Lease(task_id=row["id"], epoch=row["lease_epoch"]),
            error=claim_burial(row["last_error"], bool(row["cancel_requested"])),
        )
        for row in doomed
    )
    return [{**settle_row(burial), "op": BURIAL_OP} for burial in burials]


def outcomes(decisions: Sequence[Decision], applied: dict[int, bool]) -> list[Settled]:
    """Each decision's outcome, in order, from {position: cancelled} of the rows applied."""
    return [outcome_of(decision, applied.get(i)) for i, decision in enumerate(decisions)]


def outcome_of(decision: Decision, applied: bool | None) -> Settled:
    """Settled for a decision: ``applied`` is None (fenced), False (applied), True (cancelled)."""
    if applied is None or isinstance(decision, Fence):
        return Settled.FENCED
    if applied:
        return Settled.CANCELLED
    if isinstance(decision, Ack):
        return Settled.ACKED
    return Settled.RETRIED if isinstance(decision, Retry) else Settled.BURIED
