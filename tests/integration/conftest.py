"""Store fixtures for real-database tests: one conformance Harness per store.

The SQL harnesses need database access granted by the test's mark, which a fixture cannot
add itself::

    @pytest.mark.django_db(databases=["default", "sqlite"], transaction=True)  # sqlite_harness
    @pytest.mark.django_db(transaction=True)                                   # postgres_harness

``transaction=True`` matters: the checks run real threads, each on its own connection, which
only see committed rows; and it flushes the tables between tests.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connections, transaction

from rivet.conformance import Harness
from rivet.stores.base import Store
from rivet.stores.memory import FakeClock, MemoryStore

# Moving a SQL store's clock forward = moving every stored timestamp back, kept in the format
# the store writes (SQLite: Django's 'YYYY-MM-DD HH:MM:SS.SSS' text, as Now() writes it).
SHIFTED_TIMESTAMP_SQL = {
    "postgresql": "{column} - make_interval(secs => %(secs)s)",
    "sqlite": "strftime('%%Y-%%m-%%d %%H:%%M:%%f', {column}, -%(secs)s || ' seconds')",
}


def shift_sql(vendor: str) -> str:
    shifted = SHIFTED_TIMESTAMP_SQL[vendor]
    columns = ("visible_at", "created_at", "updated_at", "claim_rank")
    assignments = ", ".join(f"{c} = {shifted.format(column=c)}" for c in columns)
    return f"UPDATE rivet_task SET {assignments}"


def shift_fences_sql(vendor: str) -> str:
    shifted = SHIFTED_TIMESTAMP_SQL[vendor].format(column="created_at")
    return f"UPDATE rivet_fenced_write SET created_at = {shifted}"


def shift_timestamps(alias: str, store: Store | None = None):
    """An ``advance(secs)`` for a SQL store: every rivet_task and rivet_fenced_write timestamp
    moves secs earlier, and so do the store's claim floors (PostgreSQL's), if it keeps any."""

    def advance(secs: float) -> None:
        connection = connections[alias]
        with connection.cursor() as cursor:
            cursor.execute(shift_sql(connection.vendor), {"secs": float(secs)})
            cursor.execute(shift_fences_sql(connection.vendor), {"secs": float(secs)})
        floors = getattr(store, "floors", None)
        if floors is not None:
            floors.elapse(secs)

    return advance


def sql_harness(store: Store, alias: str) -> Harness:
    return Harness(
        store=store,
        advance=shift_timestamps(alias, store),
        concurrent=True,
        atomic=lambda: transaction.atomic(using=alias),
    )


@pytest.fixture
def memory_harness() -> Harness:
    """A MemoryStore on a FakeClock; needs no database."""
    clock = FakeClock()
    return Harness(store=MemoryStore(clock=clock), advance=clock.advance, atomic=None)


@pytest.fixture
def sqlite_harness() -> Iterator[Harness]:
    """SqliteStore on the 'sqlite' alias (a real file)."""
    from rivet.stores.sqlite import SqliteStore

    store = SqliteStore(using="sqlite")
    yield sql_harness(store, "sqlite")
    store.close()


@pytest.fixture
def postgres_harness() -> Iterator[Harness]:
    """PostgresStore on the 'default' alias."""
    from rivet.stores.postgres import PostgresStore

    store = PostgresStore(using="default")
    yield sql_harness(store, "default")
    store.close()


@pytest.fixture
def postgres_plain_harness() -> Iterator[Harness]:
    """PostgresStore on the 'default' alias with its speed paths off (``fast_paths=False``):
    every statement the plain way, through Django's cursor."""
    from rivet.stores.postgres import PostgresStore

    store = PostgresStore(using="default", fast_paths=False)
    yield sql_harness(store, "default")
    store.close()


@pytest.fixture
def pgbouncer_harness(pgbouncer_transaction) -> Iterator[Harness]:
    """PostgresStore on the 'default' alias through PgBouncer in transaction pooling."""
    from rivet.stores.postgres import PostgresStore
    from tests.pgbouncer import through

    with through(pgbouncer_transaction):
        store = PostgresStore(using="default")
        assert store.pooled
        yield sql_harness(store, "default")
        store.close()


@pytest.fixture
def harness(request: pytest.FixtureRequest) -> Harness:
    """The harness named by an indirect parameter: "memory", "sqlite", "postgres",
    "postgres_plain" (its speed paths off) or "pgbouncer" (PostgreSQL through PgBouncer in
    transaction pooling)."""
    return request.getfixturevalue(f"{request.param}_harness")
