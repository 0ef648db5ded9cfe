"""Checks of a task's history: what last_error says now, and the errors list of its whole life.

- A retry sets last_error and appends {attempt, at, error}; a burial (the worker's, a claim's,
  a sweep's, a cancel's) does too. ``at`` is the store's clock: equal to updated_at of the write.
- An ack clears last_error (a done task has no current error) and keeps the list.
- A requeue starts a new life: attempts 0, last_error cleared, the list kept.
- The list keeps the newest MAX_ERRORS_KEPT entries; a fenced write appends nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.test import override_settings

from rivet.conformance.harness import (
    TTL,
    Harness,
    check,
    claim_batch,
    claim_one,
    enqueue,
    expect,
    expect_eq,
    fresh_queue,
    get,
)
from rivet.decisions import failed, failed_permanently, succeeded
from rivet.values import (
    CANCELLED_SUFFIX,
    HANDLER_ERROR_SUFFIX,
    PERMANENT_SUFFIX,
    WORKER_LOST_SUFFIX,
    Ack,
    CancelOutcome,
    Lease,
    Settled,
    TaskRecord,
    ending,
)


def history(row: TaskRecord) -> list[tuple[int, str]]:
    """(attempt, error) of every entry, oldest first."""
    return [(entry["attempt"], entry["error"]) for entry in row.errors]


def expect_entry_at_write(entry: dict[str, Any], row: TaskRecord, what: str) -> None:
    """The entry's time is ISO 8601 with an offset, from the clock that wrote updated_at."""
    expect_eq(sorted(entry), ["at", "attempt", "error"], f"keys of {what}")
    at = datetime.fromisoformat(entry["at"])
    expect(at.tzinfo is not None, f"{what}: 'at' has no UTC offset: {entry['at']!r}")
    expect_eq(at, row.updated_at, f"{what}: 'at' against the row's updated_at")


@check()
def check_retry_and_bury_append_to_errors(h: Harness) -> None:
    q = fresh_queue()
    task_id = enqueue(h, q, max_attempts=2)
    expect_eq(get(h, task_id).errors, [], "errors of a new task")
    first = claim_one(h, q)
    expect_eq(h.store.task_settle([failed(first, "E: one", 0.0)]), [Settled.RETRIED], "retry")
    row = get(h, task_id)
    expect_eq((row.last_error, history(row)), ("E: one", [(1, "E: one")]), "after a retry")
    expect_entry_at_write(row.errors[0], row, "the retry's entry")
    second = claim_one(h, q)
    expect_eq(h.store.task_settle([failed(second, "E: two", 0.0)]), [Settled.BURIED], "bury")
    row = get(h, task_id)
    buried = ending("E: two", HANDLER_ERROR_SUFFIX)
    expect_eq((row.state, row.last_error), ("dead", buried), "after the last attempt failed")
    expect_eq(history(row), [(1, "E: one"), (2, buried)], "errors after a retry and a burial")
    expect_entry_at_write(row.errors[1], row, "the burial's entry")
    first_at, second_at = (datetime.fromisoformat(e["at"]) for e in row.errors)
    expect(first_at <= second_at, f"entries out of time order: {row.errors}")


@check()
def check_every_burial_appends_to_errors(h: Harness) -> None:
    q = fresh_queue()
    permanent, leased_cancel, lost, also_lost, cancelled = (
        enqueue(h, q, max_attempts=1) for _ in range(5)
    )
    expect_eq(h.store.task_cancel(cancelled), CancelOutcome.CANCELLED, "cancel before a run")
    h.store.task_settle([failed_permanently(claim_one(h, q), "E: bad")])
    leased = claim_one(h, q)
    expect_eq(h.store.task_cancel(leased_cancel), CancelOutcome.MARKED, "cancel while leased")
    expect_eq(h.store.task_ack(leased.lease, "late"), Settled.CANCELLED, "the late ack")
    claim_one(h, q, owner="vanished")
    claim_one(h, q, owner="vanished")
    h.advance(TTL + 1)
    expect_eq(h.store.dead_sweep(q), 2, "tasks swept (both lapsed last attempts)")
    expected = {
        permanent: (1, ending("E: bad", PERMANENT_SUFFIX)),
        leased_cancel: (1, CANCELLED_SUFFIX),
        lost: (1, WORKER_LOST_SUFFIX),
        also_lost: (1, WORKER_LOST_SUFFIX),
        cancelled: (0, CANCELLED_SUFFIX),
    }
    for task_id, entry in expected.items():
        row = get(h, task_id)
        expect_eq((row.state, history(row)), ("dead", [entry]), f"task {task_id}'s burial")
        expect_eq(row.last_error, entry[1], f"task {task_id}'s last_error")


