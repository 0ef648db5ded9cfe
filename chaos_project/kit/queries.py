"""Every SQL statement of the chaos harness, the verifier and the benchmark, by name.

Queue-database statements run on Django's connection (``%(name)s`` parameters); effect-database
statements run on a psycopg connection to the effect service's own database. The effect tables
are the effect service's: ``effects_effect`` (one row per effect) and
``rivet_idempotency_record`` (the dedup row written in the same transaction).
"""

from __future__ import annotations

# -- queue database ------------------------------------------------------------------------

#: Empty the queue database: every task and every fenced-write record.
QUEUE_EMPTY = "TRUNCATE rivet_task, rivet_fenced_write RESTART IDENTITY"

#: Empty one queue (the benchmark's): its tasks and its fenced-write records.
QUEUE_EMPTY_ONE = """
WITH gone AS (DELETE FROM rivet_fenced_write WHERE queue = %(queue)s)
DELETE FROM rivet_task WHERE queue = %(queue)s
"""

#: Live leases of a queue by owner: which worker holds tasks in flight right now.
LEASES_BY_OWNER = """
SELECT lease_owner, array_agg(id ORDER BY id)
FROM rivet_task
WHERE queue = %(queue)s AND state = 'pending' AND visible_at > now() AND lease_owner IS NOT NULL
GROUP BY lease_owner
"""

#: What one worker holds right now (SIGSTOPped: its leases cannot change until it runs again):
#: each task's epoch and attempts. Only live leases: a task whose lease had lapsed before the
#: stop (its worker could not heartbeat, e.g. no database connection) may be claimed at once
#: and its attempt already given up by its worker, with nothing left to write.
HELD_BY_OWNER = """
SELECT id, lease_epoch, attempts
FROM rivet_task
WHERE queue = %(queue)s AND state = 'pending' AND lease_owner = %(owner)s
    AND visible_at > now()
"""

#: The lease epoch, attempts and state of each of these tasks. Every claim, by anyone, adds one
#: to attempts (whatever it does to the epoch), so a rise in attempts is a claim; a state other
#: than pending is a task finished without its holder (a claim's burial, a cancel).
#: The owner that settled a finished task tells a zombie's own write, sent just before it
#: stopped and committed late on a busy server, from a claim's burial or a cancel.
TASK_EPOCHS = """
SELECT id, lease_epoch, attempts, state, settled_by
FROM rivet_task WHERE id = ANY(%(ids)s)
"""

#: Tasks for an operator's cancel: the newest live leases of chaos tasks not yet cancelled.
CANCEL_PICK = """
SELECT id FROM rivet_task
WHERE queue = %(queue)s AND state = 'pending' AND visible_at > now() AND NOT cancel_requested
    AND kind = 'chaos.effect'
ORDER BY id DESC
LIMIT 5
"""

#: Which of these tasks are dead (a sleeping zombie's tasks an operator requeues).
DEAD_AMONG = "SELECT id FROM rivet_task WHERE id = ANY(%(ids)s) AND state = 'dead' ORDER BY id"

#: Dead chaos tasks for an operator's requeue, the most recently buried first.
REQUEUE_PICK = """
SELECT id FROM rivet_task
WHERE queue = %(queue)s AND state = 'dead' AND kind = 'chaos.effect'
ORDER BY updated_at DESC, id DESC
LIMIT 20
"""

#: Tasks for an operator's requeue that must be refused, the newest chaos task of each kind:
#: leased (a live lease, not cancel-marked), waiting (pending with no live lease: ready, delayed
#: or waiting for its retry), cancel-marked (pending) and done.
LIVE_REQUEUE_PICK = """
SELECT DISTINCT ON (seen) seen, id
FROM (
    SELECT
        id,
        CASE
            WHEN state = 'done' THEN 'done'
            WHEN cancel_requested THEN 'cancel-marked'
            WHEN lease_owner IS NOT NULL AND visible_at > now() THEN 'leased'
            ELSE 'waiting'
        END AS seen
    FROM rivet_task
    WHERE queue = %(queue)s AND state <> 'dead' AND kind = 'chaos.effect'
) AS task
ORDER BY seen, id DESC
"""

