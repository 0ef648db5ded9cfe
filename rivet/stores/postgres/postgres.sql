-- The PostgresStore's queries, one named block each, loaded once by rivet.stores.sqlfile.
-- Every timestamp is the server's now() (one value per transaction); parameters are named.
-- A claimed task is a pending task whose visible_at is in the future: rivet_task_rank_idx
-- (queue, claim_rank, id, visible_at where state = 'pending') serves every claim, in
-- (claim_rank, id) order. claim_rank (priority aging) is rivet_claim_rank(ready time, priority,
-- %(aging_secs)s), the SQL function in functions.sql (the one place PostgreSQL holds the
-- rule); it is written whenever a task becomes runnable (enqueue, retry, requeue), never by a claim.

-- name: enqueue
-- Insert one task unless a key (idem_key, or a pending unique job) already has it; wake listeners.
WITH inserted AS (
    INSERT INTO rivet_task (
        queue, kind, payload, idem_key, unique_key, state, attempts, max_attempts,
        lease_epoch, lease_owner, visible_at, priority, created_at, updated_at, last_error,
        trace_context, claim_rank
    )
    SELECT
        %(queue)s::text, %(kind)s::text, %(payload)s::jsonb, %(idem_key)s::text,
        %(unique_key)s::text, 'pending', 0, %(max_attempts)s::integer, 0, NULL, ready.at,
        %(priority)s::integer, now(), now(), '', %(trace_context)s::jsonb,
        rivet_claim_rank(ready.at, %(priority)s::integer, %(aging_secs)s::float8)
    FROM (
        SELECT coalesce(
            %(run_at)s::timestamptz, now() + make_interval(secs => %(delay)s::float8)
        ) AS at
    ) AS ready
    ON CONFLICT DO NOTHING
    RETURNING id, queue
)
SELECT id, rivet_wake(%(channel)s::text, queue) AS woken FROM inserted

-- name: enqueue_arrays
-- Insert a small batch from arrays in the order given, skipping rows a key already has; wake
-- listeners. Returns every id in order and the 0-based positions that were not inserted. The
-- sequence is looked up once for the statement (the inner SELECT), not once per row.
WITH batch AS MATERIALIZED (
    SELECT nextval((SELECT pg_get_serial_sequence('rivet_task', 'id')::regclass)) AS id, b.*
    FROM unnest(
        %(queues)s::text[], %(kinds)s::text[], %(payloads)s::text[], %(idem_keys)s::text[],
        %(unique_keys)s::text[], %(max_attempts)s::integer[], %(run_ats)s::timestamptz[],
        %(delays)s::float8[], %(priorities)s::smallint[], %(trace_contexts)s::text[]
    ) WITH ORDINALITY AS b (
        queue, kind, payload, idem_key, unique_key, max_attempts, run_at, delay, priority,
        trace_context, position
    )
),
inserted AS (
    INSERT INTO rivet_task (
        id, queue, kind, payload, idem_key, unique_key, state, attempts, max_attempts,
        lease_epoch, lease_owner, visible_at, priority, created_at, updated_at, last_error,
        trace_context, claim_rank
    )
    SELECT
        b.id, b.queue, b.kind, b.payload::jsonb, b.idem_key, b.unique_key, 'pending', 0,
        b.max_attempts, 0, NULL, ready.at, b.priority, now(), now(), '', b.trace_context::jsonb,
        rivet_claim_rank(ready.at, b.priority, %(aging_secs)s::float8)
    FROM batch AS b
    CROSS JOIN LATERAL (
        SELECT coalesce(b.run_at, now() + make_interval(secs => b.delay)) AS at
    ) AS ready
    ORDER BY b.position
    ON CONFLICT DO NOTHING
    RETURNING id, queue
)
SELECT
    (SELECT array_agg(id ORDER BY position) FROM batch) AS ids,
    (
        SELECT coalesce(array_agg(b.position - 1 ORDER BY b.position), '{}')
        FROM batch AS b
        WHERE NOT EXISTS (SELECT 1 FROM inserted WHERE inserted.id = b.id)
    ) AS skipped,
    (
        SELECT count(pg_notify(%(channel)s, woken.queue))
        FROM (SELECT DISTINCT queue FROM inserted) AS woken
    ) AS woken

