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

from bench.bigclaim import claim_plan, load_pending, plan_problems, time_flushes
from rivet.stores.postgres import PostgresStore

pytestmark = [pytest.mark.django_db, pytest.mark.bigtable, pytest.mark.long]

ROWS = 1_000_000
QUEUE = "big"
BATCH = 16
#: The migration's backfill is checked on fewer rows: several of its batches, in seconds.
MIGRATION_ROWS = 50_000


def load(count: int) -> None:
    """``count`` pending rows in this test's transaction (bench.bigclaim's load, rolled back)."""
    load_secs, index_secs = load_pending(count, QUEUE)
    print(
        f"\nloaded {count} pending rows in {load_secs:.1f}s, "
        f"indexed and analyzed in {index_secs:.1f}s"
    )


def test_the_claim_is_an_index_scan_in_rank_order():
    load(ROWS)
    store = PostgresStore(using="default")
    plan, analyzed = claim_plan(store, BATCH, QUEUE)
    print("\n" + "\n".join(analyzed))
    assert plan_problems(plan) == [], json.dumps(plan, indent=1)
    # The claim's cost: flushes as a worker sends them (ack the last batch, claim the next).
    per_flush = time_flushes(store, BATCH, 200, QUEUE)
    print(
        f"claim of {BATCH} (and ack of the previous {BATCH}) at {ROWS} pending rows: "
        f"{per_flush * 1000:.2f} ms per flush, 200 flushes"
    )


def test_a_plan_that_sorts_or_scans_the_table_is_named():
    plan = {
        "Node Type": "Limit",
        "Plans": [
            {"Node Type": "Sort", "Plans": [
                {"Node Type": "Seq Scan", "Relation Name": "rivet_task"},
            ]},
        ],
    }  # fmt: skip
    assert plan_problems(plan) == [
        "the claim does not read rivet_task_rank_idx",
        "the claim sorts",
        "the claim reads rivet_task sequentially",
    ]


def test_the_migration_ranks_every_pending_row_in_batches():
    load(MIGRATION_ROWS)
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
