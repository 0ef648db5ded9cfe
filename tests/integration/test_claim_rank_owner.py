"""Priority aging's rule has one owner per language, and the two agree.

PostgreSQL writes claim_rank with the SQL function ``rivet_claim_rank`` (migration 0016); the
memory and SQLite stores with ``rivet.values.rank_offset_secs`` (SQLite through the
``rivet_rank_offset`` function the store registers on each connection it uses). The
conformance suite's aging checks compare the claim order the stores give; these compare the
values themselves, at the clamp's edges too.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connections

from rivet.stores.sqlite import SqliteStore
from rivet.values import rank_offset_secs

READY = datetime(2026, 3, 1, 12, 0, 0, 250000, tzinfo=UTC)
CASES = [
    (priority, step)
    for priority in (-250, -100, -99, -3, 0, 1, 7, 100, 101, 32767)
    for step in (60.0, 0.5, 315_576_000.0)
]

pytestmark = pytest.mark.django_db(databases=["default", "sqlite"])


def test_postgres_function_and_python_rule_agree_to_the_microsecond():
    with connections["default"].cursor() as cursor:
        for priority, step in CASES:
            cursor.execute("SELECT rivet_claim_rank(%s, %s, %s)", [READY, priority, step])
            (ranked,) = cursor.fetchone()
            expected = READY + timedelta(seconds=rank_offset_secs(priority, step))
            assert ranked == expected, (priority, step, ranked, expected)


def test_the_clamp_bounds_priority_to_100_points_either_way():
    assert rank_offset_secs(10_000, 60.0) == rank_offset_secs(100, 60.0) == -6000.0
    assert rank_offset_secs(-10_000, 60.0) == rank_offset_secs(-100, 60.0) == 6000.0
    assert rank_offset_secs(0, 60.0) == 0.0


def test_the_sqlite_store_registers_the_python_rule_on_its_connection():
    SqliteStore(using="sqlite").queue_stats("q")  # any statement: the store registers the rule
    with connections["sqlite"].cursor() as cursor:
        for priority, step in CASES:
            cursor.execute("SELECT rivet_rank_offset(%s, %s)", [priority, step])
            assert cursor.fetchone()[0] == rank_offset_secs(priority, step), (priority, step)


def test_the_postgres_function_is_inlined_into_the_statement():
    """STABLE and a single expression: the planner replaces the call by its body, so writing
    the rank costs what the expression written out did."""
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "EXPLAIN (VERBOSE, COSTS OFF) "
            "SELECT rivet_claim_rank(visible_at, priority, 60.0::float8) FROM rivet_task"
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "rivet_claim_rank" not in plan, plan
    assert "make_interval" in plan, plan
