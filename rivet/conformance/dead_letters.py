"""Checks of the dead-letter queue (requeue, sweep, purge) and of the read operations."""

from __future__ import annotations

from rivet.conformance.harness import (
    LONG_TTL,
    TTL,
    Harness,
    bury,
    check,
    claim_one,
    enqueue,
    expect,
    expect_eq,
    fresh_queue,
    get,
    ids,
)
from rivet.values import Lease, Settled


@check()
def check_requeue_revives_a_dead_task(h: Harness) -> None:
    q = fresh_queue()
    key = f"{q}:requeue"
    task_id = enqueue(h, q, payload={"p": 1}, idem_key=key, max_attempts=1)
    lost = claim_one(h, q)
    expect_eq(h.store.task_bury(lost.lease, "poison"), Settled.BURIED, "bury of the only attempt")
    expect_eq(h.store.dead_requeue(fresh_queue(), task_id), False, "requeue under another queue")
    expect_eq(h.store.dead_requeue(q, task_id), True, "requeue of a dead task")
    row = get(h, task_id)
    expect_eq((row.state, row.attempts, row.idem_key), ("pending", 0, key), "requeued task")
    expect(row.lease_epoch >= lost.epoch, f"requeue must not lower the epoch: {row.lease_epoch}")
    again = claim_one(h, q)
    expect_eq((again.task_id, again.attempt), (task_id, 1), "claim of the requeued task")
    expect(again.epoch > lost.epoch, f"epoch after requeue {again.epoch} <= {lost.epoch}")
    expect_eq(h.store.task_ack(lost.lease), Settled.FENCED, "ack under the pre-requeue lease")
    repeat = enqueue(h, q, payload={"p": 1}, idem_key=key)
    expect_eq(repeat, task_id, "the requeued task keeps its idempotency key")


@check()
def check_requeue_fences_the_earlier_life(h: Harness) -> None:
    """A requeue starts a new life under a new epoch: a write of the earlier life's lease that
    arrives after the requeue and before any new claim (a worker stopped while its task was
    buried, say by a cancel, and requeued) is refused, so the new life is not finished, or
    held, by a decision of the old one."""
    q = fresh_queue()
    task_id = enqueue(h, q, max_attempts=1)
    lost = claim_one(h, q)
    expect_eq(h.store.task_bury(lost.lease, "poison"), Settled.BURIED, "bury of the only attempt")
    expect_eq(h.store.dead_requeue(q, task_id), True, "requeue of a dead task")
    row = get(h, task_id)
    expect(row.lease_epoch > lost.epoch, f"requeue must raise the epoch: {row.lease_epoch}")
    held = h.store.lease_extend([lost.lease], TTL)
    expect_eq(set(held), set(), "heartbeat under the pre-requeue lease")
    expect_eq(h.store.task_ack(lost.lease), Settled.FENCED, "ack under the pre-requeue lease")
    expect_eq(
        h.store.task_retry(lost.lease, "late", 0.0), Settled.FENCED, "retry of the earlier life"
    )
    expect_eq((get(h, task_id).state, get(h, task_id).attempts), ("pending", 0), "new life")
    again = claim_one(h, q)
    expect_eq((again.task_id, again.attempt), (task_id, 1), "claim of the requeued task")
    expect(again.epoch > row.lease_epoch - 1, f"epoch after requeue {again.epoch}")


@check()
def check_requeue_refuses_live_tasks(h: Harness) -> None:
    q = fresh_queue()
    done_id = enqueue(h, q)
    h.store.task_ack(claim_one(h, q).lease)
    pending_id = enqueue(h, q)
    leased_id = enqueue(h, q, priority=1)
    claim_one(h, q)
    for task_id, state in [(pending_id, "pending"), (leased_id, "pending"), (done_id, "done")]:
        before = get(h, task_id)
        expect_eq(h.store.dead_requeue(q, task_id), False, f"requeue of a {state} task")
        expect_eq(get(h, task_id), before, f"{state} task after a refused requeue")
    expect_eq(h.store.dead_requeue(q, 10**12), False, "requeue of a task that does not exist")


