"""Checks of settling (decisions applied in batches, fenced per row) and of cancelling."""

from __future__ import annotations

from rivet.conformance.harness import (
    TTL,
    Harness,
    check,
    claim,
    claim_batch,
    claim_one,
    enqueue,
    expect,
    expect_eq,
    fresh_queue,
    get,
)
from rivet.decisions import cancelled, failed, failed_permanently, lost, succeeded
from rivet.values import (
    CANCELLED_SUFFIX,
    PERMANENT_SUFFIX,
    Ack,
    CancelOutcome,
    Lease,
    Settled,
)


@check()
def check_batch_settles_each_row_under_its_own_epoch(h: Harness) -> None:
    q = fresh_queue()
    first, stale, retried, buried = (enqueue(h, q, max_attempts=2) for _ in range(4))
    leases = {c.task_id: c for c in claim(h, q, limit=4)}
    fenced_before = h.store.fenced_count(q)
    outcomes = h.store.task_settle(
        [
            succeeded(leases[first], {"n": 1}),
            Ack(lease=Lease(task_id=stale, epoch=leases[stale].epoch + 7, owner="old")),
            failed(leases[retried], "boom", 60.0),
            failed_permanently(leases[buried], "ValueError: bad input"),
        ]
    )
    expect_eq(
        outcomes,
        [Settled.ACKED, Settled.FENCED, Settled.RETRIED, Settled.BURIED],
        "outcomes of a batch with one stale epoch, in the order given",
    )
    expect_eq(h.store.fenced_count(q), fenced_before + 1, "fenced writes: exactly the stale row")
    expect_eq(h.store.fenced_count(q, "ack"), 1, "the stale row was an ack")
    expect_eq((get(h, first).state, get(h, first).result), ("done", {"n": 1}), "acked row")
    expect_eq(get(h, stale).state, "pending", "the stale row's task is untouched")
    row = get(h, retried)
    expect_eq((row.state, row.last_error, row.lease_owner), ("pending", "boom", None), "retry")
    row = get(h, buried)
    expect_eq(row.state, "dead", "state of a permanent failure (attempts were left)")
    expect_eq(row.last_error, f"ValueError: bad input; {PERMANENT_SUFFIX}", "its last_error")
    expect_eq(h.store.task_settle([]), [], "an empty batch")


@check()
def check_fence_decision_changes_nothing_and_is_recorded(h: Harness) -> None:
    q = fresh_queue()
    task_id = enqueue(h, q)
    old = claim_one(h, q)
    h.advance(TTL + 1)
    new = claim_one(h, q, owner="w2")
    before = get(h, task_id)
    expect_eq(h.store.task_settle([lost(old)]), [Settled.FENCED], "a recorded fence")
    expect_eq(get(h, task_id), before, "task after a recorded fence")
    expect_eq(h.store.fenced_count(q, "fail"), 1, "the fence is counted as a refused fail")
    expect_eq(h.store.task_ack(new.lease), Settled.ACKED, "the current holder still acks")


@check()
def check_cancel_buries_a_pending_task_at_once(h: Harness) -> None:
    q = fresh_queue()
    ready, delayed = enqueue(h, q), enqueue(h, q, delay=60)
    for task_id in (ready, delayed):
        expect_eq(h.store.task_cancel(task_id), CancelOutcome.CANCELLED, "cancel of pending")
        row = get(h, task_id)
        expect_eq((row.state, row.last_error), ("dead", CANCELLED_SUFFIX), "a cancelled task")
    expect_eq(claim(h, q), [], "a cancelled task claimed")
    expect_eq(h.store.task_cancel(ready), CancelOutcome.FINISHED, "cancel of a dead task")
    expect_eq(h.store.task_cancel(10**12), CancelOutcome.NOT_FOUND, "cancel of no task")
    expect_eq(h.store.dead_requeue(q, ready), True, "requeue of a cancelled task")
    revived = claim_one(h, q)
    expect_eq(revived.task_id, ready, "the requeued task runs again")
    expect_eq(h.store.task_ack(revived.lease), Settled.ACKED, "and may be acked")


@check()
def check_cancel_of_a_leased_task_is_never_acked(h: Harness) -> None:
    q = fresh_queue()
    task_id = enqueue(h, q)
    leased = claim_one(h, q)
    expect_eq(h.store.task_cancel(task_id), CancelOutcome.MARKED, "cancel of a leased task")
    expect_eq(get(h, task_id).state, "pending", "a marked task stays leased")
    held = h.store.lease_extend([leased.lease], TTL)
    expect_eq((set(held), set(held.cancelled)), ({task_id}, {task_id}), "heartbeat reports it")
    expect_eq(h.store.task_ack(leased.lease, "ran anyway"), Settled.CANCELLED, "a late ack")
    row = get(h, task_id)
    expect_eq((row.state, row.result), ("dead", None), "the ack was refused, the task buried")
    expect_eq(row.last_error, CANCELLED_SUFFIX, "last_error of a cancelled leased task")
    expect_eq(h.store.dead_requeue(q, task_id), True, "requeue of a cancelled task")
    again = claim_one(h, q)
    held = h.store.lease_extend([again.lease], TTL)
    expect_eq(set(held.cancelled), set(), "a requeued task is no longer marked")
    expect_eq(h.store.task_ack(again.lease), Settled.ACKED, "and is acked")


@check()
def check_cancelled_worker_buries_with_the_cancel_ending(h: Harness) -> None:
    q = fresh_queue()
    task_id = enqueue(h, q)
    leased = claim_one(h, q)
    h.store.task_cancel(task_id)
    expect_eq(h.store.task_settle([cancelled(leased)]), [Settled.CANCELLED], "worker's burial")
    expect_eq(get(h, task_id).last_error, CANCELLED_SUFFIX, "last_error")


@check()
def check_claim_buries_a_cancelled_task_whose_lease_lapsed(h: Harness) -> None:
    q = fresh_queue()
    task_id = enqueue(h, q)
    claim_one(h, q, owner="vanished")
    h.store.task_cancel(task_id)
    h.advance(TTL + 1)
    batch = claim_batch(h, q, owner="w2")
    expect_eq((batch.claimed, batch.buried), ([], 1), "claim meeting a cancelled lapsed task")
    row = get(h, task_id)
    expect_eq(row.state, "dead", "state")
    expect(row.last_error.endswith(CANCELLED_SUFFIX), f"last_error: {row.last_error!r}")