#: The writes the fence refused for these owners: (owner, task, the stale epoch, op).
FENCED_BY_OWNERS = """
SELECT owner, task_id, epoch, op FROM rivet_fenced_write WHERE owner = ANY(%(owners)s)
"""

#: Who holds each of these tasks now, and what last settled it: a pinned holder is continued
#: once a zombie's write to its task landed (refused, or applied: then this row changes).
TASK_LEASES = """
SELECT id, state, lease_epoch, lease_owner, settled_epoch, settled_by, visible_at
FROM rivet_task WHERE id = ANY(%(ids)s)
"""

#: Tasks of a queue that ended (done or dead): the drain's measure of progress.
FINISHED_COUNT = """
SELECT count(*) FROM rivet_task WHERE queue = %(queue)s AND state <> 'pending'
"""

#: Tasks of a queue ready to be claimed now (not leased, not waiting for a retry): the backlog.
READY_COUNT = """
SELECT count(*) FROM rivet_task
WHERE queue = %(queue)s AND state = 'pending' AND visible_at <= now()
"""

#: Tasks of a queue not yet done or dead (claimed, ready, delayed or waiting for a retry).
PENDING_COUNT = "SELECT count(*) FROM rivet_task WHERE queue = %(queue)s AND state = 'pending'"

#: The verifier's figures from the queue database, for one queue.
QUEUE_FIGURES = """
SELECT
    count(*) AS enqueued,
    count(*) FILTER (WHERE state = 'done') AS done,
    count(*) FILTER (WHERE state = 'pending') AS pending,
    count(*) FILTER (
        WHERE state = 'dead' AND right(last_error, length(%(lost)s)) = %(lost)s
    ) AS dead_lost,
    count(*) FILTER (
        WHERE state = 'dead' AND right(last_error, length(%(poison)s)) = %(poison)s
    ) AS dead_poison,
    count(*) FILTER (WHERE state = 'dead') AS dead,
    (SELECT count(*) FROM rivet_fenced_write WHERE queue = %(queue)s) AS fenced,
    max(attempts) AS max_attempts,
    count(*) FILTER (
        WHERE state = 'dead' AND right(last_error, length(%(cancelled)s)) = %(cancelled)s
    ) AS dead_cancelled,
    count(*) FILTER (
        WHERE cancel_requested AND (state = 'done' OR (state = 'dead' AND result IS NOT NULL))
    ) AS done_cancelled,
    count(*) FILTER (
        WHERE state = 'dead' AND kind = 'chaos.effect' AND max_attempts > 1
            AND NOT cancel_requested
            AND right(last_error, length(%(cancelled)s)) <> %(cancelled)s
            AND NOT (payload ? 'fail_attempts') AND NOT (payload ? 'permanent_at')
    ) AS dead_not_designed
FROM rivet_task
WHERE queue = %(queue)s
"""

