"""The values schedules share: the missed-tick policies, where a schedule is defined."""

from __future__ import annotations

from django.db import models

#: The key a tick adds to its schedule's payload: the tick's scheduled time (ISO 8601, in the
#: schedule's zone, with its offset).
SCHEDULED_AT = "scheduled_at"
#: Most missed ticks a schedule with the ``all`` policy may catch up at once.
MAX_MISSED_LIMIT = 10_000


class Missed(models.TextChoices):
    """What a schedule does with ticks that passed while no worker ran (or it was late)."""

    LATEST = "latest", "latest only"
    """Run only the newest due tick; the older ones are skipped (counted, never run)."""
    ALL = "all", "all, up to max_missed"
    """Run every due tick, the newest ``max_missed`` of them; older ones are skipped."""


class Source(models.TextChoices):
    """Where a schedule is defined."""

    CODE = "code", "code"
    """Declared with ``@rivet.job(schedules=[...])``; written by each worker at start."""
    DATABASE = "database", "database"
    """Made in the admin (or by code through the ORM); editable there."""
