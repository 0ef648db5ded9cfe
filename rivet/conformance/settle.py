"""Checks of settling (decisions applied in batches, fenced per row, flushed with the next claim)
and of cancelling."""

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
    ids,
)
from rivet.decisions import cancelled, failed, failed_permanently, lost, succeeded
from rivet.values import (
    CANCELLED_SUFFIX,
    PERMANENT_SUFFIX,
    Ack,
    CancelOutcome,
    Claimed,
    Decision,
    Lease,
    Retry,
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


def _stale(claimed: Claimed) -> Lease:
    """The lease of an attempt a newer claim has replaced."""
    return Lease(task_id=claimed.task_id, epoch=claimed.epoch - 1, owner=claimed.owner)


@check()
def check_flush_settles_a_mixed_batch_fencing_exactly_the_stale_rows(h: Harness) -> None:
    q = fresh_queue()
    tasks = [enqueue(h, q, max_attempts=3) for _ in range(6)]
    leases = {c.task_id: c for c in claim(h, q, limit=6)}
    h.advance(TTL + 1)
    again = {c.task_id: c for c in claim(h, q, owner="w2", limit=2)}  # tasks[0..1] re-leased
    expect_eq(set(again), set(tasks[:2]), "the re-leased tasks")
    waiting = [enqueue(h, q) for _ in range(2)]
    h.advance(1)  # the tasks of w1 that were not re-leased are past their lease too
    fenced_before = h.store.fenced_count(q)
    batch: list[Decision] = [
        Ack(lease=_stale(again[tasks[0]]), result="stale ack"),
        Retry(lease=_stale(again[tasks[1]]), error="stale retry", delay=0.0),
        succeeded(leases[tasks[2]], {"ok": 2}),
        failed(leases[tasks[3]], "E: retry me", 0.0),
        failed_permanently(leases[tasks[4]], "E: give up"),
        lost(leases[tasks[5]], op="ack"),
    ]
    flushed = h.store.task_settle_and_claim(batch, queues=[q], owner="w3", limit=10, lease_ttl=TTL)
    expect_eq(
        flushed.settled,
        [Settled.FENCED, Settled.FENCED, Settled.ACKED, Settled.RETRIED, Settled.BURIED,
         Settled.FENCED],
        "outcomes of a mixed batch with two stale epochs and a fence, in order",
    )  # fmt: skip
    expect_eq(h.store.fenced_count(q) - fenced_before, 3, "fenced writes: the stale rows and fence")
    expect_eq(h.store.fenced_count(q, "fail"), 1, "the stale retry is recorded as a fail")
    expect_eq(h.store.fenced_count(q, "ack"), 2, "the stale ack and the ack fence")
    for task_id in tasks[:2]:
        row = get(h, task_id)
        expect_eq((row.state, row.lease_epoch, row.lease_owner), ("pending", 2, "w2"), "stale row")
    expect_eq((get(h, tasks[2]).state, get(h, tasks[2]).result), ("done", {"ok": 2}), "the ack")
    expect_eq(get(h, tasks[4]).state, "dead", "the burial")
    claimed = ids(flushed.batch.claimed)
    expect(tasks[3] not in claimed, "a retry is not claimed by the flush that wrote it")
    expect(set(waiting) <= set(claimed), f"the flush's claim leased the waiting tasks: {claimed}")
    expect_eq(get(h, waiting[0]).lease_owner, "w3", "owner of a task the flush claimed")
    later = ids(claim(h, q, owner="w4"))
    expect(tasks[3] in later, f"the next claim leases the retried task: {later}")


@check()
def check_flush_without_a_claim_or_without_decisions(h: Harness) -> None:
    q = fresh_queue()
    first, second = enqueue(h, q), enqueue(h, q)
    only_claim = h.store.task_settle_and_claim([], queues=[q], owner="w1", limit=1, lease_ttl=TTL)
    expect_eq((only_claim.settled, ids(only_claim.batch.claimed)), ([], [first]), "claim only")
    (leased,) = only_claim.batch.claimed
    only_settle = h.store.task_settle_and_claim(
        [succeeded(leased, None)], queues=[q], owner="w1", limit=0, lease_ttl=TTL
    )
    expect_eq(only_settle.settled, [Settled.ACKED], "settle only")
    expect_eq(only_settle.batch.claimed, [], "a flush with limit 0 claims nothing")
    expect_eq(get(h, second).attempts, 0, "the other task was not claimed")
    nothing = h.store.task_settle_and_claim([], queues=[q], owner="w1", limit=0, lease_ttl=TTL)
    expect_eq((nothing.settled, nothing.batch.claimed), ([], []), "an empty flush")


@check()
def check_settle_records_the_epoch_and_owner_that_finished_a_task(h: Harness) -> None:
    q = fresh_queue()
    acked, retried, buried = (enqueue(h, q, max_attempts=3) for _ in range(3))
    leases = {c.task_id: c for c in claim(h, q, owner="w1", limit=3)}
    h.store.task_settle(
        [
            succeeded(leases[acked], {"n": 1}),
            failed(leases[retried], "boom", 0.0),
            failed_permanently(leases[buried], "ValueError: bad input"),
        ]
    )
    for task_id in (acked, retried, buried):
        row = get(h, task_id)
        expect_eq(
            (row.settled_epoch, row.settled_by),
            (leases[task_id].epoch, "w1"),
            f"settled_epoch and settled_by of task {task_id} after w1's decision",
        )
    again = claim_one(h, q, owner="w2")
    expect_eq(again.task_id, retried, "the retried task is claimed again")
    stale = Ack(lease=Lease(task_id=retried, epoch=leases[retried].epoch, owner="w1"))
    expect_eq(h.store.task_settle([stale]), [Settled.FENCED], "w1's ack after w2's claim")
    h.store.task_settle([succeeded(again, {"n": 2})])
    row = get(h, retried)
    expect_eq(
        (row.state, row.settled_epoch, row.settled_by, row.lease_epoch),
        ("done", again.epoch, "w2", again.epoch),
        "a task finished by w2's ack carries w2's epoch, the epoch the task held",
    )
