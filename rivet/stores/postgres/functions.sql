-- The SQL functions of the PostgreSQL store, as the database holds them now: the one place to
-- read their current bodies. Migrations create them (each migration keeps its own copy of the
-- version it installs: 0016 rivet_claim_rank; 0017 the wake-up gate; 0018 rivet_wake again, as
-- one SQL expression); tests/integration/test_sql_functions.py checks that a migrated database
-- holds exactly these, so a change here needs a migration that installs it.
-- Advisory lock keys: (1919514113, hashtext(queue)) is a queue's waiter lock, held shared by a
-- session waiting for work; (1919514114, hashtext(queue)) its gate lock, held shared by every
-- enqueue until its transaction ends (docs/architecture.md, "Wake-ups").

-- name: rivet_claim_rank
-- Priority aging: a task of priority p ranks as if ready p x aging_secs earlier, p clamped to -100..100.
CREATE OR REPLACE FUNCTION rivet_claim_rank(
    ready timestamptz, priority integer, aging_secs double precision
) RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT ready - make_interval(secs => greatest(-100, least(100, priority)) * aging_secs) $$

-- name: rivet_wake
-- In an enqueue's statement: the gate lock shared; notify (and return the queue) only if a session waits on it.
CREATE OR REPLACE FUNCTION rivet_wake(channel text, queue text) RETURNS text
LANGUAGE sql VOLATILE
AS $$
SELECT CASE
    WHEN pg_advisory_xact_lock_shared(1919514114, hashtext(queue))::text IS NULL THEN NULL
    WHEN pg_try_advisory_lock(1919514113, hashtext(queue)) THEN
        CASE WHEN pg_advisory_unlock(1919514113, hashtext(queue)) THEN NULL END
    ELSE pg_notify(channel, queue)::text || queue
END
$$

-- name: rivet_wait_hold
-- A worker's session starts waiting on queues (with hold); true when every queue's gate is free.
CREATE OR REPLACE FUNCTION rivet_wait_hold(queues text[], hold boolean) RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    name text;
    free boolean := true;
BEGIN
    IF hold THEN
        FOREACH name IN ARRAY queues LOOP
            PERFORM pg_advisory_lock_shared(1919514113, hashtext(name));
        END LOOP;
    END IF;
    FOREACH name IN ARRAY queues LOOP
        IF pg_try_advisory_lock(1919514114, hashtext(name)) THEN
            PERFORM pg_advisory_unlock(1919514114, hashtext(name));
        ELSE
            free := false;
        END IF;
    END LOOP;
    RETURN free;
END
$$

-- name: rivet_wait_release
-- The waiter locks given back: the worker has work again.
CREATE OR REPLACE FUNCTION rivet_wait_release(queues text[]) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    name text;
BEGIN
    FOREACH name IN ARRAY queues LOOP
        PERFORM pg_advisory_unlock_shared(1919514113, hashtext(name));
    END LOOP;
END
$$
