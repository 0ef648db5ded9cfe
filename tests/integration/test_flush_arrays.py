"""The flush's arrays, written as PostgreSQL array literals by the store (``array_text``).

psycopg adapted each list element by element; the store writes the literal itself. What the
server reads back must be the list, whatever the text holds (quotes, backslashes, commas,
braces, the word NULL, spaces), and each literal must carry the type psycopg gives the list it
stands for: psycopg keys a prepared statement by its parameters' types, and the flush's plans
depend on which statement it runs (tests/integration/test_stale_statistics.py).
"""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection
from psycopg.adapt import Transformer

from rivet.stores.postgres import array_text

pytestmark = pytest.mark.django_db

CAST = {"int": "bigint[]", "float": "float8[]", "str": "text[]"}
CASES = [
    ([], "int"),
    ([1], "int"),
    ([32767, -32768], "int"),
    ([32768], "int"),
    ([-32769, 5], "int"),
    ([2**31 - 1], "int"),
    ([2**31, 1], "int"),
    ([-(2**63), 2**63 - 1], "int"),
    ([], "float"),
    ([0.0], "float"),
    ([1.5, 1e-05, 123456789.123, 1e300, 2.5e-320, float("inf")], "float"),
    ([], "str"),
    ([None], "str"),
    (["", " a ", 'q"uo\\te', "NULL", None, "{}", "a,b", "ünï", "\\", '"'], "str"),
    (["tab\there\nline", '{"k": [1, "x\\"y"]}', "}{", "'"], "str"),
]


def pg() -> psycopg.Connection:
    connection.ensure_connection()
    raw = connection.connection
    assert raw is not None
    return raw


@pytest.mark.parametrize(("values", "kind"), CASES)
def test_the_server_reads_back_the_list(values: list, kind: str) -> None:
    with pg().cursor() as cursor:
        cursor.execute(f"SELECT %s::{CAST[kind]}", [array_text(values, kind)])
        row = cursor.fetchone()
    assert row is not None
    assert row[0] == values


@pytest.mark.parametrize(("values", "kind"), CASES)
def test_the_literal_has_the_type_psycopg_gives_the_list(values: list, kind: str) -> None:
    cursor = pg().cursor()
    cursor._tx = Transformer(cursor)  # what execute sets up before it converts the query
    as_list = cursor._convert_query("%s", [values]).types
    as_text = cursor._convert_query("%s", [array_text(values, kind)]).types
    assert as_text == as_list