-- name: stage_open
-- Make this session's staging table for a bulk enqueue, empty (a temporary table, rows gone at commit).
-- Behind a transaction pooler the store sends it with ON COMMIT DROP instead (bulk.py): the
-- transaction's own table, so none stays on a server connection other clients get next.
-- The ids come with the rows (chunk_ids): a column default of nextval(pg_get_serial_sequence
-- (...)) looked the sequence up again for every row, most of the COPY's time.
CREATE TEMPORARY TABLE IF NOT EXISTS rivet_enqueue_stage (
    position integer NOT NULL,
    id bigint NOT NULL,
    queue text NOT NULL,
    kind text NOT NULL,
    payload jsonb,
    idem_key text,
    unique_key text,
    max_attempts integer NOT NULL,
    run_at timestamptz,
    delay float8 NOT NULL,
    priority smallint NOT NULL,
    trace_context jsonb
) ON COMMIT DELETE ROWS;
DELETE FROM rivet_enqueue_stage

-- name: stage_copy
-- Stream a batch into the staging table (COPY), each row with its task id (chunk_ids).
COPY rivet_enqueue_stage (
    position, id, queue, kind, payload, idem_key, unique_key, max_attempts, run_at, delay,
    priority, trace_context
) FROM STDIN

-- name: stage_insert
-- Insert the staged batch in the order given, skipping rows a key already has; wake listeners.
-- Returns every staged id in order and the positions that were not inserted (a key had them).
WITH inserted AS (
    INSERT INTO rivet_task (
        id, queue, kind, payload, idem_key, unique_key, state, attempts, max_attempts,
        lease_epoch, lease_owner, visible_at, priority, created_at, updated_at, last_error,
        trace_context, claim_rank
    )
    SELECT
        s.id, s.queue, s.kind, s.payload, s.idem_key, s.unique_key, 'pending', 0,
        s.max_attempts, 0, NULL, ready.at, s.priority, now(), now(), '', s.trace_context,
        rivet_claim_rank(ready.at, s.priority, %(aging_secs)s::float8)
    FROM rivet_enqueue_stage AS s
    CROSS JOIN LATERAL (
        SELECT coalesce(s.run_at, now() + make_interval(secs => s.delay)) AS at
    ) AS ready
    ORDER BY s.position
    ON CONFLICT DO NOTHING
    RETURNING id, queue
)
SELECT
    (SELECT array_agg(id ORDER BY position) FROM rivet_enqueue_stage) AS ids,
    (
        SELECT coalesce(array_agg(s.position ORDER BY s.position), '{}')
        FROM rivet_enqueue_stage AS s
        WHERE NOT EXISTS (SELECT 1 FROM inserted WHERE inserted.id = s.id)
    ) AS skipped,
    (
        SELECT count(pg_notify(%(channel)s, woken.queue))
        FROM (SELECT DISTINCT queue FROM inserted) AS woken
    ) AS woken

-- name: chunk_ids
-- Task ids for a chunk of a bulk enqueue: count of them, in order, from the table's sequence.
-- The sequence is looked up once (the inner SELECT, run once for the statement):
-- pg_get_serial_sequence called per row was most of the statement's time (48 ms of 57 for
-- 10 000 ids). Ids a chunk does not use (a batch that fails) are gaps, as a rollback leaves.
SELECT array_agg(
    nextval((SELECT pg_get_serial_sequence('rivet_task', 'id')::regclass)) ORDER BY n
) AS ids
FROM generate_series(1, %(count)s::integer) AS n

