"""rivet_claim_rank(ready, priority, aging_secs): priority aging's rule, on PostgreSQL.

The function's current body is in rivet/stores/postgres/functions.sql; this migration keeps the
version it installs.

Every statement of the PostgreSQL store that makes a task runnable (enqueue, bulk enqueue,
retry, requeue) writes claim_rank with this function, so the server holds the rule once. A task
of priority p ranks as if it had become ready p x aging_secs seconds earlier, p clamped to
-100..100: the same as ``rivet.values.rank_offset_secs``, which the SQLite and memory stores use
(the conformance suite's aging checks run on every store). The function is a plain SQL
expression declared STABLE (timestamptz arithmetic is), so the planner inlines it into each
statement. Nothing on SQLite: the SQLite store registers ``rivet_rank_offset`` on its
connections instead.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION rivet_claim_rank(
    ready timestamptz, priority integer, aging_secs double precision
) RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT ready - make_interval(secs => greatest(-100, least(100, priority)) * aging_secs) $$
"""
DROP = "DROP FUNCTION IF EXISTS rivet_claim_rank(timestamptz, integer, double precision)"


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [
        ("rivet", "0015_task_idem_key_partial_unique"),
    ]

    operations = [migrations.RunPython(create, drop)]
