-- Every query of SqliteStore (rivet/stores/sqlite.py), one named block each, loaded once
-- by rivet.stores.sqlfile.
--
-- Parameters are SQLite named parameters (:name). Every timestamp is written by SQLite
-- itself as strftime('%Y-%m-%d %H:%M:%f', ...) in UTC: the text Django's Now() writes on
-- SQLite, so it sorts and compares correctly against the values Django writes (which are
-- 'YYYY-MM-DD HH:MM:SS[.ffffff]' in UTC). Offsets such as :ttl are modifiers like
-- '+30.000000 seconds'. Writes run inside BEGIN IMMEDIATE (the write lock is taken first).

-- name: begin_immediate
-- Open a transaction that holds the write lock from its first statement.
BEGIN IMMEDIATE;

-- name: commit
-- Commit a transaction opened by begin_immediate.
COMMIT;

-- name: rollback
-- Roll back a transaction opened by begin_immediate.
ROLLBACK;

-- name: now
-- The database clock, read once when one operation must use a single instant.
SELECT strftime('%Y-%m-%d %H:%M:%f', 'now');

-- name: enqueue
-- Insert one task; a clash on idem_key or on the unique-pending index inserts nothing.
INSERT INTO rivet_task (
    queue, kind, payload, idem_key, unique_key, state, attempts, max_attempts,
    lease_epoch, lease_owner, visible_at, priority, created_at, updated_at, last_error, result
)
VALUES (
    :queue, :kind, :payload, :idem_key, :unique_key, 'pending', 0, :max_attempts,
    0, NULL, COALESCE(:run_at, strftime('%Y-%m-%d %H:%M:%f', 'now', :delay)), :priority,
    strftime('%Y-%m-%d %H:%M:%f', 'now'), strftime('%Y-%m-%d %H:%M:%f', 'now'), '', NULL
)
ON CONFLICT DO NOTHING
RETURNING id;

-- name: find_by_idem_key
-- The task that already holds an idempotency key, with the work it was enqueued for.
SELECT id, queue, kind, payload FROM rivet_task WHERE idem_key = :idem_key;

-- name: find_unique_pending
-- The pending task of a unique job (kind, unique_key), if there is one.
SELECT id FROM rivet_task
WHERE kind = :kind AND unique_key = :unique_key AND state = 'pending';

-- name: claim_pick
-- The next runnable tasks of one queue in claim order, skipping ids this claim already took.
SELECT id FROM rivet_task
WHERE queue = :queue AND state = 'pending' AND visible_at <= :now
  AND id NOT IN (SELECT value FROM json_each(:seen))
ORDER BY priority DESC, visible_at, id
LIMIT :limit;

-- name: claim_lease
-- Lease the picked tasks (attempts+1, epoch+1, visible_at = now + ttl); bury exhausted ones.
UPDATE rivet_task SET
    state = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'pending' END,
    last_error = CASE
        WHEN attempts < max_attempts THEN last_error
        WHEN last_error = '' THEN :lost_suffix
        ELSE last_error || '; ' || :lost_suffix
    END,
    attempts = CASE WHEN attempts >= max_attempts THEN attempts ELSE attempts + 1 END,
    lease_epoch = CASE WHEN attempts >= max_attempts THEN lease_epoch ELSE lease_epoch + 1 END,
    lease_owner = CASE WHEN attempts >= max_attempts THEN lease_owner ELSE :owner END,
    visible_at = CASE
        WHEN attempts >= max_attempts THEN visible_at
        ELSE strftime('%Y-%m-%d %H:%M:%f', :now, :ttl)
    END,
    updated_at = :now
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'pending'
RETURNING id, queue, kind, payload, idem_key, attempts, max_attempts, lease_epoch, priority,
    state;

-- name: lease_extend
-- Push visible_at to now + ttl for every (id, epoch) pair whose lease is still held.
UPDATE rivet_task SET
    visible_at = strftime('%Y-%m-%d %H:%M:%f', 'now', :ttl),
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE state = 'pending'
  AND (id, lease_epoch) IN (
      SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:leases)
  )
RETURNING id;

-- name: ack
-- Mark a task done with its result, only under the lease epoch named.
UPDATE rivet_task SET
    state = 'done',
    result = :result,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE id = :id AND lease_epoch = :epoch AND state = 'pending';

