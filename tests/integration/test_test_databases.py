"""Both databases the suite uses (PostgreSQL 'default', the SQLite file) are fully migrated.

Whether a model lacks a migration is tests/unit/test_migrations.py's question; this one asks
whether the test databases Django made ran every migration there is.
"""

import pytest
from django.db import connections
from django.db.migrations.executor import MigrationExecutor


@pytest.mark.django_db(databases="__all__")
@pytest.mark.parametrize("alias", ["default", "sqlite"])
def test_test_database_is_fully_migrated(alias):
    executor = MigrationExecutor(connections[alias])
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    assert plan == [], f"unapplied migrations on {alias!r}: {[m.name for m, _ in plan]}"
    applied = executor.loader.applied_migrations
    assert ("rivet", "0001_initial") in applied
