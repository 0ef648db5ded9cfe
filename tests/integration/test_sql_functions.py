"""rivet/stores/postgres/functions.sql is what a migrated database holds: each SQL function of
the PostgreSQL store, its arguments, result, language, volatility and body, and no other."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction

from rivet.stores.postgres.queries import FUNCTIONS

pytestmark = pytest.mark.django_db

#: What a function is, read from the catalog: its body with its whitespace collapsed (the
#: source loader drops indentation; no body has a string literal that spans lines).
SHAPES = """
SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_function_result(p.oid),
    l.lanname, p.provolatile, p.proparallel, p.prosrc
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
JOIN pg_language l ON l.oid = p.prolang
WHERE n.nspname = %s AND p.proname LIKE 'rivet\\_%%'
"""
SCRATCH = "rivet_functions_source"


def shapes(cursor: Any, schema: str) -> dict[tuple[str, str], tuple[Any, ...]]:
    cursor.execute(SHAPES, [schema])
    return {
        (name, arguments): (result, language, volatility, parallel, " ".join(body.split()))
        for name, arguments, result, language, volatility, parallel, body in cursor.fetchall()
    }


def test_a_migrated_database_holds_exactly_the_functions_of_the_source() -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT current_schema()")
        (schema,) = cursor.fetchone()
        migrated = shapes(cursor, schema)
        cursor.execute(f"CREATE SCHEMA {SCRATCH}")
        cursor.execute(f"SET LOCAL search_path = {SCRATCH}")
        for text in FUNCTIONS.values():
            cursor.execute(text)
        source = shapes(cursor, SCRATCH)
        transaction.set_rollback(True)
    assert sorted(FUNCTIONS) == sorted(name for name, _ in source)
    assert migrated == source, (
        "rivet/stores/postgres/functions.sql and the migrations disagree: a change to a "
        "function needs a migration that installs it, and functions.sql holds what the last "
        "one installed"
    )
