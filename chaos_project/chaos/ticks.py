"""Schedules in a chaos run (``--schedules N``): N one-second schedules fire while the workers
are broken, and the verifier checks T1 and T2 from the schedules' own history.

- T1 no tick fired twice: no (schedule, tick instant) has more than one task, counted by the
  identity each tick's task carries in its payload (``chaos_schedule`` and ``scheduled_at``),
  not by its idempotency key, so a scheduler that loses the key shows as duplicates. A task for
  a tick its schedule never had (before ``since``, not a tick of its expression, or of no chaos
  schedule) fails T1 too: a tick fired that was not due.
- T2 no due tick missing: every tick of each schedule's expression in ``(since, until]`` has a
  task. ``since`` is the schedule's own (the database's clock when the row was made); ``until``
  is the end of the chaos on the same clock, with a grace of 0 s: the harness disables the
  schedules only once each one's ``next_tick_at`` has passed the end of the chaos, that is once
  the scheduler's own watermark says every tick up to it was handled (the ticks' enqueue and the
  watermark commit together). A scheduler that has not caught up within the drain's timeout is
  disabled anyway, and T2 names the ticks it owes.

The schedules are database ``Schedule`` rows on the run's queue (policy ``all``, so a pass that
comes late, after a worker was stopped holding their locks, still owes every tick), in four
zones, and their tasks (``chaos.tick``) run on the same workers as the effect tasks, so L1, C1
and F2 hold for them too. See docs/chaos.md, "Schedules".
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import OperationalError, connections, transaction

from chaos_project.kit import queries
from rivet.schedules.cron import check_timezone, next_tick, ticks_after
from rivet.schedules.models import Schedule
from rivet.schedules.values import MAX_MISSED_LIMIT, Missed

TICK_KIND = "chaos.tick"
#: How long the harness's own write to the schedules waits for a row lock before it defers.
LOCK_WAIT_MS = 200
LOCK_NOT_AVAILABLE = "55P03"
EVERY_SECOND = "* * * * * *"
#: The zones the schedules are spread over: a tick's identity is its instant, whatever the zone.
ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata")
#: T2's grace: ticks due up to the end of the chaos minus this must have their task. Zero,
#: since the schedules are disabled only after their watermark passed the end (module doc).
GRACE = timedelta(0)
#: How many duplicate, missing or undue ticks a verdict names.
SAMPLES = 5


@dataclass(frozen=True, kw_only=True)
class Window:
    """One schedule's history as the verifier reads it: ticks in (since, until] are owed."""

    name: str
    cron: str
    timezone: str
    since: datetime
    until: datetime | None
    """None: nothing is owed (a schedule that never ticked, read without the run's end)."""


@dataclass(frozen=True, kw_only=True)
class TickFigures:
    """T1 and T2 over the chaos schedules of one queue."""

    schedules: int
    tick_tasks: int
    due: int
    """Ticks owed in the windows."""
    fired_twice: int
    """Ticks with more than one task (T1)."""
    not_due: int
    """Tasks for a tick that was never due (T1)."""
    missing: int
    """Ticks owed in the windows with no task (T2)."""
    t1_samples: tuple[str, ...] = ()
    t2_samples: tuple[str, ...] = ()
    window_secs: float = 0.0


def count_ticks(
    windows: Iterable[Window], fired: Iterable[tuple[str, datetime, int]]
) -> TickFigures:
    """T1 and T2 from the windows and the tick tasks ``fired`` (schedule, tick, task id)."""
    windows = list(windows)
    by_tick: dict[tuple[str, datetime], list[int]] = defaultdict(list)
    for name, tick, task in fired:
        by_tick[(name, tick.astimezone(UTC))].append(task)
    known = {w.name: w for w in windows}
    twice = sorted((key, ids) for key, ids in by_tick.items() if len(ids) > 1)
    undue = sorted(key for key in by_tick if not _was_tick(known.get(key[0]), key[1]))
    owed = [(w.name, tick) for w in windows for tick in _owed(w)]
    missing = [key for key in owed if key not in by_tick]
    t1 = [f"{_label(key)} fired {len(ids)} times (tasks {_ids(ids)})" for key, ids in twice]
    t1 = t1[:SAMPLES] + [f"{_label(key)} never due (task {_ids(by_tick[key])})" for key in undue]
    spans = [(w.until - w.since).total_seconds() for w in windows if w.until is not None]
    return TickFigures(
        schedules=len(windows),
        tick_tasks=sum(len(ids) for ids in by_tick.values()),
        due=len(owed),
        fired_twice=len(twice),
        not_due=sum(len(by_tick[key]) for key in undue),
        missing=len(missing),
        t1_samples=tuple(t1[: 2 * SAMPLES]),
        t2_samples=tuple(f"{_label(key)} has no task" for key in missing[:SAMPLES]),
        window_secs=max(spans, default=0.0),
    )


def _owed(window: Window) -> list[datetime]:
    if window.until is None:
        return []
    zone = check_timezone(window.timezone)
    owed = []
    for tick in ticks_after(window.cron, zone, window.since):
        if tick > window.until:
            break
        owed.append(tick.astimezone(UTC))
    return owed


def _was_tick(window: Window | None, tick: datetime) -> bool:
    """Whether ``tick`` is a tick of the window's schedule after its ``since``."""
    if window is None or tick <= window.since:
        return False
    zone = check_timezone(window.timezone)
    return next_tick(window.cron, zone, tick - timedelta(microseconds=1)) == tick


