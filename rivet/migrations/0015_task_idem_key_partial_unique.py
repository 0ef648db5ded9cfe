"""The idempotency key's uniqueness as one partial index; the two old indexes go.

``unique=True`` on the field made two indexes on PostgreSQL: the unique constraint, which
holds a NULL entry for every task enqueued without a key, and a ``varchar_pattern_ops`` copy
for LIKE, which no query runs. Every insert paid for both. Now one unique index over the tasks
that have a key, ``rivet_task_idem_key_uniq`` (``WHERE idem_key IS NOT NULL``): it answers
the equality lookups and the enqueue's ON CONFLICT as before. Safe on a big table, on
PostgreSQL (this migration is not atomic):

1. The new index is built CONCURRENTLY (writes go on; the old constraint still holds meanwhile,
   so the build meets no duplicate). An invalid one left by an interrupted build is dropped and
   built again.
2. The old unique constraint is dropped: ALTER TABLE, a catalogue change under a brief
   ACCESS EXCLUSIVE lock (no scan, no rewrite).
3. The LIKE index is dropped CONCURRENTLY.

The old indexes are found in the catalogue by what they are (a unique constraint on idem_key
alone; an index with varchar_pattern_ops on it), not by name: their names depend on how the
table was first made. On SQLite the field is altered and the constraint added by Django's
schema editor (which rebuilds the table there).
"""

from django.db import migrations, models

NAME = "rivet_task_idem_key_uniq"
PG_ADD_INDEX = (
    f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {NAME} "
    "ON rivet_task (idem_key) WHERE idem_key IS NOT NULL"
)
PG_INVALID = """
SELECT 1 FROM pg_index WHERE indexrelid = to_regclass(%s) AND NOT indisvalid
"""
#: The unique constraints on idem_key alone (Django's unique=True).
PG_OLD_CONSTRAINTS = """
SELECT c.conname
FROM pg_constraint AS c
JOIN pg_attribute AS a ON a.attrelid = c.conrelid AND a.attname = 'idem_key'
WHERE c.conrelid = to_regclass('rivet_task') AND c.contype = 'u' AND c.conkey = ARRAY[a.attnum]
"""
#: The pattern-ops indexes on idem_key (Django's _like index of a unique CharField).
PG_LIKE_INDEXES = """
SELECT i.indexrelid::regclass::text
FROM pg_index AS i
JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attname = 'idem_key'
JOIN pg_opclass AS o ON o.oid = i.indclass[0]
WHERE i.indrelid = to_regclass('rivet_task') AND i.indnatts = 1 AND i.indkey[0] = a.attnum
    AND o.opcname = 'varchar_pattern_ops'
"""

CONSTRAINT = models.UniqueConstraint(
    fields=["idem_key"], condition=models.Q(idem_key__isnull=False), name=NAME
)


def _keyed_field(unique: bool) -> models.CharField:
    field = models.CharField(max_length=200, null=True, blank=True, unique=unique)
    field.set_attributes_from_name("idem_key")
    return field


def _column(cursor, query: str) -> list[str]:
    cursor.execute(query)
    return [row[0] for row in cursor.fetchall()]


def to_partial(apps, schema_editor):
    task = apps.get_model("rivet", "Task")
    if schema_editor.connection.vendor != "postgresql":
        schema_editor.alter_field(task, _keyed_field(True), _keyed_field(False))
        schema_editor.add_constraint(task, CONSTRAINT)
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(PG_INVALID, [NAME])
        if cursor.fetchone():
            schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {NAME}")
        schema_editor.execute(PG_ADD_INDEX)
        for name in _column(cursor, PG_OLD_CONSTRAINTS):
            schema_editor.execute(
                f"ALTER TABLE rivet_task DROP CONSTRAINT {schema_editor.quote_name(name)}"
            )
        for name in _column(cursor, PG_LIKE_INDEXES):
            schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


def to_unique_field(apps, schema_editor):
    task = apps.get_model("rivet", "Task")
    if schema_editor.connection.vendor != "postgresql":
        schema_editor.remove_constraint(task, CONSTRAINT)
        schema_editor.alter_field(task, _keyed_field(False), _keyed_field(True))
        return
    unique = "rivet_task_idem_key_key"
    like = schema_editor._create_index_name("rivet_task", ["idem_key"], suffix="_like")
    schema_editor.execute(
        f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {unique} ON rivet_task (idem_key)"
    )
    schema_editor.execute(
        f"ALTER TABLE rivet_task ADD CONSTRAINT {unique} UNIQUE USING INDEX {unique}"
    )
    schema_editor.execute(
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {like} "
        "ON rivet_task (idem_key varchar_pattern_ops)"
    )
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {NAME}")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("rivet", "0014_task_claim_rank"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(to_partial, to_unique_field)],
            state_operations=[
                migrations.AlterField(
                    model_name="task",
                    name="idem_key",
                    field=models.CharField(blank=True, max_length=200, null=True),
                ),
                migrations.AddConstraint(model_name="task", constraint=CONSTRAINT),
            ],
        ),
    ]
