-- The admin's PostgreSQL queries, one named block each, loaded once by rivet.stores.sqlfile.
-- Each one stays cheap on a table of millions of rows: it walks an index (a loose index scan
-- or a bounded count) instead of reading the table.

-- name: queue_names
-- Distinct queues, one index probe each (a loose scan of rivet_task_queue_state_idx).
WITH RECURSIVE queues (queue) AS (
    (SELECT queue FROM rivet_task ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT t.queue FROM rivet_task AS t WHERE t.queue > queues.queue ORDER BY t.queue LIMIT 1)
    FROM queues
    WHERE queues.queue IS NOT NULL
)
SELECT queue FROM queues WHERE queue IS NOT NULL

-- name: kind_names
-- Distinct kinds, one index probe per (state, kind) pair (a loose scan of rivet_task_state_kind_idx).
WITH RECURSIVE pairs (state, kind) AS (
    (SELECT state, kind FROM rivet_task ORDER BY state, kind LIMIT 1)
    UNION ALL
    SELECT next.state, next.kind
    FROM pairs
    CROSS JOIN LATERAL (
        SELECT t.state, t.kind
        FROM rivet_task AS t
        WHERE (t.state, t.kind) > (pairs.state, pairs.kind)
        ORDER BY t.state, t.kind
        LIMIT 1
    ) AS next
)
SELECT DISTINCT kind FROM pairs ORDER BY kind

-- name: table_estimate
-- The planner's row estimate of the whole task table (-1 or 0 when never analyzed).
SELECT reltuples::bigint FROM pg_class WHERE oid = 'rivet_task'::regclass

-- name: date_buckets
-- Distinct local year/month/day buckets of created_at, one index probe each ({where}: filters).
WITH RECURSIVE unit AS (
    SELECT %s::text AS name, %s::text AS zone, %s::interval AS step
),
buckets (bucket) AS (
    SELECT date_trunc(unit.name, (SELECT min(created_at) FROM rivet_task WHERE {where}), unit.zone)
    FROM unit
    UNION ALL
    SELECT date_trunc(unit.name, (
        SELECT min(created_at)
        FROM rivet_task
        WHERE {where}
            AND created_at >= ((buckets.bucket AT TIME ZONE unit.zone) + unit.step) AT TIME ZONE unit.zone
    ), unit.zone)
    FROM buckets CROSS JOIN unit
    WHERE buckets.bucket IS NOT NULL
)
SELECT bucket FROM buckets WHERE bucket IS NOT NULL
