"""Checks of the enqueue: defaults, keys (idempotency and unique), delays, batches, bounds."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta, timezone
from functools import partial
from typing import Any

from rivet.conf import rivet_settings
from rivet.conformance.harness import (
    LONG_TTL,
    Harness,
    check,
    claim,
    claim_one,
    count_all,
    enqueue,
    expect,
    expect_eq,
    expect_raises,
    fresh_queue,
    get,
    ids,
    in_threads,
)
from rivet.errors import IdempotencyMismatch, InvalidInput, PayloadTooLarge
from rivet.validation import build_spec


class _Rollback(Exception):
    """Raised inside the caller's transaction to roll it back."""


@check()
def check_enqueue_reads_back_pending(h: Harness) -> None:
    q = fresh_queue()
    result = h.store.task_enqueue(
        build_spec(queue=q, kind="cf.new", payload={"x": 1}, priority=4, max_attempts=7)
    )
    expect(isinstance(result.task_id, int), f"task_id must be an int, got {result.task_id!r}")
    expect_eq(result.duplicate, False, "duplicate flag of a first enqueue")
    row = get(h, result.task_id)
    expect_eq((row.queue, row.kind, row.payload), (q, "cf.new", {"x": 1}), "queue/kind/payload")
    expect_eq((row.state, row.attempts, row.lease_epoch), ("pending", 0, 0), "fresh task state")
    expect_eq((row.priority, row.max_attempts), (4, 7), "priority/max_attempts")
    expect_eq((row.lease_owner, row.last_error, row.result), (None, "", None), "lease/error")
    expect_eq((row.idem_key, row.unique_key), (None, None), "keys not given")
    expect_eq(row.updated_at, row.created_at, "updated_at of a fresh task")
    expect_eq(row.visible_at, row.created_at, "visible_at of an undelayed task")


@check()
def check_payload_round_trips(h: Harness) -> None:
    q = fresh_queue()
    payloads = [None, 0, "text", [1, "a", None], {"n": {"l": [1.5, True]}, "s": "ünï ✓"}]
    task_ids = [enqueue(h, q, payload=p) for p in payloads]
    stored = [get(h, task_id).payload for task_id in task_ids]
    expect_eq(stored, payloads, "payloads read back by task_get")
    leased = claim(h, q, limit=len(payloads))
    expect_eq(ids(leased), task_ids, "claim order of equal tasks (id order)")
    expect_eq([c.payload for c in leased], payloads, "payloads handed out by claim")


@check()
def check_delayed_task_waits(h: Harness) -> None:
    q = fresh_queue()
    task_id = enqueue(h, q, delay=60)
    expect_eq(claim(h, q), [], "claim of a task delayed 60s, right away")
    stats = h.store.queue_stats(q)
    expect_eq((stats.ready, stats.delayed, stats.leased), (0, 1, 0), "stats of a delayed task")
    h.advance(30)
    expect_eq(claim(h, q), [], "claim of a task delayed 60s, after 30s")
    h.advance(31)
    expect_eq(claim_one(h, q).task_id, task_id, "claim of a task delayed 60s, after 61s")


@check()
def check_run_at_schedules_the_task(h: Harness) -> None:
    q = fresh_queue()
    now = get(h, enqueue(h, q, kind="cf.probe", delay=3600)).created_at  # the store's clock
    east = timezone(timedelta(hours=5))
    due = enqueue(h, q, run_at=(now + timedelta(seconds=60)).astimezone(east))
    overdue = enqueue(h, q, run_at=(now - timedelta(seconds=60)).astimezone(east))
    ready = enqueue(h, q)
    expect_eq(get(h, due).visible_at, now + timedelta(seconds=60), "visible_at from run_at")
    leased = claim(h, q, ttl=LONG_TTL)
    expect_eq(ids(leased), [overdue, ready], "claim with tasks 60s overdue, ready and due")
    h.advance(61)
    expect_eq(ids(claim(h, q)), [due], "claim once run_at has passed")


