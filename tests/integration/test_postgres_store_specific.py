"""PostgresStore behaviours the generic conformance suite does not reach.

LISTEN/NOTIFY wake-ups, enqueues that live and die with the caller's transaction, driver
errors translated to StoreError, the claim's use of the partial index, bulk enqueue, and
timestamps taken from the server's clock, and the claim floor.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.core.exceptions import SynchronousOnlyOperation
from django.db import DatabaseError, connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from bench.bigclaim import RANK_INDEX, claim_params, nodes
from rivet.decisions import failed, succeeded
from rivet.errors import IdempotencyMismatch, StoreError, StoreUnavailable
from rivet.models import FencedWrite
from rivet.stores.bulk import BULK_CHUNK
from rivet.stores.floor import FRONT, ClaimFloors
from rivet.stores.postgres import (
    DIRECT_ENQUEUE,
    QUERIES,
    SETTLE_COLUMNS,
    PostgresStore,
    end_worker_session,
    settle_claim_text,
)
from rivet.values import Ack, EnqueueResult, Lease, Settled, TaskSpec
from tests.integration.pg_kit import a_waiting_worker, on_other_connection, spec

LONG_WAIT = 60.0  # an upper bound for a wake-up that must come; never reached when it works
SHORT_WAIT = 0.3  # how long to wait for a wake-up that must not come


class Rollback(Exception):
    """Raised inside a transaction.atomic() block to roll it back."""


@pytest.fixture
def store() -> Iterator[PostgresStore]:
    store = PostgresStore(using="default")
    yield store
    store.close()


@pytest.fixture
def queue() -> str:
    return f"pg-{uuid.uuid4().hex[:12]}"


def shift_back(secs: float, store: PostgresStore | None = None) -> None:
    """Move every task timestamp ``secs`` earlier: the server's clock, seen from the rows (and
    from ``store``'s claim floors)."""
    if store is not None:
        store.floors.elapse(secs)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE rivet_task SET visible_at = visible_at - make_interval(secs => %s), "
            "created_at = created_at - make_interval(secs => %s), "
            "updated_at = updated_at - make_interval(secs => %s), "
            "claim_rank = claim_rank - make_interval(secs => %s)",
            [secs, secs, secs, secs],
        )


def server_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


