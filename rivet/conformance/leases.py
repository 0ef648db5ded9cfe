"""Checks of the claim, the lease and the fence: who may run a task, and whose write counts."""

from __future__ import annotations

from collections import Counter

from rivet.conformance.harness import (
    LONG_TTL,
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
    in_threads,
)
from rivet.decisions import failed
from rivet.values import Lease, Settled


@check()
def check_claim_respects_limit(h: Harness) -> None:
    q = fresh_queue()
    for n in range(5):
        enqueue(h, q, payload={"n": n})
    expect_eq(len(claim(h, q, limit=2)), 2, "tasks leased by a claim of limit 2 from 5 ready")
    expect_eq(len(claim(h, q, limit=10)), 3, "tasks leased by a claim of limit 10 from 3 ready")
    expect_eq(claim_batch(h, q, limit=10).claimed, [], "tasks leased from an exhausted queue")


@check()
def check_claim_orders_by_priority(h: Harness) -> None:
    q = fresh_queue()
    low = enqueue(h, q, priority=-5)
    high = enqueue(h, q, priority=10)
    mid = enqueue(h, q, priority=3)
    plain = enqueue(h, q)
    expect_eq(ids(claim(h, q, limit=1)), [high], "first claim takes the highest priority")
    expect_eq(ids(claim(h, q, limit=3)), [mid, plain, low], "claim order by priority desc")


@check()
def check_claim_orders_by_visible_at_then_id(h: Harness) -> None:
    q = fresh_queue()
    later = enqueue(h, q, delay=30)
    sooner = enqueue(h, q, delay=10)
    h.advance(40)
    first, second, third = (enqueue(h, q) for _ in range(3))
    expect_eq(
        ids(claim(h, q, limit=5)),
        [sooner, later, first, second, third],
        "claim order at one priority (visible_at, then id)",
    )


@check()
def check_claim_tries_queues_in_order(h: Harness) -> None:
    first_q, second_q, other_q = fresh_queue(), fresh_queue(), fresh_queue()
    urgent = enqueue(h, second_q, priority=50)
    routine = enqueue(h, first_q)
    enqueue(h, other_q, priority=100)
    got = claim(h, first_q, second_q, limit=1)
    expect_eq(ids(got), [routine], "claim of limit 1 over [first, second] takes the first queue")
    got = claim(h, first_q, second_q, limit=5)
    expect_eq(ids(got), [urgent], "claim then falls through to the second queue")
    expect_eq(claim(h, first_q, second_q), [], "a queue not named is never claimed from")


@check()
def check_claim_takes_a_lease(h: Harness) -> None:
    q = fresh_queue()
    task_id = enqueue(h, q, kind="cf.lease", payload={"a": 1}, idem_key=f"{q}:k", priority=2)
    leased = claim_one(h, q, owner="owner-a")
    expect_eq(
        (leased.task_id, leased.queue, leased.kind, leased.payload, leased.idem_key),
        (task_id, q, "cf.lease", {"a": 1}, f"{q}:k"),
        "claimed task fields",
    )
    expect_eq((leased.attempt, leased.epoch, leased.owner), (1, 1, "owner-a"), "attempt/epoch")
    expect_eq((leased.max_attempts, leased.priority), (3, 2), "claimed max_attempts/priority")
    row = get(h, task_id)
    expect_eq((row.state, row.attempts, row.lease_epoch), ("pending", 1, 1), "row after claim")
    expect_eq(row.lease_owner, "owner-a", "lease_owner after claim")
    expect(row.visible_at > row.updated_at, "a claim must set visible_at into the future")
    expect_eq(claim(h, q, owner="owner-b"), [], "a leased task claimed by another owner")


@check("concurrent")
def check_concurrent_claimers_never_share_a_task(h: Harness) -> None:
    q, total, workers = fresh_queue(), 200, 8
    for n in range(total):
        enqueue(h, q, payload={"n": n})

    def drain(index: int) -> list[tuple[int, Settled]]:
        seen = []
        for _ in range(total):  # bounded: a store that hands out a task again must not hang it
            batch = claim(h, q, owner=f"thread-{index}", limit=5, ttl=LONG_TTL)
            if not batch:
                break
            seen += [(c.task_id, h.store.task_ack(c.lease, {"by": index})) for c in batch]
        return seen

    acks = [ack for per_thread in in_threads(h, workers, drain) for ack in per_thread]
    times = Counter(task_id for task_id, _ in acks)
    twice = sorted(task_id for task_id, n in times.items() if n > 1)
    expect(not twice, f"tasks leased to two owners at once: {twice[:10]}")
    expect_eq(len(times), total, f"distinct tasks claimed by {workers} concurrent claimers")
    expect_eq({outcome for _, outcome in acks}, {Settled.ACKED}, "ack outcomes")
    expect_eq(h.store.queue_stats(q).done, total, "done tasks after the concurrent drain")


