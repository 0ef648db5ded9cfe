"""The PostgreSQL store through PgBouncer in transaction pooling: it leaves no session state.

A transaction pooler hands a server connection to another client after each transaction, so
whatever a client leaves in the session (a SET, a prepared statement, a temporary table, a
LISTEN) reaches the next client, and a prepared statement a client counts on is gone. Behind one
(the alias's DISABLE_SERVER_SIDE_CURSORS) the store sends none; these tests run its busiest
paths through a bouncer of two server connections, then look at both server connections.
The conformance suite runs through the same bouncer (test_conformance.py, pgbouncer-<check>);
the worker and the producers as processes, in both poolings: tests/acceptance/test_pgbouncer.py.
"""

from __future__ import annotations

import threading
import uuid

import pytest
from django.conf import settings
from django.db import connections
from django.test import override_settings

from rivet.stores.postgres import _PROBED, PostgresStore
from rivet.values import TaskSpec
from tests.pgbouncer import POOL_SIZE, through

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "bnc"
#: Enough rows for the bulk enqueue's COPY path (rivet.stores.bulk.COPY_MIN_ROWS).
BULK = 250

SESSION_STATE = """
SELECT current_setting('plan_cache_mode') AS plan_cache_mode,
       current_setting('enable_sort') AS enable_sort,
       current_setting('enable_seqscan') AS enable_seqscan,
       (SELECT count(*) FROM pg_prepared_statements) AS prepared,
       (SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema()) AS temp_tables,
       (SELECT count(*) FROM pg_listening_channels()) AS listening,
       (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())
           AS advisory_locks,
       pg_backend_pid() AS pid
"""


def every_server_connection(bouncer, dbname: str) -> list[dict]:
    """The session state of each of the bouncer's server connections for ``dbname``: as many
    clients as it has server connections, each inside a transaction at once, so each holds one."""
    barrier = threading.Barrier(POOL_SIZE)
    seen: list[dict] = []

    def look() -> None:
        with bouncer.connect(dbname) as conn, conn.transaction():
            cursor = conn.execute(SESSION_STATE)
            names = [column.name for column in cursor.description]
            seen.append(dict(zip(names, cursor.fetchone(), strict=True)))
            barrier.wait(timeout=10)

    threads = [threading.Thread(target=look) for _ in range(POOL_SIZE)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=15)
    return seen


def busiest_paths(store: PostgresStore) -> None:
    """The store's busiest paths: single and bulk enqueue (both COPY paths), and flushes."""
    store.task_enqueue(TaskSpec(queue=QUEUE, kind="noop", payload=0))
    # Both COPY paths: plain tasks straight into rivet_task, keyed ones through the stage.
    specs = [TaskSpec(queue=QUEUE, kind="noop", payload=n) for n in range(BULK)]
    assert len(store.task_enqueue_many(specs)) == BULK
    keyed = [
        TaskSpec(queue=QUEUE, kind="noop", payload=n, idem_key=f"bnc-{n}-{uuid.uuid4().hex}")
        for n in range(BULK)
    ]
    twice = store.task_enqueue_many(keyed * 2)
    assert [r.duplicate for r in twice] == [False] * BULK + [True] * BULK
    flushed = 0
    for _ in range(3):  # flushes: the worker's statement, several times (it was prepared)
        batch = store.task_claim(queues=[QUEUE], owner="t", limit=50, lease_ttl=30)
        flushed += len(batch.claimed)
    assert flushed == 150


def reset_server_connections(bouncer, dbname: str) -> None:
    """Give every server connection of the bouncer back as new (the fallback tests below leave
    prepared statements on them on purpose; the bouncer is shared by the whole run)."""
    barrier = threading.Barrier(POOL_SIZE)

    def reset() -> None:
        with bouncer.connect(dbname) as conn, conn.transaction():
            # Each client holds its own server connection until all have cleaned theirs.
            for statement in ("DEALLOCATE ALL", "RESET ALL", "UNLISTEN *"):
                conn.execute(statement)
            conn.execute("SELECT pg_advisory_unlock_all()")
            barrier.wait(timeout=10)

    threads = [threading.Thread(target=reset) for _ in range(POOL_SIZE)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=15)