@check()
def check_requeue_respects_unique_jobs(h: Harness) -> None:
    q = fresh_queue()
    unique = f"{q}:u"
    dead_id = bury(h, q, kind="cf.unique", unique_key=unique)
    live_id = enqueue(h, q, kind="cf.unique", unique_key=unique)
    expect(live_id != dead_id, "a unique job whose task died may be enqueued again")
    expect_eq(h.store.dead_requeue(q, dead_id), False, "requeue while its unique key is pending")
    expect_eq(get(h, dead_id).state, "dead", "state after the refused requeue")


@check()
def check_sweep_buries_only_lapsed_exhausted_tasks(h: Harness) -> None:
    q, other_q = fresh_queue(), fresh_queue()
    lapsed = enqueue(h, q, max_attempts=1)
    spare = enqueue(h, q, max_attempts=2)
    held = enqueue(h, q, max_attempts=1)
    expect_eq(claim_one(h, q).task_id, lapsed, "first claim")
    expect_eq(claim_one(h, q).task_id, spare, "second claim")
    expect_eq(claim_one(h, q, ttl=LONG_TTL).task_id, held, "third claim")
    idle = enqueue(h, q, max_attempts=1)
    elsewhere = enqueue(h, other_q, max_attempts=1)
    claim_one(h, other_q)
    h.advance(TTL + 1)
    expect_eq(h.store.dead_sweep(q), 1, "tasks swept")
    row = get(h, lapsed)
    expect_eq(row.state, "dead", "state of the lapsed exhausted task")
    expect(
        row.last_error.endswith("max attempts exceeded (no ack, worker lost)"),
        f"last_error of a swept task: {row.last_error!r}",
    )
    states = [get(h, task_id).state for task_id in (spare, held, idle, elsewhere)]
    expect_eq(states, ["pending"] * 4, "states of spare, held, idle and other-queue tasks")


@check()
def check_purge_deletes_dead_and_releases_keys(h: Harness) -> None:
    q, other_q = fresh_queue(), fresh_queue()
    key = f"{q}:purge"
    dead_id = bury(h, q, payload={"v": 1}, idem_key=key)
    done_id = enqueue(h, q)
    h.store.task_ack(claim_one(h, q).lease)
    pending_id = enqueue(h, q)
    elsewhere = bury(h, other_q)
    expect_eq(h.store.dead_purge(q), 1, "tasks purged")
    expect_eq(h.store.task_get(dead_id), None, "the purged dead task")
    late = h.store.task_ack(Lease(task_id=dead_id, epoch=1))
    expect_eq(late, Settled.FENCED, "ack naming a purged task")
    states = [get(h, task_id).state for task_id in (done_id, pending_id, elsewhere)]
    expect_eq(states, ["done", "pending", "dead"], "tasks a purge must leave")
    reused = enqueue(h, q, payload={"v": 2}, idem_key=key)
    expect(reused != dead_id, "a purged key enqueues new work as a new task")
    expect_eq(get(h, reused).payload, {"v": 2}, "payload of the new task under a purged key")


@check()
def check_purge_older_than(h: Harness) -> None:
    q = fresh_queue()
    old = bury(h, q)
    h.advance(100)
    young = bury(h, q)
    expect_eq(h.store.dead_purge(q, older_than_secs=50), 1, "purge older than 50s")
    expect_eq(h.store.task_get(old), None, "the dead task buried 100s ago")
    expect_eq(get(h, young).state, "dead", "the dead task buried just now")
    h.advance(60)
    expect_eq(h.store.dead_purge(q, older_than_secs=50), 1, "purge after 60s more")


