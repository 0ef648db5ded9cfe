"""Migrations: none missing, and both databases the suite uses are fully migrated."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connections
from django.db.migrations.executor import MigrationExecutor


@pytest.mark.django_db(databases="__all__")
def test_models_have_no_missing_migrations():
    out, err = StringIO(), StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=err)
    except SystemExit as exc:
        pytest.fail(
            f"makemigrations --check exited {exc.code}: a model changed without a migration "
            f"(run `python manage.py makemigrations`).\n{out.getvalue()}{err.getvalue()}"
        )
    assert "No changes detected" in out.getvalue()


@pytest.mark.django_db(databases="__all__")
@pytest.mark.parametrize("alias", ["default", "sqlite"])
def test_test_database_is_fully_migrated(alias):
    executor = MigrationExecutor(connections[alias])
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    assert plan == [], f"unapplied migrations on {alias!r}: {[m.name for m, _ in plan]}"
    applied = executor.loader.applied_migrations
    assert ("rivet", "0001_initial") in applied
