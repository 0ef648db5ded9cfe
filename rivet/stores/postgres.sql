-- The PostgresStore's queries, one named block each, loaded once by rivet.stores.sqlfile.
-- Every timestamp is the server's now() (one value per transaction); parameters are named.
-- A claimed task is a pending task whose visible_at is in the future: rivet_task_claim_idx
-- (queue, priority desc, visible_at, id where state = 'pending') serves every claim.

-- name: enqueue
-- Insert one task unless a key (idem_key, or a pending unique job) already has it; wake listeners.
WITH inserted AS (
    INSERT INTO rivet_task (
        queue, kind, payload, idem_key, unique_key, state, attempts, max_attempts,
        lease_epoch, lease_owner, visible_at, priority, created_at, updated_at, last_error
    )
    VALUES (
        %(queue)s, %(kind)s, %(payload)s::jsonb, %(idem_key)s, %(unique_key)s, 'pending', 0,
        %(max_attempts)s, 0, NULL,
        coalesce(%(run_at)s::timestamptz, now() + make_interval(secs => %(delay)s)),
        %(priority)s, now(), now(), ''
    )
    ON CONFLICT DO NOTHING
    RETURNING id, queue
)
SELECT id, pg_notify(%(channel)s, queue)::text AS woken FROM inserted

-- name: reserve_ids
-- Take ids for a bulk enqueue up front, so each inserted row is matched to its spec exactly.
SELECT nextval(pg_get_serial_sequence('rivet_task', 'id')) FROM generate_series(1, %(count)s)

-- name: enqueue_many
-- Insert a batch in the order given, skipping rows a key already has; wake listeners.
WITH inserted AS (
    INSERT INTO rivet_task (
        id, queue, kind, payload, idem_key, unique_key, state, attempts, max_attempts,
        lease_epoch, lease_owner, visible_at, priority, created_at, updated_at, last_error
    )
    SELECT
        batch.id, batch.queue, batch.kind, batch.payload::jsonb, batch.idem_key,
        batch.unique_key, 'pending', 0, batch.max_attempts, 0, NULL,
        coalesce(batch.run_at, now() + make_interval(secs => batch.delay)),
        batch.priority, now(), now(), ''
    FROM unnest(
        %(ids)s::bigint[], %(queues)s::text[], %(kinds)s::text[], %(payloads)s::text[],
        %(idem_keys)s::text[], %(unique_keys)s::text[], %(max_attempts)s::integer[],
        %(run_ats)s::timestamptz[], %(delays)s::float8[], %(priorities)s::smallint[]
    ) WITH ORDINALITY AS batch (
        id, queue, kind, payload, idem_key, unique_key, max_attempts, run_at, delay, priority,
        position
    )
    ORDER BY batch.position
    ON CONFLICT DO NOTHING
    RETURNING id, queue
)
SELECT id, pg_notify(%(channel)s, queue)::text AS woken FROM inserted

-- name: find_by_idem_key
-- The task holding an idempotency key, and whether it is the same work (queue, kind, payload).
SELECT
    id,
    queue = %(queue)s AND kind = %(kind)s
        AND coalesce(payload, 'null'::jsonb) = coalesce(%(payload)s::jsonb, 'null'::jsonb)
        AS same_work
FROM rivet_task
WHERE idem_key = %(idem_key)s

-- name: find_pending_unique
-- The pending task of a unique job (kind, unique_key), if there is one.
SELECT id
FROM rivet_task
WHERE kind = %(kind)s AND unique_key = %(unique_key)s AND state = 'pending'