# -- LISTEN/NOTIFY ---------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _a_worker_waits(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test here runs while a worker's session waits on its queue, as the LISTEN/NOTIFY
    tests need: enqueues notify only then (tests/integration/test_wake_gate.py)."""
    if "queue" not in request.fixturenames:
        yield
        return
    queue = request.getfixturevalue("queue")
    with a_waiting_worker([queue]):
        yield


@pytest.mark.django_db(transaction=True)
def test_enqueue_wakes_a_listening_worker(store: PostgresStore, queue: str) -> None:
    assert store.wait_for_work([queue], 0) is False  # starts listening; nothing sent yet
    store.task_enqueue(spec(queue))
    assert store.wait_for_work(["elsewhere", queue], LONG_WAIT) is True


@pytest.mark.django_db(transaction=True)
def test_a_blocked_wait_is_woken_by_an_enqueue(store: PostgresStore, queue: str) -> None:
    assert store.wait_for_work([queue], 0) is False
    woken: list[bool] = []
    waiter = threading.Thread(
        target=lambda: woken.append(store.wait_for_work([queue], LONG_WAIT)), daemon=True
    )
    waiter.start()
    store.task_enqueue(spec(queue))
    waiter.join(timeout=LONG_WAIT * 2)
    assert woken == [True]


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_another_queue_does_not_wake(store: PostgresStore, queue: str) -> None:
    assert store.wait_for_work([queue], 0) is False
    store.task_enqueue(spec(f"{queue}-other"))
    assert store.wait_for_work([queue], SHORT_WAIT) is False


@pytest.mark.django_db(transaction=True)
def test_wake_up_is_sent_on_commit_only(store: PostgresStore, queue: str) -> None:
    assert store.wait_for_work([queue], 0) is False
    with pytest.raises(Rollback), transaction.atomic():
        store.task_enqueue(spec(queue))
        raise Rollback
    assert store.wait_for_work([queue], SHORT_WAIT) is False, "woken by a rolled-back enqueue"
    with transaction.atomic():
        store.task_enqueue(spec(queue))
        assert store.wait_for_work([queue], SHORT_WAIT) is False, "woken before the commit"
    assert store.wait_for_work([queue], LONG_WAIT) is True


@pytest.mark.django_db(transaction=True)
def test_every_way_a_task_becomes_ready_wakes_listeners(store: PostgresStore, queue: str) -> None:
    assert store.wait_for_work([queue], 0) is False
    store.task_enqueue_many([spec(queue, max_attempts=3), spec(queue, max_attempts=1)])
    assert store.wait_for_work([queue], LONG_WAIT) is True, "bulk enqueue"
    retried, buried = store.task_claim(queues=[queue], owner="w", limit=2, lease_ttl=30).claimed
    assert store.task_settle([failed(buried, "poison", 0)]) == [Settled.BURIED]
    assert store.wait_for_work([queue], SHORT_WAIT) is False, "woken by a burial"
    assert store.task_settle([failed(retried, "later", 60)]) == [Settled.RETRIED]
    assert store.wait_for_work([queue], SHORT_WAIT) is False, "woken by a delayed retry"
    shift_back(61, store)
    again = store.task_claim(queues=[queue], owner="w", limit=1, lease_ttl=30).claimed[0]
    assert store.task_settle([failed(again, "at once", 0)]) == [Settled.RETRIED]
    assert store.wait_for_work([queue], LONG_WAIT) is True, "retry due now"
    assert store.dead_requeue(queue, buried.task_id) is True
    assert store.wait_for_work([queue], LONG_WAIT) is True, "requeue"


@pytest.mark.django_db(transaction=True)
def test_listener_reconnects_after_losing_its_connection(store: PostgresStore, queue: str) -> None:
    assert store.wait_for_work([queue], 0) is False
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND query LIKE 'LISTEN%%'"
        )
        assert cursor.fetchall() == [(True,)], "the listening connection was not found"
    assert store.wait_for_work([queue], SHORT_WAIT) is False  # fails, falls back to polling
    assert store.wait_for_work([queue], 0) is False  # listens again on a new connection
    store.task_enqueue(spec(queue))
    assert store.wait_for_work([queue], LONG_WAIT) is True


# -- the caller's transaction ----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_enqueue_commits_and_rolls_back_with_the_business_row(
    store: PostgresStore, queue: str
) -> None:
    with pytest.raises(Rollback), transaction.atomic():
        Group.objects.create(name=f"{queue}-doomed")
        doomed = store.task_enqueue(spec(queue, idem_key=f"{queue}:order")).task_id
        raise Rollback
    assert store.task_get(doomed) is None
    assert not Group.objects.filter(name=f"{queue}-doomed").exists()

    with transaction.atomic():
        Group.objects.create(name=f"{queue}-kept")
        kept = store.task_enqueue(spec(queue, idem_key=f"{queue}:order")).task_id
        assert on_other_connection(lambda: store.task_get(kept)) is None, "seen before commit"
    assert on_other_connection(lambda: store.task_get(kept)).state == "pending"
    assert Group.objects.filter(name=f"{queue}-kept").exists()


@pytest.mark.django_db(transaction=True)
def test_refused_enqueue_leaves_the_callers_transaction_usable(
    store: PostgresStore, queue: str
) -> None:
    key = f"{queue}:pay"
    with transaction.atomic():
        first = store.task_enqueue(spec(queue, payload={"amount": 1}, idem_key=key)).task_id
        with pytest.raises(IdempotencyMismatch):
            store.task_enqueue(spec(queue, payload={"amount": 2}, idem_key=key))
        with pytest.raises(StoreError):
            # Bypass build_spec (which refuses NUL) to reach the driver error itself.
            store.task_enqueue(TaskSpec(queue=queue, kind="pg.noop", payload="nul \x00 in jsonb"))
        Group.objects.create(name=queue)
        second = store.task_enqueue(spec(queue)).task_id
    assert [t.id for t in store.task_list(queue=queue)] == [first, second]
    assert Group.objects.filter(name=queue).exists()


@pytest.mark.django_db(transaction=True)
def test_bulk_enqueue_rolls_back_with_the_callers_transaction(
    store: PostgresStore, queue: str
) -> None:
    with pytest.raises(Rollback), transaction.atomic():
        store.task_enqueue_many([spec(queue, idem_key=f"{queue}:{n}") for n in range(3)])
        raise Rollback
    assert store.task_list(queue=queue) == []
    again = store.task_enqueue_many([spec(queue, idem_key=f"{queue}:{n}") for n in range(3)])
    assert [r.duplicate for r in again] == [False, False, False]


# -- driver errors ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_driver_errors_become_store_errors(store: PostgresStore, queue: str) -> None:
    with pytest.raises(StoreError) as enqueue_error:
        store.task_enqueue(TaskSpec(queue=queue, kind="pg.noop", payload={"text": "nul \x00"}))
    assert isinstance(enqueue_error.value.__cause__, DatabaseError)
    assert "task_enqueue" in str(enqueue_error.value)

    store.task_enqueue(spec(queue))
    with pytest.raises(StoreError) as claim_error:
        store.task_claim(queues=[queue], owner="w", limit=1, lease_ttl=1e300)
    assert isinstance(claim_error.value.__cause__, DatabaseError)

    leased = store.task_claim(queues=[queue], owner="w", limit=1, lease_ttl=30).claimed
    assert len(leased) == 1, "the store works again after a driver error"


# -- a single enqueue outside a transaction --------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_single_enqueue_outside_a_transaction_makes_no_django_cursor(
    store: PostgresStore, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[Any] = []
    real = connection.create_cursor
    monkeypatch.setattr(connection, "create_cursor", lambda name=None: made.append(1) or real(name))
    key = f"{queue}:k"
    first = store.task_enqueue(spec(queue, idem_key=key, payload={"n": 1}))
    assert made == [], "the insert went straight to the connection"
    again = store.task_enqueue(spec(queue, idem_key=key, payload={"n": 1}))
    assert again == EnqueueResult(task_id=first.task_id, duplicate=True)
    assert made == [1], "the key's read-back runs on a Django cursor"
    with pytest.raises(IdempotencyMismatch):
        store.task_enqueue(spec(queue, idem_key=key, payload={"n": 2}))
    assert [task.id for task in store.task_list(queue=queue)] == [first.task_id]


@pytest.mark.django_db(transaction=True)
def test_execute_wrappers_see_a_single_enqueue_with_its_django_cursor(
    store: PostgresStore, queue: str
) -> None:
    seen: list[tuple[str, Any]] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: dict) -> Any:
        seen.append((sql, context))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        task = store.task_enqueue(spec(queue))
    ((sql, context),) = seen
    assert "INSERT INTO rivet_task" in sql
    assert context["connection"] is connections["default"]
    assert (
        context["cursor"].db is connections["default"]
    )  # Django's CursorWrapper, as its own execute gives
    assert store.task_get(task.task_id) is not None


def terminate_this_backend() -> None:
    """End the server process of the test's connection, from another connection."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()

    def terminate() -> None:
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])

    on_other_connection(terminate)


