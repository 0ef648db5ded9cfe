-- Every query of SqliteStore (rivet/stores/sqlite.py), one named block each, loaded once
-- by rivet.stores.sqlfile.
--
-- Parameters are SQLite named parameters (:name). Every timestamp is written by SQLite
-- itself as strftime('%Y-%m-%d %H:%M:%f', ...) in UTC: the text Django's Now() writes on
-- SQLite, so it sorts and compares correctly against the values Django writes (which are
-- 'YYYY-MM-DD HH:MM:SS[.ffffff]' in UTC). Offsets such as :ttl are modifiers like
-- printf('%+.6f seconds', :secs). Writes run inside BEGIN IMMEDIATE (the write lock is taken
-- first). Lists of ids come as JSON arrays, read with json_each.
--
-- claim_rank (priority aging) is the time a task became runnable moved by
-- rivet_rank_offset(priority, :aging_secs) seconds, in the same text format: a function
-- SqliteStore registers on each connection it uses, rivet.values.rank_offset_secs (the rule's
-- one Python owner, which the memory store uses too). A claim orders by
-- (claim_rank, id) on rivet_task_rank_idx and never writes it.

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
    lease_epoch, lease_owner, visible_at, priority, created_at, updated_at, last_error, result,
    trace_context, claim_rank
)
SELECT
    :queue, :kind, :payload, :idem_key, :unique_key, 'pending', 0, :max_attempts,
    0, NULL, ready.at, :priority,
    strftime('%Y-%m-%d %H:%M:%f', 'now'), strftime('%Y-%m-%d %H:%M:%f', 'now'), '', NULL,
    :trace_context,
    strftime(
        '%Y-%m-%d %H:%M:%f', ready.at,
        printf('%+.6f seconds', rivet_rank_offset(:priority, :aging_secs))
    )
FROM (
    SELECT COALESCE(
        :run_at, strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.6f seconds', :delay))
    ) AS at
) AS ready
WHERE true
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
-- The next runnable tasks of one queue in claim order, skipping ids this claim already met;
-- doomed ones (attempts used up, or cancelled) come with what their burial needs.
SELECT id, (attempts >= max_attempts OR cancel_requested) AS doomed, lease_epoch, last_error,
    cancel_requested
FROM rivet_task
WHERE queue = :queue AND state = 'pending' AND visible_at <= :now
  AND id NOT IN (SELECT value FROM json_each(:seen))
ORDER BY claim_rank, id
LIMIT :limit;

-- name: claim_lease
-- Lease the picked tasks: attempts+1, epoch+1, owner, visible_at = now + ttl.
UPDATE rivet_task SET
    attempts = attempts + 1,
    lease_epoch = lease_epoch + 1,
    lease_owner = :owner,
    visible_at = strftime('%Y-%m-%d %H:%M:%f', :now, printf('%+.6f seconds', :ttl)),
    updated_at = :now
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'pending'
RETURNING id, queue, kind, payload, idem_key, attempts, max_attempts, lease_epoch, priority,
    last_error, cancel_requested, trace_context;

-- name: lease_extend
-- Push visible_at to now + ttl for every (id, epoch) pair still held; return them, cancel marks too.
UPDATE rivet_task SET
    visible_at = strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.6f seconds', :ttl)),
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE state = 'pending'
  AND (id, lease_epoch) IN (
      SELECT a.value, b.value FROM json_each(:task_ids) AS a JOIN json_each(:epochs) AS b
      ON a.key = b.key
  )
RETURNING id, cancel_requested;

-- name: lease_refused
-- Record a heartbeat refused because another claim took the task (its epoch is newer now) as a
-- fenced write, op 'beat', once per lease (rivet_fence_one_beat_per_lease); one a task
-- finished under the same epoch meets is not recorded.
INSERT INTO rivet_fenced_write (task_id, queue, op, owner, epoch, created_at)
SELECT id, queue, 'beat', :owner, :epoch, strftime('%Y-%m-%d %H:%M:%f', 'now')
FROM rivet_task
WHERE id = :task_id AND lease_epoch > :epoch
ON CONFLICT (task_id, epoch) WHERE op = 'beat' DO NOTHING;

