"""The Schedule table: every schedule, declared in code or made in the admin, and its history.

One row per schedule. Code-declared rows are written by the workers at start (``source`` is
``code``; their definition is read-only in the admin, only pausing them is an operator's). The
scheduler reads ``next_tick_at`` to find due rows, and moves the watermark ``last_tick_at``
forward in the same transaction as the ticks' enqueue.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from rivet.errors import InvalidInput
from rivet.schedules.declare import check_definition
from rivet.schedules.values import MAX_MISSED_LIMIT, SCHEDULED_AT, Missed, Source

#: What an edit of a schedule may change (the rest is the scheduler's state).
DEFINITION_FIELDS = ["name", "kind", "cron", "timezone", "queue", "priority", "payload"]
DEFINITION_FIELDS += ["missed", "max_missed"]


class Schedule(models.Model):
    """A periodic job: a cron expression in a timezone, the task each tick enqueues, its state."""

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=100)
    cron = models.CharField(
        max_length=200,
        help_text="Five fields (minute hour day month weekday), or six with seconds first.",
    )
    timezone = models.CharField(max_length=64, default="UTC", help_text="An IANA zone name.")
    queue = models.CharField(
        max_length=100, blank=True, default="", help_text="Empty: the job's own queue."
    )
    priority = models.SmallIntegerField(null=True, blank=True)
    payload = models.JSONField(
        default=dict, blank=True, help_text=f"A JSON object; each tick adds '{SCHEDULED_AT}'."
    )
    enabled = models.BooleanField(default=True)
    missed = models.CharField(max_length=6, choices=Missed.choices, default=Missed.LATEST)
    max_missed = models.PositiveIntegerField(
        default=100, help_text="With 'all': most missed ticks run after downtime."
    )
    source = models.CharField(
        max_length=8, choices=Source.choices, default=Source.DATABASE, editable=False
    )
    #: Ticks strictly after this instant are owed: when the schedule was made, last enabled,
    #: or its expression or zone last changed.
    since = models.DateTimeField(db_default=Now(), editable=False)
    #: The watermark: the newest tick enqueued or skipped by the policy.
    last_tick_at = models.DateTimeField(null=True, blank=True, editable=False)
    #: The next tick the scheduler will look at (NULL while paused).
    next_tick_at = models.DateTimeField(null=True, blank=True, editable=False, db_default=Now())
    skipped_ticks = models.BigIntegerField(default=0, db_default=0, editable=False)
    last_error = models.TextField(blank=True, default="", db_default="", editable=False)
    created_at = models.DateTimeField(db_default=Now(), editable=False)
    updated_at = models.DateTimeField(db_default=Now(), editable=False)

    class Meta:
        db_table = "rivet_schedule"
        ordering = ["name"]
        permissions = [("run_schedule", "Can run a schedule now")]
        constraints = [
            models.CheckConstraint(
                condition=Q(missed__in=Missed.values), name="rivet_schedule_missed_valid"
            ),
            models.CheckConstraint(
                condition=Q(max_missed__gte=1, max_missed__lte=MAX_MISSED_LIMIT),
                name="rivet_schedule_max_missed",
            ),
        ]
        indexes = [
            # Serves the scheduler's pass: the enabled schedules whose next tick is due.
            models.Index(
                fields=["next_tick_at"], condition=Q(enabled=True), name="rivet_schedule_due_idx"
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.cron} {self.timezone})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save; an edit writes only the definition, never the scheduler's state.

        A schedule (re-)enabled, or whose expression or zone changed, owes the ticks after
        now only; a paused one owes none.
        """
        if self.pk is not None and kwargs.get("update_fields") is None and not self._state.adding:
            kwargs["update_fields"] = self._edited_fields(kwargs.get("using"))
        elif not self.enabled:
            self.next_tick_at = None
        super().save(*args, **kwargs)

    def _edited_fields(self, using: str | None) -> list[str]:
        fields = [*DEFINITION_FIELDS, "enabled", "updated_at"]
        self.updated_at = Now()
        rows = type(self)._default_manager.using(using or self._state.db or "default")
        found = rows.filter(pk=self.pk).values("cron", "timezone", "enabled").first()
        before: dict[str, Any] = dict(found or {})
        restarted = self.enabled and any(
            before.get(name) != getattr(self, name) for name in ("cron", "timezone", "enabled")
        )
        if restarted:
            self.since, self.next_tick_at = Now(), Now()
            fields += ["since", "next_tick_at"]
        elif not self.enabled:
            self.next_tick_at = None
            fields.append("next_tick_at")
        return fields

    def clean(self) -> None:
        """Refuse what a tick would be refused for: a bad expression, zone or payload, an
        unknown kind (unless RIVET['ALLOW_UNKNOWN_KINDS']), a bad queue or priority."""
        from rivet.jobs import task_spec

        try:
            check_definition(self.definition())
            task_spec(
                self.kind,
                {**self.payload, SCHEDULED_AT: "2000-01-01T00:00:00+00:00"},
                queue=self.queue or None,
                priority=self.priority,
            )
        except InvalidInput as exc:
            field = getattr(exc, "field", None)
            fields = {f.name for f in self._meta.fields}
            raise ValidationError({field: str(exc)} if field in fields else str(exc)) from exc

    def definition(self) -> dict[str, Any]:
        """The fields that say what the schedule enqueues and when."""
        return {
            "name": self.name,
            "kind": self.kind,
            "cron": self.cron,
            "timezone": self.timezone,
            "queue": self.queue or None,
            "priority": self.priority,
            "payload": self.payload,
            "missed": self.missed,
            "max_missed": self.max_missed,
        }
