"""The producer's W3C trace context, kept beside the task (rivet.tracing), never in the payload."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("rivet", "0009_task_settled_epoch"),
    ]

    operations = [
        migrations.AddField(
            model_name="task",
            name="trace_context",
            field=models.JSONField(blank=True, editable=False, null=True),
        ),
    ]
