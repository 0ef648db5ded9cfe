"""Cron: a parsed schedule expression in a timezone, and the ticks it has in a span of time.

Parsing and stepping are cronsim's (Debian cron's rules, DST included; docs/schedules.md says
why cronsim and not croniter); ticks_after keeps them in order of their instants wherever a scan
starts, and steps jobs that follow the real clock one span of fixed UTC offset at a time.
Five fields (minute hour day month weekday) or six with seconds first (``*/15 * * * * *``:
every 15 seconds). Every tick is an aware datetime in the schedule's zone; a tick's identity is
its instant (UTC), so a repeated wall-clock hour never yields the same tick twice.

DST, as Debian cron: a job at a fixed time that falls in a skipped hour (02:30 on the spring-
forward night in Europe/Berlin) runs once, at the first valid time after the gap (03:00); a job
at a fixed time in a repeated hour (02:30 on the fall-back night) runs once, the first time;
jobs that run more often than hourly follow the real clock through both (an every-30-minutes job
runs at 02:00 and 02:30 twice on the fall-back night, four real half hours).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from rivet.errors import InvalidInput

__all__ = ["Due", "check_cron", "check_timezone", "due_ticks", "next_tick", "tick_key"]

#: A tick's key: the schedule's name and the tick's instant in UTC, to the second.
KEY_FORMAT = "rivet.tick:{name}:{instant:%Y%m%dT%H%M%SZ}"


@lru_cache(maxsize=256)
def check_timezone(name: str) -> ZoneInfo:
    """The zone named ``name`` (an IANA name such as Europe/Berlin), or InvalidInput."""
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"timezone must be an IANA zone name, got {name!r}", field="timezone")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(
            f"timezone {name!r} is not a known IANA zone; use a name such as 'UTC' or "
            "'Europe/Berlin'",
            field="timezone",
        ) from None


@lru_cache(maxsize=1024)
def check_cron(expr: str) -> str:
    """``expr`` if it is a cron expression (five fields, or six with seconds first)."""
    if not isinstance(expr, str) or len(expr.split()) not in (5, 6):
        raise InvalidInput(
            f"cron must have five fields (minute hour day month weekday) or six (seconds "
            f"first), got {expr!r}",
            field="cron",
        )
    try:
        CronSim(expr, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        raise InvalidInput(f"cron {expr!r} is not valid: {exc}", field="cron") from None
    return expr


def ticks_after(expr: str, zone: ZoneInfo, after: datetime) -> Iterator[datetime]:
    """The ticks of ``expr`` strictly after the instant ``after``, in ``zone``, for ever.

    Strictly increasing instants, all after ``after``; a scan resumed at any instant yields the
    same ticks after it as one that began earlier (the property test in
    tests/unit/test_schedule_dst.py), so a watermark never makes a tick fire twice or go back.
    """
    if _fixed_time(expr):
        return _wall_clock(expr, zone, after)
    return _real_clock(expr, zone, after)


def _fixed_time(expr: str) -> bool:
    """Whether cronsim reads ``expr`` as Debian cron's fixed-time job (neither the minute nor
    the hour led by ``*``, five fields): stepped in wall-clock time, a gap's tick moved to its
    end, a repeated hour's tick run the first time."""
    fields = expr.split()
    return len(fields) == 5 and not fields[0].startswith("*") and not fields[1].startswith("*")


def _wall_clock(expr: str, zone: ZoneInfo, after: datetime) -> Iterator[datetime]:
    """A fixed-time job's ticks: cronsim's, with the ones at or before the last instant dropped.

    cronsim steps the wall clock: started in the second pass of a repeated hour (02:15+01:00 on
    a fall-back night) it answers 02:30 with the first pass's 02:30+02:00, an instant before the
    start. Such a tick is owed only to a scan that began before it, which has seen it. Instants
    are compared in UTC: two datetimes in one zone compare by their ambiguous wall-clock reading.
    """
    floor = after.astimezone(UTC)
    for tick in CronSim(expr, after.astimezone(zone)):
        instant = tick.astimezone(UTC)
        if instant > floor:
            floor = instant
            yield tick


#: The step at which _real_clock looks for the zone's next change of UTC offset (zones change
#: it at most a few times a year), and how far ahead of a candidate tick it looks at most.
_PROBE = timedelta(hours=6)