@check()
def check_lapsed_lease_is_claimed_again(h: Harness) -> None:
    q = fresh_queue()
    task_id = enqueue(h, q)
    first = claim_one(h, q)
    h.advance(TTL + 1)
    second = claim_one(h, q, owner="w2")
    expect_eq(second.task_id, task_id, "task reclaimed after its lease lapsed")
    expect_eq((second.attempt, second.epoch), (2, first.epoch + 1), "attempt/epoch of reclaim")
    expect_eq(get(h, task_id).lease_owner, "w2", "lease_owner after the reclaim")


@check()
def check_claim_fills_the_batch_past_buried_tasks(h: Harness) -> None:
    q = fresh_queue()
    exhausted = [enqueue(h, q, max_attempts=1, priority=10) for _ in range(2)]
    expect_eq(ids(claim(h, q, limit=2)), exhausted, "claim of the one-attempt tasks")
    h.advance(TTL + 1)
    runnable = [enqueue(h, q) for _ in range(2)]
    batch = claim_batch(h, q, limit=1)
    expect_eq((ids(batch.claimed), batch.buried), ([runnable[0]], 2), "(leased, buried)")
    batch = claim_batch(h, q, limit=5)
    expect_eq((ids(batch.claimed), batch.buried), ([runnable[1]], 0), "(leased, buried) after")


@check()
def check_lapse_alone_does_not_fence(h: Harness) -> None:
    q = fresh_queue()
    task_id = enqueue(h, q)
    slow = claim_one(h, q)
    h.advance(TTL + 1)
    expect_eq(h.store.task_ack(slow.lease, "late"), Settled.ACKED, "ack after an unclaimed lapse")
    expect_eq(get(h, task_id).state, "done", "state after that ack")
    expect_eq(h.store.fenced_count(q), 0, "fenced writes when no other claim happened")


@check()
def check_stale_ack_is_fenced(h: Harness) -> None:
    q = fresh_queue()
    task_id = enqueue(h, q)
    old = claim_one(h, q)
    h.advance(TTL + 1)
    new = claim_one(h, q, owner="w2")
    before, fenced = get(h, task_id), h.store.fenced_count(q, "ack")
    fenced_anywhere = h.store.fenced_count()
    expect_eq(h.store.task_ack(old.lease, {"late": True}), Settled.FENCED, "stale-epoch ack")
    expect_eq(get(h, task_id), before, "task after a fenced ack (nothing may change)")
    expect_eq(h.store.fenced_count(q, "ack"), fenced + 1, "fenced_count(queue, 'ack')")
    expect_eq(h.store.fenced_count(q, "fail"), 0, "fenced_count(queue, 'fail')")
    expect_eq(h.store.fenced_count(), fenced_anywhere + 1, "fenced_count() over all queues")
    expect_eq(h.store.task_ack(new.lease, "ok"), Settled.ACKED, "ack by the current holder")


@check()
def check_stale_fail_is_fenced(h: Harness) -> None:
    q = fresh_queue()
    task_id = enqueue(h, q, max_attempts=2)
    old = claim_one(h, q)
    h.advance(TTL + 1)
    claim_one(h, q, owner="w2")
    before, fenced = get(h, task_id), h.store.fenced_count(q, "fail")
    outcome = h.store.task_settle([failed(old, "late failure", 0.0)])
    expect_eq(outcome, [Settled.FENCED], "stale-epoch fail (even on what is the last attempt)")
    expect_eq(h.store.task_bury(old.lease, "late"), Settled.FENCED, "stale-epoch bury")
    expect_eq(get(h, task_id), before, "task after a fenced fail (nothing may change)")
    expect_eq(h.store.fenced_count(q, "fail"), fenced + 2, "fenced_count(queue, 'fail')")


@check()
def check_stale_lease_extend_is_refused(h: Harness) -> None:
    q = fresh_queue()
    task_id = enqueue(h, q)
    old = claim_one(h, q)
    h.advance(TTL + 1)
    claim_one(h, q, owner="w2")
    before = get(h, task_id)
    held = h.store.lease_extend([old.lease, Lease(task_id=task_id, epoch=99)], TTL * 10)
    expect_eq(held, set(), "lease_extend with stale or unknown epochs returns no task")
    expect_eq(get(h, task_id), before, "task after a refused lease_extend")
    expect_eq(
        h.store.fenced_count(q, "beat"),
        1,
        "fenced_count(queue, 'beat') after a heartbeat another claim refused (the epoch-99 "
        "lease, newer than the task's, took nothing from anyone and is not recorded)",
    )
    h.store.lease_extend([old.lease], TTL)
    expect_eq(
        h.store.fenced_count(q, "beat"),
        1,
        "fenced_count(queue, 'beat') after the same stale lease's second heartbeat (one record "
        "per lease)",
    )