def assert_no_session_state(bouncer, dbname: str) -> None:
    """Another client finds every server connection of the bouncer as a new session has it."""
    seen = every_server_connection(bouncer, dbname)
    assert len({row["pid"] for row in seen}) == POOL_SIZE
    for row in seen:
        assert row == {
            **row,
            "plan_cache_mode": "auto",
            "enable_sort": "on",
            "enable_seqscan": "on",
            "prepared": 0,
            "temp_tables": 0,
            "listening": 0,
            "advisory_locks": 0,
        }


def test_no_session_state_is_left_on_the_pooled_server_connections(pgbouncer_transaction):
    dbname = connections["default"].settings_dict["NAME"]
    with through(pgbouncer_transaction):
        store = PostgresStore(using="default")
        assert store.pooled and not store.supports_wakeup
        busiest_paths(store)
        store.close()
    assert_no_session_state(pgbouncer_transaction, dbname)


def test_a_transaction_pooler_the_alias_does_not_name_is_found_before_any_session_state(
    pgbouncer_transaction, caplog
):
    """Without DISABLE_SERVER_SIDE_CURSORS, the store probes its way to the server before it
    sends anything a session would keep: the pooler is found at once, no flush fails, and
    another client finds nothing left on the shared server connections."""
    dbname = connections["default"].settings_dict["NAME"]
    _PROBED.clear()  # an earlier test of this process may have probed the same way
    with through(pgbouncer_transaction, flag=False):
        store = PostgresStore(using="default")
        assert store.pooled and store.pooler_detected and not store.supports_wakeup
        assert "transaction_pooler_detected" in caplog.text
        assert "two connections were given one server connection" in caplog.text
        busiest_paths(store)
        store.close()
    assert_no_session_state(pgbouncer_transaction, dbname)


def test_session_pooling_and_a_direct_connection_are_not_taken_for_a_transaction_pooler(
    pgbouncer_session,
):
    _PROBED.clear()
    direct = PostgresStore(using="default")
    assert not direct.pooled and direct.supports_wakeup
    with through(pgbouncer_session, flag=False):
        store = PostgresStore(using="default")
        assert not store.pooled and not store.pooler_detected and store.supports_wakeup
        store.close()


def missed_probe() -> None:
    """Pin the probe's answer for the bouncer as 'no pooler', as when it misses one (a pooler
    that hands out server connections round robin, or another client that took the released
    one at each look): what the fallback below the probe must still survive."""
    db = connections["default"].settings_dict
    way = ("default", *(str(db.get(key) or "") for key in ("HOST", "PORT", "NAME", "USER")))
    _PROBED[way] = False


def test_idle_workers_poll_unless_a_listen_url_bypasses_the_pooler(pgbouncer_transaction):
    db = settings.DATABASES["default"]
    direct = f"postgres://{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}"
    with through(pgbouncer_transaction):
        store = PostgresStore(using="default")
        assert not store.wait_for_work([QUEUE], 0.2)  # no LISTEN through the pooler
        rivet = {**getattr(settings, "RIVET", {}), "LISTEN_DATABASE_URL": direct}
        with override_settings(RIVET=rivet):
            assert store.supports_wakeup
            assert not store.wait_for_work([QUEUE], 0.2)  # listening now, nothing enqueued
            store.task_enqueue(TaskSpec(queue=QUEUE, kind="noop", payload=1))
            assert store.wait_for_work([QUEUE], 5.0)
        store.close()