def _label(key: tuple[str, datetime]) -> str:
    return f"{key[0]} tick {key[1]:%H:%M:%S}"


def _ids(ids: list[int]) -> str:
    return ", ".join(str(i) for i in sorted(ids))


def read_ticks(*, queue: str, until: datetime | None, using: str = "default") -> TickFigures | None:
    """T1 and T2 for the chaos schedules of ``queue``; None when the queue has none.

    ``until`` is the end of the chaos on the database's clock (minus GRACE); None takes each
    schedule's own watermark (``last_tick_at``) as the end of its window.
    """
    rows = Schedule.objects.using(using).filter(kind=TICK_KIND, queue=queue)
    windows = [
        Window(
            name=row.name,
            cron=row.cron,
            timezone=row.timezone,
            since=row.since,
            until=(until - GRACE) if until is not None else row.last_tick_at,
        )
        for row in rows
    ]
    if not windows:
        return None
    with connections[using].cursor() as cursor:
        cursor.execute(queries.TICK_TASKS, {"queue": queue, "kind": TICK_KIND})
        fired = [(name or "", tick, task) for name, tick, task in cursor.fetchall()]
    return count_ticks(windows, fired)


class ChaosSchedules:
    """The run's schedules: made before the workers start, disabled once they caught up with
    the end of the chaos (a source of the chaos loop during the drain)."""

    def __init__(
        self,
        *,
        count: int,
        queue: str,
        seed: int,
        catch_up_limit: float,
        say: Callable[[str], None],
        log: Callable[..., Any],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.count = count
        self.queue = queue
        self.seed = seed
        self.catch_up_limit = catch_up_limit
        self.say = say
        self.log = log
        self.clock = clock
        self.until: datetime | None = None
        self.over_at = 0.0
        self.disabled = count == 0
        self.deferred = 0  # disables put off: a worker's pass held a schedule's row

    @staticmethod
    def remove_earlier() -> int:
        """Delete the chaos schedules of earlier runs (their ticks would run in this one)."""
        return Schedule.objects.filter(kind=TICK_KIND).delete()[0]

    def create(self) -> None:
        if not self.count:
            return
        rows = [
            Schedule(
                name=f"chaos-{self.seed}-tick-{n:03d}",
                kind=TICK_KIND,
                cron=EVERY_SECOND,
                timezone=ZONES[n % len(ZONES)],
                queue=self.queue,
                payload={"chaos_schedule": f"chaos-{self.seed}-tick-{n:03d}"},
                missed=Missed.ALL,
                max_missed=MAX_MISSED_LIMIT,
            )
            for n in range(self.count)
        ]
        Schedule.objects.bulk_create(rows)
        self.log("schedules_created", count=self.count)
        self.say(
            f"schedules: {self.count} one-second schedules ({TICK_KIND} on queue {self.queue!r}, "
            "missed ticks: all), run by every worker's scheduler"
        )

    def chaos_over(self) -> None:
        """Note the end of the chaos on the database's clock: T2's window ends there."""
        if not self.count:
            return
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT now()")
            self.until = cursor.fetchone()[0]
        self.over_at = self.clock()
        self.log("schedules_window", until=self.until.isoformat(), grace_secs=GRACE.seconds)

    def holding(self) -> bool:
        """Whether the drain must wait: the schedules still fire."""
        return not self.disabled

    def tick(self, now: float) -> None:
        if self.disabled or self.until is None:
            return
        behind = self._rows().filter(enabled=True, next_tick_at__lte=self.until).count()
        waited = self.clock() - self.over_at
        if behind and waited < self.catch_up_limit:
            return
        if not self._disable():
            return
        if behind:
            self.say(
                f"schedules: {behind} had not caught up with the end of the chaos after "
                f"{waited:.0f} s; disabled anyway (T2 names the ticks they owe)"
            )
        else:
            self.say(f"schedules: caught up with the end of the chaos in {waited:.1f} s; disabled")

    def close(self) -> None:
        """Disable the schedules if no one holds them; the harness calls it again once every
        worker is gone, when nothing can."""
        if not self.disabled:
            self._disable()

    def _disable(self) -> bool:
        """Disable the schedules; False (retried later) while a worker's pass holds a row.

        A worker stopped inside its scheduler pass (a zombie's SIGSTOP can land there, and the
        scheduler-stall fault stops one there on purpose) holds its schedules' rows until it
        is continued or its session is ended. The harness must never wait for it: it is the
        one that continues it.
        """
        try:
            with transaction.atomic(), connections["default"].cursor() as cursor:
                cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{LOCK_WAIT_MS}ms"])
                self._rows().update(enabled=False, next_tick_at=None)
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                raise
            self.deferred += 1
            if self.deferred == 1:
                self.log("schedules_disable_deferred", reason="a worker's pass holds a schedule")
            return False
        self.disabled = True
        self.log("schedules_disabled")
        return True

    def _rows(self):
        return Schedule.objects.filter(kind=TICK_KIND, queue=self.queue)


def window_end(records: Iterable[dict[str, Any]]) -> datetime | None:
    """The end of T2's window from a run's event log (``schedules_window``), if it has one."""
    for record in records:
        if record.get("event") == "schedules_window":
            return datetime.fromisoformat(record["until"])
    return None
