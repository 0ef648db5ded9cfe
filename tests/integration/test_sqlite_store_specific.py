"""SqliteStore behaviours the generic conformance suite cannot see.

Several OS processes on one database file, the caller's transaction.atomic(), an alias without
``transaction_mode: IMMEDIATE``, and timestamps that come from SQLite's clock, not Python's.

Run as a script, this file is the claimer process of the multi-process test (models are
imported inside the tests, because the claimer configures Django only after its imports)::

    python tests/integration/test_sqlite_store_specific.py DB_PATH MODE QUEUE OWNER
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.db import connections, transaction

from rivet.errors import IdempotencyMismatch, RivetConfigError, StoreError
from rivet.stores.sqlite import SqliteStore
from rivet.validation import build_spec
from rivet.values import WORKER_LOST_SUFFIX, Lease, Settled

REPO_ROOT = Path(__file__).resolve().parents[2]
QUEUE = "sq-procs"
TASKS, ATTEMPTS, PROCESSES = 150, 3, 4
#: The text strftime('%Y-%m-%d %H:%M:%f') makes; Python's str(datetime) has 6 digits.
SQLITE_TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}$")


def _claimer(db_path: str, mode: str, queue: str, owner: str) -> None:
    """Child process: Django on the shared file, claim with a zero-second lease until drained.

    A zero ttl makes every lease lapse at once, so the processes keep re-claiming one
    another's tasks (epoch 1, 2, 3) and then bury them; each claim is printed "id epoch".
    """
    import django
    from django.conf import settings

    options = {"timeout": 30, "init_command": "PRAGMA journal_mode=WAL;"}
    if mode != "none":
        options["transaction_mode"] = mode
    database = {"ENGINE": "django.db.backends.sqlite3", "NAME": db_path, "OPTIONS": options}
    settings.configure(DATABASES={"default": database}, USE_TZ=True, TIME_ZONE="UTC")
    django.setup()
    store = SqliteStore(using="default")
    print("ready", flush=True)
    sys.stdin.readline()  # the parent releases every process at once
    while True:
        batch = store.task_claim(queues=[queue], owner=owner, limit=1, lease_ttl=0.0)
        for leased in batch.claimed:
            print(leased.task_id, leased.epoch, flush=True)
        if not batch.claimed and not batch.buried:
            return
        time.sleep(0.002)  # let go of the file between claims, so the processes interleave


pytestmark = pytest.mark.django_db(databases=["default", "sqlite"], transaction=True)


@pytest.fixture
def store() -> SqliteStore:
    return SqliteStore(using="sqlite")


def spec(queue: str = "sq", **fields):
    return build_spec(queue=queue, kind="sq.noop", **fields)


def raw_row(table: str, row_id: int, *columns: str) -> tuple[str, ...]:
    """Columns of one row as the text stored (CAST, so no converter turns it into datetime)."""
    select = ", ".join(f"CAST({column} AS TEXT)" for column in columns)
    with connections["sqlite"].cursor() as cursor:
        cursor.execute(f"SELECT {select} FROM {table} WHERE id = %s", [row_id])
        return cursor.fetchone()


def db_now() -> str:
    with connections["sqlite"].cursor() as cursor:
        cursor.execute("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')")
        return cursor.fetchone()[0]


# -- several processes, one file ---------------------------------------------------------------


def _start_claimers(db_path: str, mode: str) -> list[subprocess.Popen]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    script = str(Path(__file__).resolve())
    children = [
        subprocess.Popen(
            [sys.executable, script, db_path, mode, QUEUE, f"proc-{n}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO_ROOT,
            env=env,
        )
        for n in range(PROCESSES)
    ]
    for child in children:
        assert child.stdout.readline().strip() == "ready", child.communicate()[1]
    return children


def _collect_claims(children: list[subprocess.Popen]) -> list[tuple[int, int]]:
    for child in children:
        child.stdin.write("go\n")
        child.stdin.flush()
    claims = []
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, f"claimer process failed:\n{err}"
        claims += [tuple(int(n) for n in line.split()) for line in out.splitlines()]
    return claims


@pytest.mark.parametrize("mode", ["IMMEDIATE", "none"])
def test_processes_sharing_one_file_claim_every_epoch_exactly_once(store, mode):
    task_ids = [
        r.task_id
        for r in store.task_enqueue_many(
            [spec(QUEUE, payload={"n": n}, max_attempts=ATTEMPTS) for n in range(TASKS)]
        )
    ]
    db_path = connections["sqlite"].settings_dict["NAME"]
    claims = _collect_claims(_start_claimers(db_path, mode))

    twice = sorted(pair for pair, times in Counter(claims).items() if times > 1)
    assert not twice, f"(task, epoch) leased to two processes: {twice[:10]}"
    expected = {(task_id, epoch) for task_id in task_ids for epoch in range(1, ATTEMPTS + 1)}
    assert set(claims) == expected
    dead = store.task_list(queue=QUEUE, state="dead", limit=TASKS + 1)
    assert sorted(t.id for t in dead) == task_ids
    assert {(t.attempts, t.lease_epoch, t.last_error) for t in dead} == {
        (ATTEMPTS, ATTEMPTS, WORKER_LOST_SUFFIX)
    }


# -- the caller's transaction ------------------------------------------------------------------


class Rollback(Exception):
    pass


def test_enqueue_rolls_back_with_the_callers_atomic_block(store):
    from django.contrib.auth.models import Group

    with pytest.raises(Rollback), transaction.atomic(using="sqlite"):
        Group.objects.using("sqlite").create(name="signup-1")
        store.task_enqueue(spec(idem_key="welcome-1"))
        store.task_enqueue_many([spec(payload={"n": 1}), spec(payload={"n": 2})])
        raise Rollback
    assert not Group.objects.using("sqlite").exists()
    assert store.task_list() == []

    with transaction.atomic(using="sqlite"):
        Group.objects.using("sqlite").create(name="signup-2")
        kept = store.task_enqueue(spec(idem_key="welcome-1"))
    assert kept.duplicate is False
    assert Group.objects.using("sqlite").filter(name="signup-2").exists()
    assert [t.id for t in store.task_list()] == [kept.task_id]


def test_refused_enqueue_inside_atomic_leaves_the_callers_transaction_usable(store):
    from django.contrib.auth.models import Group

    store.task_enqueue(spec(payload={"v": 1}, idem_key="order-7"))
    with transaction.atomic(using="sqlite"):
        Group.objects.using("sqlite").create(name="billing")
        with pytest.raises(IdempotencyMismatch):
            store.task_enqueue_many(
                [spec(payload={"v": 3}), spec(payload={"v": 2}, idem_key="order-7")]
            )
        later = store.task_enqueue(spec(payload={"v": 4}))
    assert Group.objects.using("sqlite").filter(name="billing").exists()
    payloads = [t.payload for t in store.task_list()]
    assert payloads == [{"v": 1}, {"v": 4}], "the refused batch rolled back, nothing else did"
    assert store.task_get(later.task_id).state == "pending"


# -- the write lock, with and without transaction_mode IMMEDIATE ---------------------------------


@pytest.fixture(params=["IMMEDIATE", None], ids=["immediate-alias", "deferred-alias"])
def statements(request, monkeypatch) -> list[str]:
    """Every statement the 'sqlite' connection runs, under the alias's mode or with none set."""
    connection = connections["sqlite"]
    connection.ensure_connection()
    monkeypatch.setattr(connection, "transaction_mode", request.param)
    seen: list[str] = []
    connection.connection.set_trace_callback(lambda sql: seen.append(sql.strip().rstrip(";")))
    yield seen
    connection.connection.set_trace_callback(None)


