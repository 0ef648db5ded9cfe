"""Ticks never go back in time: every DST transition of many zones from 2020 to 2035.

``next_tick(after)`` is later than ``after``, the ticks of a scan are strictly increasing, and a
scan resumed at any instant (the scheduler's watermark, a schedule created, resumed or edited
there) yields exactly the ticks after it that a scan begun earlier does: no tick is fired twice
and none is lost, in the repeated hour (fall back) and in the gap (spring forward) alike.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import cache
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rivet.schedules.cron import due_ticks, next_tick, ticks_after

#: Zones with DST rules of every kind: northern and southern, the hour changed at midnight
#: (Havana, Beirut, Asuncion), a half-hour shift (Lord Howe), a two-hour one (Troll), a
#: negative DST (Dublin), odd offsets (Chatham +12:45, St John's -03:30), clocks moved back and
#: forth around Ramadan (Casablanca, Gaza), and zones whose rules ended in these years (Tehran,
#: Mexico City, Amman, Volgograd, Apia).
ZONES = (
    "Europe/Berlin",
    "America/New_York",
    "Europe/London",
    "Europe/Dublin",
    "Europe/Kyiv",
    "Europe/Chisinau",
    "Europe/Volgograd",
    "America/Santiago",
    "America/Havana",
    "America/Asuncion",
    "America/St_Johns",
    "America/Nuuk",
    "America/Mexico_City",
    "Australia/Sydney",
    "Australia/Lord_Howe",
    "Pacific/Auckland",
    "Pacific/Chatham",
    "Pacific/Apia",
    "Antarctica/Troll",
    "Asia/Tehran",
    "Asia/Beirut",
    "Asia/Gaza",
    "Asia/Amman",
    "Africa/Casablanca",
    "Africa/Cairo",
)

START, END = datetime(2020, 1, 1, tzinfo=UTC), datetime(2036, 1, 1, tzinfo=UTC)


def _offset(zone: ZoneInfo, instant: datetime) -> timedelta | None:
    return instant.astimezone(zone).utcoffset()


@cache
def transitions() -> tuple[tuple[str, datetime], ...]:
    """Every (zone, instant) at which a zone in ZONES changes its UTC offset, 2020 to 2035.

    Samples every six hours (no zone changes its offset twice within six hours) and bisects
    each change down to the second.
    """
    found = []
    step = timedelta(hours=6)
    for name in ZONES:
        zone = ZoneInfo(name)
        at, before = START, _offset(zone, START)
        while at < END:
            nxt = at + step
            offset = _offset(zone, nxt)
            if offset != before:
                low, high = at, nxt  # offset(low) == before != offset(high)
                while high - low > timedelta(seconds=1):
                    mid = low + (high - low) / 2
                    if _offset(zone, mid) == before:
                        low = mid
                    else:
                        high = mid
                found.append((name, high.replace(microsecond=0)))
            at, before = nxt, offset
    return tuple(found)


def utc_list(ticks: list[datetime]) -> list[datetime]:
    return [tick.astimezone(UTC) for tick in ticks]


def scan(expr: str, zone: ZoneInfo, after: datetime, until: datetime) -> list[datetime]:
    """The ticks in (after, until] as UTC instants."""
    return utc_list(due_ticks(expr, zone, after=after, now=until, keep=None).ticks)


def check_resumes(
    expr: str, zone: ZoneInfo, start: datetime, at: datetime, until: datetime, resumes
) -> None:
    """The scan from ``start`` to ``until`` is increasing and after ``start``; one resumed at
    each of ``resumes`` and at each of its ticks within 3 hours of ``at`` (the transition)
    agrees with it, and so does next_tick there."""
    base = scan(expr, zone, start, until)
    assert all(tick > start for tick in base), (expr, zone.key, start, base)
    assert base == sorted(set(base)), (expr, zone.key, start, base)
    near = [tick for tick in base if abs(tick - at) <= timedelta(hours=3)]
    for resume in [*resumes, *near[:3], *near[-3:]]:
        owed = [tick for tick in base if tick > resume]
        assert scan(expr, zone, resume, until) == owed, (expr, zone.key, start, resume)
        following = next_tick(expr, zone, resume)
        if following is not None:
            assert following.astimezone(UTC) > resume, (expr, zone.key, resume, following)
            if owed:
                assert following.astimezone(UTC) == owed[0], (expr, zone.key, resume)


def test_the_zones_have_transitions_in_every_year_of_the_span():
    found = transitions()
    assert {name for name, _ in found} == set(ZONES)
    assert {at.year for _, at in found} == set(range(2020, 2036))
    berlin = [at for name, at in found if name == "Europe/Berlin" and at.year == 2026]
    assert berlin == [datetime(2026, 3, 29, 1, tzinfo=UTC), datetime(2026, 10, 25, 1, tzinfo=UTC)]


def test_the_reported_ticks_before_their_start_are_gone():
    # 01:15Z is 02:15+01:00 in Berlin, 06:15Z is 01:15-05:00 in New York: each in the second
    # pass of the repeated hour, after the first pass's 02:30 (01:30 in New York).
    berlin = next_tick(
        "30 2 * * *", ZoneInfo("Europe/Berlin"), datetime(2026, 10, 25, 1, 15, tzinfo=UTC)
    )
    assert berlin is not None and berlin.isoformat() == "2026-10-26T02:30:00+01:00"
    york = next_tick(
        "30 1 * * *", ZoneInfo("America/New_York"), datetime(2026, 11, 1, 6, 15, tzinfo=UTC)
    )
    assert york is not None and york.isoformat() == "2026-11-02T01:30:00-05:00"


#: Fixed and frequent expressions of the shapes the DST rules treat apart, each with how long
#: after the transition its scan runs (a day for the daily ones: the next day's tick).
FIXED_EXPRESSIONS = (
    ("30 2 * * *", 26),
    ("0 0 * * *", 26),
    ("15,45 * * * *", 4),
    ("*/20 2 * * *", 4),
    ("0,30 1-3 * * *", 4),
)


def test_every_transition_with_fixed_expressions():
    """Each transition, each expression, resumed every 40 minutes from 3 hours before to after."""
    for name, at in transitions():
        zone = ZoneInfo(name)
        start = at - timedelta(hours=3)
        resumes = [start + timedelta(minutes=40 * i) for i in range(1, 9)]
        for expr, hours in FIXED_EXPRESSIONS:
            check_resumes(expr, zone, start, at, at + timedelta(hours=hours), resumes)


def _field(low: int, high: int) -> st.SearchStrategy[str]:
    value = st.integers(low, high)
    return st.one_of(
        st.just("*"),
        value.map(str),
        st.integers(1, max(1, (high - low) // 2)).map(lambda n: f"*/{n}"),
        st.lists(value, min_size=1, max_size=4, unique=True).map(
            lambda vs: ",".join(map(str, sorted(vs)))
        ),
        st.tuples(value, value).map(lambda ab: f"{min(ab)}-{max(ab)}"),
    )


#: Cron expressions that fire at least once a month (a day of the month up to 28), so a scan of
#: a few days sees ticks around the transition; a third of them with a seconds field.
EXPRESSIONS = st.builds(
    lambda sec, minute, hour, dom, dow: " ".join(
        [*([sec] if sec else []), minute, hour, dom, "*", dow]
    ),
    st.one_of(st.none(), st.none(), st.sampled_from(["0", "30", "*/20", "0,15"])),
    _field(0, 59),
    _field(0, 23),
    st.one_of(st.just("*"), st.just("*"), _field(1, 28)),
    st.one_of(st.just("*"), st.just("*"), _field(0, 6)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    where=st.sampled_from(transitions()),
    expr=EXPRESSIONS,
    lead=st.integers(0, 6 * 3600),
    resumes=st.lists(st.integers(0, 10 * 3600), min_size=1, max_size=6),
)
def test_random_expressions_never_go_back_and_resume_alike(where, expr, lead, resumes):
    name, at = where
    zone = ZoneInfo(name)
    start = at - timedelta(seconds=lead)
    until = at + timedelta(hours=4 if len(expr.split()) == 6 else 30)  # seconds tick often
    resumed = [start + timedelta(seconds=s) for s in sorted(resumes)]
    check_resumes(expr, zone, start, at, until, resumed)


def test_ticks_after_compares_instants_not_wall_clock():
    # Both arguments in Berlin: 02:15+01:00 (fold 1) reads as before 02:30+02:00 on the clock.
    berlin = ZoneInfo("Europe/Berlin")
    second_pass = datetime(2026, 10, 25, 1, 15, tzinfo=UTC).astimezone(berlin)
    assert second_pass.fold == 1
    first = next(ticks_after("30 2 * * *", berlin, second_pass))
    assert first.astimezone(UTC) > second_pass.astimezone(UTC)


def test_a_schedule_made_in_the_second_pass_owes_nothing_before_its_since():
    # Created, resumed or edited at 02:15+01:00 on the fall-back night (since = 01:15Z): the
    # day's 02:30 ran at 02:30+02:00, before it, so a pass at 02:20+01:00 owes nothing, and the
    # next tick is the next day's.
    berlin = ZoneInfo("Europe/Berlin")
    since = datetime(2026, 10, 25, 1, 15, tzinfo=UTC)
    due = due_ticks("30 2 * * *", berlin, after=since, now=since + timedelta(minutes=5), keep=None)
    assert due.ticks == [] and due.last is None
    assert due.next is not None and due.next.isoformat() == "2026-10-26T02:30:00+01:00"


def test_the_watermark_at_the_first_pass_tick_fires_the_day_once():
    # The watermark (last_tick_at) is the first pass's 02:30+02:00; a pass in the second 02:xx
    # (after the tick's task was pruned, the key no longer dedupes) owes nothing more that day.
    berlin = ZoneInfo("Europe/Berlin")
    fired = datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    later = datetime(2026, 10, 25, 1, 45, tzinfo=UTC)
    assert due_ticks("30 2 * * *", berlin, after=fired, now=later, keep=None).ticks == []