#: A finished task whose finishing write is not the one that held it: settled_epoch (the
#: epoch the applied decision named) differs from the epoch the task held, or a worker's
#: decision (settled_by not '': a claim's or sweep's burial names no worker) came from another
#: owner than the lease's (except a retry a cancel turned into a burial: the retry cleared the
#: owner as it always does, and the cancel mark buried the task under the lease's own epoch). A
#: stale write was applied through the fence. Sample and count. A
#: row no settle statement finished (settled_epoch NULL: done before migration 0009, or set by
#: hand) has nothing to judge.
STALE_SETTLED_WHERE = """
queue = %(queue)s AND state <> 'pending' AND settled_epoch IS NOT NULL
    AND (
        settled_epoch <> lease_epoch
        OR (
            settled_by <> '' AND settled_by IS DISTINCT FROM lease_owner
            AND NOT (cancel_requested AND state = 'dead' AND lease_owner IS NULL)
        )
    )
"""
STALE_SETTLED = f"""
SELECT
    (SELECT count(*) FROM rivet_task WHERE {STALE_SETTLED_WHERE}),
    (
        SELECT coalesce(array_agg(sample ORDER BY sample), '{{}}')
        FROM (
            SELECT format(
                'task %%s %%s by %%s at epoch %%s (held: epoch %%s, owner %%s)', id, state,
                coalesce(settled_by, '?'), coalesce(settled_epoch::text, 'none'),
                lease_epoch, coalesce(lease_owner, 'none')
            ) AS sample
            FROM rivet_task
            WHERE {STALE_SETTLED_WHERE}
            ORDER BY id
            LIMIT 5
        ) AS samples
    )
"""

#: The effect keys of a queue's done effect tasks (the key the effect kinds send).
DONE_EFFECT_KEYS = """
SELECT coalesce(idem_key, 'rivet-task-' || id)
FROM rivet_task
WHERE queue = %(queue)s AND state = 'done' AND kind = ANY(%(kinds)s)
"""

#: Every task of a queue as the history invariants need it (chaos.leases.TaskEnd): its end,
#: its effect key, whether it was designed to fail (a poison task; a payload that fails every
#: attempt it has, or permanently) and whether an operator's cancel ended it.
TASK_ENDS = """
SELECT
    id, state, kind, coalesce(idem_key, 'rivet-task-' || id),
    kind = 'fail' OR payload ? 'permanent_at'
        OR coalesce((payload ->> 'fail_attempts')::integer >= max_attempts, false),
    cancel_requested OR right(last_error, length(%(cancelled)s)) = %(cancelled)s,
    result
FROM rivet_task
WHERE queue = %(queue)s
"""

#: Which of the given idempotency keys a queue already holds (a repeated seed under --keep).
KEYS_TAKEN = "SELECT count(*) FROM rivet_task WHERE idem_key = ANY(%(keys)s)"

#: Throughput and latency of a queue's done tasks, from the task rows only. A claim sets
#: visible_at = now() + ttl and the ack leaves it, so visible_at - ttl is when the claim ran.
BENCH_FIGURES = """
SELECT
    count(*) AS done,
    extract(
        epoch FROM max(updated_at) - min(visible_at - make_interval(secs => %(ttl)s))
    )::float8 AS window_secs,
    percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (
        ORDER BY extract(epoch FROM updated_at - created_at)::float8
    ) AS end_to_end,
    percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (
        ORDER BY extract(epoch FROM updated_at - visible_at)::float8 + %(ttl)s::float8
    ) AS service,
    count(*) FILTER (WHERE attempts > 1) AS redelivered
FROM rivet_task
WHERE queue = %(queue)s AND state = 'done'
"""

#: Before each benchmark measurement (outside any transaction): reclaim dead rows and refresh the
#: planner's statistics, so a run does not inherit the bloat of the runs before it.
BENCH_VACUUM = "VACUUM (ANALYZE) rivet_task"
#: After BENCH_VACUUM (outside any transaction): write every dirty page now, so a measurement
#: does not run beside the checkpoint that the runs before it started (their WAL) and share the
#: disk with its writes. A superuser, or a member of pg_checkpoint (PostgreSQL 15), may.
BENCH_CHECKPOINT = "CHECKPOINT"
#: During a soak, every --soak-vacuum-secs (none by default): what autovacuum would do.
SOAK_VACUUM = "VACUUM rivet_task"
#: After a backlog is inserted: statistics for the table as the workers will find it.
BENCH_ANALYZE = "ANALYZE rivet_task"

