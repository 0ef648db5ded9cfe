"""Checks of retention: only old done tasks and old fenced-write records are pruned, in batches."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rivet.conformance.harness import (
    Harness,
    bury,
    check,
    claim_one,
    count_all,
    enqueue,
    expect,
    expect_eq,
    fresh_queue,
    get,
)
from rivet.validation import build_spec
from rivet.values import Lease, Pruned

#: The retention the checks prune with; tasks are made "old" by moving the clock past it.
RETENTION = 3600.0


def _done(h: Harness, queue: str, **fields: Any) -> int:
    """Enqueue a task into an otherwise idle queue, claim it and ack it; return its id."""
    task_id = enqueue(h, queue, **fields)
    leased = claim_one(h, queue)
    expect_eq(leased.task_id, task_id, "the task claimed to be acked")
    h.store.task_ack(leased.lease, "ok")
    return task_id


@check()
def check_prune_deletes_only_done_tasks_past_the_retention(h: Harness) -> None:
    q, other = fresh_queue(), fresh_queue()
    old_done = _done(h, q, idem_key=f"{q}:old")
    old_dead = bury(h, q)
    other_done = _done(h, other)
    waiting = enqueue(h, q, delay=10 * RETENTION)
    h.advance(RETENTION + 60)
    new_done = _done(h, q)
    leased = enqueue(h, q)
    claim_one(h, q)
    expect_eq(h.store.prunable(RETENTION, queue=q), Pruned(tasks=1), "prunable in one queue")
    expect_eq(h.store.task_prune(RETENTION, 100, queue=q), 1, "done tasks pruned from one queue")
    expect_eq(h.store.task_get(old_done), None, "the old done task after the prune")
    kept = [old_dead, waiting, new_done, leased]
    expect_eq([get(h, i).id for i in kept], kept, "dead, pending, leased, recent done tasks")
    expect_eq(get(h, other_done).state, "done", "another queue's old done task")
    expect(_prune_all(h.store.task_prune) >= 1, "a prune of every queue takes the other's")
    expect_eq(h.store.task_get(other_done), None, "another queue's task after a prune of all")
    again = h.store.task_enqueue(build_spec(queue=q, kind="cf.noop", idem_key=f"{q}:old"))
    expect_eq(again.duplicate, False, "the key of a pruned task is released (a new task)")
    expect(again.task_id != old_done, "a pruned task's key names a new task")


def _prune_all(prune: Callable[..., int]) -> int:
    """Prune every queue in batches until a batch comes back short; return the total."""
    total = 0
    while (pruned := prune(RETENTION, 50)) > 0:
        total += pruned
    return total


@check()
def check_prune_takes_at_most_limit_rows_per_call(h: Harness) -> None:
    q = fresh_queue()
    for _ in range(5):
        _done(h, q)
    h.advance(RETENTION + 1)
    counts = [h.store.task_prune(RETENTION, 2, queue=q) for _ in range(4)]
    expect_eq(counts, [2, 2, 1, 0], "done tasks pruned by calls of limit 2")
    expect_eq(count_all(h, q), 0, "tasks left after pruning them all")
    expect_eq(h.store.prunable(RETENTION, queue=q), Pruned(), "prunable once all are pruned")


@check()
def check_prune_deletes_old_fenced_records(h: Harness) -> None:
    q, other = fresh_queue(), fresh_queue()
    stale = Lease(task_id=enqueue(h, q), epoch=0, owner="gone")
    h.store.task_fence(stale, "ack")
    h.store.task_fence(Lease(task_id=enqueue(h, other), epoch=0, owner="gone"), "fail")
    h.advance(RETENTION + 60)
    h.store.task_fence(stale, "fail")
    expect_eq(h.store.prunable(RETENTION, queue=q).fenced, 1, "prunable fenced records")
    expect_eq(h.store.fenced_prune(RETENTION, 100, queue=q), 1, "fenced records pruned")
    expect_eq(h.store.fenced_count(q), 1, "the recent fenced record of the queue is kept")
    expect_eq(h.store.fenced_count(q, op="fail"), 1, "the kept record is the recent one")
    expect_eq(h.store.fenced_count(other), 1, "another queue's record, pruned by queue")
    expect(_prune_all(h.store.fenced_prune) >= 1, "a prune of every queue's fenced records")
    expect_eq(h.store.fenced_count(other), 0, "another queue's record after a prune of all")
    expect_eq(h.store.fenced_count(q), 1, "the recent record after a prune of all")
    expect_eq(h.store.task_prune(RETENTION, 100, queue=q), 0, "no done task: nothing pruned")