@check()
def check_claim_burial_appends_to_errors(h: Harness) -> None:
    q = fresh_queue()
    task_id = enqueue(h, q, max_attempts=1)
    claim_one(h, q, owner="vanished")
    h.advance(TTL + 1)
    batch = claim_batch(h, q, owner="w2")
    expect_eq((batch.claimed, batch.buried), ([], 1), "claim meeting a lapsed last attempt")
    row = get(h, task_id)
    expect_eq(history(row), [(1, WORKER_LOST_SUFFIX)], "errors of a task its worker lost")
    expect_entry_at_write(row.errors[0], row, "the claim burial's entry")


@check()
def check_requeue_keeps_errors_and_ack_clears_last_error(h: Harness) -> None:
    q = fresh_queue()
    task_id = enqueue(h, q, max_attempts=1)
    claim_one(h, q, owner="vanished")
    h.advance(TTL + 1)
    expect_eq(h.store.dead_sweep(q), 1, "the lost task swept")
    expect_eq(h.store.dead_requeue(q, task_id), True, "requeue")
    row = get(h, task_id)
    expect_eq((row.state, row.attempts, row.last_error), ("pending", 0, ""), "a new life")
    expect_eq(history(row), [(1, WORKER_LOST_SUFFIX)], "errors kept by a requeue")
    again = claim_one(h, q)
    expect_eq(h.store.task_settle([succeeded(again, {"ok": True})]), [Settled.ACKED], "ack")
    row = get(h, task_id)
    expect_eq((row.state, row.last_error), ("done", ""), "acked after a requeue")
    expect_eq(history(row), [(1, WORKER_LOST_SUFFIX)], "errors after the ack")


@check()
def check_ack_after_a_retry_clears_last_error(h: Harness) -> None:
    q = fresh_queue()
    task_id = enqueue(h, q, max_attempts=3)
    h.store.task_retry(claim_one(h, q).lease, "E: flaky", 0.0)
    h.store.task_ack(claim_one(h, q).lease, 7)
    row = get(h, task_id)
    expect_eq((row.state, row.result, row.last_error), ("done", 7, ""), "acked on attempt 2")
    expect_eq(history(row), [(1, "E: flaky")], "the retry stays in errors")


@check()
def check_errors_keep_the_newest_entries(h: Harness) -> None:
    q = fresh_queue()
    task_id = enqueue(h, q, max_attempts=6)
    with override_settings(RIVET={**getattr(settings, "RIVET", {}), "MAX_ERRORS_KEPT": 3}):
        for n in range(1, 6):
            h.store.task_retry(claim_one(h, q).lease, f"E: {n}", 0.0)
            kept = [(i, f"E: {i}") for i in range(max(n - 2, 1), n + 1)]
            expect_eq(history(get(h, task_id)), kept, f"errors after {n} retries, 3 kept")
    h.store.task_retry(claim_one(h, q).lease, "E: 6", 0.0)
    row = get(h, task_id)
    kept = [(3, "E: 3"), (4, "E: 4"), (5, "E: 5"), (6, "E: 6")]
    expect_eq(history(row), kept, "errors after one more retry under the default bound")


@check()
def check_fenced_write_appends_nothing(h: Harness) -> None:
    q = fresh_queue()
    task_id = enqueue(h, q, max_attempts=3)
    old = claim_one(h, q)
    h.advance(TTL + 1)
    new = claim_one(h, q, owner="w2")
    outcomes = h.store.task_settle(
        [
            failed(old, "E: stale", 0.0),
            Ack(lease=Lease(task_id=task_id, epoch=old.epoch)),
        ]
    )
    expect_eq(outcomes, [Settled.FENCED, Settled.FENCED], "writes under the old epoch")
    row = get(h, task_id)
    expect_eq((row.last_error, row.errors), ("", []), "a task after fenced writes")
    h.store.task_retry(new.lease, "E: current", 0.0)
    expect_eq(history(get(h, task_id)), [(2, "E: current")], "the holder's retry is kept")
