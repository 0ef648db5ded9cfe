"""The bench's start gate counts what it waits for: a wake-up listener connected since the
workers started, asleep after its LISTEN, and no other session (bench/runner.py,
``_wait_listening``)."""

import time

import psycopg
import pytest
from django.db import connection

from chaos_project.kit import queries
from rivet.stores.postgres import PostgresStore

pytestmark = pytest.mark.django_db(transaction=True)


def server_now():
    with connection.cursor() as cursor:
        cursor.execute(queries.SERVER_NOW)
        return cursor.fetchone()[0]


def listening(since) -> int:
    with connection.cursor() as cursor:
        cursor.execute(queries.BENCH_LISTENING, {"since": since})
        return cursor.fetchone()[0]


def test_a_workers_listener_counts_once_and_other_sessions_do_not() -> None:
    earlier = PostgresStore()  # a listener from before: a stopped row's, not yet gone
    try:
        assert earlier.wait_for_work(["gate-q"], timeout=0.05) is False
        time.sleep(0.01)
        since = server_now()
        assert listening(since) == 0
        with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:
            other.execute("SELECT 1")  # idle, connected since, its last statement not a LISTEN
            assert listening(since) == 0
            store = PostgresStore()
            try:
                # the worker's own wait: its listener connects, LISTENs and sleeps the timeout
                assert store.wait_for_work(["gate-q"], timeout=0.05) is False
                assert listening(since) == 1
                assert store.wait_for_work(["gate-q"], timeout=0.05) is False
                assert listening(since) == 1  # the same connection, still one
            finally:
                store.close()
        # a closed session's backend leaves pg_stat_activity once it has exited
        deadline = time.monotonic() + 10
        while listening(since) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert listening(since) == 0
    finally:
        earlier.close()
