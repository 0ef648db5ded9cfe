"""``rivet.stores.direct.DirectStatement`` without a server: its text, its name, and which
values it sends itself as text (the rest it leaves to psycopg).

Its runs against PostgreSQL (prepared once, a session reset, a pooler, the server's errors) are
in tests/integration/test_postgres_store_specific.py and test_pgbouncer.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rivet.stores.direct import DirectStatement
from rivet.stores.postgres import DIRECT_ENQUEUE, QUERIES

SQL = "SELECT %(a)s::text, %(b)s::int, %(a)s::text || %(c)s::text"


def test_named_parameters_become_positional_in_order_of_first_use() -> None:
    statement = DirectStatement("t", SQL)
    assert statement.text == b"SELECT $1::text, $2::int, $1::text || $3::text"
    assert statement.params == ("a", "b", "c")


def test_the_name_carries_the_texts_hash() -> None:
    one, same, other = (
        DirectStatement("t", SQL),
        DirectStatement("t", SQL),
        DirectStatement("t", "SELECT 1"),
    )
    assert one.name == same.name != other.name
    assert one.name.startswith(b"t_") and len(one.name) == len(b"t_") + 12


def test_the_enqueue_statement_takes_every_parameter_of_the_query() -> None:
    assert set(DIRECT_ENQUEUE.params) == set(
        name.split(")")[0] for name in QUERIES["enqueue"].split("%(")[1:]
    )
    assert b"%(" not in DIRECT_ENQUEUE.text


@pytest.mark.parametrize(
    ("value", "sent"),
    [
        (None, None),
        ("caf\u00e9", "caf\u00e9".encode()),
        (0, b"0"),
        (-(2**40), b"-1099511627776"),
        (0.1, b"0.1"),
        (1e-300, b"1e-300"),
        (datetime(2030, 1, 2, 3, 4, 5, 6, tzinfo=UTC), b"2030-01-02T03:04:05.000006+00:00"),
        (
            datetime(2030, 1, 2, tzinfo=timezone(timedelta(hours=-5))),
            b"2030-01-02T00:00:00-05:00",
        ),
    ],
)
def test_values_it_sends_as_text(value: object, sent: bytes | None) -> None:
    statement = DirectStatement("t", "SELECT %(v)s")
    assert statement.encode({"v": value}) == [sent]


@pytest.mark.parametrize(
    "value",
    [
        "nul \x00 inside",  # libpq would cut the text at the NUL; psycopg refuses it
        float("inf"),
        float("nan"),
        True,  # not an int to PostgreSQL
        datetime(2030, 1, 2),  # no time zone: psycopg decides
        b"bytes",
        [1, 2],
    ],
)
def test_values_it_leaves_to_psycopg(value: object) -> None:
    statement = DirectStatement("t", "SELECT %(a)s, %(v)s")
    assert statement.encode({"a": "x", "v": value}) is None


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_float_reads_back_as_the_same_float(value: float) -> None:
    (sent,) = DirectStatement("t", "SELECT %(v)s::float8").encode({"v": value})
    assert sent is not None and float(sent.decode()) == value
