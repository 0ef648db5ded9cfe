"""The wake-up gate: an enqueue notifies only while a worker waits on its queue, and a worker
that starts waiting misses no enqueue that did not notify it (migration 0017).

A notifying commit holds a lock that every other notifying commit waits for, so enqueues that
each notified committed one at a time. Here: the protocol between producers and a waiting
session, on real PostgreSQL connections (producers on threads of their own), then a worker
whose poll interval is far longer than the test, which must still run every task it is sent
while idle, one at a time, and a burst from several producers.
"""

from __future__ import annotations

import importlib
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from django.db import connection, connections, transaction

from rivet.jobs import JobContext, JobRegistry, job
from rivet.stores.base import Waiting
from rivet.stores.postgres import PostgresStore
from rivet.validation import build_spec
from rivet.worker import Worker, WorkerConfig
from tests.integration.pg_kit import on_other_connection

pytestmark = pytest.mark.django_db(transaction=True)

LONG_WAIT = 60.0  # an upper bound for what must come; never reached when it works
SHORT_WAIT = 0.3  # how long to wait for a wake-up that must not come


@pytest.fixture
def store() -> Iterator[PostgresStore]:
    store = PostgresStore(using="default")
    yield store
    store.close()


@pytest.fixture
def queue() -> str:
    return f"gate-{uuid.uuid4().hex[:12]}"


def enqueue(store: PostgresStore, queue: str) -> int:
    """An enqueue from a producer's session, not the test's (which waits in some tests, and a
    session never conflicts with its own locks)."""
    spec = build_spec(queue=queue, kind="gate.noop")
    return on_other_connection(lambda: store.task_enqueue(spec).task_id)


class OpenProducer:
    """A producer on a thread (and connection) of its own whose enqueue's transaction stays
    open until ``commit()``."""

    def __init__(self, store: PostgresStore, queue: str) -> None:
        self.inserted, self.release, self.done = (threading.Event() for _ in range(3))
        self.task_id: int | None = None

        def run() -> None:
            try:
                with transaction.atomic():
                    spec = build_spec(queue=queue, kind="gate.noop")
                    self.task_id = store.task_enqueue(spec).task_id
                    self.inserted.set()
                    self.release.wait(LONG_WAIT)
            finally:
                connections.close_all()
                self.done.set()

        threading.Thread(target=run, daemon=True).start()
        assert self.inserted.wait(LONG_WAIT), "the producer did not enqueue"

    def commit(self) -> None:
        self.release.set()
        assert self.done.wait(LONG_WAIT), "the producer did not commit"


def test_an_enqueue_notifies_only_while_a_session_waits(store, queue):
    assert store.wait_for_work([queue], 0) is False  # listening
    enqueue(store, queue)
    assert store.wait_for_work([queue], SHORT_WAIT) is False, "notified with no worker waiting"
    assert store.wait_for_wakeups([queue], True) is Waiting.STARTED
    assert store.wait_for_wakeups([queue], True) is Waiting.WAITING  # nothing more to do
    enqueue(store, queue)
    assert store.wait_for_work([queue], LONG_WAIT) is True
    assert store.wait_for_wakeups([queue], False) is Waiting.WAITING  # work again: released
    enqueue(store, queue)
    assert store.wait_for_work([queue], SHORT_WAIT) is False, "notified after the release"


def test_a_worker_starts_waiting_only_after_an_enqueue_that_saw_no_waiter_ends(store, queue):
    assert store.wait_for_work([queue], 0) is False
    producer = OpenProducer(store, queue)  # saw no waiter: it will not notify
    assert store.wait_for_wakeups([queue], True) is Waiting.NOT_YET
    assert store.wait_for_wakeups([queue], True) is Waiting.NOT_YET  # still open
    producer.commit()
    assert store.wait_for_work([queue], SHORT_WAIT) is False, "it did notify"
    assert store.wait_for_wakeups([queue], True) is Waiting.STARTED
    claimed = store.task_claim(queues=[queue], owner="w", limit=5, lease_ttl=30).claimed
    assert [c.task_id for c in claimed] == [producer.task_id]


def test_an_enqueue_that_saw_the_waiter_notifies_at_its_commit(store, queue):
    assert store.wait_for_work([queue], 0) is False
    assert store.wait_for_wakeups([queue], True) is Waiting.STARTED
    producer = OpenProducer(store, queue)
    assert store.wait_for_work([queue], SHORT_WAIT) is False, "notified before the commit"
    producer.commit()
    assert store.wait_for_work([queue], LONG_WAIT) is True


def test_a_gate_waits_for_no_enqueue_on_another_queue(store, queue):
    assert store.wait_for_work([queue], 0) is False
    producer = OpenProducer(store, f"{queue}-other")
    try:
        assert store.wait_for_wakeups([queue], True) is Waiting.STARTED
    finally:
        producer.commit()


def test_nothing_waits_before_the_store_listens(store, queue):
    assert store.wait_for_wakeups([queue], True) is Waiting.NOT_YET  # a notification would be lost
    assert store.wait_for_work([queue], 0) is False
    assert store.wait_for_wakeups([queue], True) is Waiting.STARTED