@pytest.mark.django_db(transaction=True)
def test_a_single_enqueue_on_a_dropped_connection_fails_once_then_reconnects(
    store: PostgresStore, queue: str
) -> None:
    store.task_enqueue(spec(queue))
    terminate_this_backend()
    with pytest.raises(StoreUnavailable, match="task_enqueue"):
        store.task_enqueue(spec(queue))
    assert connection.connection is None, "Django was told to reconnect"
    store.task_enqueue(spec(queue))
    assert len(store.task_list(queue=queue)) == 2


@pytest.mark.django_db(transaction=True)
def test_a_single_enqueue_health_checks_its_connection_first_as_djangos_cursor_does(
    store: PostgresStore, queue: str
) -> None:
    """CONN_HEALTH_CHECKS: the first statement of a request checks the connection and opens a
    new one if it is gone. The single enqueue makes no Django cursor, so it asks the same."""
    store.task_enqueue(spec(queue))
    terminate_this_backend()
    connection.health_check_enabled = True  # what CONN_HEALTH_CHECKS gives at connect
    connection.health_check_done = False  # what a new request (close_old_connections) does
    try:
        store.task_enqueue(spec(queue))  # checked, reconnected: no error
    finally:
        connection.health_check_enabled = False
    assert len(store.task_list(queue=queue)) == 2


