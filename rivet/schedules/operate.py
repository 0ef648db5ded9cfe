"""What an operator does to schedules: list them, run one now, pause, resume; and their history.

The ``rivet_schedule`` command, the admin and the HTTP API all call these, so each action means
the same wherever it is taken. Pausing and resuming work on code-declared schedules too (their
definition is the code's; whether they run is the operator's).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from django.db.models.functions import Now
from django.utils import timezone

from rivet.errors import InvalidInput
from rivet.jobs import task_spec
from rivet.models import Task
from rivet.schedules.cron import check_cron, check_timezone, due_ticks, next_tick, tick_key
from rivet.schedules.models import Schedule
from rivet.schedules.values import SCHEDULED_AT
from rivet.stores.base import Store
from rivet.values import EnqueueResult

__all__ = ["find", "last_task_id", "next_run", "owed_ticks", "pause", "resume", "run_now"]


class ScheduleNotFound(InvalidInput):
    """No schedule has the name given."""

    code = "not_found"


def find(name: str, *, alias: str) -> Schedule:
    """The schedule called ``name``, or ScheduleNotFound listing the names there are."""
    try:
        return Schedule.objects.using(alias).get(name=name)
    except Schedule.DoesNotExist:
        known = list(Schedule.objects.using(alias).values_list("name", flat=True)[:20])
        raise ScheduleNotFound(
            f"no schedule is called {name!r} (known: {', '.join(known) or 'none'}); "
            "`manage.py rivet_schedule list` shows them",
            field="name",
        ) from None


def next_run(schedule: Schedule) -> datetime | None:
    """The schedule's next owed tick: the first after its watermark (None while paused, or
    with an expression or zone that is not valid). In the past when the tick is overdue.
    """
    if not schedule.enabled:
        return None
    try:
        expr, zone = check_cron(schedule.cron), check_timezone(schedule.timezone)
    except InvalidInput:
        return None
    since = schedule.since if isinstance(schedule.since, datetime) else timezone.now()
    after = max(since, schedule.last_tick_at or since)
    return next_tick(expr, zone, after)


def last_task_id(schedule: Schedule, *, alias: str) -> int | None:
    """The task of the schedule's last tick, found by the tick's key (None once pruned)."""
    if schedule.last_tick_at is None:
        return None
    key = tick_key(schedule.name, schedule.last_tick_at)
    return Task.objects.using(alias).filter(idem_key=key).values_list("pk", flat=True).first()


@dataclass(frozen=True, kw_only=True)
class Changed:
    """What pause or resume did: False when the schedule already was that way."""

    schedule: Schedule
    changed: bool


def pause(name: str, *, alias: str) -> Changed:
    """Stop a schedule's ticks; none is owed for the time it stays paused."""
    changed = (
        Schedule.objects.using(alias)
        .filter(name=name, enabled=True)
        .update(enabled=False, next_tick_at=None, updated_at=Now())
    )
    return Changed(schedule=find(name, alias=alias), changed=bool(changed))


def resume(name: str, *, alias: str) -> Changed:
    """Start a paused schedule again; it owes the ticks after now, none of the pause's."""
    changed = (
        Schedule.objects.using(alias)
        .filter(name=name, enabled=False)
        .update(enabled=True, since=Now(), next_tick_at=Now(), updated_at=Now())
    )
    return Changed(schedule=find(name, alias=alias), changed=bool(changed))


def run_now(name: str, *, store: Store, alias: str) -> EnqueueResult:
    """Enqueue one task of the schedule now, outside its ticks (its watermark is not moved).

    The task's ``scheduled_at`` is now; it carries no tick key, so each call is a new task.
    """
    schedule = find(name, alias=alias)
    zone = check_timezone(schedule.timezone)
    payload = {**schedule.payload, SCHEDULED_AT: timezone.now().astimezone(zone).isoformat()}
    spec = task_spec(
        schedule.kind, payload, queue=schedule.queue or None, priority=schedule.priority
    )
    return store.task_enqueue(spec)


def owed_ticks(schedule: Schedule) -> list[datetime]:
    """Every tick the schedule owed from its ``since`` up to its watermark (``last_tick_at``):
    its own history, which an audit holds its ticks' tasks against. Empty before its first."""
    if schedule.last_tick_at is None:
        return []
    return due_ticks(
        schedule.cron,
        ZoneInfo(schedule.timezone),
        after=schedule.since,
        now=schedule.last_tick_at,
        keep=None,
    ).ticks
