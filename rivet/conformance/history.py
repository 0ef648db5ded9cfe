"""Checks of a task's history: what last_error says now, and the errors list of its whole life.

- A retry sets last_error and appends {attempt, at, error}; a burial (the worker's, a claim's,
  a sweep's, a cancel's) does too. ``at`` is the store's clock: equal to updated_at of the write.
- An ack clears last_error (a done task has no current error) and keeps the list.
- A requeue starts a new life: attempts 0, last_error cleared, the list kept.
- The list keeps the newest MAX_ERRORS_KEPT entries; a fenced write appends nothing.
"""

from __future__ import annotations

import re
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
from rivet.decisions import cancelled, failed, failed_permanently, succeeded
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
    claim_burial,
    ending,
    error_at,
)


def history(row: TaskRecord) -> list[tuple[int, str]]:
    """(attempt, error) of every entry, oldest first."""
    return [(entry["attempt"], entry["error"]) for entry in row.errors]


#: The one shape of an entry's ``at`` on every store (``rivet.values.error_at``).
AT_SHAPE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00")


def expect_at_shape(entry: dict[str, Any], what: str) -> None:
    """``at`` is ISO 8601 in UTC with six fraction digits and +00:00, the same on every store."""
    shape = "YYYY-MM-DDTHH:MM:SS.ffffff+00:00"
    expect(AT_SHAPE.fullmatch(entry["at"]) is not None, f"{what}: 'at' {entry['at']!r} != {shape}")


def expect_entry_at_write(entry: dict[str, Any], row: TaskRecord, what: str) -> None:
    """The entry's time is ``error_at`` of the clock that wrote updated_at, to the character."""
    expect_eq(sorted(entry), ["at", "attempt", "error"], f"keys of {what}")
    expect_at_shape(entry, what)
    at = datetime.fromisoformat(entry["at"])
    expect_eq(at, row.updated_at, f"{what}: 'at' against the row's updated_at")
    expect_eq(entry["at"], error_at(row.updated_at), f"{what}: 'at' as text")


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


@check()
def check_every_entry_has_the_same_at_shape(h: Harness) -> None:
    """Retries, burials (worker, claim, sweep, cancel) and cancel overrides: one ``at`` shape."""
    qs = {path: fresh_queue() for path in ("retry", "bury", "lost", "swept", "marked", "cancel")}
    ids = {
        path: enqueue(h, q, max_attempts=1 if path in ("lost", "swept") else 3)
        for path, q in qs.items()
    }
    claim_one(h, qs["lost"], owner="vanished")
    claim_one(h, qs["swept"], owner="vanished")
    h.advance(TTL + 1)  # moves the SQL stores' timestamps: every write below comes after it
    expect_eq(claim_batch(h, qs["lost"], owner="w2").buried, 1, "the claim's burial")
    expect_eq(h.store.dead_sweep(qs["swept"]), 1, "the sweep's burial")
    h.store.task_retry(claim_one(h, qs["retry"]).lease, "E: flaky", 0.0)
    h.store.task_settle([failed_permanently(claim_one(h, qs["bury"]), "E: bad")])
    marked = claim_one(h, qs["marked"])
    h.store.task_cancel(ids["marked"])
    h.store.task_ack(marked.lease, "late")
    h.store.task_cancel(ids["cancel"])
    for path, task_id in ids.items():
        row = get(h, task_id)
        expect_eq(len(row.errors), 1, f"{path}: errors entries of {row}")
        expect_entry_at_write(row.errors[0], row, f"{path}: the entry")


@check()
def check_claim_burial_keeps_the_earlier_reason(h: Harness) -> None:
    """A claim's burial texts are rivet.values.claim_burial's, earlier reason included."""
    queues = {was_cancelled: fresh_queue() for was_cancelled in (False, True)}
    ids = {was_cancelled: enqueue(h, q, max_attempts=2) for was_cancelled, q in queues.items()}
    for q in queues.values():
        h.store.task_retry(claim_one(h, q).lease, "E: first", 0.0)
        claim_one(h, q, owner="vanished")
    h.store.task_cancel(ids[True])
    h.advance(TTL + 1)
    for was_cancelled, q in queues.items():
        batch = claim_batch(h, q, owner="w2")
        expect_eq((batch.claimed, batch.buried), ([], 1), f"claim meeting {ids[was_cancelled]}")
    for was_cancelled, task_id in ids.items():
        row = get(h, task_id)
        text = claim_burial("E: first", was_cancelled)
        expect_eq((row.state, row.last_error), ("dead", text), f"task {task_id}'s burial")
        expect_eq(history(row), [(1, "E: first"), (2, text)], f"task {task_id}'s errors")


@check()
def check_a_cancel_mark_overrides_each_decision_with_its_own_text(h: Harness) -> None:
    """Ack and retry become the cancel ending; a burial keeps the reason it was decided with."""
    q = fresh_queue()
    acked, retried, buried, stopped = (enqueue(h, q, max_attempts=3) for _ in range(4))
    leases = [claim_one(h, q) for _ in range(4)]
    for task_id in (acked, retried, buried, stopped):
        expect_eq(h.store.task_cancel(task_id), CancelOutcome.MARKED, f"mark {task_id}")
    decisions = [
        succeeded(leases[0], "late"),
        failed(leases[1], "E: retry", 5.0),
        failed_permanently(leases[2], "E: bad"),
        cancelled(leases[3]),
    ]
    expect_eq(h.store.task_settle(decisions), [Settled.CANCELLED] * 4, "outcomes")
    texts = {
        acked: CANCELLED_SUFFIX,
        retried: CANCELLED_SUFFIX,
        buried: ending("E: bad", PERMANENT_SUFFIX),
        stopped: CANCELLED_SUFFIX,
    }
    for decision, (task_id, text) in zip(decisions, texts.items(), strict=True):
        expect_eq(decision.cancelled_error, text, f"the decision's cancelled_error ({task_id})")
        row = get(h, task_id)
        expect_eq((row.state, row.last_error, row.result), ("dead", text, None), f"task {task_id}")
        expect_eq(history(row), [(1, text)], f"task {task_id}'s errors")
        expect_entry_at_write(row.errors[0], row, f"task {task_id}'s entry")
