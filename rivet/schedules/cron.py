"""Cron: a parsed schedule expression in a timezone, and the ticks it has in a span of time.

Parsing and stepping are cronsim's (Debian cron's rules, DST included; docs/schedules.md says
why cronsim and not croniter). Five fields (minute hour day month weekday) or six with seconds
first (``*/15 * * * * *``: every 15 seconds). Every tick is an aware datetime in the schedule's
zone; a tick's identity is its instant (UTC), so a repeated wall-clock hour never yields the
same tick twice.

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
    """The ticks of ``expr`` strictly after the instant ``after``, in ``zone``, for ever."""
    return CronSim(expr, after.astimezone(zone))


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
