from django.db import migrations, models
from django.db.models import Min


def drop_repeated_beats(apps, schema_editor):
    """Keep the first refused-heartbeat record of each lease; a race could have written two."""
    fenced_write = apps.get_model("rivet", "FencedWrite")
    rows = fenced_write.objects.using(schema_editor.connection.alias).filter(op="beat")
    first = rows.values("task_id", "epoch").annotate(first_id=Min("id")).values("first_id")
    rows.exclude(id__in=first).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("rivet", "0012_schedule"),
    ]

    operations = [
        migrations.RunPython(drop_repeated_beats, migrations.RunPython.noop, elidable=True),
        migrations.AddConstraint(
            model_name="fencedwrite",
            constraint=models.UniqueConstraint(
                condition=models.Q(("op", "beat")),
                fields=("task_id", "epoch"),
                name="rivet_fence_one_beat_per_lease",
            ),
        ),
    ]
