"""The worker and the producers as processes through PgBouncer, in transaction and session pooling.

Every process gets a DATABASE_URL through the bouncer (in transaction pooling with
``?disable_server_side_cursors=True``, which tells Django and rivet a transaction pooler sits
between). A producer process enqueues one task and a bulk batch large enough for the COPY path;
a worker process runs them all and exits 0; one more task enqueued while the worker is idle
is picked up by polling (transaction pooling: LISTEN does not pass the pooler) or by LISTEN
(session pooling), and with RIVET_LISTEN_DATABASE_URL by a LISTEN that bypasses the pooler.
"""

from __future__ import annotations

import signal
import threading

import psycopg
import pytest
from django.db import connections

from rivet.models import Task
from rivet.values import TaskState
from tests.acceptance.test_worker_metrics import free_port, sample, scrapable, scrape
from tests.integration.test_pgbouncer import assert_no_session_state, reset_server_connections
from tests.pgbouncer import running_bouncer
from tests.processes import child_environ, manage

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

#: Rows of the bulk enqueue: above rivet.stores.bulk.COPY_MIN_ROWS, so it stages with COPY.
BULK = 250
PRODUCE = f"""
from rivet.producer import enqueue, enqueue_many
enqueue("noop", {{"single": 1}}, queue="bnc")
results = enqueue_many([{{"kind": "noop", "payload": n, "queue": "bnc"}} for n in range({BULK})])
print(len(results))
"""


@pytest.mark.parametrize("mode", ["transaction", "session"])
def test_producers_and_a_worker_through_pgbouncer(mode, request, workers):
    bouncer = request.getfixturevalue(f"pgbouncer_{mode}")
    db = connections["default"].settings_dict
    env = child_environ(bouncer.url(db["NAME"]))
    produced = manage("shell", "-c", PRODUCE, env=env)
    assert (produced.returncode, produced.stdout.split()[-1]) == (0, str(BULK)), produced.stderr
    worker = workers.start(
        "--queue", "bnc", "--concurrency", "4", "--prefetch", "32", "--pool-size", "6",
        "--log-format", "json", "--poll-interval", "0.2", "--max-jobs", str(BULK + 2), env=env,
    )  # fmt: skip
    workers.wait_for(
        lambda: Task.objects.filter(state=TaskState.DONE).count() == BULK + 1, "the batch done"
    )
    late = manage("rivet_enqueue", "--queue", "bnc", "--kind", "noop", env=env)
    assert late.returncode == 0, late.stderr
    assert worker.wait() == 0, worker.log
    assert Task.objects.filter(state=TaskState.DONE).count() == BULK + 2
    assert not worker.events("claim_failed") and not worker.events("listener_failed")
    assert not worker.events("db_waiting")
    polling = [event["note"] for event in worker.events("wakeup_polling")]
    assert len(polling) == (1 if mode == "transaction" else 0)


def test_a_worker_behind_a_transaction_pooler_listens_through_the_bypass_url(
    pgbouncer_transaction, workers
):
    db = connections["default"].settings_dict
    direct = f"postgres://{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}"
    env = child_environ(pgbouncer_transaction.url(db["NAME"]), RIVET_LISTEN_DATABASE_URL=direct)
    # A poll interval longer than the test: only a notification can wake the idle worker.
    worker = workers.start(
        "--queue", "bnc", "--log-format", "json", "--poll-interval", "60", env=env
    )  # fmt: skip
    workers.wait_for(lambda: worker.events("worker_started"), "the worker started")
    workers.wait_for(
        lambda: _listening(db["NAME"]), "the worker's LISTEN on the server, not the bouncer"
    )
    assert manage("rivet_enqueue", "--queue", "bnc", "--kind", "noop", env=env).returncode == 0
    workers.wait_for(lambda: worker.events("acked"), "the task run at once", limit=15)
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.log
    assert not worker.events("wakeup_polling")


def _listening(dbname: str) -> bool:
    """A session LISTENs: its last statement is the LISTEN, or (behind a transaction pooler)
    the waiter locks its listening connection takes right after it (the wake-up gate)."""
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
            "AND (query LIKE 'LISTEN%%' OR query LIKE 'SELECT rivet_wait_hold(%%')",
            [dbname],
        )
        return cursor.fetchone()[0] > 0