def test_every_write_takes_the_write_lock_first(store, statements):
    task_id = store.task_enqueue(spec()).task_id
    leased = store.task_claim(queues=["sq"], owner="w1", limit=5, lease_ttl=30).claimed
    assert [c.task_id for c in leased] == [task_id]
    assert store.task_ack(leased[0].lease) is Settled.ACKED
    assert store.task_ack(leased[0].lease) is Settled.FENCED

    begins = [s for s in statements if s.startswith("BEGIN")]
    assert begins == ["BEGIN IMMEDIATE"] * 4, statements
    assert sum(s == "COMMIT" for s in statements) == 4, statements
    assert store.task_get(task_id).state == "done"
    assert store.fenced_count("sq", "ack") == 1


def test_failed_write_rolls_back_and_frees_the_connection(store, statements):
    store.task_enqueue(spec(payload={"v": 1}, idem_key="k"))
    with pytest.raises(IdempotencyMismatch):
        store.task_enqueue_many([spec(payload={"v": 2}), spec(payload={"v": 3}, idem_key="k")])
    assert statements[-1] == "ROLLBACK"
    assert not connections["sqlite"].connection.in_transaction
    assert [t.payload for t in store.task_list()] == [{"v": 1}]
    assert store.task_enqueue(spec(payload={"v": 2})).duplicate is False