@check()
def check_a_heartbeat_after_the_holders_own_end_is_not_recorded(h: Harness) -> None:
    """A heartbeat that crosses its own worker's ack is refused (the task is done) but nobody
    else holds the task: nothing was fenced, and nothing is recorded."""
    q = fresh_queue()
    task_id = enqueue(h, q)
    leased = claim_one(h, q)
    expect_eq(h.store.task_ack(leased.lease), Settled.ACKED, "ack")
    expect_eq(h.store.lease_extend([leased.lease], TTL), set(), "heartbeat after the ack")
    expect_eq(h.store.fenced_count(q), 0, "fenced writes after a heartbeat crossed its own ack")
    expect_eq(get(h, task_id).state, "done", "state after a heartbeat crossed the ack")


@check()
def check_lease_extend_keeps_the_lease(h: Harness) -> None:
    q = fresh_queue()
    task_id = enqueue(h, q)
    leased = claim_one(h, q)
    h.advance(TTL * 2 / 3)
    expect_eq(h.store.lease_extend([leased.lease], TTL), {task_id}, "lease_extend of a held lease")
    h.advance(TTL * 2 / 3)
    expect_eq(claim(h, q, owner="w2"), [], "claim after the original ttl of an extended lease")
    expect_eq(h.store.task_ack(leased.lease), Settled.ACKED, "ack under the extended lease")


@check()
def check_ack_marks_done_with_result(h: Harness) -> None:
    q = fresh_queue()
    task_id = enqueue(h, q)
    leased = claim_one(h, q)
    visible = get(h, task_id).visible_at
    result = {"receipt": "r-1", "lines": [1, 2.5, None, "é"]}
    expect_eq(h.store.task_ack(leased.lease, result), Settled.ACKED, "ack")
    row = get(h, task_id)
    expect_eq((row.state, row.result), ("done", result), "state and result after ack")
    expect_eq(row.visible_at, visible, "visible_at after ack (an ack leaves it alone)")
    expect_eq(claim(h, q), [], "a done task claimed again")


@check()
def check_ack_is_final(h: Harness) -> None:
    q = fresh_queue()
    task_id = enqueue(h, q)
    leased = claim_one(h, q)
    h.store.task_ack(leased.lease, 1)
    expect_eq(h.store.task_ack(leased.lease, 2), Settled.FENCED, "second ack of one lease")
    outcome = h.store.task_retry(leased.lease, "after done", 0.0)
    expect_eq(outcome, Settled.FENCED, "retry after the ack")
    expect_eq(h.store.task_bury(leased.lease, "after done"), Settled.FENCED, "bury after the ack")
    row = get(h, task_id)
    expect_eq((row.state, row.result, row.last_error), ("done", 1, ""), "task after late writes")


@check()
def check_fail_retries_after_delay(h: Harness) -> None:
    q = fresh_queue()
    task_id = enqueue(h, q)
    first = claim_one(h, q)
    expect_eq(h.store.task_settle([failed(first, "boom", 60.0)]), [Settled.RETRIED], "attempt 1")
    row = get(h, task_id)
    expect_eq((row.state, row.attempts, row.last_error), ("pending", 1, "boom"), "after fail")
    expect_eq(claim(h, q), [], "claim before the retry delay passed")
    h.advance(61)
    again = claim_one(h, q)
    expect_eq((again.attempt, again.epoch), (2, 2), "attempt/epoch of the retry")
    expect_eq(h.store.task_ack(first.lease), Settled.FENCED, "ack by the failed attempt")


@check()
def check_fail_on_last_attempt_buries(h: Harness) -> None:
    q = fresh_queue()
    task_id = enqueue(h, q, max_attempts=2)
    h.store.task_settle([failed(claim_one(h, q), "first", 0.0)])
    h.advance(1)
    last = claim_one(h, q)
    outcome = h.store.task_settle([failed(last, "second", 0.0)])
    expect_eq(outcome, [Settled.BURIED], "last-attempt fail")
    row = get(h, task_id)
    expect_eq((row.state, row.attempts), ("dead", 2), "state/attempts after last fail")
    expect_eq(
        row.last_error,
        "second; max attempts exceeded (handler error)",
        "last_error of a handler-error burial",
    )
    expect_eq(claim(h, q), [], "a dead task claimed")


@check()
def check_lapsed_last_attempt_is_buried_by_claim(h: Harness) -> None:
    q = fresh_queue()
    task_id = enqueue(h, q, max_attempts=1)
    lost = claim_one(h, q, owner="vanished")
    h.advance(TTL + 1)
    batch = claim_batch(h, q, owner="w2")
    expect_eq((batch.claimed, batch.buried), ([], 1), "claim meeting an exhausted lapsed task")
    row = get(h, task_id)
    expect_eq((row.state, row.attempts), ("dead", 1), "state/attempts of the buried task")
    expect(
        row.last_error.endswith("max attempts exceeded (no ack, worker lost)"),
        f"last_error of a worker-lost burial: {row.last_error!r}",
    )
    expect_eq(h.store.task_ack(lost.lease), Settled.FENCED, "ack of a buried task")
    expect_eq(get(h, task_id).state, "dead", "state after the late ack")