@check()
def check_idempotent_enqueue_returns_existing(h: Harness) -> None:
    q = fresh_queue()
    key = f"{q}:pay-1"
    spec = build_spec(queue=q, kind="cf.pay", payload={"amount": 100}, idem_key=key)
    first = h.store.task_enqueue(spec)
    again = h.store.task_enqueue(spec)
    expect_eq((again.task_id, again.duplicate), (first.task_id, True), "repeat enqueue of a key")
    expect_eq(count_all(h, q), 1, "tasks after a repeated key")
    reordered = build_spec(queue=q, kind="cf.pay", payload={"b": [1], "a": 2}, idem_key=f"{key}b")
    first_b = h.store.task_enqueue(reordered).task_id
    same = build_spec(queue=q, kind="cf.pay", payload={"a": 2, "b": [1]}, idem_key=f"{key}b")
    expect_eq(h.store.task_enqueue(same).task_id, first_b, "repeat with payload keys reordered")
    h.store.task_ack(claim_one(h, q).lease, "paid")
    later = h.store.task_enqueue(spec)
    expect_eq((later.task_id, later.duplicate), (first.task_id, True), "repeat after done")
    expect_eq(get(h, first.task_id).state, "done", "state of the done task after a repeat")


@check()
def check_idempotency_mismatch_is_refused(h: Harness) -> None:
    q, other_q = fresh_queue(), fresh_queue()
    key = f"{q}:order-9"
    task_id = enqueue(h, q, kind="cf.pay", payload={"amount": 100}, idem_key=key)
    variants: list[dict[str, Any]] = [
        {"queue": q, "kind": "cf.pay", "payload": {"amount": 999}},
        {"queue": q, "kind": "cf.refund", "payload": {"amount": 100}},
        {"queue": other_q, "kind": "cf.pay", "payload": {"amount": 100}},
    ]
    for fields in variants:
        spec = build_spec(idem_key=key, **fields)
        exc = expect_raises(IdempotencyMismatch, partial(h.store.task_enqueue, spec), "reuse")
        expect_eq((exc.idem_key, exc.existing_id), (key, task_id), "mismatch names key and task")
        expect(key in str(exc), f"mismatch message should name the key: {exc}")
    expect_eq((count_all(h, q), count_all(h, other_q)), (1, 0), "tasks after mismatches")
    expect_eq(get(h, task_id).payload, {"amount": 100}, "payload of the original task")


@check("concurrent")
def check_concurrent_producers_share_one_key(h: Harness) -> None:
    q, producers = fresh_queue(), 8
    spec = build_spec(queue=q, kind="cf.pay", payload={"amount": 5}, idem_key=f"{q}:race")
    results = in_threads(h, producers, lambda _: h.store.task_enqueue(spec))
    expect_eq(len({r.task_id for r in results}), 1, f"task ids from {producers} producers")
    fresh = [r for r in results if not r.duplicate]
    expect_eq(len(fresh), 1, "producers told they created the task (the rest are duplicates)")
    expect_eq(count_all(h, q), 1, "tasks written by concurrent producers of one key")


@check()
def check_unique_job_while_pending(h: Harness) -> None:
    q = fresh_queue()
    unique = f"{q}:nightly"
    first = h.store.task_enqueue(build_spec(queue=q, kind="cf.report", unique_key=unique))
    again = h.store.task_enqueue(
        build_spec(queue=q, kind="cf.report", payload={"v": 2}, unique_key=unique)
    )
    expect_eq((again.task_id, again.duplicate), (first.task_id, True), "unique job while pending")
    leased = claim_one(h, q, ttl=LONG_TTL)
    while_leased = enqueue(h, q, kind="cf.report", unique_key=unique)
    expect_eq(while_leased, first.task_id, "unique job while its task is leased")
    other_kind = enqueue(h, q, kind="cf.other", unique_key=unique)
    expect(other_kind != first.task_id, "one unique_key under another kind is another job")
    h.store.task_ack(leased.lease)
    after = h.store.task_enqueue(build_spec(queue=q, kind="cf.report", unique_key=unique))
    expect_eq(after.duplicate, False, "unique job enqueued after the first one is done")
    expect(after.task_id != first.task_id, "a unique job after done must be a new task")


@check()
def check_bulk_enqueue(h: Harness) -> None:
    q = fresh_queue()
    old = enqueue(h, q, payload={"n": 0}, idem_key=f"{q}:0")
    specs = [
        build_spec(queue=q, kind="cf.noop", payload={"n": 1}),
        build_spec(queue=q, kind="cf.noop", payload={"n": 2}, idem_key=f"{q}:2"),
        build_spec(queue=q, kind="cf.noop", payload={"n": 0}, idem_key=f"{q}:0"),
        build_spec(queue=q, kind="cf.noop", payload={"n": 2}, idem_key=f"{q}:2"),
    ]
    results = h.store.task_enqueue_many(specs)
    flags = [r.duplicate for r in results]
    expect_eq(flags, [False, False, True, True], "duplicate flags of a bulk enqueue, in order")
    expect_eq(results[2].task_id, old, "bulk entry for a key used before")
    expect_eq(results[3].task_id, results[1].task_id, "bulk entry repeating a key of the batch")
    expect_eq(len({results[0].task_id, results[1].task_id, old}), 3, "ids of new bulk tasks")
    expect_eq(count_all(h, q), 3, "tasks after the bulk enqueue")
    expect_eq(get(h, results[1].task_id).payload, {"n": 2}, "payload of a bulk task")
    expect_eq(h.store.task_enqueue_many([]), [], "bulk enqueue of no tasks")


