"""The claim on 1 000 000 pending task rows in PostgreSQL: an index scan in claim order.

Priority aging orders the claim by ``claim_rank`` (then id), which rivet_task_rank_idx holds in
that order, with ``visible_at`` as a key column after it: the claim walks the index from its
start and stops after N runnable rows, stepping over leased and delayed rows inside the index.
No Sort of the backlog, whatever its size. The plan is asserted; the timings (the claim of a
batch, the migration's backfill of the ranks) are printed (run with ``-s``), never asserted.

Cost: loading the rows takes a few seconds (one INSERT ... SELECT generate_series, indexes
built after); they vanish with the test's transaction. Deselect with ``-m "not bigtable"``.
"""

from __future__ import annotations

import importlib
import json
import time

import pytest
from django.db import connection

from rivet.stores.postgres import PostgresStore, settle_claim_text
from rivet.values import Ack
from tests.integration.test_admin_big_table import PLAIN_INDEXES, UNIQUE_CONSTRAINTS, rows

pytestmark = [pytest.mark.django_db, pytest.mark.bigtable, pytest.mark.long]

ROWS = 1_000_000
QUEUE = "big"
BATCH = 16

# One queue, every row pending: priorities -5..5; ready over the last ~28 hours, except 2 %
# leased (visible_at 30 s ahead, the rank they had when they became runnable) and 1 % delayed
# (an hour ahead). claim_rank = the time it became runnable less priority x 60 s.
LOAD = """
INSERT INTO rivet_task (
    queue, kind, payload, state, attempts, max_attempts, lease_epoch, lease_owner,
    visible_at, priority, created_at, updated_at, last_error, claim_rank
)
SELECT
    %(queue)s, 'kind-' || (i %% 8), jsonb_build_object('n', i), 'pending',
    CASE WHEN i %% 100 < 2 THEN 1 ELSE 0 END, 3, CASE WHEN i %% 100 < 2 THEN 1 ELSE 0 END,
    CASE WHEN i %% 100 < 2 THEN 'worker-' || (i %% 4) END,
    CASE
        WHEN i %% 100 < 2 THEN now() + interval '30 seconds'
        WHEN i %% 100 = 2 THEN now() + interval '1 hour'
        ELSE ready
    END,
    (i %% 11) - 5, ready, ready, '',
    CASE WHEN i %% 100 = 2 THEN now() + interval '1 hour' ELSE ready END
        - make_interval(secs => ((i %% 11) - 5) * 60.0)
FROM generate_series(1, %(rows)s) AS i,
    LATERAL (SELECT now() - make_interval(secs => (%(rows)s - i) * 0.1)) AS at (ready)
"""


#: The migration's backfill is checked on fewer rows: several of its batches, in seconds.
MIGRATION_ROWS = 50_000


@pytest.fixture
def million_pending():
    """1 000 000 pending rows in this test's transaction: no WAL, indexes built after."""
    load_pending(ROWS)


@pytest.fixture
def pending_for_migration():
    load_pending(MIGRATION_ROWS)


def load_pending(count: int) -> None:
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE rivet_task SET UNLOGGED")
        cursor.execute("SET LOCAL maintenance_work_mem = '256MB'")
        indexes, constraints = rows(cursor, PLAIN_INDEXES), rows(cursor, UNIQUE_CONSTRAINTS)
        for name, _ in indexes:
            cursor.execute(f'DROP INDEX "{name}"')
        for name, _ in constraints:
            cursor.execute(f'ALTER TABLE rivet_task DROP CONSTRAINT "{name}"')
        cursor.execute(LOAD, {"queue": QUEUE, "rows": count})
        loaded = time.perf_counter()
        for name, definition in constraints:
            cursor.execute(f'ALTER TABLE rivet_task ADD CONSTRAINT "{name}" {definition}')
        for _, definition in indexes:
            cursor.execute(definition)
        cursor.execute("ANALYZE rivet_task")
    print(
        f"\nloaded {count} pending rows in {loaded - started:.1f}s, "
        f"indexed and analyzed in {time.perf_counter() - loaded:.1f}s"
    )


def claim_params(store: PostgresStore) -> dict:
    params = {"queue": QUEUE, "owner": "w", "ttl": 30.0, "seen": []}
    params |= store._common_params()
    columns = ("task_id", "epoch", "owner", "op", "state", "result", "error", "cancelled_error")
    return params | {f"{column}s": [] for column in (*columns, "delay")}


def nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def test_the_claim_is_an_index_scan_in_rank_order(million_pending):
    store = PostgresStore(using="default")
    text = settle_claim_text(BATCH)
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + text, claim_params(store))
        (plan,) = cursor.fetchone()
        plan = json.loads(plan) if isinstance(plan, str) else plan
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + text, claim_params(store))
        analyzed = [row[0] for row in cursor.fetchall()]
    print("\n" + "\n".join(analyzed))
    every = list(nodes(plan[0]["Plan"]))
    scans = [node for node in every if node.get("Relation Name") == "rivet_task"]
    picked = [node for node in scans if node.get("Index Name") == "rivet_task_rank_idx"]
    assert picked, f"the claim does not read rivet_task_rank_idx: {json.dumps(plan, indent=1)}"
    assert picked[0]["Node Type"] == "Index Scan", picked[0]
    assert "visible_at" in picked[0]["Index Cond"], "leased rows are stepped over in the index"
    assert not [n for n in every if n["Node Type"] in ("Sort", "Incremental Sort")], plan
    assert not [n for n in scans if n["Node Type"] == "Seq Scan"], plan

    # The claim's cost: flushes as a worker sends them (ack the last batch, claim the next).
    flushes, decisions = 200, []
    started = time.perf_counter()
    for _ in range(flushes):
        flushed = store.task_settle_and_claim(
            decisions, queues=[QUEUE], owner="w", limit=BATCH, lease_ttl=30
        )
        assert len(flushed.batch.claimed) == BATCH
        decisions = [Ack(lease=claimed.lease) for claimed in flushed.batch.claimed]
    per_flush = (time.perf_counter() - started) / flushes
    print(
        f"claim of {BATCH} (and ack of the previous {BATCH}) at {ROWS} pending rows: "
        f"{per_flush * 1000:.2f} ms per flush, {flushes} flushes"
    )


def test_the_migration_ranks_every_pending_row_in_batches(pending_for_migration):
    migration = importlib.import_module("rivet.migrations.0014_task_claim_rank")
    started = time.perf_counter()
    with connection.schema_editor(atomic=False) as schema_editor:
        migration.rank_pending(None, schema_editor)
    took = time.perf_counter() - started
    print(f"\nbackfill of claim_rank on {MIGRATION_ROWS} pending rows: {took:.1f}s")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM rivet_task WHERE state = 'pending' AND claim_rank <> "
            "visible_at - make_interval(secs => priority * 60.0)"
        )
        assert cursor.fetchone()[0] == 0
