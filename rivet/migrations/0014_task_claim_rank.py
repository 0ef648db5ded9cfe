"""Priority aging: the claim orders by claim_rank (a time), read from a new partial index.

A task of priority p ranks as if it had become ready p x RIVET['PRIORITY_AGING_SECS'] seconds
earlier (docs/jobs.md, "Priority and aging"). Safe on a big table, on PostgreSQL:

1. The column is added with the database default now(): a stable default, so PostgreSQL 11+
   only records it in the catalogue; no row is rewritten. Done and dead rows keep it (no claim
   reads their rank).
2. The pending rows get their rank, visible_at less priority x the setting (the old claim
   order, aged), by UPDATEs of 10 000 ids at a time, each committed by itself (this migration
   is not atomic), so no lock is held on the whole backlog.
3. The new index is built CONCURRENTLY (writes go on), then the old priority index is dropped
   CONCURRENTLY. Claims use either meanwhile.

On SQLite each step is one statement in the migration's own connection. What the claim and
the backfill cost on a table of a million pending rows:
docs/decisions/0011-priority-aging-claim-rank.md. A task enqueued by code older than this
migration while it runs ranks by its insert time (the default) until it is retried.
"""

from django.db import migrations, models
from django.db.models.functions import Now

from rivet.conf import priority_aging_secs

BATCH = 10_000
#: Priorities are -100..100 (rivet.validation); a row written by other means is clamped.
PG_BACKFILL = """
UPDATE rivet_task
SET claim_rank = visible_at - make_interval(secs => greatest(-100, least(100, priority)) * %s)
WHERE state = 'pending' AND id >= %s AND id < %s
"""
SQLITE_BACKFILL = """
UPDATE rivet_task
SET claim_rank = strftime(
    '%%Y-%%m-%%d %%H:%%M:%%f', visible_at,
    printf('%%+.6f seconds', -max(-100, min(100, priority)) * %s)
)
WHERE state = 'pending'
"""
PG_ADD_INDEX = (
    "CREATE INDEX CONCURRENTLY IF NOT EXISTS rivet_task_rank_idx "
    "ON rivet_task (queue, claim_rank, id, visible_at) WHERE state = 'pending'"
)
PG_DROP_OLD_INDEX = "DROP INDEX CONCURRENTLY IF EXISTS rivet_task_claim_idx"
PG_ADD_OLD_INDEX = (
    "CREATE INDEX CONCURRENTLY IF NOT EXISTS rivet_task_claim_idx "
    "ON rivet_task (queue, priority DESC, visible_at, id) WHERE state = 'pending'"
)
PG_DROP_INDEX = "DROP INDEX CONCURRENTLY IF EXISTS rivet_task_rank_idx"

RANK_INDEX = models.Index(
    fields=["queue", "claim_rank", "id", "visible_at"],
    condition=models.Q(state="pending"),
    name="rivet_task_rank_idx",
)
OLD_INDEX = models.Index(
    models.F("queue"),
    models.F("priority").desc(),
    models.F("visible_at"),
    models.F("id"),
    condition=models.Q(state="pending"),
    name="rivet_task_claim_idx",
)


def rank_pending(apps, schema_editor):
    step = priority_aging_secs()
    with schema_editor.connection.cursor() as cursor:
        if schema_editor.connection.vendor != "postgresql":
            cursor.execute(SQLITE_BACKFILL, [step])
            return
        cursor.execute("SELECT min(id), max(id) FROM rivet_task WHERE state = 'pending'")
        low, high = cursor.fetchone()
        if low is None:
            return
        for start in range(low, high + 1, BATCH):
            cursor.execute(PG_BACKFILL, [step, start, start + BATCH])


def swap_indexes(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PG_ADD_INDEX)
        schema_editor.execute(PG_DROP_OLD_INDEX)
        return
    task = apps.get_model("rivet", "Task")
    schema_editor.add_index(task, RANK_INDEX)
    schema_editor.remove_index(task, OLD_INDEX)


def swap_back(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PG_ADD_OLD_INDEX)
        schema_editor.execute(PG_DROP_INDEX)
        return
    task = apps.get_model("rivet", "Task")
    schema_editor.add_index(task, OLD_INDEX)
    schema_editor.remove_index(task, RANK_INDEX)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("rivet", "0013_fenced_write_one_beat_per_lease"),
    ]

    operations = [
        migrations.AddField(
            model_name="task",
            name="claim_rank",
            field=models.DateTimeField(db_default=Now(), editable=False),
        ),
        migrations.RunPython(rank_pending, migrations.RunPython.noop, elidable=True),
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(swap_indexes, swap_back)],
            state_operations=[
                migrations.AddIndex(model_name="task", index=RANK_INDEX),
                migrations.RemoveIndex(model_name="task", name="rivet_task_claim_idx"),
            ],
        ),
    ]
