"""Schedules run by real worker processes on PostgreSQL: each tick once, missed-tick policies.

Every worker runs the scheduler; none is a leader. The schedules tick every second into a queue
no worker consumes, so every tick's task stays to be counted. Each test reads the ticks the
tasks carry (``scheduled_at`` in the payload, not the key) and compares them with the ticks the
schedule owes from its own history: ``since`` to its watermark.
"""

from __future__ import annotations

import signal
import time
from datetime import datetime

import pytest

from rivet.models import Schedule, Task
from rivet.schedules.operate import owed_ticks
from tests.acceptance.conftest import wait_for

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

FAST = (
    "--queue",
    "demo",
    "--poll-interval",
    "0.2",
    "--lease-ttl-secs",
    "2",
    "--log-format",
    "json",
)
EVERY_SECOND = "* * * * * *"


def make(name: str, **fields) -> Schedule:
    return Schedule.objects.create(
        name=name,
        kind="noop",
        cron=EVERY_SECOND,
        queue="ticks",
        payload={"schedule": name},
        **fields,
    )


def fired(name: str) -> list[datetime]:
    """The ticks enqueued for a schedule, oldest first (duplicates kept, to be caught)."""
    payloads = Task.objects.filter(queue="ticks", payload__schedule=name).values_list(
        "payload", flat=True
    )
    return sorted(datetime.fromisoformat(p["scheduled_at"]) for p in payloads)


def owed(schedule: Schedule) -> list[datetime]:
    """Every tick of the schedule after its creation, up to its watermark."""
    schedule.refresh_from_db()
    assert schedule.last_tick_at is not None, f"{schedule.name} never ticked"
    return owed_ticks(schedule)


def stop_all(fleet) -> None:
    for worker in fleet:  # a worker signalled before it installs its handlers dies of it
        wait_for(lambda w=worker: w.events("worker_started"), "the worker's start")
    for worker in fleet:
        worker.send(signal.SIGTERM)
    for worker in fleet:
        assert worker.wait() == 0, worker.log


def ticked_past(name: str, instant: datetime, seconds: float) -> bool:
    last = Schedule.objects.get(name=name).last_tick_at
    return last is not None and (last - instant).total_seconds() >= seconds


def test_every_tick_is_enqueued_once_while_workers_are_killed_and_restarted(workers):
    schedules = [make(f"tick-{i}", missed="all", max_missed=1000) for i in range(10)]
    fleet = [workers.start(*FAST, "--owner", f"w{i}") for i in range(3)]
    for round_ in range(4):
        time.sleep(1.3)
        victim = fleet.pop(0)
        victim.send(signal.SIGKILL)  # mid-pass or not: its transaction rolls back whole
        assert victim.wait() == -signal.SIGKILL
        fleet.append(workers.start(*FAST, "--owner", f"r{round_}"))
    time.sleep(1.3)
    stop_all(fleet)

    for schedule in schedules:
        got = fired(schedule.name)
        assert len(got) == len(set(got)), f"{schedule.name}: a tick enqueued twice"
        expected = owed(schedule)
        assert len(expected) >= 4, f"{schedule.name} ticked only {len(expected)} times"
        assert got == expected, f"{schedule.name}: ticks missing or extra"


def test_missed_ticks_after_all_workers_stopped_follow_each_schedule_s_policy(workers):
    catch_up = make("catch-up", missed="all", max_missed=1000)
    latest = make("latest-only", missed="latest")
    fleet = [workers.start(*FAST, "--owner", f"a{i}") for i in range(2)]
    started = Schedule.objects.get(name="catch-up").since
    workers.wait_for(lambda: ticked_past("latest-only", started, 1), "ticks before the stop")
    stop_all(fleet)
    watermark = Schedule.objects.get(name="latest-only").last_tick_at
    time.sleep(1.5)
    born = make("born-while-down", missed="all", max_missed=1000)
    time.sleep(2.5)  # every schedule now owes ticks no worker ran

    fleet = [workers.start(*FAST, "--owner", f"b{i}") for i in range(2)]
    for name in ("catch-up", "latest-only", "born-while-down"):
        workers.wait_for(lambda n=name: ticked_past(n, watermark, 6), f"{name} after restart")
    stop_all(fleet)

    assert fired("catch-up") == owed(catch_up)  # every missed tick ran, once

    latest.refresh_from_db()
    got, expected = fired("latest-only"), owed(latest)
    assert len(got) == len(set(got))
    missing = [tick for tick in expected if tick not in got]
    down = [tick for tick in expected if tick > watermark and tick not in got]
    # The downtime's ticks were skipped, but its newest, which ran.
    assert len(down) >= 2, (watermark, got)
    assert latest.skipped_ticks == len(missing)
    assert set(got) <= set(expected)

    ticks = fired("born-while-down")
    born.refresh_from_db()
    assert ticks and min(ticks) > born.since  # nothing from before it existed
    assert ticks == owed(born)