@check()
def check_purge_by_ids(h: Harness) -> None:
    q, other_q = fresh_queue(), fresh_queue()
    first, second, third = (bury(h, q) for _ in range(3))
    pending_id = enqueue(h, q)
    elsewhere = bury(h, other_q)
    purged = h.store.dead_purge(q, task_ids=[first, third, pending_id, elsewhere])
    expect_eq(purged, 2, "dead tasks of the queue purged by id")
    expect_eq([h.store.task_get(i) for i in (first, third)], [None, None], "the purged ids")
    states = [get(h, task_id).state for task_id in (second, pending_id, elsewhere)]
    expect_eq(states, ["dead", "pending", "dead"], "tasks a purge by id must leave")
    expect_eq(h.store.dead_purge(q, task_ids=[]), 0, "a purge of no ids")
    expect_eq(get(h, second).state, "dead", "a dead task after a purge of no ids")


@check()
def check_queue_stats_counts(h: Harness) -> None:
    q = fresh_queue()
    empty = h.store.queue_stats(q)
    expect_eq((empty.ready, empty.leased, empty.delayed, empty.done, empty.dead), (0,) * 5, "new")
    expect_eq((empty.fenced, empty.oldest_ready_age_secs), (0, None), "fenced/age, empty queue")
    bury(h, q)
    done_id = enqueue(h, q)
    h.store.task_ack(claim_one(h, q).lease)
    enqueue(h, q)
    h.store.task_retry(claim_one(h, q).lease, "try later", 60.0)
    enqueue(h, q)
    claim_one(h, q)
    enqueue(h, q, delay=60)
    enqueue(h, q)
    enqueue(h, q)
    h.store.task_ack(Lease(task_id=done_id, epoch=1))
    h.advance(10)
    stats = h.store.queue_stats(q)
    counts = (stats.ready, stats.leased, stats.delayed, stats.done, stats.dead, stats.fenced)
    expect_eq(counts, (2, 1, 2, 1, 1, 1), "(ready, leased, delayed, done, dead, fenced)")
    age = stats.oldest_ready_age_secs
    expect(age is not None and age >= 10, f"oldest ready age after 10s: {age!r}")
    expect_eq(stats.queue, q, "queue named by the stats")


@check()
def check_queue_overview_names_every_queue(h: Harness) -> None:
    dead_q, ready_q, empty_q = sorted(fresh_queue() for _ in range(3))
    enqueue(h, ready_q)
    bury(h, dead_q)
    listed = [stats.queue for stats in h.store.queue_overview()]
    expect(dead_q in listed and ready_q in listed, f"queues with tasks in the overview: {listed}")
    expect(empty_q not in listed, "a queue without tasks or fenced writes in the overview")
    asked = h.store.queue_overview([ready_q, empty_q, dead_q])
    expect_eq([s.queue for s in asked], [dead_q, ready_q, empty_q], "queues asked for, in order")
    counts = [(s.ready, s.dead, s.done, s.done_estimated) for s in asked]
    expect_eq(counts, [(0, 1, 0, False), (1, 0, 0, False), (0, 0, 0, False)], "their counts")


@check()
def check_task_list_filters_and_orders(h: Harness) -> None:
    q, other_q = fresh_queue(), fresh_queue()
    first = enqueue(h, q, priority=9)
    second, third = enqueue(h, q), enqueue(h, q)
    h.store.task_ack(claim_one(h, q).lease)
    dead_id = bury(h, other_q)
    expect_eq(ids(h.store.task_list(queue=q)), [first, second, third], "list of a queue")
    expect_eq(ids(h.store.task_list(queue=q, limit=2)), [first, second], "list with limit 2")
    expect_eq(ids(h.store.task_list(queue=q, state="done")), [first], "done tasks of a queue")
    expect_eq(ids(h.store.task_list(queue=q, state="pending")), [second, third], "pending ones")
    expect_eq(ids(h.store.dead_list(other_q)), [dead_id], "dead_list of the other queue")
    expect_eq(h.store.task_get(10**12), None, "task_get of an id that does not exist")