def test_a_worker_through_a_transaction_pooler_its_url_does_not_name_leaves_no_session_state(
    pgbouncer_transaction, workers
):
    """A naive config: transaction pooling, and a DATABASE_URL without the flag. The worker
    finds the pooler before it sets anything (no flush fails), runs every task, and another
    client then finds both server connections as new sessions have them."""
    bouncer = pgbouncer_transaction
    db = connections["default"].settings_dict
    naive = f"postgres://{bouncer.user}@{bouncer.host}:{bouncer.port}/{db['NAME']}"
    reset_server_connections(bouncer, db["NAME"])  # as new, whatever earlier tests left
    env = child_environ(naive)
    produced = manage("shell", "-c", PRODUCE, env=env)
    assert (produced.returncode, produced.stdout.split()[-1]) == (0, str(BULK)), produced.stderr
    worker = workers.start(
        "--queue", "bnc", "--concurrency", "4", "--pool-size", "6", "--log-format", "json",
        "--poll-interval", "0.2", "--max-jobs", str(BULK + 1), env=env,
    )  # fmt: skip
    assert worker.wait() == 0, worker.log
    assert Task.objects.filter(state=TaskState.DONE).count() == BULK + 1
    (detected,) = worker.events("transaction_pooler_detected")
    assert "two connections" in detected["how"]
    assert not worker.events("claim_failed")
    assert_no_session_state(bouncer, db["NAME"])


def test_a_worker_says_when_a_session_pooler_has_no_free_server_connection(
    workers, django_db_setup
):
    """Session pooling with one server connection, held by another client: the worker's first
    statement would wait for PgBouncer's query_wait_timeout (two minutes). It says within
    --connect-timeout-secs that no server connection is free, and exits 1."""
    db = connections["default"].settings_dict
    with running_bouncer("session", pool=1) as bouncer, bouncer.connect(db["NAME"]) as holder:
        holder.execute("SELECT 1")  # session pooling: its server connection is held until it ends
        worker = workers.start(
            "--queue", "bnc", "--once", "--connect-timeout-secs", "2",
            env=child_environ(bouncer.url(db["NAME"])),
        )  # fmt: skip
        assert worker.wait() == 1, worker.log
    assert "did not answer its first statement within 2 s" in worker.log
    assert "no server connection is free" in worker.log


def _pool_counts(bouncer, dbname: str) -> dict[str, int]:
    """PgBouncer's SHOW POOLS for ``dbname``: its clients waiting and its server connections."""
    with psycopg.connect(
        host=bouncer.host,
        port=bouncer.port,
        user=bouncer.user,
        dbname="pgbouncer",
        autocommit=True,
        cursor_factory=psycopg.ClientCursor,  # the admin console speaks the simple protocol
    ) as admin:
        cursor = admin.execute("SHOW POOLS")
        names = [column.name for column in cursor.description]
        for row in cursor.fetchall():
            pool = dict(zip(names, row, strict=True))
            if pool["database"] == dbname:
                return {key: int(pool[key]) for key in ("cl_waiting", "sv_active", "sv_idle")}
    return {"cl_waiting": 0, "sv_active": 0, "sv_idle": 0}


