"""The worker's statements on stale statistics: the plans they run do not depend on estimates.

rivet_task is analyzed while empty, then filled (a burst of enqueues on a server whose
autovacuum is off, or behind): the planner then believes the table, or each queue in it, holds
a row or two. Two ways it used to go wrong, one per way the table was emptied:

- emptied by TRUNCATE (or new), then analyzed: the claim read every pending row of the queue
  through rivet_task_queue_state_idx and sorted them, at every flush;
- emptied by DELETE, then analyzed (its indexes keep their pages): the settle and the heartbeat
  found each row by id through rivet_task_rank_idx, a walk of the claim index per row.

Each case runs the store's own flush (ack a batch, claim the next) and heartbeat on such a
table and reads the plans PostgreSQL executed for them (auto_explain, sent back as notices):
the claim must read rivet_task_rank_idx in order (no Sort), and the settle and the heartbeat
must find their rows by the primary key. Both the prepared statement with its generic plan (a
worker's connection) and the unnamed statement planned with its values (behind a transaction
pooler) are checked, inside a transaction and outside one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection

from bench.bigclaim import RANK_INDEX, nodes
from rivet.stores.postgres import PostgresStore
from rivet.values import Ack

ROWS = 30_000
QUEUE = "stale"
#: A LIMIT no other test claims with: its own prepared statement, planned on these statistics.
BATCH = 11
#: The same, for the test whose plans are made while the table is small.
SMALL_BATCH = 20
PKEY = "rivet_task_pkey"

FILL = """
INSERT INTO rivet_task (
    queue, kind, payload, state, attempts, max_attempts, lease_epoch, visible_at, priority,
    created_at, updated_at, last_error, claim_rank
)
SELECT %(queue)s, 'noop', '{}'::jsonb, 'pending', 0, 3, 0, ready, 0, ready, ready, '', ready
FROM generate_series(1, %(rows)s) AS i,
    LATERAL (SELECT now() - make_interval(secs => (%(rows)s - i) * 0.001)) AS at (ready)
"""


def truncated_then_analyzed(cursor: Any) -> None:
    cursor.execute("TRUNCATE rivet_task, rivet_fenced_write")
    cursor.execute("ANALYZE rivet_task")
    cursor.execute(FILL, {"queue": QUEUE, "rows": ROWS})


def deleted_then_analyzed(cursor: Any) -> None:
    cursor.execute("TRUNCATE rivet_task, rivet_fenced_write")
    cursor.execute(FILL, {"queue": QUEUE, "rows": ROWS})
    cursor.execute("DELETE FROM rivet_task")
    cursor.execute("ANALYZE rivet_task")
    cursor.execute(FILL, {"queue": QUEUE, "rows": ROWS})


EMPTIED = {"truncated": truncated_then_analyzed, "deleted": deleted_then_analyzed}


@contextmanager
def executed_plans() -> Iterator[list[dict]]:
    """The plan of every statement this connection runs meanwhile, as auto_explain's JSON."""
    pg = connection.connection
    plans: list[dict] = []

    def notice(diag: Any) -> None:
        text = diag.message_primary or ""
        if "plan:" in text:
            plans.append(json.loads(text.split("plan:", 1)[1]))

    with connection.cursor() as cursor:
        cursor.execute("LOAD 'auto_explain'")
        cursor.execute("SET auto_explain.log_min_duration = 0")
        cursor.execute("SET auto_explain.log_format = 'json'")
        cursor.execute("SET auto_explain.log_level = 'notice'")
        cursor.execute("SET client_min_messages = 'notice'")
    pg.add_notice_handler(notice)
    try:
        yield plans
    finally:
        pg.remove_notice_handler(notice)
        with connection.cursor() as cursor:
            cursor.execute("RESET auto_explain.log_min_duration")
            cursor.execute("RESET client_min_messages")


def cte(plan: dict, name: str) -> dict:
    (found,) = [n for n in nodes(plan["Plan"]) if n.get("Subplan Name") == f"CTE {name}"]
    return found