@check()
def check_bulk_enqueue_is_all_or_nothing(h: Harness) -> None:
    q = fresh_queue()
    enqueue(h, q, payload={"n": 0}, idem_key=f"{q}:0")
    specs = [
        build_spec(queue=q, kind="cf.noop", payload={"n": 1}, idem_key=f"{q}:1"),
        build_spec(queue=q, kind="cf.noop", payload={"n": 2}),
        build_spec(queue=q, kind="cf.noop", payload={"n": "other"}, idem_key=f"{q}:0"),
    ]
    expect_raises(IdempotencyMismatch, lambda: h.store.task_enqueue_many(specs), "bulk mismatch")
    expect_eq(count_all(h, q), 1, "tasks after a bulk enqueue that failed part way")
    fresh = h.store.task_enqueue(specs[0])
    expect_eq(fresh.duplicate, False, "key of a rolled-back bulk entry is free again")


@check()
def check_bounded_inputs_are_refused(h: Harness) -> None:
    before, q, limits = count_all(h), fresh_queue(), rivet_settings
    bad: list[tuple[str, type[Exception], dict[str, Any]]] = [
        ("queue name too long", InvalidInput, {"queue": "q" * (limits.MAX_NAME_LENGTH + 1)}),
        ("queue name with spaces", InvalidInput, {"queue": "bad queue!"}),
        ("kind name empty", InvalidInput, {"kind": ""}),
        ("payload not JSON", InvalidInput, {"payload": {"when": object()}}),
        ("payload over the limit", PayloadTooLarge, {"payload": "x" * limits.MAX_PAYLOAD_BYTES}),
        ("max_attempts 0", InvalidInput, {"max_attempts": 0}),
        ("idem_key too long", InvalidInput, {"idem_key": "k" * (limits.MAX_IDEM_KEY_LENGTH + 1)}),
        ("negative delay", InvalidInput, {"delay": -1}),
    ]
    for what, exc_type, fields in bad:
        kwargs = {"queue": q, "kind": "cf.noop", **fields}
        exc = expect_raises(exc_type, partial(enqueue, h, **kwargs), what)
        expect(str(exc).strip() != "", f"{what}: the error needs a message")
    expect_eq(count_all(h), before, "tasks written by refused enqueues")


@check("atomic")
def check_enqueue_joins_the_callers_transaction(h: Harness) -> None:
    assert h.atomic is not None  # @check("atomic") runs only where the harness has it
    q = fresh_queue()
    try:
        with h.atomic():
            doomed = enqueue(h, q, idem_key=f"{q}:doomed")
            expect(h.store.task_get(doomed) is not None, "task visible inside its transaction")
            raise _Rollback
    except _Rollback:
        pass
    expect_eq(h.store.task_get(doomed), None, "task enqueued in a rolled-back transaction")
    expect_eq(count_all(h, q), 0, "tasks after the rollback")
    with h.atomic():
        kept = enqueue(h, q, idem_key=f"{q}:doomed")
    expect_eq(get(h, kept).state, "pending", "task enqueued in a committed transaction")
    expect_eq(ids(claim(h, q)), [kept], "claim of the committed task")


@check()
def check_trace_context_travels_to_the_claim(h: Harness) -> None:
    q = fresh_queue()
    parent = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    traced = {**parent, "tracestate": "congo=t61rcWkgMzE"}
    one = replace(build_spec(queue=q, kind="cf.noop", payload={"n": 0}), trace_context=traced)
    many = [
        replace(build_spec(queue=q, kind="cf.noop", payload={"n": 1}), trace_context=parent),
        build_spec(queue=q, kind="cf.noop", payload={"n": 2}),
    ]
    first = h.store.task_enqueue(one).task_id
    h.store.task_enqueue_many(many)
    expect_eq(get(h, first).trace_context, traced, "trace context read back by task_get")
    expect_eq(get(h, first).payload, {"n": 0}, "payload beside a trace context")
    leased = {c.payload["n"]: c.trace_context for c in claim(h, q, limit=3)}
    expect_eq(leased, {0: traced, 1: parent, 2: None}, "trace contexts the claim hands back")