-- name: settle
-- Apply one decision under its epoch. A row an operator cancelled is buried whatever was
-- decided, with the decision's :cancelled_error (composed by rivet.values); the caller records a fence when no row comes back. An ack clears
-- last_error; a retry or burial sets it and appends {attempt, at, error} to errors, keeping
-- the newest :errors_kept entries (at: rivet.values.error_at's shape; the clock has ms). The decision's epoch and owner become settled_epoch and
-- settled_by.
UPDATE rivet_task SET
    state = CASE WHEN cancel_requested THEN 'dead' ELSE :state END,
    result = CASE WHEN :state = 'done' AND NOT cancel_requested THEN :result ELSE result END,
    last_error = CASE
        WHEN cancel_requested THEN :cancelled_error
        WHEN :state = 'done' THEN ''
        ELSE :error
    END,
    errors = CASE
        WHEN :state = 'done' AND NOT cancel_requested THEN errors
        ELSE (
            SELECT json_group_array(json(kept.value))
            FROM json_each(json_insert(errors, '$[#]', json_object(
                'attempt', attempts,
                'at', strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000+00:00',
                'error', CASE WHEN cancel_requested THEN :cancelled_error ELSE :error END
            ))) AS kept
            WHERE kept.key > json_array_length(errors) - :errors_kept
        )
    END,
    lease_owner = CASE WHEN :state = 'pending' THEN NULL ELSE lease_owner END,
    settled_epoch = :epoch,
    settled_by = :owner,
    visible_at = CASE
        WHEN :state = 'pending'
            THEN strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.6f seconds', :delay))
        ELSE visible_at
    END,
    claim_rank = CASE
        WHEN :state = 'pending' THEN strftime('%Y-%m-%d %H:%M:%f', 'now', printf(
            '%+.6f seconds', :delay + rivet_rank_offset(priority, :aging_secs)
        ))
        ELSE claim_rank
    END,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE id = :task_id AND lease_epoch = :epoch AND state = 'pending'
RETURNING cancel_requested;

-- name: fence
-- Record a refused (stale-epoch) decision durably; queue is '' for a task that is gone.
INSERT INTO rivet_fenced_write (task_id, queue, op, owner, epoch, created_at)
VALUES (
    :task_id, COALESCE((SELECT queue FROM rivet_task WHERE id = :task_id), ''), :op, :owner,
    :epoch,
    strftime('%Y-%m-%d %H:%M:%f', 'now')
);

-- name: task_get
-- One task row by id.
SELECT id, queue, kind, payload, idem_key, unique_key, state, attempts, max_attempts,
    lease_epoch, lease_owner, visible_at, priority, created_at, updated_at, last_error, result, cancel_requested,
    errors, trace_context, settled_epoch, settled_by
FROM rivet_task
WHERE id = :task_id;

-- name: task_list
-- Task rows filtered by queue and state (NULL = any), oldest id first.
SELECT id, queue, kind, payload, idem_key, unique_key, state, attempts, max_attempts,
    lease_epoch, lease_owner, visible_at, priority, created_at, updated_at, last_error, result, cancel_requested,
    errors, trace_context, settled_epoch, settled_by
FROM rivet_task
WHERE (:queue IS NULL OR queue = :queue) AND (:state IS NULL OR state = :state)
ORDER BY id
LIMIT :limit;

-- name: queue_overview
-- Per queue (those in the JSON list :queues, or every queue with a task or a fenced write), at one
-- database instant: ready, leased, delayed, done, dead, fenced writes, oldest ready.
WITH clock AS (SELECT strftime('%Y-%m-%d %H:%M:%f', 'now') AS now),
queues (queue) AS (
    SELECT queue FROM rivet_task WHERE :queues IS NULL
    UNION
    SELECT queue FROM rivet_fenced_write WHERE :queues IS NULL
    UNION
    SELECT value FROM json_each(coalesce(:queues, '[]'))
)
SELECT
    queues.queue AS queue,
    clock.now AS now,
    COUNT(t.id) FILTER (WHERE t.state = 'pending' AND t.visible_at <= clock.now) AS ready,
    COUNT(t.id) FILTER (
        WHERE t.state = 'pending' AND t.visible_at > clock.now AND t.lease_owner IS NOT NULL
    ) AS leased,
    COUNT(t.id) FILTER (
        WHERE t.state = 'pending' AND t.visible_at > clock.now AND t.lease_owner IS NULL
    ) AS delayed,
    COUNT(t.id) FILTER (WHERE t.state = 'done') AS done,
    COUNT(t.id) FILTER (WHERE t.state = 'dead') AS dead,
    MIN(t.visible_at) FILTER (
        WHERE t.state = 'pending' AND t.visible_at <= clock.now
    ) AS oldest_ready_at,
    (SELECT COUNT(*) FROM rivet_fenced_write f WHERE f.queue = queues.queue) AS fenced
FROM queues CROSS JOIN clock LEFT JOIN rivet_task t ON t.queue = queues.queue
GROUP BY queues.queue, clock.now
ORDER BY queues.queue;

-- name: fenced_count
-- Fenced writes recorded, filtered by queue and op (NULL = any).
SELECT COUNT(*) AS fenced FROM rivet_fenced_write
WHERE (:queue IS NULL OR queue = :queue) AND (:op IS NULL OR op = :op);

-- name: dead_requeue
-- Make a dead task pending with fresh attempts, unless its unique job is pending already.
-- A new life: last_error is cleared, the errors list (the whole life's history) is kept. It
-- starts under a new epoch: a write of the earlier life's lease is fenced, not applied to it.
UPDATE rivet_task SET
    state = 'pending',
    attempts = 0,
    lease_epoch = lease_epoch + 1,
    last_error = '',
    lease_owner = NULL,
    cancel_requested = 0,
    visible_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
    claim_rank = strftime(
        '%Y-%m-%d %H:%M:%f', 'now',
        printf('%+.6f seconds', rivet_rank_offset(priority, :aging_secs))
    )
WHERE id = :task_id AND queue = :queue AND state = 'dead'
  AND NOT EXISTS (
      SELECT 1 FROM rivet_task AS live
      WHERE live.state = 'pending' AND live.kind = rivet_task.kind
        AND live.unique_key = rivet_task.unique_key
  )
RETURNING id;

-- name: sweep_pick
-- The pending tasks of a queue no claim may run (used up, or cancelled) whose lease lapsed.
SELECT id, lease_epoch, last_error, cancel_requested FROM rivet_task
WHERE queue = :queue AND state = 'pending' AND (attempts >= max_attempts OR cancel_requested)
  AND visible_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')
ORDER BY id;

-- name: cancel_pick
-- One task for a cancel: its state and epoch, and whether a lease still holds it.
SELECT state, lease_epoch, last_error,
    (lease_owner IS NOT NULL AND visible_at > strftime('%Y-%m-%d %H:%M:%f', 'now')) AS leased
FROM rivet_task
WHERE id = :task_id;

-- name: cancel_mark
-- Mark a leased task cancelled: its worker's next heartbeat stops the handler and buries it.
UPDATE rivet_task SET cancel_requested = 1, updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE id = :task_id AND state = 'pending'
RETURNING id;

-- name: dead_purge
-- Delete the dead tasks of a queue: only the ids in the JSON array :task_ids and only those
-- last updated :older_than seconds ago or earlier, if given.
DELETE FROM rivet_task
WHERE queue = :queue AND state = 'dead'
  AND (:task_ids IS NULL OR id IN (SELECT value FROM json_each(:task_ids)))
  AND (:older_than IS NULL OR updated_at <= strftime(
      '%Y-%m-%d %H:%M:%f', 'now', printf('%+.6f seconds', -:older_than)
  ));


-- name: task_prune
-- Delete up to :limit done tasks last updated :older_than seconds ago (of :queue, if given).
DELETE FROM rivet_task
WHERE id IN (
    SELECT id FROM rivet_task
    WHERE state = 'done'
      AND updated_at <= strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.6f seconds', -:older_than))
      AND (:queue IS NULL OR queue = :queue)
    LIMIT :limit
);

-- name: fenced_prune
-- Delete up to :limit fenced-write records written :older_than seconds ago (of :queue, if given).
DELETE FROM rivet_fenced_write
WHERE id IN (
    SELECT id FROM rivet_fenced_write
    WHERE created_at <= strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.6f seconds', -:older_than))
      AND (:queue IS NULL OR queue = :queue)
    ORDER BY id
    LIMIT :limit
);

-- name: prunable
-- How many done tasks and fenced-write records a prune with these arguments would delete now.
SELECT
    (SELECT COUNT(*) FROM rivet_task
     WHERE state = 'done'
       AND updated_at <= strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.6f seconds', -:older_than))
       AND (:queue IS NULL OR queue = :queue)) AS tasks,
    (SELECT COUNT(*) FROM rivet_fenced_write
     WHERE created_at <= strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.6f seconds', -:older_than))
       AND (:queue IS NULL OR queue = :queue)) AS fenced;
