"""PostgreSQL only: the task table is vacuumed early; its fillfactor stays 100.

Every update of a task (claim, heartbeat, ack, retry) changes an indexed column (visible_at or
state), so PostgreSQL can never make it a HOT update and free space kept in each page buys
nothing but a larger table (the measurement: docs/decisions/0003-table-settings.md). What each
update leaves behind is a dead row version and index entries for it, which only VACUUM
removes; by default autovacuum waits until 20 % of the table is dead, which on a table of
long-kept done tasks is a great many. So vacuum (and analyze, for the claim's plan) after 1 %
plus a thousand rows instead.
"""

from django.db import migrations

TABLE_SETTINGS = {
    "fillfactor": 100,
    "autovacuum_vacuum_scale_factor": 0.01,
    "autovacuum_vacuum_threshold": 1000,
    "autovacuum_vacuum_insert_scale_factor": 0.01,
    "autovacuum_vacuum_insert_threshold": 1000,
    "autovacuum_analyze_scale_factor": 0.02,
    "autovacuum_analyze_threshold": 1000,
}


def set_table_settings(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return  # SQLite has no such settings
    pairs = ", ".join(f"{name} = {value}" for name, value in TABLE_SETTINGS.items())
    schema_editor.execute(f"ALTER TABLE rivet_task SET ({pairs})")


def reset_table_settings(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"ALTER TABLE rivet_task RESET ({', '.join(TABLE_SETTINGS)})")


class Migration(migrations.Migration):
    dependencies = [
        ("rivet", "0007_task_errors"),
    ]

    operations = [
        migrations.RunPython(set_table_settings, reset_table_settings, elidable=False),
    ]