def test_the_http_api_and_the_admin_through_transaction_pooling(pgbouncer_transaction):
    from django.test import Client
    from django.urls import reverse
    from rest_framework.test import APIClient

    from tests.factories import UserFactory

    dbname = connections["default"].settings_dict["NAME"]
    with through(pgbouncer_transaction):
        user = UserFactory(is_superuser=True)
        api = APIClient()
        api.force_login(user)
        one = api.post("/rivet/tasks/", {"kind": "noop", "queue": QUEUE}, format="json")
        assert one.status_code == 201, one.json()
        items = [{"kind": "noop", "queue": QUEUE, "payload": n} for n in range(3)]
        bulk = api.post("/rivet/tasks/bulk/", {"tasks": items}, format="json")
        assert bulk.status_code in (200, 201), bulk.json()
        assert api.get("/rivet/tasks/", {"queue": QUEUE}).status_code == 200
        admin = Client()
        admin.force_login(user)
        page = admin.get(reverse("admin:rivet_task_changelist"))
        assert page.status_code == 200
        assert str(one.json()["id"]).encode() in page.content
    for row in every_server_connection(pgbouncer_transaction, dbname):
        assert row == {
            **row,
            "plan_cache_mode": "auto",
            "enable_sort": "on",
            "enable_seqscan": "on",
            "prepared": 0,
            "temp_tables": 0,
        }


def test_a_transaction_pooler_the_probe_missed_is_detected(pgbouncer_transaction, caplog):
    """Without the flag and with a probe that missed the pooler, the first prepared statement
    the pooler loses fails that one flush; the store then prepares nothing, and the next
    flushes run."""
    from rivet.errors import StoreError

    dbname = connections["default"].settings_dict["NAME"]
    with through(pgbouncer_transaction, flag=False):
        missed_probe()
        store = PostgresStore(using="default")
        store.task_enqueue_many([TaskSpec(queue=QUEUE, kind="noop", payload=n) for n in range(9)])
        assert not store.pooled
        store.task_claim(queues=[QUEUE], owner="t", limit=1, lease_ttl=30)  # prepared, on A
        failed = 0
        for _ in range(4):  # another client holds server A: the store's next flush gets B
            with pgbouncer_transaction.connect(dbname) as other, other.transaction():
                other.execute("SELECT 1")
                try:
                    store.task_claim(queues=[QUEUE], owner="t", limit=1, lease_ttl=30)
                except StoreError:
                    failed += 1
            if store.pooled:
                break
        assert store.pooler_detected and failed == 1
        assert "transaction_pooler_detected" in caplog.text
        claimed = store.task_claim(queues=[QUEUE], owner="t", limit=5, lease_ttl=30)
        assert len(claimed.claimed) == 5
        assert not store.supports_wakeup
        store.close()
    reset_server_connections(pgbouncer_transaction, dbname)


def test_single_enqueues_through_a_pooler_the_alias_does_not_name_write_each_task_once(
    pgbouncer_transaction, caplog
):
    """The single enqueue's own prepared statement (rivet_enqueue_<hash>, sent through libpq)
    meets the pooler too: a server connection without it is found out (26000, the statement did
    not run) and given it again, and one that has it already (42P05) is used as it is. A second
    loss in one call fails that enqueue and the store stops preparing. Either way each enqueue
    that returned wrote its task once, and a refused one wrote nothing."""
    from rivet.errors import StoreError

    dbname = connections["default"].settings_dict["NAME"]
    with through(pgbouncer_transaction, flag=False):
        missed_probe()
        store = PostgresStore(using="default")
        written, refused = [], 0
        for n in range(6):  # another client holds one server connection: the next gets the other
            with pgbouncer_transaction.connect(dbname) as other, other.transaction():
                other.execute("SELECT 1")
                try:
                    written.append(
                        store.task_enqueue(TaskSpec(queue=QUEUE, kind="noop", payload=n))
                    )
                except StoreError:
                    refused += 1
            written.append(store.task_enqueue(TaskSpec(queue=QUEUE, kind="noop", payload=-n)))
        tasks = store.task_list(queue=QUEUE, limit=100)
        assert sorted(t.id for t in tasks) == sorted(r.task_id for r in written)
        assert len(tasks) == 12 - refused and refused <= 1
        assert refused == 0 or "transaction_pooler_detected" in caplog.text
        store.close()
    reset_server_connections(pgbouncer_transaction, dbname)