-- name: claim
-- Lease up to limit runnable tasks of one queue; bury the exhausted ones met on the way.
WITH picked AS (
    SELECT id, visible_at AS ready_at
    FROM rivet_task
    WHERE state = 'pending' AND queue = %(queue)s AND visible_at <= now()
    ORDER BY priority DESC, visible_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
leased AS (
    UPDATE rivet_task AS t
    SET
        attempts = CASE WHEN t.attempts < t.max_attempts THEN t.attempts + 1 ELSE t.attempts END,
        lease_epoch = CASE
            WHEN t.attempts < t.max_attempts THEN t.lease_epoch + 1 ELSE t.lease_epoch
        END,
        lease_owner = CASE WHEN t.attempts < t.max_attempts THEN %(owner)s ELSE t.lease_owner END,
        visible_at = CASE
            WHEN t.attempts < t.max_attempts THEN now() + make_interval(secs => %(ttl)s)
            ELSE t.visible_at
        END,
        state = CASE WHEN t.attempts < t.max_attempts THEN 'pending' ELSE 'dead' END,
        last_error = CASE
            WHEN t.attempts < t.max_attempts THEN t.last_error
            WHEN t.last_error = '' THEN %(lost_suffix)s
            ELSE t.last_error || '; ' || %(lost_suffix)s
        END,
        updated_at = now()
    FROM picked
    WHERE t.id = picked.id
    RETURNING
        t.id, t.queue, t.kind, t.payload::text AS payload, t.idem_key, t.attempts,
        t.max_attempts, t.lease_epoch, t.priority, t.state, picked.ready_at
)
SELECT id, queue, kind, payload, idem_key, attempts, max_attempts, lease_epoch, priority, state
FROM leased
ORDER BY priority DESC, ready_at, id

-- name: lease_extend
-- Push visible_at to now + ttl for every (task, epoch) still held; return their ids.
UPDATE rivet_task AS t
SET visible_at = now() + make_interval(secs => %(ttl)s), updated_at = now()
FROM unnest(%(task_ids)s::bigint[], %(epochs)s::bigint[]) AS held (task_id, epoch)
WHERE t.id = held.task_id AND t.lease_epoch = held.epoch AND t.state = 'pending'
RETURNING t.id

-- name: ack
-- Mark a task done if the epoch still holds its lease; otherwise record the fenced ack.
WITH acked AS (
    UPDATE rivet_task
    SET state = 'done', result = %(result)s::jsonb, updated_at = now()
    WHERE id = %(task_id)s AND lease_epoch = %(epoch)s AND state = 'pending'
    RETURNING id
),
fenced AS (
    INSERT INTO rivet_fenced_write (task_id, queue, op, owner, epoch, created_at)
    SELECT
        %(task_id)s,
        coalesce((SELECT queue FROM rivet_task WHERE id = %(task_id)s), ''),
        'ack', %(owner)s, %(epoch)s, now()
    WHERE NOT EXISTS (SELECT 1 FROM acked)
    RETURNING id
)
SELECT count(*) FROM acked

-- name: fail
-- Record a failed attempt if the epoch holds the lease: retry (wake listeners if due now), or bury.
WITH failed AS (
    UPDATE rivet_task
    SET
        state = CASE WHEN attempts < max_attempts THEN 'pending' ELSE 'dead' END,
        last_error = CASE WHEN attempts < max_attempts THEN %(error)s ELSE %(buried_error)s END,
        lease_owner = CASE WHEN attempts < max_attempts THEN NULL ELSE lease_owner END,
        visible_at = CASE
            WHEN attempts < max_attempts THEN now() + make_interval(secs => %(delay)s)
            ELSE visible_at
        END,
        updated_at = now()
    WHERE id = %(task_id)s AND lease_epoch = %(epoch)s AND state = 'pending'
    RETURNING state, queue
),
fenced AS (
    INSERT INTO rivet_fenced_write (task_id, queue, op, owner, epoch, created_at)
    SELECT
        %(task_id)s,
        coalesce((SELECT queue FROM rivet_task WHERE id = %(task_id)s), ''),
        'fail', %(owner)s, %(epoch)s, now()
    WHERE NOT EXISTS (SELECT 1 FROM failed)
    RETURNING id
)
SELECT
    state,
    CASE
        WHEN state = 'pending' AND %(delay)s::float8 <= 0 THEN pg_notify(%(channel)s, queue)::text
    END AS woken
FROM failed

-- name: task_get
-- One task row by id.
SELECT
    id, queue, kind, payload::text AS payload, idem_key, unique_key, state, attempts,
    max_attempts, lease_epoch, lease_owner, visible_at, priority, created_at, updated_at,
    last_error, result::text AS result
FROM rivet_task
WHERE id = %(task_id)s

-- name: task_list
-- Task rows filtered by queue and state (NULL = any), oldest id first.
SELECT
    id, queue, kind, payload::text AS payload, idem_key, unique_key, state, attempts,
    max_attempts, lease_epoch, lease_owner, visible_at, priority, created_at, updated_at,
    last_error, result::text AS result
FROM rivet_task
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
    AND (%(state)s::text IS NULL OR state = %(state)s)
ORDER BY id
LIMIT %(limit)s

-- name: queue_stats
-- Ready, leased, delayed, done and dead counts, the oldest ready age and fenced writes of a queue.
SELECT
    count(*) FILTER (WHERE state = 'pending' AND visible_at <= now()) AS ready,
    count(*) FILTER (
        WHERE state = 'pending' AND visible_at > now() AND lease_owner IS NOT NULL
    ) AS leased,
    count(*) FILTER (
        WHERE state = 'pending' AND visible_at > now() AND lease_owner IS NULL
    ) AS delayed,
    count(*) FILTER (WHERE state = 'done') AS done,
    count(*) FILTER (WHERE state = 'dead') AS dead,
    extract(
        epoch FROM now() - min(visible_at) FILTER (WHERE state = 'pending' AND visible_at <= now())
    )::float8 AS oldest_ready_age_secs,
    (SELECT count(*) FROM rivet_fenced_write WHERE queue = %(queue)s) AS fenced
FROM rivet_task
WHERE queue = %(queue)s

-- name: fenced_count
-- How many fenced writes were recorded, by queue and op (NULL = any).
SELECT count(*)
FROM rivet_fenced_write
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
    AND (%(op)s::text IS NULL OR op = %(op)s)

-- name: dead_requeue
-- Revive a dead task of a queue with fresh attempts, unless its unique job is pending again.
WITH revived AS (
    UPDATE rivet_task AS t
    SET state = 'pending', attempts = 0, lease_owner = NULL, visible_at = now(), updated_at = now()
    WHERE t.id = %(task_id)s AND t.queue = %(queue)s AND t.state = 'dead'
        AND NOT EXISTS (
            SELECT 1
            FROM rivet_task AS live
            WHERE live.state = 'pending' AND live.kind = t.kind AND live.unique_key = t.unique_key
        )
    RETURNING t.id, t.queue
)
SELECT id, pg_notify(%(channel)s, queue)::text AS woken FROM revived

-- name: dead_sweep
-- Bury the pending tasks of a queue whose attempts are used up and whose lease lapsed.
WITH lapsed AS (
    SELECT id
    FROM rivet_task
    WHERE state = 'pending' AND queue = %(queue)s AND visible_at <= now()
        AND attempts >= max_attempts
    FOR UPDATE SKIP LOCKED
)
UPDATE rivet_task AS t
SET
    state = 'dead',
    last_error = CASE
        WHEN t.last_error = '' THEN %(lost_suffix)s ELSE t.last_error || '; ' || %(lost_suffix)s
    END,
    updated_at = now()
FROM lapsed
WHERE t.id = lapsed.id

-- name: dead_purge
-- Delete the dead tasks of a queue: only task_ids and only those buried older_than ago, if given.
DELETE FROM rivet_task
WHERE queue = %(queue)s AND state = 'dead'
    AND (%(task_ids)s::bigint[] IS NULL OR id = ANY(%(task_ids)s::bigint[]))
    AND (
        %(older_than)s::float8 IS NULL
        OR updated_at <= now() - make_interval(secs => %(older_than)s::float8)
    )

-- name: listen
-- Subscribe the wake-up connection to the notify channel ({channel} is a quoted identifier).
LISTEN {channel}