-- name: wake_queues
-- The wake-up of each queue of %(queues)s: those a chunk copied straight into rivet_task
-- filled, known once the COPY has read the chunk (a staged chunk's INSERT wakes the queues it
-- filled). A notification is sent at commit, never if the transaction rolls back.
SELECT count(pg_notify(%(channel)s::text, woken.queue)) AS woken
FROM (SELECT DISTINCT unnest(%(queues)s::text[]) AS queue) AS woken

-- name: direct_copy
-- Stream a chunk straight into rivet_task, ids given: only for tasks no key can refuse and
-- that are runnable at once at priority 0 (no idem_key, no unique_key, no delay, no run_at),
-- so nothing can conflict. Every other column takes the table's default: pending, no attempt,
-- epoch 0, and visible_at = claim_rank = created_at = updated_at = statement_timestamp(), the
-- server's clock at the COPY (priority 0: the rank is the ready time).
COPY rivet_task (id, queue, kind, payload, max_attempts, trace_context) FROM STDIN

-- name: find_by_idem_keys
-- The tasks holding any of the idempotency keys, with the work each was enqueued for.
SELECT id, idem_key, queue, kind, payload::text AS payload
FROM rivet_task
WHERE idem_key = ANY(%(idem_keys)s::text[])

-- name: find_unique_pending_many
-- The pending tasks of unique jobs, for parallel arrays of kinds and unique keys.
SELECT t.id, t.kind, t.unique_key
FROM rivet_task AS t
JOIN unnest(%(kinds)s::text[], %(unique_keys)s::text[]) AS wanted (kind, unique_key)
    ON t.kind = wanted.kind AND t.unique_key = wanted.unique_key
WHERE t.state = 'pending'

-- name: find_by_idem_key
-- The task holding an idempotency key, with the work it was enqueued for.
SELECT id, queue, kind, payload::text AS payload
FROM rivet_task
WHERE idem_key = %(idem_key)s

-- name: find_unique_pending
-- The pending task of a unique job (kind, unique_key), if there is one.
SELECT id
FROM rivet_task
WHERE kind = %(kind)s AND unique_key = %(unique_key)s AND state = 'pending'