@pytest.mark.django_db(transaction=True)
def test_a_single_enqueue_inside_an_event_loop_is_refused_as_djangos_cursor_is(
    store: PostgresStore, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Connected already, the enqueue still asks Django's async-safety check: in a running
    event loop it raises SynchronousOnlyOperation unless DJANGO_ALLOW_ASYNC_UNSAFE is set."""

    async def in_a_loop() -> None:
        monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        try:
            store.task_enqueue(spec(queue))  # allowed: connects the loop's own connection
            assert connections["default"].connection is not None
            monkeypatch.delenv("DJANGO_ALLOW_ASYNC_UNSAFE")
            with pytest.raises(SynchronousOnlyOperation):
                store.task_enqueue(spec(queue))  # connected, and refused all the same
        finally:
            monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
            connections["default"].close()

    asyncio.run(in_a_loop())
    assert len(store.task_list(queue=queue)) == 1


#: The single enqueue's statement name on the server (rivet_enqueue_ and its text's hash).
DIRECT = DIRECT_ENQUEUE.name.decode()


def prepared_statements() -> dict[str, str]:
    """The statements Django's connection has prepared on the server, by name."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, statement FROM pg_prepared_statements")
        return dict(cursor.fetchall())


@pytest.mark.django_db(transaction=True)
def test_a_single_enqueue_goes_through_libpq_under_rivets_own_statement_name(
    store: PostgresStore, queue: str
) -> None:
    first = store.task_enqueue(spec(queue, payload={"n": 1}, priority=3))
    before = prepared_statements()
    assert "INSERT INTO rivet_task" in before[DIRECT]
    assert not any("rivet_task" in text for name, text in before.items() if name.startswith("_pg3"))
    second = store.task_enqueue(
        spec(queue, payload={"n": 2}, run_at=datetime(2030, 1, 2, tzinfo=UTC))
    )
    assert prepared_statements() == before, "prepared once per connection"
    tasks = {task.id: task for task in store.task_list(queue=queue)}
    assert tasks[first.task_id].payload == {"n": 1} and tasks[first.task_id].priority == 3
    assert tasks[second.task_id].visible_at == datetime(2030, 1, 2, tzinfo=UTC)


@pytest.mark.django_db(transaction=True)
def test_a_single_enqueue_after_discard_all_prepares_its_statement_again(
    store: PostgresStore, queue: str
) -> None:
    """A pool that resets its sessions (DISCARD ALL) takes the statement away: the next enqueue
    finds it gone, prepares it again and is written once."""
    store.task_enqueue(spec(queue, payload=1))
    with connection.cursor() as cursor:
        cursor.execute("DISCARD ALL")
    assert DIRECT not in prepared_statements()
    again = store.task_enqueue(spec(queue, payload=2))
    assert DIRECT in prepared_statements()
    assert [task.payload for task in store.task_list(queue=queue)] == [1, 2]
    assert store.task_get(again.task_id) is not None
    assert not store.pooler_detected


@pytest.mark.django_db(transaction=True)
def test_django_query_log_sees_the_statements_rivet_sends_past_its_cursor(
    store: PostgresStore, queue: str
) -> None:
    """DEBUG, assertNumQueries and the debug toolbar read connection.queries_log: the single
    enqueue (in or out of the caller's transaction) and the flush are in it, as Django's own
    cursor would have put them."""
    with CaptureQueriesContext(connection) as outside:
        store.task_enqueue(spec(queue, payload=1))
    with CaptureQueriesContext(connection) as inside, transaction.atomic():
        store.task_enqueue(spec(queue, payload=2))
    with CaptureQueriesContext(connection) as flush:
        claimed = store.task_claim(queues=[queue], owner="w", limit=2, lease_ttl=30).claimed
    assert len(claimed) == 2
    for captured in (outside, inside):
        assert [q["sql"] for q in captured if "INSERT INTO rivet_task" in q["sql"]] == [
            QUERIES["enqueue"]
        ]
    assert any("FOR UPDATE" in q["sql"] for q in flush.captured_queries)
    assert [task.payload for task in store.task_list(queue=queue)] == [1, 2]


@pytest.mark.django_db(transaction=True)
def test_a_session_that_has_the_statement_already_is_taken_as_it_is(
    store: PostgresStore, queue: str
) -> None:
    """A session handed on without a reset holds the statement under the same name (42P05 on
    preparing): the name carries the text's hash, so the enqueue uses it."""
    store.task_enqueue(spec(queue, payload=1))
    DIRECT_ENQUEUE.forget(connection.connection)  # as a new client of that session would be
    store.task_enqueue(spec(queue, payload=2))
    assert [task.payload for task in store.task_list(queue=queue)] == [1, 2]
    assert not store.pooler_detected


@pytest.mark.django_db(transaction=True)
def test_a_single_enqueue_the_server_or_the_driver_refuses_raises_and_the_connection_goes_on(
    store: PostgresStore, queue: str
) -> None:
    """Built past build_spec (which refuses NUL): jsonb refuses a NUL escape in the payload's
    text (the server's error, from the direct path); a raw NUL in a text parameter is left to
    psycopg, which refuses it before anything is sent (libpq would cut the text there)."""
    store.task_enqueue(spec(queue, payload=0))
    with pytest.raises(StoreError, match="task_enqueue.*unsupported Unicode escape"):
        store.task_enqueue(TaskSpec(queue=queue, kind="pg.noop", payload="a \x00 b"))
    with pytest.raises(StoreError, match="task_enqueue.*NUL"):
        store.task_enqueue(TaskSpec(queue=queue, kind="pg.no\x00op", payload=1))
    store.task_enqueue(spec(queue, payload=1))
    assert [task.payload for task in store.task_list(queue=queue)] == [0, 1]


@pytest.mark.django_db(transaction=True)
def test_a_single_enqueue_inside_a_transaction_leaves_libpq_alone(
    store: PostgresStore, queue: str
) -> None:
    """In the caller's atomic() the insert runs on Django's cursor inside a savepoint, so it
    rolls back with the caller."""
    with pytest.raises(Rollback), transaction.atomic():
        store.task_enqueue(spec(queue, payload=1))
        assert DIRECT not in prepared_statements()
        raise Rollback
    assert store.task_list(queue=queue) == []


@pytest.mark.django_db(transaction=True)
def test_store_error_inside_the_callers_transaction_reaches_the_caller(
    store: PostgresStore, queue: str
) -> None:
    with pytest.raises(StoreError), transaction.atomic():
        store.task_enqueue(spec(queue, idem_key=f"{queue}:a"))
        store.task_claim(queues=[queue], owner="w", limit=1, lease_ttl=1e300)
    assert store.task_list(queue=queue) == []


# -- the claim -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_claim_reads_the_partial_claim_index(store: PostgresStore, queue: str) -> None:
    params = {"queue": queue, "limit": 4, "owner": "w", "ttl": 30.0, "channel": "c", "seen": []}
    params |= store._common_params() | FRONT
    params |= {f"{column}s": [] for column in SETTLE_COLUMNS}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + QUERIES["settle_claim"], params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "rivet_task_rank_idx" in plan, plan
    assert "Sort" not in plan, f"the claim reads the index in (claim_rank, id) order:\n{plan}"
    assert "LockRows" in plan, plan


@pytest.mark.django_db(transaction=True)
def test_claim_buries_every_exhausted_task_it_meets(store: PostgresStore, queue: str) -> None:
    lost = [store.task_enqueue(spec(queue, max_attempts=1)).task_id for _ in range(3)]
    assert len(store.task_claim(queues=[queue], owner="gone", limit=3, lease_ttl=30).claimed) == 3
    shift_back(31, store)
    fresh = [store.task_enqueue(spec(queue)).task_id for _ in range(2)]
    batch = store.task_claim(queues=[queue], owner="w", limit=2, lease_ttl=30)
    assert ([c.task_id for c in batch.claimed], batch.buried) == (fresh, 3)
    assert {store.task_get(task_id).state for task_id in lost} == {"dead"}


@pytest.mark.django_db(transaction=True)
def test_concurrent_producers_share_one_unique_job(store: PostgresStore, queue: str) -> None:
    producers = 8
    barrier = threading.Barrier(producers)

    def produce(n: int) -> Any:
        barrier.wait(timeout=60)
        return store.task_enqueue(spec(queue, kind="pg.report", unique_key=f"{queue}:nightly"))

    results: list[Any] = [None] * producers
    threads = [
        threading.Thread(
            target=lambda n=n: results.__setitem__(n, on_other_connection(lambda: produce(n)))
        )
        for n in range(producers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len({r.task_id for r in results}) == 1
    assert sum(not r.duplicate for r in results) == 1
    assert len(store.task_list(queue=queue)) == 1


# -- server timestamps and durable fences ----------------------------------------------------


@pytest.mark.django_db
def test_timestamps_come_from_the_server_clock(store: PostgresStore, queue: str) -> None:
    # One transaction (the test's): the server's now() is one instant throughout it.
    now = server_now()
    task_id = store.task_enqueue(spec(queue)).task_id
    row = store.task_get(task_id)
    assert (row.created_at, row.updated_at, row.visible_at) == (now, now, now)
    leased = store.task_claim(queues=[queue], owner="w", limit=1, lease_ttl=30).claimed[0]
    row = store.task_get(task_id)
    assert (row.updated_at, row.visible_at) == (now, now + timedelta(seconds=30))
    assert store.task_settle([failed(leased, "boom", 60)]) == [Settled.RETRIED]
    assert store.task_get(task_id).visible_at == now + timedelta(seconds=60)
    delayed = store.task_enqueue(spec(queue, delay=5)).task_id
    assert store.task_get(delayed).visible_at == now + timedelta(seconds=5)
    when = datetime(2030, 5, 6, 7, 8, 9, tzinfo=UTC)
    scheduled = store.task_enqueue(spec(queue, run_at=when)).task_id
    assert store.task_get(scheduled).visible_at == when


@pytest.mark.django_db
def test_fenced_writes_are_recorded_with_owner_and_epoch(store: PostgresStore, queue: str) -> None:
    task_id = store.task_enqueue(spec(queue)).task_id
    leased = store.task_claim(queues=[queue], owner="w1", limit=1, lease_ttl=30).claimed[0]
    stale = Lease(task_id=task_id, epoch=leased.epoch - 1, owner="w0")
    assert store.task_ack(stale, "late") is Settled.FENCED
    assert store.task_retry(stale, "late", 0) is Settled.FENCED
    assert store.task_ack(Lease(task_id=10**12, epoch=1, owner="w9")) is Settled.FENCED
    fences = FencedWrite.objects.filter(task_id__in=[task_id, 10**12])
    assert [(f.task_id, f.queue, f.op, f.owner, f.epoch) for f in fences] == [
        (task_id, queue, "ack", "w0", leased.epoch - 1),
        (task_id, queue, "fail", "w0", leased.epoch - 1),
        (10**12, "", "ack", "w9", 1),
    ]
    assert store.queue_stats(queue).fenced == 2
    assert store.task_ack(leased.lease) is Settled.ACKED


@pytest.mark.django_db(transaction=True)
def test_a_lease_refused_by_two_heartbeats_at_once_is_recorded_once(
    store: PostgresStore, queue: str
) -> None:
    # A worker's heartbeat thread and its settler may both heartbeat one lease at the same
    # moment. The first's record is not committed yet when the second looks for it: only the
    # unique index makes the second wait for the first and then write nothing.
    task_id = store.task_enqueue(spec(queue)).task_id
    leased = store.task_claim(queues=[queue], owner="w1", limit=1, lease_ttl=30).claimed[0]
    stale = Lease(task_id=task_id, epoch=leased.epoch - 1, owner="w0")
    recorded, release = threading.Event(), threading.Event()

    def first() -> Any:
        with transaction.atomic():
            held = store.lease_extend([stale], 30)
            recorded.set()
            assert release.wait(LONG_WAIT)
        return held

    def second() -> Any:
        assert recorded.wait(LONG_WAIT)
        return store.lease_extend([stale], 30)

    outcomes: list[Any] = []
    threads = [
        threading.Thread(target=lambda w=w: outcomes.append(on_other_connection(w)))
        for w in (first, second)
    ]
    for thread in threads:
        thread.start()
    assert recorded.wait(LONG_WAIT)
    threads[1].join(timeout=SHORT_WAIT)  # the second heartbeat is under way, not finished
    release.set()
    for thread in threads:
        thread.join(timeout=120)
    assert [task_id in held for held in outcomes] == [False, False]
    beats = FencedWrite.objects.filter(task_id=task_id, op="beat")
    assert [(f.owner, f.epoch) for f in beats] == [("w0", leased.epoch - 1)]


# -- bulk enqueue ----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_bulk_enqueue_across_chunks_keeps_order_and_keys(store: PostgresStore, queue: str) -> None:
    before = store.task_enqueue(spec(queue, payload={"n": "old"}, idem_key=f"{queue}:old"))
    when = datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC)
    specs = [
        spec(
            queue,
            payload={"n": n, "text": 'quote " and \\ backslash'},
            idem_key=f"{queue}:{n}" if n % 3 == 0 else None,
            priority=n % 7 - 3,
            max_attempts=n % 4 + 1,
            delay=10 if n % 5 == 0 else None,
        )
        for n in range(BULK_CHUNK + 50)
    ]
    specs += [
        spec(queue, payload={"n": 0, "text": 'quote " and \\ backslash'}, idem_key=f"{queue}:0"),
        spec(queue, payload={"n": "old"}, idem_key=f"{queue}:old"),
        spec(queue, kind="pg.unique", unique_key=f"{queue}:u"),
        spec(queue, kind="pg.unique", unique_key=f"{queue}:u", run_at=when),
        spec(queue, payload=None, run_at=when),
    ]
    results = store.task_enqueue_many(specs)
    count = BULK_CHUNK + 50
    assert [r.duplicate for r in results] == [False] * count + [True, True, False, True, False]
    assert results[count].task_id == results[0].task_id
    assert results[count + 1].task_id == before.task_id
    assert results[count + 3].task_id == results[count + 2].task_id
    assert len({r.task_id for r in results}) == count + 3
    for given, result in zip(specs, results, strict=True):
        if result.duplicate:
            continue
        row = store.task_get(result.task_id)
        assert (row.queue, row.kind, row.payload, row.idem_key, row.unique_key) == (
            given.queue,
            given.kind,
            given.payload,
            given.idem_key,
            given.unique_key,
        )
        assert (row.priority, row.max_attempts, row.state) == (
            given.priority,
            given.max_attempts,
            "pending",
        )
        expected_visible = given.run_at or row.created_at + timedelta(seconds=given.delay_secs)
        assert row.visible_at == expected_visible


@pytest.mark.django_db(transaction=True)
def test_bulk_enqueue_refuses_a_key_reused_within_the_batch(
    store: PostgresStore, queue: str
) -> None:
    key = f"{queue}:k"
    specs = [spec(queue, payload=1, idem_key=key), spec(queue, payload=2, idem_key=key)]
    with pytest.raises(IdempotencyMismatch) as refused:
        store.task_enqueue_many(specs)
    assert refused.value.idem_key == key
    assert store.task_list(queue=queue) == []


# -- the prepared flush statement ------------------------------------------------------------

PREPARED = "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"


def drain_in_flushes(store: PostgresStore, queue: str, limit: int) -> int:
    """Ack what each flush claimed in the next one, as a worker does; how many were acked."""
    acks: list[Ack] = []
    acked = 0
    while True:
        flushed = store.task_settle_and_claim(
            acks, queues=[queue], owner="w", limit=limit, lease_ttl=30
        )
        acked += sum(1 for settled in flushed.settled if settled is Settled.ACKED)
        if not flushed.batch.claimed:
            return acked
        acks = [
            Ack(lease=Lease(task_id=c.task_id, epoch=c.epoch, owner=c.owner))
            for c in flushed.batch.claimed
        ]


def rows(sql: str) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchall()


def prepared() -> list[tuple[str, int, int]]:
    return rows(PREPARED)


@pytest.mark.django_db(transaction=True)
def test_the_flush_is_prepared_once_per_limit_and_planned_once(
    store: PostgresStore, queue: str
) -> None:
    for _ in range(7):
        store.task_enqueue(spec(queue))
    assert drain_in_flushes(store, queue, limit=2) == 7
    flushes = [row for row in prepared() if "LIMIT 2\n" in row[0]]
    # one statement text for LIMIT 2 (psycopg prepares it again for other parameter types: an
    # empty array is sent untyped), each planned once and that plan reused
    assert flushes and all("%(" not in text for text, _, _ in flushes)
    assert sum(generic for _, generic, _ in flushes) >= 4
    assert [custom for _, _, custom in flushes] == [0] * len(flushes)
    assert plan_cache_mode() == "force_generic_plan"
    # worker_session sets them all, in one statement
    assert rows("SHOW enable_sort") == rows("SHOW enable_seqscan") == [("off",)]


@pytest.mark.django_db(transaction=True)
def test_a_connection_that_outlives_its_flushes_gets_the_server_defaults_back(
    store: PostgresStore, queue: str
) -> None:
    store.task_enqueue(spec(queue))
    assert drain_in_flushes(store, queue, limit=2) == 1
    pg = connection.connection
    assert end_worker_session(pg) is True
    assert (plan_cache_mode(), rows("SHOW enable_sort")) == ("auto", [("on",)])
    assert rows("SHOW enable_seqscan") == [("on",)]
    assert end_worker_session(pg) is True  # nothing left to take back: nothing sent
    assert drain_in_flushes(store, queue, limit=2) == 0  # a flush: the settings again
    with transaction.atomic():  # in a transaction they cannot be taken back
        assert end_worker_session(pg) is False
    assert end_worker_session(pg) is True
    assert rows("SHOW enable_sort") == [("on",)]


@pytest.mark.django_db(transaction=True)
def test_a_producer_connection_prepares_its_enqueue_and_keeps_its_plan_mode(
    store: PostgresStore, queue: str
) -> None:
    connection.close()  # a connection that has run no flush
    for _ in range(3):
        store.task_enqueue(spec(queue))
    (text,) = [row[0] for row in prepared()]
    assert text.startswith("WITH inserted AS (") and "%(" not in text
    assert plan_cache_mode() == "auto"  # a web app's connection is left as it was


def plan_cache_mode() -> str:
    return rows("SHOW plan_cache_mode")[0][0]


@pytest.mark.django_db(transaction=True)
def test_the_prepared_flush_survives_a_table_change_and_new_statistics(
    store: PostgresStore, queue: str
) -> None:
    for _ in range(4):
        store.task_enqueue(spec(queue))
    assert drain_in_flushes(store, queue, limit=1) == 4  # prepared and planned on this connection
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE rivet_task ADD COLUMN rivet_test_extra integer")
        cursor.execute("ANALYZE rivet_task")
    try:
        for _ in range(3):
            store.task_enqueue(spec(queue))
        assert drain_in_flushes(store, queue, limit=1) == 3
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE rivet_task DROP COLUMN rivet_test_extra")
    store.task_enqueue(spec(queue))
    assert drain_in_flushes(store, queue, limit=1) == 1


@pytest.mark.django_db(transaction=True)
def test_behind_a_transaction_pooler_nothing_is_prepared(
    store: PostgresStore, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DISABLE_SERVER_SIDE_CURSORS, Django's setting for PgBouncer in transaction mode."""
    connection.close()
    monkeypatch.setitem(connection.settings_dict, "DISABLE_SERVER_SIDE_CURSORS", True)
    for _ in range(3):
        store.task_enqueue(spec(queue))
    assert drain_in_flushes(store, queue, limit=2) == 3
    assert prepared() == []


@pytest.mark.django_db
def test_server_warnings_name_autovacuum_when_it_is_off(store: PostgresStore) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SHOW autovacuum")
        autovacuum = cursor.fetchone()[0]
    warnings = store.server_warnings()
    if autovacuum == "off":
        ((event, note),) = warnings
        assert event == "autovacuum_off" and "VACUUM rivet_task" in note
    else:
        assert warnings == []


@pytest.mark.django_db(transaction=True)
def test_a_refused_settle_inside_the_callers_transaction_leaves_it_usable(
    store: PostgresStore, queue: str
) -> None:
    from rivet.values import Ack

    task_id = store.task_enqueue(spec(queue)).task_id
    (claimed,) = store.task_claim(queues=[queue], owner="w", limit=1, lease_ttl=30).claimed
    with transaction.atomic():
        with pytest.raises(StoreError):
            store.task_settle([Ack(lease=claimed.lease, result="nul \x00 in jsonb")])
        assert store.task_get(task_id).state == "pending"  # a savepoint kept the transaction


# -- the claim floor (rivet.stores.floor) ------------------------------------------------------
# A draining worker's claim reads from where its last one began, past the dead index entries of
# the tasks it settled, and finds what became runnable ahead of that point at its next read
# from the front.

FLOOR_BATCH = 16


@pytest.fixture
def no_autovacuum() -> Iterator[None]:
    """The dead entries stay while the test looks at them, whatever the server's autovacuum."""
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE rivet_task SET (autovacuum_enabled = off)")
    yield
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE rivet_task RESET (autovacuum_enabled)")


def claim_ids(store: PostgresStore, queue: str, limit: int, owner: str = "w") -> list[int]:
    batch = store.task_claim(queues=[queue], owner=owner, limit=limit, lease_ttl=30)
    return [claimed.task_id for claimed in batch.claimed]


def drain(store: PostgresStore, queue: str, count: int) -> None:
    """Lease and ack ``count`` tasks as a worker does: each flush settles the last batch and
    claims the next."""
    held: list[Any] = []
    done = 0
    while done < count:
        decisions = [succeeded(claimed, None) for claimed in held]
        done += len(decisions)
        want = min(FLOOR_BATCH, count - done)
        flushed = store.task_settle_and_claim(
            decisions, queues=[queue], owner="w", limit=want, lease_ttl=30
        )
        held = flushed.batch.claimed
        if not want:
            break


def index_blocks(store: PostgresStore, queue: str, start: dict[str, Any]) -> int:
    """Index and heap pages the claim's scan of rivet_task_rank_idx touches, reading from
    ``start`` (EXPLAIN ANALYZE in a transaction rolled back: nothing is leased)."""
    params = claim_params(store, queue, start)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + settle_claim_text(FLOOR_BATCH), params
        )
        (plan,) = cursor.fetchone()
        transaction.set_rollback(True)
    plan = json.loads(plan) if isinstance(plan, str) else plan
    (scan,) = [node for node in nodes(plan[0]["Plan"]) if node.get("Index Name") == RANK_INDEX]
    return scan["Shared Hit Blocks"] + scan["Shared Read Blocks"]


@pytest.mark.django_db(transaction=True)
def test_a_draining_worker_claims_past_the_dead_entries_it_left(
    store: PostgresStore, queue: str, no_autovacuum: None
) -> None:
    store.task_enqueue_many([spec(queue) for _ in range(3_000)])
    drain(store, queue, 2_500)
    floor = store.floors.start(queue)
    assert floor is not None, "a worker with a backlog keeps a floor"
    index_blocks(store, queue, FRONT)  # the first walk marks the dead entries it meets
    front = index_blocks(store, queue, FRONT)
    from_floor = index_blocks(store, queue, floor.params())
    # 5 000 dead entries lie at the front (two per settled task): tens of index pages. From
    # the floor the scan reads a leaf or two and the heap pages of the rows it leases.
    print(f"claim index scan: {front} pages from the front, {from_floor} from the floor")
    assert from_floor * 3 < front, (from_floor, front)
    assert from_floor < 40, from_floor


@pytest.mark.django_db(transaction=True)
def test_a_read_from_the_floor_leases_in_claim_order(store: PostgresStore, queue: str) -> None:
    tasks = [store.task_enqueue(spec(queue)).task_id for _ in range(5 * FLOOR_BATCH)]
    leased = [task for _ in range(5) for task in claim_ids(store, queue, FLOOR_BATCH)]
    assert leased == tasks


@pytest.mark.django_db(transaction=True)
def test_a_task_ranked_ahead_of_the_floor_is_leased_at_the_next_read_from_the_front(
    store: PostgresStore, queue: str
) -> None:
    now = [1_000.0]
    store.floors = ClaimFloors(secs=1.0, clock=lambda: now[0])
    backlog = [store.task_enqueue(spec(queue)).task_id for _ in range(8)]
    assert claim_ids(store, queue, 2) == backlog[:2]
    urgent = store.task_enqueue(spec(queue, priority=100)).task_id
    # Within FLOOR_SECS the claim goes on from its floor: the urgent task waits.
    assert claim_ids(store, queue, 2) == backlog[2:4]
    now[0] += 1.0
    assert claim_ids(store, queue, 2) == [urgent, backlog[4]]


@pytest.mark.django_db(transaction=True)
def test_a_short_read_from_the_floor_reads_the_front_for_the_rest(
    store: PostgresStore, queue: str
) -> None:
    tasks = [store.task_enqueue(spec(queue)).task_id for _ in range(4)]
    assert claim_ids(store, queue, 2, owner="gone") == tasks[:2]
    assert claim_ids(store, queue, 2, owner="gone") == tasks[2:]
    assert store.floors.start(queue).task_id == tasks[2]
    # The leases lapse: the four are runnable again, two of them ahead of the floor.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE rivet_task SET visible_at = now() - interval '1 second' WHERE queue = %s",
            [queue],
        )
    again = store.task_claim(queues=[queue], owner="w", limit=4, lease_ttl=30)
    assert [claimed.task_id for claimed in again.claimed] == tasks
    assert [claimed.lease.epoch for claimed in again.claimed] == [2, 2, 2, 2]
    assert store.floors.start(queue).task_id == tasks[0]


@pytest.mark.django_db(transaction=True)
def test_reads_from_the_front_and_from_a_floor_share_one_prepared_statement(
    store: PostgresStore, queue: str
) -> None:
    """The floor's parameters keep their types whatever their values (an id of any size):
    psycopg prepares a statement again for each new set of types."""
    store.task_enqueue_many([spec(queue) for _ in range(8)])
    for _ in range(3):  # from the front, then twice from the floor
        store.task_claim(queues=[queue], owner="w", limit=2, lease_ttl=30)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements "
            "WHERE statement LIKE %s AND statement LIKE %s",
            ["%(claim_rank, id) >=%", "%LIMIT 2\n%"],
        )
        (prepared,) = cursor.fetchone()
    assert prepared == 1