def task_scans(node: dict) -> list[dict]:
    """The reads of rivet_task under ``node`` (not the UPDATE that writes it)."""
    return [
        n
        for n in nodes(node)
        if n.get("Relation Name") == "rivet_task" and n["Node Type"] != "ModifyTable"
    ]


def one(plans: list[dict], marker: str) -> dict:
    (found,) = [p for p in plans if marker in p["Query Text"]]
    return found


def flush_and_beat(store: PostgresStore) -> list[dict]:
    """A worker's round on the table: claim, then ack half and claim more, and a heartbeat."""
    first = store.task_settle_and_claim([], queues=[QUEUE], owner="w", limit=BATCH, lease_ttl=30)
    claimed = first.batch.claimed
    assert len(claimed) == BATCH
    with executed_plans() as plans:
        acks = [Ack(lease=task.lease) for task in claimed[: BATCH // 2]]
        again = store.task_settle_and_claim(
            acks, queues=[QUEUE], owner="w", limit=BATCH, lease_ttl=30
        )
        store.lease_extend([task.lease for task in claimed[BATCH // 2 :]], 30)
    assert len(again.batch.claimed) == BATCH
    return plans


def acked_and_claimed(store: PostgresStore, claimed: list[Any], limit: int) -> dict:
    """The plan of the flush that acks ``claimed`` and claims ``limit`` more (it must get them)."""
    with executed_plans() as plans:
        acks = [Ack(lease=task.lease) for task in claimed]
        again = store.task_settle_and_claim(
            acks, queues=[QUEUE], owner="w", limit=limit, lease_ttl=30
        )
    assert len(again.batch.claimed) == limit
    return one(plans, "decided_by_worker")


def assert_estimate_proof(plans: list[dict]) -> None:
    flush = one(plans, "decided_by_worker")
    picked = task_scans(cte(flush, "picked"))
    assert [(n["Node Type"], n.get("Index Name")) for n in picked] == [
        ("Index Scan", RANK_INDEX)
    ], json.dumps(cte(flush, "picked"), indent=1)
    assert not [n for n in nodes(cte(flush, "picked")) if "Sort" in n["Node Type"]]
    assert_by_primary_key(cte(flush, "applied"))
    assert_by_primary_key(cte(one(plans, "WITH held"), "extended"))


def assert_by_primary_key(node: dict) -> None:
    """Every row of rivet_task under ``node`` found through the primary key alone (an index
    scan of it, or a bitmap of it: the planner's choice between the two is its own)."""
    reads = task_scans(node)
    indexes = {n["Index Name"] for n in nodes(node) if "Index Name" in n}
    assert reads and indexes == {PKEY}, json.dumps(node, indent=1)
    assert all(n["Node Type"] in ("Index Scan", "Bitmap Heap Scan") for n in reads), reads


def stale_table(emptied: str) -> None:
    with connection.cursor() as cursor:
        EMPTIED[emptied](cursor)
        cursor.execute(
            "SELECT reltuples FROM pg_class WHERE oid = 'rivet_task'::regclass",
        )
        assert cursor.fetchone()[0] == 0  # the statistics say empty: nothing analyzed since


@pytest.mark.django_db
@pytest.mark.parametrize("emptied", sorted(EMPTIED))
@pytest.mark.parametrize("pooled", [False, True], ids=["prepared", "pooled"])
def test_the_flush_and_heartbeat_plans_in_a_transaction(emptied: str, pooled: bool) -> None:
    stale_table(emptied)
    store = PostgresStore(using="default")
    store.pooler_detected = pooled  # pooled: unnamed statements, each planned with its values
    assert_estimate_proof(flush_and_beat(store))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("emptied", sorted(EMPTIED))
@pytest.mark.parametrize("pooled", [False, True], ids=["prepared", "pooled"])
def test_the_flush_and_heartbeat_plans_outside_a_transaction(emptied: str, pooled: bool) -> None:
    stale_table(emptied)
    store = PostgresStore(using="default")
    store.pooler_detected = pooled
    assert_estimate_proof(flush_and_beat(store))
    with connection.cursor() as cursor:
        cursor.execute("SHOW enable_sort")
        # A direct connection keeps the setting for its session (a worker's loop sends it
        # once); behind a pooler the statement's own transaction took it, and it ended there.
        assert cursor.fetchone()[0] == ("on" if pooled else "off")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("analyzed", [False, True], ids=["as-found", "analyzed"])
@pytest.mark.parametrize("rows", [0, 300])
@pytest.mark.parametrize("emptied", sorted(EMPTIED))
def test_plans_made_while_the_table_was_small_still_fit_it_once_full(
    emptied: str, analyzed: bool, rows: int
) -> None:
    """A worker started on a quiet queue prepares its flush (one generic plan, kept for the
    session) while the table holds a few rows; a burst then fills it. The plan made then must
    still find rows by index, not read the whole table at every flush."""
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE rivet_task, rivet_fenced_write")
        if emptied == "deleted":
            cursor.execute(FILL, {"queue": QUEUE, "rows": ROWS})
            cursor.execute("DELETE FROM rivet_task")
            cursor.execute("ANALYZE rivet_task")
        cursor.execute(FILL, {"queue": QUEUE, "rows": rows})
        if analyzed:
            cursor.execute("ANALYZE rivet_task")
    store = PostgresStore(using="default")
    first = store.task_settle_and_claim(
        [], queues=[QUEUE], owner="w", limit=SMALL_BATCH, lease_ttl=30
    )
    with connection.cursor() as cursor:
        cursor.execute(FILL, {"queue": QUEUE, "rows": ROWS})
    if not first.batch.claimed:  # an empty table: claim from the burst, then ack
        first = store.task_settle_and_claim(
            [], queues=[QUEUE], owner="w", limit=SMALL_BATCH, lease_ttl=30
        )
    flush = acked_and_claimed(store, first.batch.claimed, SMALL_BATCH)
    picked = task_scans(cte(flush, "picked"))
    assert [(n["Node Type"], n.get("Index Name")) for n in picked] == [
        ("Index Scan", RANK_INDEX)
    ], json.dumps(cte(flush, "picked"), indent=1)
    assert_by_primary_key(cte(flush, "leased"))
    assert_by_primary_key(cte(flush, "applied"))


#: A LIMIT of its own for the test below (its statement planned on its own table).
WARM_BATCH = 29


@pytest.mark.django_db(transaction=True)
def test_a_plan_made_on_a_vacuumed_table_with_a_few_rows_still_settles_by_primary_key() -> None:
    """The bench's full-backlog row as found on 2026-12-06: rivet_task emptied by DELETE and
    VACUUM (which truncates the file: the statistics say 0 pages, 0 rows), a worker warmed up on
    a few tasks (its flush prepared and planned on a table of a few pages), then a backlog. The
    flush's settle had been planned as a sequential scan of rivet_task joined to the acks, kept
    for the session: every flush of a 5 000-task backlog read the whole table once per ack
    (100 ms a flush of 32)."""
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE rivet_task, rivet_fenced_write")
        cursor.execute(FILL, {"queue": QUEUE, "rows": ROWS})
        cursor.execute("DELETE FROM rivet_task")
        cursor.execute("VACUUM (ANALYZE) rivet_task")
        cursor.execute(FILL, {"queue": QUEUE, "rows": 4 * WARM_BATCH})
    store = PostgresStore(using="default")
    acks: list[Ack] = []
    while True:  # the warm-up: drained a batch at a time, each acked with the next claim
        flushed = store.task_settle_and_claim(
            acks, queues=[QUEUE], owner="w", limit=WARM_BATCH, lease_ttl=30
        )
        acks = [Ack(lease=task.lease) for task in flushed.batch.claimed]
        if not acks:
            break
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM rivet_task")
        cursor.execute(FILL, {"queue": QUEUE, "rows": ROWS})
    first = store.task_settle_and_claim(
        [], queues=[QUEUE], owner="w", limit=WARM_BATCH, lease_ttl=30
    )
    flush = acked_and_claimed(store, first.batch.claimed, WARM_BATCH)
    assert_by_primary_key(cte(flush, "applied"))
    assert_by_primary_key(cte(flush, "leased"))