def test_a_running_worker_says_when_a_new_connection_finds_no_free_server_connection(
    workers, django_db_setup
):
    """Session pooling: a running worker (it LISTENs past the bouncer) holds some server
    connections, other clients hold the rest and as many more wait in the bouncer's queue.
    The worker's server connections are then ended: the queued clients get the bouncer's
    next ones, and the worker's new connections wait (PgBouncer: up to query_wait_timeout,
    two minutes). The worker says within --connect-timeout-secs that no server connection is
    free, once per waiting thread, and when the clients let go, that the wait is over."""
    db = connections["default"].settings_dict
    dbname = db["NAME"]
    direct = f"postgres://{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}"
    release = threading.Event()
    holders: list[threading.Thread] = []

    def hold(bouncer) -> None:
        with bouncer.connect(dbname) as holder:
            holder.execute("SELECT 1")  # waits in the bouncer's queue, then holds its server
            release.wait(90)

    def one_more_holder(bouncer) -> None:
        holders.append(threading.Thread(target=hold, args=(bouncer,)))
        holders[-1].start()

    with running_bouncer("session", pool=4) as bouncer:
        env = child_environ(bouncer.url(dbname), RIVET_LISTEN_DATABASE_URL=direct)
        worker = workers.start(
            "--queue", "bnc", "--concurrency", "1", "--pool-size", "3", "--log-format", "json",
            "--poll-interval", "0.3", "--connect-timeout-secs", "2", env=env,
        )  # fmt: skip
        workers.wait_for(lambda: worker.events("worker_started"), "the worker started")
        workers.wait_for(lambda: _backends_of_others(dbname), "the worker on the server")
        try:
            while _pool_counts(bouncer, dbname)["cl_waiting"] == 0:  # fill the free ones
                one_more_holder(bouncer)
                workers.wait_for(
                    lambda: (
                        _pool_counts(bouncer, dbname)["cl_waiting"]
                        or len(_holding(dbname)) == len(holders)
                    ),
                    "the last client holding a server connection or queued",
                )
            worker_backends = _backends_of_others(dbname)
            for _ in worker_backends[1:]:  # one queued client for each of the worker's
                one_more_holder(bouncer)
            workers.wait_for(
                lambda: _pool_counts(bouncer, dbname)["cl_waiting"] == len(worker_backends),
                "a queued client for each of the worker's server connections",
            )
            with connections["default"].cursor() as cursor:  # past the bouncer: the server
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid",
                    [worker_backends],
                )
            waiting = workers.wait_for(
                lambda: worker.events("db_waiting"), "the worker saying it waits", limit=60
            )
            assert "query_wait_timeout" not in worker.log  # said before the bouncer's own end
        finally:
            release.set()
            for thread in holders:
                thread.join(30)
        over = workers.wait_for(lambda: worker.events("db_wait_over"), "the wait over", limit=60)
        worker.send(signal.SIGTERM)
        assert worker.wait() == 0, worker.log
    causes = {event["cause"] for event in worker.events("db_waiting")}
    assert causes == {"no_free_server_connection"}, worker.log
    first = waiting[0]
    assert first["alias"] == "default"
    assert first["doing"] in {"claim", "schedule pass", "wake-up check"}, first
    assert "no server connection is free" in first["note"]
    assert "default_pool_size" in first["note"]
    assert over[0]["alias"] == "default" and over[0]["waited"] > 0


def _holding(dbname: str) -> list[int]:
    """The server sessions of the test's clients that got a server connection."""
    return [pid for pid, query in _sessions(dbname) if query == "SELECT 1"]


def _backends_of_others(dbname: str) -> list[int]:
    """The worker's server sessions through the bouncer: neither the test's clients, nor its
    LISTEN (past the bouncer), nor this test's own connection."""
    return [
        pid for pid, query in _sessions(dbname) if query != "SELECT 1" and "LISTEN" not in query
    ]


def _sessions(dbname: str) -> list[tuple[int, str]]:
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT pid, query FROM pg_stat_activity WHERE datname = %s "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
            [dbname],
        )
        return [(pid, query) for pid, query in cursor.fetchall()]


def test_a_running_worker_says_when_a_statement_waits_on_a_lock(workers, django_db_setup):
    """A claim that waits on a lock another session holds is named a slow statement on a
    connection that has answered before, not a pooler with no free server connection; the
    gauge of the longest wait in progress shows it."""
    port = free_port()
    worker = workers.start(
        "--queue", "bnc", "--concurrency", "1", "--log-format", "json", "--poll-interval", "0.3",
        "--connect-timeout-secs", "2", "--metrics-port", str(port),
    )  # fmt: skip
    workers.wait_for(lambda: worker.events("worker_started"), "the worker started")
    assert workers.wait_for(lambda: scrapable(port), "the metrics port to answer")
    with psycopg.connect(**_direct_params()) as locker:
        with locker.transaction():
            locker.execute("LOCK TABLE rivet_task IN ACCESS EXCLUSIVE MODE")
            waiting = workers.wait_for(
                lambda: worker.events("db_waiting"), "the worker saying it waits", limit=60
            )
            assert sample(scrape(port), "rivet_worker_db_wait_seconds") > 0
    over = workers.wait_for(lambda: worker.events("db_wait_over"), "the wait over", limit=60)
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.log
    assert {event["cause"] for event in waiting} == {"slow_statement"}, worker.log
    assert "a lock another session holds" in waiting[0]["note"]
    assert "no server connection is free" not in worker.log
    assert over


def _direct_params() -> dict:
    params = connections["default"].get_connection_params()
    for django_only in ("cursor_factory", "context", "pool"):
        params.pop(django_only, None)
    return params
