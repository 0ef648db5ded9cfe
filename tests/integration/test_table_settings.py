"""Migration 0008: the task table's storage settings on PostgreSQL (vacuumed early)."""

import pytest
from django.db import connection

from rivet.models import Task


@pytest.mark.django_db
def test_the_task_table_is_vacuumed_early_and_keeps_full_pages() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE oid = 'rivet_task'::regclass")
        (options,) = cursor.fetchone()
    settings = dict(option.split("=", 1) for option in options or [])
    assert settings == {
        "fillfactor": "100",
        "autovacuum_vacuum_scale_factor": "0.01",
        "autovacuum_vacuum_threshold": "1000",
        "autovacuum_vacuum_insert_scale_factor": "0.01",
        "autovacuum_vacuum_insert_threshold": "1000",
        "autovacuum_analyze_scale_factor": "0.02",
        "autovacuum_analyze_threshold": "1000",
    }
    assert Task._meta.db_table == "rivet_task"