-- name: lease_extend
-- Push visible_at to now + ttl for every (task, epoch) still held; return them, cancel marks too.
-- A heartbeat refused because another claim took the task (its epoch is newer now) is recorded
-- as a fenced write, op 'beat', under the heartbeat's owner and epoch: the fence firing, seen
-- at the heartbeat. One a task finished under the same epoch meets (its own ack, a cancel, a
-- claim's burial) is refused and not recorded: no other worker holds it. A lease is recorded
-- once, at its first refused heartbeat (a worker may ask again before it stops the attempt, even
-- at the same moment from two threads): rivet_fence_one_beat_per_lease and ON CONFLICT see to it.
WITH held AS (
    SELECT *
    FROM unnest(%(task_ids)s::bigint[], %(epochs)s::bigint[], %(owners)s::text[])
        AS held (task_id, epoch, owner)
), extended AS (
    UPDATE rivet_task AS t
    SET visible_at = now() + make_interval(secs => %(ttl)s), updated_at = now()
    FROM held
    -- (state = 'pending') IS TRUE, not state = 'pending': the same guard (state is never NULL),
    -- in a form no partial index's predicate follows from, so each row is found by the primary
    -- key. On stale statistics (the table analyzed empty) the planner took
    -- rivet_task_rank_idx, whose predicate the plain form proves, for the id lookup: a walk of
    -- the claim index per row.
    WHERE t.id = held.task_id AND t.lease_epoch = held.epoch AND (t.state = 'pending') IS TRUE
    RETURNING t.id, t.cancel_requested
), refused AS (
    INSERT INTO rivet_fenced_write (task_id, queue, op, owner, epoch, created_at)
    SELECT held.task_id, t.queue, 'beat', held.owner, held.epoch, now()
    FROM held JOIN rivet_task AS t ON t.id = held.task_id
    WHERE t.lease_epoch > held.epoch AND held.task_id NOT IN (SELECT id FROM extended)
    ON CONFLICT (task_id, epoch) WHERE op = 'beat' DO NOTHING
)
SELECT id, cancel_requested FROM extended

-- name: settle_claim
-- Apply the worker's decisions and lease up to limit runnable tasks of one queue, in one
-- statement (one round trip, one commit). Each decision is fenced by its own epoch; a refused
-- one is recorded as a fenced write, unless its op is 'bury' (a doomed row's burial, refused
-- only when another claim or a cancel buried the row first: no stale write). A task an
-- operator cancelled is buried whatever was decided, with the decision's cancelled_error. Texts
-- are the decisions' (rivet.values composes them), never this statement's: an ack clears
-- last_error, a retry or burial sets it and appends {attempt, at, error} to errors (newest
-- errors_kept kept); the decision's epoch and owner are written as settled_epoch and settled_by.
-- A doomed task the claim meets (attempts used up, or cancelled) is not leased: it comes back
-- (doomed, with lease_epoch, last_error, cancel_requested) for rivet.values.claim_burial.
-- Rows: one per leased or doomed task (position NULL), one per applied decision (positions
-- 1..n); wakes on retries.
-- It never leases a task it settles, nor one in seen (those a flush's earlier statement settled
-- or met). With limit 0 (or queue NULL) it only settles; with no decisions it only claims.
-- rank_us (claim_rank in microseconds since the epoch) orders the leased rows as the claim did;
-- an integer because parsing a timestamp per row was a visible part of a busy worker's CPU.
-- The claim reads the index from (from_rank, from_id) on: ('-infinity', 0) reads the queue
-- from its front; a worker's claim floor (rivet.stores.postgres.ClaimFloors) starts it past
-- the entries of tasks settled since the last VACUUM, which every read from the front walks.
-- A retry's new rank is its new visible_at less priority x aging_secs (priority aging).
-- The decisions are applied before the claim locks anything: the first branch of the UNION ALL
-- below (applied) runs to its end before the second (leased, hence picked) starts. A claim's
-- FOR UPDATE SKIP LOCKED can lock a row its snapshot saw pending that another worker has since
-- leased (it locks the newer version, finds it no longer runnable, skips it) and holds that
-- lock to its commit, so the other worker's ack of that task waits for it. Had this statement
-- claimed first, that ack would wait while holding rows its own claim locked, which the first
-- worker's settle may need: a deadlock (tests/integration/test_store_flush.py).
WITH decided_by_worker AS (
    SELECT *
    FROM unnest(
        %(task_ids)s::bigint[], %(epochs)s::bigint[], %(owners)s::text[], %(ops)s::text[],
        %(states)s::text[], %(results)s::text[], %(errors)s::text[], %(cancelled_errors)s::text[],
        %(delays)s::float8[]
    ) WITH ORDINALITY AS d (
        task_id, epoch, owner, op, state, result, error, cancelled_error, delay, position
    )
),
picked AS (
    SELECT
        id, (extract(epoch FROM claim_rank) * 1000000)::bigint AS rank_us,
        (attempts >= max_attempts OR cancel_requested) AS doomed, lease_epoch, last_error,
        cancel_requested
    FROM rivet_task
    WHERE state = 'pending' AND queue = %(queue)s::text AND visible_at <= now()
        AND (claim_rank, id) >= (%(from_rank)s::timestamptz, %(from_id)s::bigint)
        AND NOT (id = ANY(%(task_ids)s::bigint[])) AND NOT (id = ANY(%(seen)s::bigint[]))
    ORDER BY claim_rank, id
    LIMIT %(limit)s::integer
    FOR UPDATE SKIP LOCKED
),
leased AS (
    UPDATE rivet_task AS t
    SET
        attempts = t.attempts + 1,
        lease_epoch = t.lease_epoch + 1,
        lease_owner = %(owner)s::text,
        visible_at = now() + make_interval(secs => %(ttl)s::float8),
        updated_at = now()
    FROM picked
    WHERE t.id = picked.id AND NOT picked.doomed
    RETURNING
        t.id, t.queue, t.kind, t.payload::text AS payload, t.idem_key, t.attempts,
        t.max_attempts, t.lease_epoch, t.priority, t.cancel_requested, picked.rank_us,
        t.trace_context::text AS trace_context
),
applied AS (
    UPDATE rivet_task AS t
    SET
        state = CASE WHEN t.cancel_requested THEN 'dead' ELSE d.state END,
        result = CASE
            WHEN d.state = 'done' AND NOT t.cancel_requested THEN d.result::jsonb ELSE t.result
        END,
        last_error = CASE
            WHEN t.cancel_requested THEN d.cancelled_error
            WHEN d.state = 'done' THEN ''
            ELSE d.error
        END,
        errors = CASE
            WHEN d.state = 'done' AND NOT t.cancel_requested THEN t.errors
            ELSE (
                SELECT coalesce(jsonb_agg(kept.entry ORDER BY kept.n), '[]'::jsonb)
                FROM jsonb_array_elements(
                    t.errors || jsonb_build_object(
                        'attempt', t.attempts,
                        'at', to_char(
                            now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'
                        ),
                        'error', CASE WHEN t.cancel_requested THEN d.cancelled_error ELSE d.error END
                    )
                ) WITH ORDINALITY AS kept (entry, n)
                WHERE kept.n > jsonb_array_length(t.errors) + 1 - %(errors_kept)s::integer
            )
        END,
        lease_owner = CASE WHEN d.state = 'pending' THEN NULL ELSE t.lease_owner END,
        settled_epoch = d.epoch,
        settled_by = d.owner,
        visible_at = CASE
            WHEN d.state = 'pending' THEN now() + make_interval(secs => d.delay)
            ELSE t.visible_at
        END,
        claim_rank = CASE
            WHEN d.state = 'pending' THEN rivet_claim_rank(
                now() + make_interval(secs => d.delay), t.priority, %(aging_secs)s::float8
            )
            ELSE t.claim_rank
        END,
        updated_at = now()
    FROM decided_by_worker AS d
    -- The state guard as lease_extend writes it: a settled row is found by the primary key only.
    WHERE t.id = d.task_id AND t.lease_epoch = d.epoch AND (t.state = 'pending') IS TRUE
        AND d.state IS NOT NULL
    RETURNING t.id, d.position, t.cancel_requested AS cancelled, t.state, t.queue, d.delay
),
fenced AS (
    INSERT INTO rivet_fenced_write (task_id, queue, op, owner, epoch, created_at)
    SELECT
        d.task_id, coalesce((SELECT queue FROM rivet_task WHERE id = d.task_id), ''),
        d.op, d.owner, d.epoch, now()
    FROM decided_by_worker AS d
    WHERE d.position NOT IN (SELECT position FROM applied) AND d.op <> 'bury'
    RETURNING id
)
SELECT
    id, NULL::text AS queue, NULL::text AS kind, NULL::text AS payload, NULL::text AS idem_key,
    NULL::integer AS attempts, NULL::integer AS max_attempts, NULL::bigint AS lease_epoch,
    NULL::integer AS priority, cancelled AS cancel_requested, NULL::bigint AS rank_us, position,
    CASE WHEN state = 'pending' AND delay <= 0 THEN pg_notify(%(channel)s::text, queue)::text END
        AS woken,
    NULL::text AS trace_context, NULL::boolean AS doomed, NULL::text AS last_error
FROM applied
UNION ALL
SELECT
    id, queue, kind, payload, idem_key, attempts, max_attempts, lease_epoch, priority,
    cancel_requested, rank_us, NULL, NULL, trace_context, false, NULL
FROM leased
UNION ALL
SELECT
    id, NULL, NULL, NULL, NULL, NULL, NULL, lease_epoch, NULL, cancel_requested, rank_us, NULL,
    NULL, NULL, true, last_error
FROM picked
WHERE doomed

-- name: worker_session
-- Once per direct (not pooled) worker connection, at its first flush outside a transaction, for
-- its session (committed at once: the connection is in autocommit): prepared statements (only
-- settle_claim's, one per LIMIT) keep the plan made for them instead of being planned again at
-- each execution (the plan does not depend on the values: the LIMIT is written in the text);
-- and sorting and sequential scans are off, as claim_unsorted sets them for one transaction, so
-- a flush sends nothing more for them. Never behind a transaction pooler, where a session
-- setting would stay on a server connection other clients get next; a producer's connection
-- (the web app's) runs no flush and is left alone.
SELECT
    set_config('plan_cache_mode', 'force_generic_plan', false),
    set_config('enable_sort', 'off', false),
    set_config('enable_seqscan', 'off', false)

-- name: worker_session_end
-- worker_session's settings back to the server's defaults, on a connection that outlives its
-- use by a worker (the test suite's, between tests).
RESET plan_cache_mode; RESET enable_sort; RESET enable_seqscan

-- name: wait_hold
-- A worker's loop connection relies on notifications for its queues from now on (hold: the
-- waiter locks, held by the session until wait_release; without it, the gates are tried
-- again), then tries each queue's gate: true when every enqueue that saw no waiter and did
-- not notify has ended (migration 0017, rivet_wake).
SELECT rivet_wait_hold(%(queues)s::text[], %(hold)s::boolean) AS free

-- name: wait_release
-- The worker has work again: enqueues on its queues need not notify it.
SELECT rivet_wait_release(%(queues)s::text[])

-- name: claim_unsorted
-- Inside the transaction of a settle_claim statement that claims, before it: no plan that
-- sorts, for this transaction only (set_config's is_local), and the setting it replaced. The
-- claim must read rivet_task_rank_idx in (claim_rank, id) order. Its other plan, every pending
-- row of the queue read through another index (rivet_task_queue_state_idx, smaller) and then
-- sorted, is what the planner picks when its estimates say the queue holds a row or two: on
-- the statistics of a table analyzed while empty, then filled, that is a read and sort of the
-- whole backlog at every flush. No shape of the statement rules it out (any index on queue or
-- state serves the claim's conditions, and at a one-row estimate the shorter index plus a
-- sort costs less); with sorting off, the index read in order is the only plan left.
-- Sequential scans are off too: a generic plan made while rivet_task held a few pages (a
-- worker's first flushes after a VACUUM emptied the file) settled its acks by reading the
-- whole table once per ack, and kept that plan for the session while a backlog filled it
-- (tests/integration/test_stale_statistics.py); every row the flush touches has an index.
SELECT
    current_setting('enable_sort') AS was,
    current_setting('enable_seqscan') AS was_seqscan,
    set_config('enable_sort', 'off', true) AS now,
    set_config('enable_seqscan', 'off', true) AS now_seqscan

-- name: claim_sorted_again
-- After that statement inside a caller's transaction: the settings claim_unsorted replaced.
SELECT set_config('enable_sort', %(was)s::text, true), set_config('enable_seqscan', %(was_seqscan)s::text, true)

-- name: autovacuum_setting
-- Whether the server's autovacuum runs (a worker warns at start when it does not).
SHOW autovacuum

-- name: task_get
-- One task row by id.
SELECT
    id, queue, kind, payload::text AS payload, idem_key, unique_key, state, attempts,
    max_attempts, lease_epoch, lease_owner, visible_at, priority, created_at, updated_at,
    last_error, result::text AS result, cancel_requested, errors::text AS errors,
    trace_context::text AS trace_context, settled_epoch, settled_by
FROM rivet_task
WHERE id = %(task_id)s

-- name: task_list
-- Task rows filtered by queue and state (NULL = any), oldest id first.
SELECT
    id, queue, kind, payload::text AS payload, idem_key, unique_key, state, attempts,
    max_attempts, lease_epoch, lease_owner, visible_at, priority, created_at, updated_at,
    last_error, result::text AS result, cancel_requested, errors::text AS errors,
    trace_context::text AS trace_context, settled_epoch, settled_by
FROM rivet_task
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
    AND (%(state)s::text IS NULL OR state = %(state)s)
ORDER BY id
LIMIT %(limit)s

-- name: queue_overview
-- Per queue (those %(queues)s names, or every queue with a task or a fenced write): ready, leased,
-- delayed, dead, fenced writes, oldest ready age, and done counted up to %(done_cap)s. Queues come
-- from loose index scans and each count from an index probe, so a big table stays cheap.
WITH RECURSIVE task_queues (queue) AS (
    (SELECT queue FROM rivet_task WHERE %(queues)s::text[] IS NULL ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT t.queue FROM rivet_task AS t WHERE t.queue > q.queue ORDER BY t.queue LIMIT 1)
    FROM task_queues AS q
    WHERE q.queue IS NOT NULL
),
fenced_queues (queue) AS (
    (SELECT queue FROM rivet_fenced_write WHERE %(queues)s::text[] IS NULL ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (
        SELECT f.queue FROM rivet_fenced_write AS f WHERE f.queue > q.queue ORDER BY f.queue LIMIT 1
    )
    FROM fenced_queues AS q
    WHERE q.queue IS NOT NULL
),
queues (queue) AS (
    SELECT queue FROM task_queues WHERE queue IS NOT NULL
    UNION
    SELECT queue FROM fenced_queues WHERE queue IS NOT NULL
    UNION
    SELECT unnest(%(queues)s::text[])
)
SELECT
    queues.queue, pending.ready, pending.leased, pending.delayed, done.n AS done, dead.n AS dead,
    fenced.n AS fenced,
    extract(epoch FROM now() - pending.oldest_ready)::float8 AS oldest_ready_age_secs
FROM queues
CROSS JOIN LATERAL (
    SELECT
        count(*) FILTER (WHERE visible_at <= now()) AS ready,
        count(*) FILTER (WHERE visible_at > now() AND lease_owner IS NOT NULL) AS leased,
        count(*) FILTER (WHERE visible_at > now() AND lease_owner IS NULL) AS delayed,
        min(visible_at) FILTER (WHERE visible_at <= now()) AS oldest_ready
    FROM rivet_task
    WHERE queue = queues.queue AND state = 'pending'
) AS pending
CROSS JOIN LATERAL (
    SELECT count(*) AS n FROM rivet_task WHERE queue = queues.queue AND state = 'dead'
) AS dead
CROSS JOIN LATERAL (
    SELECT count(*) AS n
    FROM (
        SELECT 1 FROM rivet_task WHERE queue = queues.queue AND state = 'done' LIMIT %(done_cap)s
    ) AS capped
) AS done
CROSS JOIN LATERAL (
    SELECT count(*) AS n FROM rivet_fenced_write WHERE queue = queues.queue
) AS fenced
ORDER BY queues.queue

-- name: done_estimate
-- The planner's estimate of a queue's done tasks (EXPLAIN: nothing is scanned).
EXPLAIN (FORMAT JSON) SELECT 1 FROM rivet_task WHERE queue = %(queue)s AND state = 'done'

-- name: jit_off
-- No JIT compilation for the rest of this transaction: the overview's queries are index probes,
-- and on a big table their cost guess would make compiling them take longer than running them.
SET LOCAL jit = off

-- name: fenced_count
-- How many fenced writes were recorded, by queue and op (NULL = any).
SELECT count(*) AS fenced
FROM rivet_fenced_write
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
    AND (%(op)s::text IS NULL OR op = %(op)s)

-- name: dead_requeue
-- Revive a dead task of a queue with fresh attempts, unless its unique job is pending again.
-- A new life: last_error is cleared, the errors list (the whole life's history) is kept. It
-- starts under a new epoch: a write of the earlier life's lease (a worker stopped while its task
-- was buried) is fenced, not applied to the new life.
WITH revived AS (
    UPDATE rivet_task AS t
    SET
        state = 'pending', attempts = 0, last_error = '', lease_owner = NULL, visible_at = now(),
        lease_epoch = t.lease_epoch + 1,
        updated_at = now(), cancel_requested = false,
        claim_rank = rivet_claim_rank(now(), t.priority, %(aging_secs)s::float8)
    WHERE t.id = %(task_id)s AND t.queue = %(queue)s AND t.state = 'dead'
        AND NOT EXISTS (
            SELECT 1
            FROM rivet_task AS live
            WHERE live.state = 'pending' AND live.kind = t.kind AND live.unique_key = t.unique_key
        )
    RETURNING t.id, t.queue
)
SELECT id, pg_notify(%(channel)s, queue)::text AS woken FROM revived

-- name: sweep_pick
-- The pending tasks of a queue no claim may run (used up, or cancelled) whose lease lapsed.
SELECT id, lease_epoch, last_error, cancel_requested
FROM rivet_task
WHERE state = 'pending' AND queue = %(queue)s AND visible_at <= now()
    AND (attempts >= max_attempts OR cancel_requested)
ORDER BY id
FOR UPDATE SKIP LOCKED

-- name: cancel_pick
-- Lock one task for a cancel: its state and epoch, and whether a lease still holds it.
SELECT
    state, lease_epoch, last_error,
    (lease_owner IS NOT NULL AND visible_at > now()) AS leased
FROM rivet_task
WHERE id = %(task_id)s
FOR UPDATE

-- name: cancel_mark
-- Mark a leased task cancelled: its worker's next heartbeat stops the handler and buries it.
UPDATE rivet_task SET cancel_requested = true, updated_at = now()
WHERE id = %(task_id)s AND state = 'pending'
RETURNING id

-- name: dead_purge
-- Delete the dead tasks of a queue: only task_ids and only those buried older_than ago, if given.
DELETE FROM rivet_task
WHERE queue = %(queue)s AND state = 'dead'
    AND (%(task_ids)s::bigint[] IS NULL OR id = ANY(%(task_ids)s::bigint[]))
    AND (
        %(older_than)s::float8 IS NULL
        OR updated_at <= now() - make_interval(secs => %(older_than)s::float8)
    )

-- name: task_prune
-- Delete up to limit done tasks last updated older_than seconds ago (of a queue, if given).
-- One short statement; rows another transaction holds are skipped, not waited for.
DELETE FROM rivet_task
WHERE id IN (
    SELECT id
    FROM rivet_task
    WHERE state = 'done'
        AND updated_at <= now() - make_interval(secs => %(older_than)s::float8)
        AND (%(queue)s::text IS NULL OR queue = %(queue)s)
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)

-- name: fenced_prune
-- Delete up to limit fenced-write records written older_than seconds ago (of a queue, if given).
DELETE FROM rivet_fenced_write
WHERE id IN (
    SELECT id
    FROM rivet_fenced_write
    WHERE created_at <= now() - make_interval(secs => %(older_than)s::float8)
        AND (%(queue)s::text IS NULL OR queue = %(queue)s)
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)

-- name: prunable
-- How many done tasks and fenced-write records a prune with these arguments would delete now.
SELECT
    (
        SELECT count(*)
        FROM rivet_task
        WHERE state = 'done'
            AND updated_at <= now() - make_interval(secs => %(older_than)s::float8)
            AND (%(queue)s::text IS NULL OR queue = %(queue)s)
    ) AS tasks,
    (
        SELECT count(*)
        FROM rivet_fenced_write
        WHERE created_at <= now() - make_interval(secs => %(older_than)s::float8)
            AND (%(queue)s::text IS NULL OR queue = %(queue)s)
    ) AS fenced

-- name: listen
-- Subscribe the wake-up connection to the notify channel ({channel} is a quoted identifier).
LISTEN {channel}
