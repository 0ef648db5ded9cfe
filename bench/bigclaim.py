"""The claim on a big table: a million task rows loaded fast, the claim's plan and its cost.

``bulk_load`` fills rivet_task inside the caller's transaction the fast way (the table unlogged,
every index and unique constraint dropped, one INSERT ... SELECT generate_series, the indexes
built again after: a sorted build is much faster than a million inserts into each), so a
rollback takes it all back. The big-table tests load with it, and so does the benchmark's
"claim at 1 000 000 pending rows" part (``measure_big_claim``): one queue of pending rows with
mixed priorities, 2 % leased and 1 % delayed, then the worker's own settle-and-claim statement
explained (it must read rivet_task_rank_idx in rank order: an Index Scan, no Sort, no Seq Scan)
and timed as a worker sends it (ack the last batch, claim the next), then rolled back.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from django.db import connection, transaction

UNIQUE_CONSTRAINTS = """
SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
WHERE conrelid = 'rivet_task'::regclass AND contype IN ('p', 'u')
"""
PLAIN_INDEXES = """
SELECT indexname, indexdef FROM pg_indexes
WHERE tablename = 'rivet_task' AND indexname NOT IN (
    SELECT conname FROM pg_constraint WHERE conrelid = 'rivet_task'::regclass
)
"""
#: The index the claim must read, in its order.
RANK_INDEX = "rivet_task_rank_idx"
BIG_QUEUE = "bench-big"

# One queue, every row pending: priorities -5..5; ready over the last rows / 10 seconds, except
# 2 % leased (visible_at 30 s ahead, the rank they had when they became runnable) and 1 %
# delayed (an hour ahead). claim_rank = the time it became runnable less priority x 60 s.
PENDING = """
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


def rows(cursor: Any, sql: str) -> list[tuple]:
    cursor.execute(sql)
    return cursor.fetchall()


def bulk_load(load_sql: str, params: Any) -> tuple[float, float]:
    """Run ``load_sql`` into rivet_task the fast way, in the caller's transaction.

    Returns (seconds loading, seconds indexing and analyzing).
    """
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE rivet_task SET UNLOGGED")
        cursor.execute("SET LOCAL maintenance_work_mem = '256MB'")  # each index sort in memory
        indexes, constraints = rows(cursor, PLAIN_INDEXES), rows(cursor, UNIQUE_CONSTRAINTS)
        for name, _ in indexes:
            cursor.execute(f'DROP INDEX "{name}"')
        for name, _ in constraints:
            cursor.execute(f'ALTER TABLE rivet_task DROP CONSTRAINT "{name}"')
        cursor.execute(load_sql, params)
        loaded = time.perf_counter()
        for name, definition in constraints:
            cursor.execute(f'ALTER TABLE rivet_task ADD CONSTRAINT "{name}" {definition}')
        for _, definition in indexes:
            cursor.execute(definition)
        cursor.execute("ANALYZE rivet_task")
    return loaded - started, time.perf_counter() - loaded


def load_pending(count: int, queue: str = BIG_QUEUE) -> tuple[float, float]:
    return bulk_load(PENDING, {"queue": queue, "rows": count})


def claim_params(store: Any, queue: str, start: dict[str, Any] | None = None) -> dict[str, Any]:
    """Parameters of a settle_claim statement that only claims, in ``queue``, reading from
    ``start`` (a claim floor's parameters; by default the queue's front)."""
    from rivet.stores.floor import FRONT
    from rivet.stores.postgres import SETTLE_COLUMNS

    params = {"queue": queue, "owner": "w", "ttl": 30.0, "seen": []}
    params |= store._common_params() | (start or FRONT)
    return params | {f"{column}s": [] for column in SETTLE_COLUMNS}


def nodes(plan: dict) -> Iterator[dict]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def claim_plan(store: Any, batch: int, queue: str = BIG_QUEUE) -> tuple[dict, list[str]]:
    """The settle-and-claim statement's plan (JSON) and its EXPLAIN ANALYZE lines, planned as
    the store plans it (the store's own ``unsorted``: sorting and sequential scans off for the
    statement); inside a transaction."""
    from rivet.stores.postgres import settle_claim_text, unsorted

    text = settle_claim_text(batch)
    with connection.cursor() as cursor, unsorted(connection.connection):
        cursor.execute("EXPLAIN (FORMAT JSON) " + text, claim_params(store, queue))
        (plan,) = cursor.fetchone()
        plan = json.loads(plan) if isinstance(plan, str) else plan
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + text, claim_params(store, queue))
        analyzed = [row[0] for row in cursor.fetchall()]
    return plan[0]["Plan"], analyzed


def plan_problems(plan: dict) -> list[str]:
    """What is wrong with the claim's plan: empty when it reads the rank index in order."""
    every = list(nodes(plan))
    scans = [node for node in every if node.get("Relation Name") == "rivet_task"]
    picked = [node for node in scans if node.get("Index Name") == RANK_INDEX]
    problems = []
    if not picked:
        problems.append(f"the claim does not read {RANK_INDEX}")
    elif picked[0]["Node Type"] != "Index Scan":
        problems.append(f"{RANK_INDEX} is read by a {picked[0]['Node Type']}, not an Index Scan")
    elif "visible_at" not in picked[0].get("Index Cond", ""):
        problems.append("leased rows are not stepped over inside the index (visible_at)")
    if [n for n in every if n["Node Type"] in ("Sort", "Incremental Sort")]:
        problems.append("the claim sorts")
    if [n for n in scans if n["Node Type"] == "Seq Scan"]:
        problems.append("the claim reads rivet_task sequentially")
    return problems


def time_flushes(store: Any, batch: int, flushes: int, queue: str = BIG_QUEUE) -> float:
    """Seconds per flush as a worker sends them: ack the last batch, claim the next."""
    from rivet.values import Ack

    decisions: list[Ack] = []
    started = time.perf_counter()
    for _ in range(flushes):
        flushed = store.task_settle_and_claim(
            decisions, queues=[queue], owner="w", limit=batch, lease_ttl=30
        )
        if len(flushed.batch.claimed) != batch:
            raise AssertionError(f"a flush claimed {len(flushed.batch.claimed)}, not {batch}")
        decisions = [Ack(lease=claimed.lease) for claimed in flushed.batch.claimed]
    return (time.perf_counter() - started) / flushes


class _Rollback(Exception):
    """Raised inside the measurement's transaction: nothing it loaded stays."""


def measure_big_claim(count: int, batch: int = 16, flushes: int = 200) -> dict[str, Any]:
    """The benchmark's part: load ``count`` pending rows, explain and time the claim, roll back."""
    from rivet.stores.postgres import PostgresStore

    store = PostgresStore(using="default")
    result: dict[str, Any] = {}
    try:
        with transaction.atomic():
            load_secs, index_secs = load_pending(count)
            plan, analyzed = claim_plan(store, batch)
            per_flush = time_flushes(store, batch, flushes)
            scan = next(
                (n for n in nodes(plan) if n.get("Index Name") == RANK_INDEX), {"Node Type": "-"}
            )
            result = {
                "rows": count,
                "batch": batch,
                "flushes": flushes,
                "load_s": load_secs,
                "index_s": index_secs,
                "per_flush_ms": per_flush * 1000,
                "scan": f"{scan['Node Type']} using {scan.get('Index Name', '-')}",
                "index_cond": scan.get("Index Cond", ""),
                "problems": plan_problems(plan),
                "explain": analyzed,
            }
            raise _Rollback
    except _Rollback:
        pass
    return result