#: Sessions of this database, connected since %(since)s, whose last statement was a LISTEN,
#: idle: a worker's wake-up listener (one per worker, connected straight to the server), asleep
#: on notifications. Its loop's connection claimed before it, and its last statement is a claim
#: or a waiter lock. ``since``: before the workers started (a stopped row's listener, not yet
#: gone from pg_stat_activity, is not one of them).
BENCH_LISTENING = """
SELECT count(*)
FROM pg_stat_activity
WHERE datname = current_database()
    AND pid <> pg_backend_pid()
    AND backend_start >= %(since)s
    AND state = 'idle'
    AND query LIKE 'LISTEN %%'
"""
#: The server's clock, for BENCH_LISTENING's ``since``.
SERVER_NOW = "SELECT now()"

#: End to end (enqueue to ack) of every done task of a queue, in seconds: the latency plot.
BENCH_END_TO_END = """
SELECT extract(epoch FROM updated_at - created_at)::float8
FROM rivet_task
WHERE queue = %(queue)s AND state = 'done'
"""

#: A soak's first and last tenth by claim order (claim = visible_at - ttl): tasks, seconds from
#: the tenth's first claim to its last ack, and claim-to-ack percentiles.
BENCH_SOAK_TENTHS = """
WITH done AS (
    SELECT
        visible_at - make_interval(secs => %(ttl)s) AS claimed_at,
        updated_at AS acked_at,
        ntile(10) OVER (ORDER BY visible_at, id) AS tenth
    FROM rivet_task
    WHERE queue = %(queue)s AND state = 'done'
)
SELECT
    tenth,
    count(*),
    extract(epoch FROM max(acked_at) - min(claimed_at))::float8,
    percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (
        ORDER BY extract(epoch FROM acked_at - claimed_at)::float8
    )
FROM done
WHERE tenth IN (1, 10)
GROUP BY tenth
ORDER BY tenth
"""

#: The server's own description of itself, for the benchmark's header.
SERVER_VERSION = "SELECT version()"

# -- effect database (psycopg) -------------------------------------------------------------

EFFECT_TABLES = ("effects_effect", "rivet_idempotency_record")

#: Empty the effect database: effects and their dedup rows.
EFFECT_EMPTY = "TRUNCATE effects_effect, rivet_idempotency_record RESTART IDENTITY"

#: Which task an effect was made for: the chaos run's tasks carry their key in the body
#: (``chaos_task``), so a duplicate is found even when the key sent with it was wrong; any
#: other effect is known by its key.
EFFECT_TASK = "coalesce(body ->> 'chaos_task', key)"

#: Effects written and duplicate effects (rows beyond the first for a task).
EFFECT_FIGURES = f"""
SELECT coalesce(sum(n), 0)::bigint, coalesce(sum(n - 1), 0)::bigint
FROM (SELECT count(*) AS n FROM effects_effect GROUP BY {EFFECT_TASK}) AS per_task
"""

#: Every task (by key) that has an effect.
EFFECT_KEYS = f"SELECT DISTINCT {EFFECT_TASK} FROM effects_effect"

#: Every effect's id and key: the effect service's own record, for H5.
EFFECT_IDS = "SELECT id, key FROM effects_effect"

#: Effects under one key (the harness's check that the service writes where it reads).
EFFECT_COUNT_KEY = "SELECT count(*) FROM effects_effect WHERE key = %(key)s"

#: Remove the check's effect and its dedup row again.
EFFECT_DELETE_KEY = """
WITH gone AS (DELETE FROM rivet_idempotency_record WHERE key = %(key)s)
DELETE FROM effects_effect WHERE key = %(key)s
"""

#: The chaos schedules' tick tasks of a queue, by the identity each carries in its payload
#: (schedule name, tick instant), not by its key: T1 and T2 (chaos.ticks).
TICK_TASKS = """
SELECT payload->>'chaos_schedule', (payload->>'scheduled_at')::timestamptz, id
FROM rivet_task
WHERE queue = %(queue)s AND kind = %(kind)s
"""