-- name: fail
-- Record a failed attempt under the epoch named: retry after :delay, or bury on the last.
UPDATE rivet_task SET
    state = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'pending' END,
    last_error = CASE
        WHEN attempts < max_attempts THEN :error
        WHEN :error = '' THEN :error_suffix
        ELSE :error || '; ' || :error_suffix
    END,
    lease_owner = CASE WHEN attempts >= max_attempts THEN lease_owner ELSE NULL END,
    visible_at = CASE
        WHEN attempts >= max_attempts THEN visible_at
        ELSE strftime('%Y-%m-%d %H:%M:%f', 'now', :delay)
    END,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE id = :id AND lease_epoch = :epoch AND state = 'pending'
RETURNING state;

-- name: fence
-- Record a refused (stale-epoch) ack or fail durably; queue is '' for a task that is gone.
INSERT INTO rivet_fenced_write (task_id, queue, op, owner, epoch, created_at)
VALUES (
    :id, COALESCE((SELECT queue FROM rivet_task WHERE id = :id), ''), :op, :owner, :epoch,
    strftime('%Y-%m-%d %H:%M:%f', 'now')
);

-- name: task_get
-- One task row by id.
SELECT id, queue, kind, payload, idem_key, unique_key, state, attempts, max_attempts,
    lease_epoch, lease_owner, visible_at, priority, created_at, updated_at, last_error, result
FROM rivet_task
WHERE id = :id;

-- name: task_list
-- Task rows filtered by queue and state (NULL = any), oldest id first.
SELECT id, queue, kind, payload, idem_key, unique_key, state, attempts, max_attempts,
    lease_epoch, lease_owner, visible_at, priority, created_at, updated_at, last_error, result
FROM rivet_task
WHERE (:queue IS NULL OR queue = :queue) AND (:state IS NULL OR state = :state)
ORDER BY id
LIMIT :limit;

-- name: queue_stats
-- Counts for one queue at one database instant, with that instant and the oldest ready time.
WITH clock AS (SELECT strftime('%Y-%m-%d %H:%M:%f', 'now') AS now)
SELECT
    clock.now,
    COUNT(t.id) FILTER (WHERE t.state = 'pending' AND t.visible_at <= clock.now),
    COUNT(t.id) FILTER (
        WHERE t.state = 'pending' AND t.visible_at > clock.now AND t.lease_owner IS NOT NULL
    ),
    COUNT(t.id) FILTER (
        WHERE t.state = 'pending' AND t.visible_at > clock.now AND t.lease_owner IS NULL
    ),
    COUNT(t.id) FILTER (WHERE t.state = 'done'),
    COUNT(t.id) FILTER (WHERE t.state = 'dead'),
    MIN(t.visible_at) FILTER (WHERE t.state = 'pending' AND t.visible_at <= clock.now),
    (SELECT COUNT(*) FROM rivet_fenced_write f WHERE f.queue = :queue)
FROM clock LEFT JOIN rivet_task t ON t.queue = :queue;

-- name: fenced_count
-- Fenced writes recorded, filtered by queue and op (NULL = any).
SELECT COUNT(*) FROM rivet_fenced_write
WHERE (:queue IS NULL OR queue = :queue) AND (:op IS NULL OR op = :op);

-- name: dead_requeue
-- Make a dead task pending with fresh attempts, unless its unique job is pending already.
UPDATE rivet_task SET
    state = 'pending',
    attempts = 0,
    lease_owner = NULL,
    visible_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE id = :id AND queue = :queue AND state = 'dead'
  AND NOT EXISTS (
      SELECT 1 FROM rivet_task AS live
      WHERE live.state = 'pending' AND live.kind = rivet_task.kind
        AND live.unique_key = rivet_task.unique_key
  );

-- name: dead_sweep
-- Bury the pending tasks of a queue whose attempts are used up and whose lease lapsed.
UPDATE rivet_task SET
    state = 'dead',
    last_error = CASE
        WHEN last_error = '' THEN :lost_suffix
        ELSE last_error || '; ' || :lost_suffix
    END,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE queue = :queue AND state = 'pending' AND attempts >= max_attempts
  AND visible_at <= strftime('%Y-%m-%d %H:%M:%f', 'now');

-- name: dead_purge
-- Delete the dead tasks of a queue: only the ids in the JSON array :ids and only those last
-- updated before now + :age, if given.
DELETE FROM rivet_task
WHERE queue = :queue AND state = 'dead'
  AND (:ids IS NULL OR id IN (SELECT value FROM json_each(:ids)))
  AND (:age IS NULL OR updated_at <= strftime('%Y-%m-%d %H:%M:%f', 'now', :age));
