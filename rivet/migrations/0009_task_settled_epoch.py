"""The epoch and owner of the last decision a settle applied, on the task row.

The chaos verifier reads them: on a finished task they must be the epoch the task held, so a
stale write applied through a broken fence is a violation, whatever else was fenced.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("rivet", "0008_task_table_settings"),
    ]

    operations = [
        migrations.AddField(
            model_name="task",
            name="settled_epoch",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="task",
            name="settled_by",
            field=models.CharField(blank=True, max_length=200, null=True),
        ),
    ]
