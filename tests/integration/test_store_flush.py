"""A flush on the real SQL stores: one statement on PostgreSQL, all or nothing on both.

The generic semantics of ``task_settle_and_claim`` (fencing per row, the claim beside it) are
in rivet.conformance.settle; here is what only a real database shows: how many statements a
flush sends (one more only for a claim that met doomed rows, to bury them with the texts
rivet.values composes), that a batch the database refuses leaves no row changed and no fence
recorded, and that a doomed row buried twice is buried once and recorded as no stale write.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from django.db import connections

from rivet.decisions import failed, lost, succeeded
from rivet.errors import StoreError
from rivet.stores.postgres import PostgresStore
from rivet.stores.sqlite import SqliteStore
from rivet.validation import build_spec
from rivet.values import WORKER_LOST_SUFFIX, Ack, Lease, Settled, claim_burial
from tests.effect_service import wait_until


def fill(store, queue: str, count: int) -> list[int]:
    specs = [build_spec(queue=queue, kind="flush.noop") for _ in range(count)]
    return [result.task_id for result in store.task_enqueue_many(specs)]


def lapsed_last_attempts(store, queue: str, count: int) -> list[int]:
    """Tasks on their last attempt whose worker vanished: doomed, for the next claim to bury."""
    specs = [build_spec(queue=queue, kind="flush.noop", max_attempts=1) for _ in range(count)]
    ids = [result.task_id for result in store.task_enqueue_many(specs)]
    store.task_claim(queues=[queue], owner="gone", limit=count, lease_ttl=0.001)
    time.sleep(0.05)
    return ids


def flush(store, decisions, queue: str, limit: int):
    return store.task_settle_and_claim(
        decisions, queues=[queue], owner="w1", limit=limit, lease_ttl=30
    )


class Statements:
    """Counts the statements Django sends on one alias."""

    def __init__(self) -> None:
        self.sql: list[str] = []

    def __call__(self, execute, sql, params, many, context):
        self.sql.append(sql)
        return execute(sql, params, many, context)


@pytest.fixture
def queue() -> str:
    return f"fl-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def postgres() -> Iterator[PostgresStore]:
    store = PostgresStore(using="default")
    yield store
    store.close()


@pytest.mark.django_db(transaction=True)
def test_a_postgres_flush_is_one_statement_however_many_rows(postgres, queue):
    fill(postgres, queue, 20)
    first = flush(postgres, [], queue, limit=8).batch.claimed
    stale = first[0]
    decisions = [succeeded(c, {"n": c.task_id}) for c in first[1:]]
    decisions.append(Ack(lease=Lease(task_id=stale.task_id, epoch=stale.epoch + 1, owner="x")))
    decisions.append(lost(stale))
    counter = Statements()
    with connections["default"].execute_wrapper(counter):
        flushed = flush(postgres, decisions, queue, limit=8)
    assert len(counter.sql) == 1, counter.sql
    assert flushed.settled == [Settled.ACKED] * 7 + [Settled.FENCED, Settled.FENCED]
    assert len(flushed.batch.claimed) == 8
    assert postgres.fenced_count(queue) == 2
    assert not connections["default"].in_atomic_block


@pytest.mark.django_db(transaction=True)
def test_a_postgres_batch_the_database_refuses_changes_nothing(postgres, queue):
    fill(postgres, queue, 3)
    claimed = flush(postgres, [], queue, limit=3).batch.claimed
    bad = Ack(lease=Lease(task_id=claimed[2].task_id, epoch=2**70, owner="w1"))
    batch = [succeeded(claimed[0], None), failed(claimed[1], "E", 0.0), bad]
    with pytest.raises(StoreError):
        flush(postgres, batch, queue, limit=5)
    assert {postgres.task_get(c.task_id).attempts for c in claimed} == {1}
    assert {postgres.task_get(c.task_id).state for c in claimed} == {"pending"}
    assert postgres.fenced_count(queue) == 0
    after = flush(postgres, batch[:2], queue, limit=5)
    assert after.settled == [Settled.ACKED, Settled.RETRIED]


@pytest.mark.django_db(databases=["default", "sqlite"], transaction=True)
def test_a_sqlite_batch_the_database_refuses_changes_nothing(queue):
    store = SqliteStore(using="sqlite")
    fill(store, queue, 3)
    claimed = flush(store, [], queue, limit=3).batch.claimed
    stale = Ack(lease=Lease(task_id=claimed[0].task_id, epoch=claimed[0].epoch + 5))
    bad = Ack(lease=Lease(task_id=claimed[2].task_id, epoch=2**70))
    batch = [stale, succeeded(claimed[1], None), bad]
    with pytest.raises((StoreError, OverflowError)):
        flush(store, batch, queue, limit=5)
    assert {store.task_get(c.task_id).state for c in claimed} == {"pending"}
    assert store.fenced_count(queue) == 0  # the stale row's fence rolled back with the rest
    after = flush(store, batch[:2], queue, limit=5)
    assert after.settled == [Settled.FENCED, Settled.ACKED]
    assert store.fenced_count(queue) == 1


class FailSecond(Statements):
    """Lets the first statement through and fails every later one, as a dropped server would."""

    def __call__(self, execute, sql, params, many, context):
        self.sql.append(sql)
        if len(self.sql) > 1:
            raise connections["default"].Database.OperationalError("server closed the connection")
        return execute(sql, params, many, context)


@pytest.mark.django_db(transaction=True)
def test_a_claim_that_fails_after_the_decisions_committed_raises_with_their_outcomes(
    postgres, queue
):
    from rivet.stores.base import ClaimFailed

    (task,) = fill(postgres, queue, 1)
    (claimed,) = flush(postgres, [], queue, 1).batch.claimed
    fill(postgres, f"{queue}-b", 1)
    failing = FailSecond()
    with connections["default"].execute_wrapper(failing), pytest.raises(ClaimFailed) as error:
        # The first statement acks and finds queue one empty; the claim of queue two fails.
        postgres.task_settle_and_claim(
            [succeeded(claimed, "ok")],
            queues=[queue, f"{queue}-b"],
            owner="w1",
            limit=1,
            lease_ttl=30,
        )
    assert len(failing.sql) == 2
    assert error.value.settled == [Settled.ACKED]
    assert postgres.task_get(task).state == "done"  # committed by the first statement


def counted_claim(store, queue: str, limit: int):
    """A claim, and how many statements it sent."""
    counter = Statements()
    with connections["default"].execute_wrapper(counter):
        batch = flush(store, [], queue, limit=limit).batch
    return batch, len(counter.sql)


@pytest.mark.parametrize(
    ("doomed", "fresh", "limit", "statements"),
    [
        (0, 2, 8, 1),  # the hot path: one statement
        (3, 2, 8, 2),  # one statement meets all five; one more buries the three doomed
        # The first statement meets the two doomed rows (claim order: ready first) and leases
        # nothing; the next buries them and leases the two fresh tasks: no statement more.
        (2, 2, 2, 2),
    ],
)
@pytest.mark.django_db(transaction=True)
def test_a_postgres_claim_buries_doomed_rows_with_the_next_statement_it_sends(
    postgres, queue, doomed, fresh, limit, statements
):
    lapsed = lapsed_last_attempts(postgres, queue, doomed) if doomed else []
    runnable = fill(postgres, queue, fresh)
    batch, sent = counted_claim(postgres, queue, limit)
    assert sent == statements
    assert ([c.task_id for c in batch.claimed], batch.buried) == (runnable, doomed)
    for task_id in lapsed:
        row = postgres.task_get(task_id)
        assert (row.state, row.last_error) == ("dead", claim_burial("", False))
    assert postgres.fenced_count(queue) == 0


@pytest.mark.parametrize("alias", ["default", "sqlite"])
@pytest.mark.django_db(databases=["default", "sqlite"], transaction=True)
def test_a_doomed_row_buried_twice_is_buried_once_and_fences_nothing(alias, queue):
    """Two claims met the same doomed row (PostgreSQL releases it between the claim and the
    burial): the second burial is refused, and that is no stale write."""
    store = PostgresStore(using="default") if alias == "default" else SqliteStore(using="sqlite")
    (task_id,) = lapsed_last_attempts(store, queue, 1)
    row = store.task_get(task_id)
    met = {"id": task_id, "lease_epoch": row.lease_epoch, "last_error": "", "cancel_requested": 0}
    buried = []
    for _ in range(2):
        with store._writing() as cursor:
            buried.append(store._bury_doomed(cursor, [met]))
    assert buried == [1, 0]
    assert store.fenced_count(queue) == 0
    row = store.task_get(task_id)
    assert (row.state, row.last_error, len(row.errors)) == ("dead", WORKER_LOST_SUFFIX, 1)
    store.close()


@pytest.mark.django_db(transaction=True)
def test_a_flush_settles_before_its_claim_locks_anything(postgres, queue):
    """Another worker's claim can hold the lock of a task this worker leased: its FOR UPDATE SKIP
    LOCKED locks the newer version of a row its snapshot saw pending, skips it, and keeps the
    lock to its commit. This worker's ack of that task then waits for that claim. Were its own
    claim's locks already taken (as when the statement claimed before it settled), the other
    worker settling a task this claim locked would wait in turn: a deadlock, which make bench's
    ceiling loop met (4 connections) and 8 connections x batch 4 met 5 times in 120 000 tasks.
    Settling first, the waiting ack holds nothing the other worker needs."""
    leased_id, pending_id = fill(postgres, queue, 2)
    (claimed,) = postgres.task_claim(queues=[queue], owner="w1", limit=1, lease_ttl=30).claimed
    assert claimed.task_id == leased_id
    params = connections["default"].get_connection_params()
    for django_only in ("cursor_factory", "context"):
        params.pop(django_only, None)
    with psycopg.connect(**params) as other:
        other.execute("SET lock_timeout = '5s'")
        # The other worker's claim, as its FOR UPDATE left it: the leased task's row locked.
        other.execute("SELECT 1 FROM rivet_task WHERE id = %s FOR UPDATE", [leased_id])
        ack = Ack(lease=Lease(task_id=leased_id, epoch=claimed.epoch, owner="w1"))
        with ThreadPoolExecutor(1) as pool:
            flushing = pool.submit(flush_on_its_own_connection, [ack], queue)
            wait_until(lambda: lock_waiters(other) > 0, "the flush to wait for the locked row")
            # That worker now settles the task this flush would claim: it must not wait on it.
            other.execute("UPDATE rivet_task SET updated_at = now() WHERE id = %s", [pending_id])
            other.commit()
            flushed = flushing.result(timeout=30)
    assert flushed.settled == [Settled.ACKED]
    assert [task.task_id for task in flushed.batch.claimed] == [pending_id]


def flush_on_its_own_connection(decisions, queue: str):
    """A flush from a thread of its own, hence on a database connection of its own."""
    try:
        return flush(PostgresStore(), decisions, queue, 1)
    finally:
        connections.close_all()


def lock_waiters(session: psycopg.Connection) -> int:
    """Backends other than ``session``'s waiting for a lock."""
    (waiting,) = session.execute(
        "SELECT count(*) FROM pg_locks WHERE NOT granted AND pid <> pg_backend_pid()"
    ).fetchone()
    return waiting
