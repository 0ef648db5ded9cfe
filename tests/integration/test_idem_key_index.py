"""The idempotency key has one index, unique over the tasks that have a key, on both SQL stores.

Migration 0015 replaced the field's ``unique=True`` (a unique index holding every task's NULL,
plus on PostgreSQL a ``varchar_pattern_ops`` index for LIKE that no query runs) with the
partial ``rivet_task_idem_key_uniq``. The key still names one task, whichever store enqueues
it and whatever code writes the row; tasks without a key never meet in that index.
"""

from __future__ import annotations

import importlib
import uuid

import pytest
from django.db import IntegrityError, connection, connections, transaction

from rivet.models import Task
from rivet.stores.postgres import QUERIES, PostgresStore
from rivet.stores.sqlite import SqliteStore
from tests.integration.pg_kit import spec

pytestmark = pytest.mark.django_db(databases=["default", "sqlite"], transaction=True)

INDEX = "rivet_task_idem_key_uniq"


def idem_key_indexes(alias: str) -> dict[str, str]:
    """{name: definition} of every index of rivet_task that reads idem_key."""
    with connections[alias].cursor() as cursor:
        if connections[alias].vendor == "postgresql":
            cursor.execute(
                "SELECT indexname, indexdef FROM pg_indexes "
                "WHERE tablename = 'rivet_task' AND indexdef LIKE '%%idem_key%%'"
            )
        else:
            # Every index, the ones SQLite makes for a UNIQUE column too (they have no SQL).
            cursor.execute(
                "SELECT il.name, coalesce(m.sql, '') FROM pragma_index_list('rivet_task') AS il "
                "JOIN pragma_index_info(il.name) AS ii LEFT JOIN sqlite_master AS m "
                "ON m.name = il.name WHERE ii.name = 'idem_key'"
            )
        return dict(cursor.fetchall())


@pytest.mark.parametrize("alias", ["default", "sqlite"])
def test_one_index_holds_the_key_and_only_rows_that_have_one(alias: str) -> None:
    indexes = idem_key_indexes(alias)
    assert list(indexes) == [INDEX], indexes
    definition = "".join(c for c in indexes[INDEX].upper() if c not in '"()')
    assert "UNIQUE INDEX" in definition
    assert definition.endswith("WHERE IDEM_KEY IS NOT NULL"), definition
    assert "VARCHAR_PATTERN_OPS" not in "".join(indexes.values()).upper()


@pytest.mark.parametrize("alias", ["default", "sqlite"])
def test_the_database_refuses_a_second_task_under_one_key(alias: str) -> None:
    key = f"idx-{uuid.uuid4().hex[:8]}"
    Task.objects.using(alias).create(queue="idx", kind="noop", idem_key=key)
    with pytest.raises(IntegrityError), transaction.atomic(using=alias):
        Task.objects.using(alias).create(queue="idx", kind="noop", idem_key=key)
    for _ in range(3):
        Task.objects.using(alias).create(queue="idx", kind="noop", idem_key=None)
    assert Task.objects.using(alias).filter(queue="idx").count() == 4


@pytest.mark.parametrize("store_class", [PostgresStore, SqliteStore], ids=["postgres", "sqlite"])
def test_each_store_dedupes_by_key_one_at_a_time_and_in_bulk(store_class) -> None:
    store = store_class(using="default" if store_class is PostgresStore else "sqlite")
    queue = f"idx-{uuid.uuid4().hex[:8]}"
    try:
        first = store.task_enqueue(spec(queue, payload=1, idem_key=f"{queue}:a"))
        again = store.task_enqueue(spec(queue, payload=1, idem_key=f"{queue}:a"))
        assert (again.task_id, again.duplicate) == (first.task_id, True)
        bulk = store.task_enqueue_many(
            [spec(queue, payload=1, idem_key=f"{queue}:a")]
            + [spec(queue, payload=n) for n in range(300)]
        )
        assert (bulk[0].task_id, bulk[0].duplicate) == (first.task_id, True)
        assert len({r.task_id for r in bulk[1:]}) == 300
        assert len(store.task_list(queue=queue, limit=1000)) == 301
    finally:
        store.close()


@pytest.mark.parametrize("query", ["find_by_idem_key", "find_by_idem_keys"])
def test_the_key_lookups_read_the_partial_index(query: str) -> None:
    params = {"idem_key": "k", "idem_keys": ["k", "l"]}
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + QUERIES[query], params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert INDEX in plan, plan


def test_the_migration_back_restores_the_unique_field_and_forth_again() -> None:
    migration = importlib.import_module("rivet.migrations.0015_task_idem_key_partial_unique")
    from django.apps import apps

    with connection.schema_editor(atomic=False) as editor:
        migration.to_unique_field(apps, editor)
    try:
        back = idem_key_indexes("default")
        assert INDEX not in back
        assert any("varchar_pattern_ops" in d for d in back.values()), back
        assert any("UNIQUE" in d and "WHERE" not in d for d in back.values()), back
    finally:
        with connection.schema_editor(atomic=False) as editor:
            migration.to_partial(apps, editor)
    assert list(idem_key_indexes("default")) == [INDEX]
