"""Schedules declared in code: ``@rivet.job("k", schedules=[rivet.cron("0 7 * * *")])``.

``cron(...)`` makes a ``CronSchedule``; the ``job`` decorator binds it to its kind and records
it here. Workers write every declared schedule to the Schedule table at start
(``rivet.schedules.scheduler.sync_code_schedules``), where the admin shows it read-only.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from rivet.errors import InvalidInput
from rivet.schedules.cron import check_cron, check_timezone
from rivet.schedules.values import MAX_MISSED_LIMIT, SCHEDULED_AT, Missed
from rivet.text import depth_message, json_depth_problem
from rivet.validation import check_name

__all__ = ["CronSchedule", "check_definition", "code_schedules", "cron"]


@dataclass(frozen=True, kw_only=True)
class CronSchedule:
    """One cron schedule of a job: when it ticks and the task each tick enqueues."""

    cron: str
    timezone: str = "UTC"
    name: str | None = None  # None: the job's kind (give one when a job has several)
    payload: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None  # None: the job's queue
    priority: int | None = None
    missed: str = Missed.LATEST.value
    max_missed: int = 100

    def bind(self, kind: str) -> dict[str, Any]:
        """The schedule's definition for the job ``kind``, checked."""
        return check_definition(
            {
                "name": self.name or kind,
                "kind": kind,
                "cron": self.cron,
                "timezone": self.timezone,
                "queue": self.queue,
                "priority": self.priority,
                "payload": self.payload,
                "missed": self.missed,
                "max_missed": self.max_missed,
            }
        )


def cron(
    expr: str,
    *,
    timezone: str = "UTC",
    name: str | None = None,
    payload: dict[str, Any] | None = None,
    queue: str | None = None,
    priority: int | None = None,
    missed: str = Missed.LATEST.value,
    max_missed: int = 100,
) -> CronSchedule:
    """A schedule for ``@rivet.job(schedules=[...])``; docs/schedules.md explains each option.

    :param expr: five cron fields, or six with seconds first.
    :param timezone: an IANA name the fields are read in; DST gaps and repeats follow Debian
        cron.
    :param name: the schedule's name, which its tick keys carry (``rivet_schedule`` and the
        admin use it too); default the job's kind. A job with two schedules names each; keep a
        name once ticks were made with it.
    :param payload: a JSON object, to which each tick adds ``scheduled_at``.
    :param queue: the queue of its tasks; default the job's.
    :param priority: the priority of its tasks; default the job's.
    :param missed: ``"latest"`` (run only the newest due tick after downtime) or ``"all"``
        (run each, the newest ``max_missed`` of them).
    :param max_missed: the most missed ticks ``"all"`` runs after downtime.
    """
    schedule = CronSchedule(
        cron=expr,
        timezone=timezone,
        name=name,
        payload=dict(payload or {}),
        queue=queue,
        priority=priority,
        missed=missed,
        max_missed=max_missed,
    )
    # Checked now, so a bad expression fails at import, not in a worker later.
    CronSchedule.bind(schedule, name or "check")
    return schedule


def check_definition(definition: dict[str, Any]) -> dict[str, Any]:
    """``definition`` if every field of a schedule is valid, else InvalidInput naming the field."""
    check_name("schedule name", definition["name"])
    check_name("kind", definition["kind"])
    check_cron(definition["cron"])
    check_timezone(definition["timezone"])
    if definition.get("queue"):
        check_name("queue", definition["queue"])
    payload = definition["payload"]
    if not isinstance(payload, dict):
        raise InvalidInput(
            f"a schedule's payload must be a JSON object, got {type(payload).__name__}",
            field="payload",
        )
    if SCHEDULED_AT in payload:
        raise InvalidInput(
            f"a schedule's payload may not hold {SCHEDULED_AT!r}: each tick sets it",
            field="payload",
        )
    try:
        text = json.dumps(payload)
    except RecursionError:  # nested past the encoder's stack: far past the limit
        raise InvalidInput(f"payload {depth_message()}", field="payload") from None
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"payload is not JSON: {exc}", field="payload") from None
    too_deep = json_depth_problem(text)  # the tick's own key goes at the top: no deeper
    if too_deep:
        raise InvalidInput(f"payload {too_deep}", field="payload")
    if definition["missed"] not in Missed.values:
        raise InvalidInput(
            f"missed must be one of {', '.join(Missed.values)}, got {definition['missed']!r}",
            field="missed",
        )
    bound = definition["max_missed"]
    if isinstance(bound, bool) or not isinstance(bound, int) or not 1 <= bound <= MAX_MISSED_LIMIT:
        raise InvalidInput(
            f"max_missed must be an integer from 1 to {MAX_MISSED_LIMIT}, got {bound!r}",
            field="max_missed",
        )
    return definition


class CodeSchedules:
    """Name -> definition of every schedule declared in code in this process."""

    def __init__(self) -> None:
        self._schedules: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def add(self, kind: str, schedules: list[CronSchedule]) -> None:
        if len(schedules) > 1 and any(s.name is None for s in schedules):
            raise InvalidInput(
                f"job {kind!r} has {len(schedules)} schedules: give each a name "
                "(rivet.cron(..., name='...'))"
            )
        with self._lock:
            for schedule in schedules:
                definition = schedule.bind(kind)
                current = self._schedules.get(definition["name"])
                if current is not None and current["kind"] != kind:
                    raise InvalidInput(
                        f"schedule {definition['name']!r} is already declared by job "
                        f"{current['kind']!r}; schedule names must be unique"
                    )
                self._schedules[definition["name"]] = definition

    def remove(self, name: str) -> None:
        with self._lock:
            self._schedules.pop(name, None)

    def all(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(d) for d in self._schedules.values()]


code_schedules = CodeSchedules()
