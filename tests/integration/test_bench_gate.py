"""The bench's start gate counts what it waits for: a worker's wake-up listener, asleep after its
LISTEN, and no other session (bench/runner.py, ``_wait_listening``)."""

import time

import psycopg
import pytest
from django.db import connection

from chaos_project.kit import queries
from rivet.stores.postgres import PostgresStore

pytestmark = pytest.mark.django_db(transaction=True)


def listening() -> int:
    with connection.cursor() as cursor:
        cursor.execute(queries.BENCH_LISTENING)
        return cursor.fetchone()[0]


def test_a_workers_listener_counts_once_and_other_idle_sessions_do_not() -> None:
    before = listening()
    params = connection.get_connection_params()
    with psycopg.connect(**params, autocommit=True) as other:
        other.execute("SELECT 1")  # idle, its last statement not a LISTEN
        assert listening() == before
        store = PostgresStore()
        try:
            # the worker's own wait: its listener connects, LISTENs and sleeps the timeout out
            assert store.wait_for_work(["gate-q"], timeout=0.05) is False
            assert listening() == before + 1
            assert store.wait_for_work(["gate-q"], timeout=0.05) is False
            assert listening() == before + 1  # the same connection, still one
        finally:
            store.close()
        # a closed session's backend leaves pg_stat_activity once it has exited
        deadline = time.monotonic() + 10
        while listening() != before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert listening() == before
