"""Checks of the claim order with priority aging: a task's effective priority is its priority
plus the seconds it has waited since it became runnable over RIVET['PRIORITY_AGING_SECS'].

A claim takes the highest effective priority first, the task that became runnable first on a
tie, then the lower id. The checks read the step the store ranks with
(``rivet.conf.priority_aging_secs``) and move the store's clock by multiples of it.
"""

from __future__ import annotations

from rivet.conf import priority_aging_secs
from rivet.conformance.harness import (
    TTL,
    Harness,
    check,
    claim,
    claim_one,
    enqueue,
    expect_eq,
    fresh_queue,
    ids,
)


@check()
def check_claim_ages_priority(h: Harness) -> None:
    step, q = priority_aging_secs(), fresh_queue()
    old_low = enqueue(h, q, priority=-1)
    h.advance(2 * step - 10)  # old_low has waited less than 2 points' worth
    high_before = enqueue(h, q, priority=1)
    h.advance(20)  # now more: a priority-1 task enqueued now ranks after it
    high_after = enqueue(h, q, priority=1)
    new_low = enqueue(h, q, priority=-1)
    expect_eq(
        ids(claim(h, q, limit=4)),
        [high_before, old_low, high_after, new_low],
        "claim order: a priority -1 task waiting more than 2 x PRIORITY_AGING_SECS seconds "
        "goes before a priority 1 task enqueued since, not before one enqueued earlier",
    )


@check()
def check_delayed_task_ages_from_its_run_time(h: Harness) -> None:
    step, q = priority_aging_secs(), fresh_queue()
    plain = enqueue(h, q)
    delayed = enqueue(h, q, priority=1, delay=step / 2)
    h.advance(step)
    expect_eq(
        ids(claim(h, q, limit=2)),
        [delayed, plain],
        "claim order once a priority 1 task delayed by half a point's worth is due: it ranks "
        "a point's worth before its run time, so before a priority 0 task enqueued with it",
    )


@check()
def check_lapsed_lease_keeps_its_rank(h: Harness) -> None:
    q = fresh_queue()
    lost = enqueue(h, q)
    claim_one(h, q)
    h.advance(1)
    later = enqueue(h, q)
    h.advance(TTL + 1)
    expect_eq(
        ids(claim(h, q, owner="w2", limit=2)),
        [lost, later],
        "claim order after a lease lapsed: the lost task keeps the rank it had when it became "
        "runnable, ahead of a task enqueued after it",
    )


@check()
def check_retry_ranks_from_its_new_ready_time(h: Harness) -> None:
    step, q = priority_aging_secs(), fresh_queue()
    retried = enqueue(h, q, priority=1)
    waiting = enqueue(h, q)
    lease = claim_one(h, q).lease
    h.advance(step + 10)
    h.store.task_retry(lease, "boom", delay=0)
    expect_eq(
        ids(claim(h, q, limit=2)),
        [waiting, retried],
        "claim order after a retry: the retried task waits again from its retry, a point's "
        "worth ahead of it, behind a task waiting longer than that",
    )