def _real_clock(expr: str, zone: ZoneInfo, after: datetime) -> Iterator[datetime]:
    """The ticks of a job that follows the real clock: every instant whose wall-clock reading in
    ``zone`` matches, none in a gap, both passes of a repeated hour, in order of their instants.

    cronsim's own stepping of such jobs through a transition depends on where it starts (it
    loses the 02:00 and 02:20 of ``*/20 2 * * *`` in Australia/Lord_Howe, whose clocks go back
    half an hour, when it starts before the change, and yields them when it starts after), so
    time is cut at the zone's changes of offset: within one span the wall clock is UTC plus a
    fixed offset, and cronsim steps it as a plain clock.
    """
    at, start = after.astimezone(UTC), after.astimezone(UTC)
    while True:
        offset = at.astimezone(zone).utcoffset()
        assert offset is not None
        walls = CronSim(expr, (start + offset).replace(tzinfo=None))  # strictly after start
        steady = at  # the offset holds from ``at`` to here
        while True:
            wall = next(walls, None)
            if wall is None:
                return  # the expression never matches again
            instant = (wall - offset).replace(tzinfo=UTC)
            change = _next_change(zone, steady, offset, instant)
            if change is None:
                steady = instant
                yield instant.astimezone(zone)
                continue
            # The offset changes before this candidate: the next span begins at the change,
            # and its first candidate may be the change itself.
            at, start = change, change - timedelta(seconds=1)
            break


def _next_change(
    zone: ZoneInfo, start: datetime, offset: timedelta, until: datetime
) -> datetime | None:
    """The first instant in (start, until] at which ``zone`` is no longer at ``offset``, to the
    second; None when it keeps it throughout."""
    low = start
    while low < until:
        high = min(low + _PROBE, until)
        if high.astimezone(zone).utcoffset() != offset:
            while high - low > timedelta(seconds=1):
                mid = low + (high - low) / 2
                if mid.astimezone(zone).utcoffset() == offset:
                    low = mid
                else:
                    high = mid
            # Zones change offset on a whole second, which is the one in (low, high].
            return high.replace(microsecond=0)
        low = high
    return None


def next_tick(expr: str, zone: ZoneInfo, after: datetime) -> datetime | None:
    """The first tick strictly after ``after`` (None for an expression that never fires)."""
    return next(ticks_after(expr, zone, after), None)


#: How many due ticks a catch-up counts one by one from the watermark. Past it (a one-second
#: schedule after a long stop), the window of the newest ticks is found backwards from now
#: and the skipped ticks before it are not all counted: ``skipped`` is then a lower bound.
COUNT_LIMIT = 2_000


@dataclass(frozen=True, kw_only=True)
class Due:
    """The ticks a schedule owes at one moment, by its missed-tick policy."""

    #: Ticks to enqueue, oldest first.
    ticks: list[datetime]
    #: Ticks at or before ``now`` that the policy skips (they will never run); a lower bound
    #: past COUNT_LIMIT due ticks.
    skipped: int
    #: The newest tick at or before ``now`` (enqueued or skipped): the new watermark.
    last: datetime | None
    #: The first tick after ``now``.
    next: datetime | None


def due_ticks(
    expr: str, zone: ZoneInfo, *, after: datetime, now: datetime, keep: int | None
) -> Due:
    """The ticks in (after, now]: all of them, or only the newest ``keep`` (1: latest only).

    The work is bounded by ``keep`` and COUNT_LIMIT, not by how long ago ``after`` was.
    """
    if keep is None:
        due = _scan(expr, zone, after, now, keep, limit=None)
        assert due is not None
        return due
    due = _scan(expr, zone, after, now, keep, limit=COUNT_LIMIT)
    if due is not None:
        return due
    window = _scan(expr, zone, _window_start(expr, zone, after, now, keep), now, keep, None)
    assert window is not None
    at_least = max(window.skipped, COUNT_LIMIT + 1 - len(window.ticks))
    return Due(ticks=window.ticks, skipped=at_least, last=window.last, next=window.next)


def _scan(
    expr: str, zone: ZoneInfo, after: datetime, now: datetime, keep: int | None, limit: int | None
) -> Due | None:
    """The ticks in (after, now] one by one; None when there are more than ``limit``."""
    kept: deque[datetime] = deque(maxlen=keep)
    seen = 0
    upcoming = None
    for tick in ticks_after(expr, zone, after):
        if tick > now:
            upcoming = tick
            break
        if limit is not None and seen >= limit:
            return None
        kept.append(tick)
        seen += 1
    return Due(
        ticks=list(kept),
        skipped=seen - len(kept),
        last=kept[-1] if kept else None,
        next=upcoming,
    )


def _window_start(expr: str, zone: ZoneInfo, after: datetime, now: datetime, keep: int) -> datetime:
    """An instant in [after, now) after which the newest ``keep`` ticks up to ``now`` lie.

    Widens a window back from ``now`` four times at a step, counting at most ``keep`` ticks
    in each, so the cost follows ``keep``, not the length of the stop.
    """
    span = timedelta(seconds=1)
    while True:
        start = now - span
        if start <= after:
            return after
        count = 0
        for tick in ticks_after(expr, zone, start):
            if tick > now or count >= keep:
                break
            count += 1
        if count >= keep:
            return start
        span *= 4


def tick_key(name: str, tick: datetime) -> str:
    """The idempotency key of one tick of the schedule ``name``."""
    return KEY_FORMAT.format(name=name, instant=tick.astimezone(UTC))
