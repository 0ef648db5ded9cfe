"""The ticks of a schedule: cron arithmetic in real zones across DST, policies, keys."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

import rivet
from rivet.errors import InvalidInput
from rivet.jobs import JobRegistry
from rivet.schedules.cron import (
    COUNT_LIMIT,
    check_cron,
    due_ticks,
    next_tick,
    tick_key,
    ticks_after,
)
from rivet.schedules.declare import code_schedules

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def ticks(expr: str, zone: ZoneInfo, after: datetime, until: datetime) -> list[str]:
    """The ticks in (after, until] as local ISO strings."""
    return [t.isoformat() for t in due_ticks(expr, zone, after=after, now=until, keep=None).ticks]


def test_a_daily_job_in_the_skipped_hour_runs_once_right_after_the_gap():
    # Europe/Berlin springs forward on 2026-03-29 at 02:00 -> 03:00: 02:30 does not exist.
    got = ticks("30 2 * * *", BERLIN, utc(2026, 3, 27, 12), utc(2026, 3, 30, 12))
    assert got == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
    ]


def test_a_daily_job_in_the_repeated_hour_runs_once_on_the_fall_back_night():
    # Europe/Berlin falls back on 2026-10-25 at 03:00 -> 02:00: 02:30 happens twice.
    got = ticks("30 2 * * *", BERLIN, utc(2026, 10, 24, 12), utc(2026, 10, 26, 12))
    assert got == ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]


def test_a_frequent_job_follows_the_real_clock_through_the_repeated_hour():
    got = ticks("*/30 * * * *", BERLIN, utc(2026, 10, 24, 23, 45), utc(2026, 10, 25, 2, 0))
    assert got == [
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:30:00+02:00",
        "2026-10-25T02:00:00+01:00",
        "2026-10-25T02:30:00+01:00",
        "2026-10-25T03:00:00+01:00",
    ]
    instants = [datetime.fromisoformat(t) for t in got]
    assert all(b - a == timedelta(minutes=30) for a, b in zip(instants, instants[1:], strict=False))
    keys = {tick_key("half-hourly", t) for t in instants}
    assert len(keys) == len(instants)  # the two 02:00s are two ticks with two keys


def test_new_york_gap_and_repeat():
    # America/New_York: 2026-03-08 02:00 -> 03:00; 2026-11-01 02:00 -> 01:00.
    spring = ticks("30 2 * * *", NEW_YORK, utc(2026, 3, 7, 12), utc(2026, 3, 9, 12))
    assert spring == ["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"]
    autumn = ticks("30 1 * * *", NEW_YORK, utc(2026, 10, 31, 12), utc(2026, 11, 2, 12))
    assert autumn == ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"]


def test_ticks_start_strictly_after_the_watermark_even_inside_the_repeated_hour():
    second_two_oclock = utc(2026, 10, 25, 1, 0)  # 02:00+01:00, the second 02:00
    assert next_tick("*/30 * * * *", BERLIN, second_two_oclock).isoformat() == (
        "2026-10-25T02:30:00+01:00"
    )
    first = next(ticks_after("0 * * * *", BERLIN, utc(2026, 10, 25, 0, 0)))
    assert first.isoformat() == "2026-10-25T02:00:00+01:00"


def test_six_fields_put_seconds_first():
    got = ticks("*/20 * * * * *", ZoneInfo("UTC"), utc(2026, 1, 1), utc(2026, 1, 1, 0, 1))
    assert got == [
        "2026-01-01T00:00:20+00:00",
        "2026-01-01T00:00:40+00:00",
        "2026-01-01T00:01:00+00:00",
    ]


def test_latest_keeps_the_newest_tick_and_counts_the_rest_as_skipped():
    due = due_ticks(
        "* * * * *", ZoneInfo("UTC"), after=utc(2026, 1, 1), now=utc(2026, 1, 1, 1), keep=1
    )
    assert [t.isoformat() for t in due.ticks] == ["2026-01-01T01:00:00+00:00"]
    assert due.skipped == 59
    assert due.last == utc(2026, 1, 1, 1)
    assert due.next == utc(2026, 1, 1, 1, 1)


def test_all_keeps_the_newest_ticks_up_to_the_bound():
    due = due_ticks(
        "* * * * *", ZoneInfo("UTC"), after=utc(2026, 1, 1), now=utc(2026, 1, 1, 1), keep=5
    )
    assert due.ticks == [utc(2026, 1, 1, 0, m) for m in range(56, 60)] + [utc(2026, 1, 1, 1)]
    assert due.skipped == 55


def test_nothing_is_due_at_or_before_the_watermark():
    due = due_ticks(
        "0 * * * *", ZoneInfo("UTC"), after=utc(2026, 1, 1, 1), now=utc(2026, 1, 1, 1, 59), keep=10
    )
    assert (due.ticks, due.skipped, due.last, due.next) == ([], 0, None, utc(2026, 1, 1, 2))


def test_the_key_names_the_schedule_and_the_utc_instant():
    tick = datetime(2026, 3, 29, 3, 0, tzinfo=BERLIN)
    assert tick_key("reports.daily", tick) == "rivet.tick:reports.daily:20260329T010000Z"


@pytest.mark.parametrize("expr", ["* * * *", "61 * * * *", "* * * * * * *", "", "0 7 * * FOO"])
def test_a_bad_expression_is_refused_naming_the_field(expr):
    with pytest.raises(InvalidInput) as caught:
        check_cron(expr)
    assert caught.value.field == "cron"


def test_rivet_cron_refuses_bad_options_at_import_time():
    with pytest.raises(InvalidInput, match="not a known IANA zone"):
        rivet.cron("0 7 * * *", timezone="Mars/Olympus")
    with pytest.raises(InvalidInput, match="scheduled_at"):
        rivet.cron("0 7 * * *", payload={"scheduled_at": "x"})
    with pytest.raises(InvalidInput, match="missed must be one of"):
        rivet.cron("0 7 * * *", missed="some")


def test_a_job_declares_its_schedules_and_two_need_names():
    registry = JobRegistry()
    with pytest.raises(InvalidInput, match="give each a name"):
        rivet.job(
            "tests.twice",
            schedules=[rivet.cron("0 7 * * *"), rivet.cron("0 8 * * *")],
            registry=registry,
        )(lambda c: None)
    rivet.job(
        "tests.nightly",
        schedules=[rivet.cron("0 3 * * *", timezone="Europe/Berlin", payload={"full": True})],
        registry=registry,
    )(lambda c: None)
    try:
        declared = {d["name"]: d for d in code_schedules.all()}["tests.nightly"]
        assert (declared["kind"], declared["cron"], declared["timezone"]) == (
            "tests.nightly",
            "0 3 * * *",
            "Europe/Berlin",
        )
        assert declared["payload"] == {"full": True}
    finally:
        code_schedules.remove("tests.nightly")


def test_a_long_stop_of_a_one_second_schedule_keeps_the_newest_ticks_without_walking_them_all():
    now = utc(2026, 1, 2, 0, 0, 0)
    due = due_ticks(
        "* * * * * *", ZoneInfo("UTC"), after=now - timedelta(days=1), now=now, keep=1000
    )
    assert due.ticks == [now - timedelta(seconds=s) for s in range(999, -1, -1)]
    assert (due.last, due.next) == (now, now + timedelta(seconds=1))
    # Past COUNT_LIMIT the skipped ticks are a lower bound, never more than the truth.
    assert COUNT_LIMIT + 1 - 1000 <= due.skipped <= 86_400 - 1000


def test_a_short_stop_counts_every_skipped_tick():
    now = utc(2026, 1, 4, 12)
    due = due_ticks("0 7 * * *", BERLIN, after=utc(2026, 1, 1, 12), now=now, keep=1)
    assert [t.isoformat() for t in due.ticks] == ["2026-01-04T07:00:00+01:00"]
    assert due.skipped == 2


@pytest.mark.parametrize("depth", [101, 5000])
def test_a_code_schedule_payload_nested_past_the_limit_is_invalid_input(depth):
    tree: list = []
    for _ in range(depth - 2):
        tree = [tree]
    with pytest.raises(InvalidInput) as raised:
        rivet.cron("0 * * * *", name="deep", payload={"tree": tree})
    assert raised.value.field == "payload"
    assert "at most 100 levels (rivet.text.MAX_JSON_DEPTH)" in str(raised.value)
