"""The wake-up gate: an enqueue notifies only when a worker waits on its queue.

The functions' current bodies are in rivet/stores/postgres/functions.sql (``rivet_wake`` is
0018's now); this migration keeps the versions it installs.

A ``pg_notify`` makes its transaction take a lock that every notifying transaction holds until
its commit is on disk, so enqueues that each notify commit one after another: however many
producers enqueue at once, their commits go through that lock in single file. A worker that has
work does not need the notification, so the enqueue asks first, and a worker says when it waits.

- ``rivet_wake(channel, queue)``, in the enqueue's statement: takes the queue's gate lock
  shared until its transaction ends, then notifies only if some session holds the queue's
  waiter lock (a worker waiting for work). Returns the queue's name when it notified.
- ``rivet_wait_hold(queues, hold)``: with ``hold``, a worker's session starts waiting on
  ``queues`` (the waiter locks, shared, held by the session until ``rivet_wait_release``; the
  worker asks once, and without ``hold`` when it tries the gates again); then, for each queue,
  tries its gate lock exclusive and lets it go at once. True when every gate was free: every enqueue
  that decided not to notify (it saw no waiter) has ended, so the worker's next claim sees what
  it committed. False: one may still be open; the worker claims again shortly and tries again.
- ``rivet_wait_release(queues)``: the waiter locks given back (the worker has work again).

Advisory locks of two keys: (1919514113, hashtext(queue)) for waiters and (1919514114,
hashtext(queue)) for gates. Two queues whose names hash alike share locks: an enqueue then
notifies more often than it needs to, and a worker passes a gate a little later; nothing is
missed. Nothing on SQLite, which has no notifications.
"""

from django.db import migrations

WAITER, GATE = 1919514113, 1919514114

CREATE = [
    f"""
CREATE OR REPLACE FUNCTION rivet_wake(channel text, queue text) RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared({GATE}, hashtext(queue));
    IF pg_try_advisory_lock({WAITER}, hashtext(queue)) THEN
        PERFORM pg_advisory_unlock({WAITER}, hashtext(queue));
        RETURN NULL;
    END IF;
    PERFORM pg_notify(channel, queue);
    RETURN queue;
END
$$
""",
    f"""
CREATE OR REPLACE FUNCTION rivet_wait_hold(queues text[], hold boolean) RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    name text;
    free boolean := true;
BEGIN
    IF hold THEN
        FOREACH name IN ARRAY queues LOOP
            PERFORM pg_advisory_lock_shared({WAITER}, hashtext(name));
        END LOOP;
    END IF;
    FOREACH name IN ARRAY queues LOOP
        IF pg_try_advisory_lock({GATE}, hashtext(name)) THEN
            PERFORM pg_advisory_unlock({GATE}, hashtext(name));
        ELSE
            free := false;
        END IF;
    END LOOP;
    RETURN free;
END
$$
""",
    f"""
CREATE OR REPLACE FUNCTION rivet_wait_release(queues text[]) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    name text;
BEGIN
    FOREACH name IN ARRAY queues LOOP
        PERFORM pg_advisory_unlock_shared({WAITER}, hashtext(name));
    END LOOP;
END
$$
""",
]
DROP = [
    "DROP FUNCTION IF EXISTS rivet_wake(text, text)",
    "DROP FUNCTION IF EXISTS rivet_wait_hold(text[], boolean)",
    "DROP FUNCTION IF EXISTS rivet_wait_release(text[])",
]


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in CREATE:
            schema_editor.execute(statement)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in DROP:
            schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [
        ("rivet", "0016_claim_rank_function"),
    ]

    operations = [migrations.RunPython(create, drop)]