def waiters(queue: str) -> int:
    """Sessions holding the queue's waiter lock (pg_locks: advisory, the migration's key)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND classid = 1919514113 AND objid = hashtext(%s)::oid",
            [queue],
        )
        return cursor.fetchone()[0]


class IdleWorker:
    """A worker on a thread whose poll interval outlasts the test: idle, only a wake-up makes
    it claim. Counts what it ran."""

    def __init__(self, queue: str, concurrency: int = 2) -> None:
        self.ran: list[int] = []
        jobs = JobRegistry()

        @job("gate.noop", registry=jobs)
        def noop(ctx: JobContext) -> None:
            self.ran.append(ctx.task_id)

        config = WorkerConfig(
            queues=(queue,), owner=f"gate:{queue}", concurrency=concurrency, poll_interval=600.0
        )
        self.worker = Worker(config, store=PostgresStore(using="default"), registry=jobs)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.worker.run()
        finally:
            connections.close_all()

    def wait_for(self, count: int) -> bool:
        deadline = time.monotonic() + LONG_WAIT
        while len(self.ran) < count and time.monotonic() < deadline:
            time.sleep(0.005)
        return len(self.ran) >= count

    def stop(self) -> None:
        self.worker.stop()
        self.thread.join(LONG_WAIT)
        self.worker.store.close()


def test_an_idle_worker_runs_each_task_sent_while_it_waits(store, queue):
    worker = IdleWorker(queue)
    try:
        deadline = time.monotonic() + LONG_WAIT
        while waiters(queue) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)  # the worker has claimed nothing, and waits
        for n in range(1, 16):
            enqueue(store, queue)
            assert worker.wait_for(n), f"task {n} was not run: its wake-up was lost"
            time.sleep(0.002 * (n % 4))  # now while it runs, now when it waits again
    finally:
        worker.stop()
    # Its connection is closed; the server's backend lets the lock go as it exits, a moment on.
    deadline = time.monotonic() + LONG_WAIT
    while waiters(queue) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert waiters(queue) == 0, "the stopped worker still holds its waiter lock"


def test_a_burst_from_several_producers_is_all_run_without_polling(store, queue):
    worker = IdleWorker(queue, concurrency=4)
    per_producer, producers = 50, 4

    def produce() -> None:
        try:
            for _ in range(per_producer):
                store.task_enqueue(build_spec(queue=queue, kind="gate.noop"))
        finally:
            connections.close_all()

    try:
        for _round in range(3):  # each round ends with the worker idle again
            threads = [threading.Thread(target=produce) for _ in range(producers)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(LONG_WAIT)
            done = (_round + 1) * per_producer * producers
            assert worker.wait_for(done), f"{len(worker.ran)} of {done} run: a wake-up was lost"
    finally:
        worker.stop()
    assert len(worker.ran) == len(set(worker.ran)) == 3 * per_producer * producers


def function_language(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang "
            "WHERE p.proname = %s",
            [name],
        )
        return cursor.fetchone()[0]


def test_the_wake_runs_inside_the_enqueues_own_plan(store, queue):
    """Migration 0018: rivet_wake is one SQL expression, which the planner puts into the
    enqueue's statement (no PL/pgSQL call per enqueue), its lock calls in their order."""
    assert function_language("rivet_wake") == "sql"
    params = {
        **store._common_params(),
        **store._spec_params(build_spec(queue=queue, kind="gate.noop")),
        "channel": "rivet_task",
    }
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (VERBOSE) " + store.queries["enqueue"], params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "rivet_wake" not in plan, plan
    gate, waiter, notify = (
        plan.index(call)
        for call in ("pg_advisory_xact_lock_shared", "pg_try_advisory_lock", "pg_notify")
    )
    assert gate < waiter < notify, plan


def test_the_wake_answers_the_queue_only_while_a_session_waits(queue):
    def wake() -> str | None:
        def call() -> str | None:
            with connection.cursor() as cursor:
                cursor.execute("SELECT rivet_wake(%s, %s)", ["rivet_gate_test", queue])
                return cursor.fetchone()[0]

        return on_other_connection(call)

    assert wake() is None
    with connection.cursor() as cursor:  # this session waits on the queue
        cursor.execute("SELECT pg_advisory_lock_shared(1919514113, hashtext(%s))", [queue])
    try:
        assert wake() == queue
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock_shared(1919514113, hashtext(%s))", [queue])
    assert wake() is None


def test_the_inline_wake_migrates_back_to_plpgsql_and_forward():
    wake_inline = importlib.import_module("rivet.migrations.0018_wake_inline")
    try:
        with connection.schema_editor() as editor:
            wake_inline.restore(None, editor)
        assert function_language("rivet_wake") == "plpgsql"
    finally:
        with connection.schema_editor() as editor:
            wake_inline.create(None, editor)
    assert function_language("rivet_wake") == "sql"