def test_locked_database_beyond_the_timeout_is_a_store_error(store):
    import sqlite3

    connection = connections["sqlite"]
    connection.ensure_connection()
    holder = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout = 50")
    try:
        with pytest.raises(StoreError, match="locked") as caught:
            store.task_claim(queues=["sq"], owner="w1", limit=1, lease_ttl=30)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA busy_timeout = 30000")
    assert "timeout" in str(caught.value)
    assert caught.value.__cause__ is not None


def test_a_non_sqlite_alias_is_refused():
    with pytest.raises(RivetConfigError, match="SQLite"):
        SqliteStore(using="default")


# -- timestamps come from SQLite ---------------------------------------------------------------


def test_timestamps_are_written_by_sqlite(store, monkeypatch):
    from rivet.models import FencedWrite

    monkeypatch.setattr("django.utils.timezone.now", lambda: datetime(2001, 1, 1, tzinfo=UTC))
    before = db_now()
    task_id = store.task_enqueue(spec()).task_id
    created, updated, visible = raw_row(
        "rivet_task", task_id, "created_at", "updated_at", "visible_at"
    )
    assert all(SQLITE_TIME.match(t) for t in (created, updated, visible)), (created, visible)
    assert before <= created == updated == visible <= db_now()

    leased = store.task_claim(queues=["sq"], owner="w1", limit=1, lease_ttl=30).claimed[0]
    updated, visible = raw_row("rivet_task", task_id, "updated_at", "visible_at")
    with connections["sqlite"].cursor() as cursor:
        cursor.execute("SELECT strftime('%Y-%m-%d %H:%M:%f', %s, '+30 seconds')", [updated])
        assert visible == cursor.fetchone()[0], "visible_at = the claim's now + lease_ttl"

    store.task_ack(Lease(task_id=task_id, epoch=leased.epoch + 1))
    fence_id = FencedWrite.objects.using("sqlite").get(task_id=task_id).id
    assert SQLITE_TIME.match(raw_row("rivet_fenced_write", fence_id, "created_at")[0])

    record = store.task_get(task_id)
    assert record.created_at.tzinfo == UTC and record.created_at.year > 2001
    assert record.visible_at - record.updated_at == timedelta(seconds=30)


def test_times_written_by_django_compare_with_times_written_by_sqlite(store):
    from rivet.models import Task

    now = datetime.now(UTC).replace(microsecond=123456)
    orm = Task.objects.using("sqlite")
    overdue = orm.create(queue="sq", kind="sq.noop", visible_at=now - timedelta(hours=1)).id
    future = orm.create(queue="sq", kind="sq.noop", visible_at=now + timedelta(hours=1)).id
    fresh = store.task_enqueue(spec()).task_id
    past_run_at = store.task_enqueue(spec(run_at=now - timedelta(hours=2))).task_id
    assert raw_row("rivet_task", overdue, "visible_at")[0].endswith(".123456"), "Django's format"

    leased = store.task_claim(queues=["sq"], owner="w1", limit=10, lease_ttl=30).claimed
    assert [c.task_id for c in leased] == [past_run_at, overdue, fresh]
    assert store.task_get(future).state == "pending"
    assert orm.get(id=fresh).visible_at == store.task_get(fresh).visible_at
    assert store.task_get(past_run_at).attempts == 1


if __name__ == "__main__":
    _claimer(*sys.argv[1:])
