"""``rivet_wake`` as one SQL expression the planner puts into the enqueue's own statement.

The current body is in rivet/stores/postgres/functions.sql; this migration keeps the version
it installs.

Migration 0017 wrote it in PL/pgSQL: every enqueue then started the PL/pgSQL interpreter for
three lock calls. The same steps, in the same order, as a SQL function of one ``CASE`` (which
evaluates its branches in order and only those it needs): take the queue's gate lock shared
until the transaction ends; then, if the waiter lock can be taken exclusive, nobody waits: let it
go and return NULL; else notify and return the queue's name. A SQL function of one SELECT is
inlined where it is called, so a prepared enqueue runs the lock calls in its own plan, and no
enqueue starts the PL/pgSQL interpreter (the measurement: docs/decisions/0008-wake-inline.md).

The waiter and gate locks, and ``rivet_wait_hold`` and ``rivet_wait_release``, are unchanged.
Nothing on SQLite.
"""

import importlib

from django.db import migrations

WAITER, GATE = 1919514113, 1919514114

# pg_advisory_xact_lock_shared returns void, whose text is '' (never NULL): the first branch
# only takes the lock, and the CASE goes on to the next.
CREATE = f"""
CREATE OR REPLACE FUNCTION rivet_wake(channel text, queue text) RETURNS text
LANGUAGE sql VOLATILE
AS $$
SELECT CASE
    WHEN pg_advisory_xact_lock_shared({GATE}, hashtext(queue))::text IS NULL THEN NULL
    WHEN pg_try_advisory_lock({WAITER}, hashtext(queue)) THEN
        CASE WHEN pg_advisory_unlock({WAITER}, hashtext(queue)) THEN NULL END
    ELSE pg_notify(channel, queue)::text || queue
END
$$
"""


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def restore(apps, schema_editor):
    """Back to 0017's PL/pgSQL function (its first statement)."""
    if schema_editor.connection.vendor == "postgresql":
        earlier = importlib.import_module("rivet.migrations.0017_wake_gate_functions")
        schema_editor.execute(earlier.CREATE[0])


class Migration(migrations.Migration):
    dependencies = [
        ("rivet", "0017_wake_gate_functions"),
    ]

    operations = [migrations.RunPython(create, restore)]