# -- the speed paths and their plain twins ---------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "plain"])
def test_the_speed_paths_are_taken_only_when_on(
    fast: bool, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The conformance suite runs every check on both (postgres-*, postgres_plain-*); here,
    that each really takes its own way: the array literals, the server-bound statements and
    the direct libpq enqueue on the fast one, none of them on the plain one."""
    from rivet.stores.postgres import store as store_module
    from rivet.stores.postgres import wire

    used: list[str] = []

    def counted(name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            used.append(name)
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(store_module, "array_text", counted("arrays", wire.array_text))
    monkeypatch.setattr(store_module, "send_bound", counted("bound", wire.send_bound))
    monkeypatch.setattr(DIRECT_ENQUEUE, "run", counted("direct", DIRECT_ENQUEUE.run))
    plain_or_fast = PostgresStore(using="default", fast_paths=fast)
    try:
        task_id = plain_or_fast.task_enqueue(spec(queue)).task_id
        flushed = plain_or_fast.task_settle_and_claim(
            [], queues=[queue], owner="w", limit=5, lease_ttl=30.0
        )
        (claimed,) = flushed.batch.claimed
        assert claimed.task_id == task_id
        plain_or_fast.task_settle_and_claim(
            [succeeded(claimed, {"ok": 1})], queues=[], owner="w", limit=0, lease_ttl=30.0
        )
        record = plain_or_fast.task_get(task_id)
        assert record is not None and record.state == "done" and record.result == {"ok": 1}
    finally:
        plain_or_fast.close()
    assert set(used) == ({"arrays", "bound", "direct"} if fast else set())


def test_the_environment_turns_the_speed_paths_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RIVET_POSTGRES_PLAIN", "1")
    assert not PostgresStore(using="default").fast_paths
    assert PostgresStore(using="default", fast_paths=True).fast_paths
    monkeypatch.delenv("RIVET_POSTGRES_PLAIN")
    assert PostgresStore(using="default").fast_paths
