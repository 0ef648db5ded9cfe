"""The scheduler's pass, its crash safety and the operator's actions, on PostgreSQL."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from rivet.errors import StoreError
from rivet.models import Schedule, Task
from rivet.schedules import operate
from rivet.schedules.scheduler import run_due, sync_code_schedules
from rivet.stores import store_for_alias

pytestmark = pytest.mark.django_db


@pytest.fixture
def store():
    return store_for_alias("default")


def overdue(name: str, seconds: int, **fields) -> Schedule:
    """A schedule made ``seconds`` ago that no worker has run since: it owes those ticks."""
    past = timezone.now().replace(microsecond=0) - timedelta(seconds=seconds)
    fields = {"kind": "noop", "cron": "* * * * * *", "queue": "ticks", **fields}
    return Schedule.objects.create(
        name=name, since=past - timedelta(milliseconds=500), next_tick_at=past, **fields
    )


def ticks_of(name: str) -> list[str]:
    return sorted(
        t.payload["scheduled_at"]
        for t in Task.objects.filter(queue="ticks", idem_key__startswith=f"rivet.tick:{name}:")
    )


def test_a_pass_enqueues_every_owed_tick_with_its_time_and_moves_the_watermark(store):
    overdue("s", 5, missed="all", payload={"region": "eu"})
    done = run_due(store, alias="default")
    schedule = Schedule.objects.get(name="s")
    assert done.enqueued >= 5 and done.duplicates == 0
    task = Task.objects.get(pk=operate.last_task_id(schedule, alias="default"))
    assert task.payload == {"region": "eu", "scheduled_at": schedule.last_tick_at.isoformat()}
    assert len(ticks_of("s")) == done.enqueued
    assert schedule.next_tick_at > schedule.last_tick_at
    # Nothing is due twice: a second pass tries none of those ticks again. (A one-second schedule
    # may owe the next second's tick by then, on a slow machine: that one is new and later.)
    first = ticks_of("s")
    again = run_due(store, alias="default")
    assert again.duplicates == 0
    later = ticks_of("s")
    assert later[: len(first)] == first and len(later) == len(first) + again.enqueued
    last = datetime.fromisoformat(first[-1])
    assert all(datetime.fromisoformat(tick) > last for tick in later[len(first) :])


def test_latest_enqueues_only_the_newest_owed_tick_and_counts_the_skipped(store):
    overdue("s", 5, missed="latest")
    done = run_due(store, alias="default")
    schedule = Schedule.objects.get(name="s")
    assert (done.enqueued, schedule.skipped_ticks) == (1, done.skipped)
    assert done.skipped >= 4
    assert ticks_of("s") == [schedule.last_tick_at.isoformat()]


def test_a_crash_between_deciding_and_enqueuing_loses_no_tick(store, monkeypatch):
    overdue("s", 3, missed="all")

    def crash(specs):
        raise StoreError("the worker died here")

    monkeypatch.setattr(store, "task_enqueue_many", crash)
    with pytest.raises(StoreError):
        run_due(store, alias="default")
    schedule = Schedule.objects.get(name="s")
    assert (schedule.last_tick_at, Task.objects.count()) == (None, 0)  # rolled back whole
    monkeypatch.undo()
    assert run_due(store, alias="default").enqueued >= 3


def test_a_tick_two_passes_both_find_due_is_one_task(store):
    overdue("s", 3, missed="all")
    first = run_due(store, alias="default")
    # A second worker that read the row before the first pass committed sees the same ticks.
    Schedule.objects.filter(name="s").update(last_tick_at=None, next_tick_at=timezone.now())
    second = run_due(store, alias="default")
    assert second.duplicates >= first.enqueued and Task.objects.count() == len(ticks_of("s"))
    assert len(ticks_of("s")) == len(set(ticks_of("s")))


def test_an_unknown_kind_is_recorded_and_its_ticks_stay_owed(store):
    overdue("s", 2, missed="all", kind="no.such.kind")
    done = run_due(store, alias="default")
    schedule = Schedule.objects.get(name="s")
    assert done.failed == 1 and "no.such.kind" in schedule.last_error
    assert schedule.last_tick_at is None and Task.objects.count() == 0
    Schedule.objects.filter(name="s").update(kind="noop", next_tick_at=timezone.now())
    assert run_due(store, alias="default").enqueued >= 2


def test_code_schedules_are_written_once_and_follow_the_code(store):
    definition = {
        "name": "nightly",
        "kind": "noop",
        "cron": "0 3 * * *",
        "timezone": "Europe/Berlin",
        "queue": None,
        "priority": None,
        "payload": {},
        "missed": "latest",
        "max_missed": 100,
    }
    assert sync_code_schedules([definition], alias="default") == 1
    assert sync_code_schedules([definition], alias="default") == 0
    Schedule.objects.filter(name="nightly").update(enabled=False)  # an operator paused it
    assert sync_code_schedules([{**definition, "cron": "0 4 * * *"}], alias="default") == 1
    row = Schedule.objects.get(name="nightly")
    assert (row.source, row.cron, row.enabled) == ("code", "0 4 * * *", False)


def command(*args: str) -> str:
    out = StringIO()
    call_command("rivet_schedule", *args, stdout=out)
    return out.getvalue()


def test_the_command_lists_runs_pauses_and_resumes(store):
    overdue("s", 2, missed="all", payload={"x": 1})
    listed = [json.loads(line) for line in command("list", "--json").splitlines()]
    assert [(r["name"], r["state"], r["last_tick"]) for r in listed] == [("s", "enabled", None)]
    assert listed[0]["next_run"] is not None

    assert "enqueued task" in command("run", "s")
    ran = Task.objects.get(idem_key=None, queue="ticks")
    assert ran.payload["x"] == 1 and "scheduled_at" in ran.payload

    assert command("pause", "s").strip() == "schedule s paused"
    assert command("pause", "s").strip() == "schedule s paused (it already was paused)"
    assert run_due(store, alias="default").schedules == 0  # a paused schedule owes nothing
    assert "paused" in command("list")
    before = timezone.now()
    assert command("resume", "s").strip() == "schedule s resumed"
    assert Schedule.objects.get(name="s").since >= before - timedelta(seconds=1)
    # The pause's ticks are not owed; a one-second schedule may owe a tick from after the resume
    # by now (a slow machine), never one from before it.
    run_due(store, alias="default")
    resumed_at = Schedule.objects.get(name="s").since
    owed = [datetime.fromisoformat(t) for t in ticks_of("s")]
    assert all(tick >= resumed_at for tick in owed), (owed, resumed_at)


def test_the_command_refuses_an_unknown_name_with_exit_2():
    with pytest.raises(CommandError, match="no schedule is called 'nope'") as caught:
        command("pause", "nope")
    assert caught.value.returncode == 2


def test_a_schedule_saved_with_a_bad_expression_does_not_stop_the_others(store):
    overdue("broken", 2, cron="61 * * * *")
    overdue("fine", 2, missed="all")
    done = run_due(store, alias="default")
    broken = Schedule.objects.get(name="broken")
    assert done.failed == 1 and "not valid" in broken.last_error
    assert broken.next_tick_at is None  # looked at again when an edit fixes it
    assert len(ticks_of("fine")) >= 2


@pytest.mark.django_db(databases=["default", "sqlite"])
def test_a_pass_on_the_sqlite_store_enqueues_each_tick_once():
    past = timezone.now().replace(microsecond=0) - timedelta(seconds=3)
    Schedule.objects.using("sqlite").create(
        name="s", kind="noop", cron="* * * * * *", missed="all", since=past, next_tick_at=past
    )
    sqlite = store_for_alias("sqlite")
    first = run_due(sqlite, alias="sqlite")
    # Back to before the first pass: the same ticks are due again, and each is refused by its key.
    Schedule.objects.using("sqlite").update(last_tick_at=None, next_tick_at=past)
    again = run_due(sqlite, alias="sqlite")
    assert first.enqueued >= 3 and again.duplicates >= first.enqueued
    assert Task.objects.using("sqlite").count() == first.enqueued + again.enqueued


@pytest.mark.django_db(transaction=True)  # the pass closes its thread's connections
def test_the_scheduler_thread_s_pass_syncs_the_code_and_never_raises(store, monkeypatch):
    from rivet.schedules.scheduler import MIN_PAUSE_SECS, Scheduler

    declared = {
        "name": "every-second",
        "kind": "noop",
        "cron": "* * * * * *",
        "timezone": "UTC",
        "queue": "ticks",
        "priority": None,
        "payload": {},
        "missed": "all",
        "max_missed": 10,
    }
    scheduler = Scheduler(store=store, alias="default", definitions=lambda: [declared], every=0.5)
    done, pause = scheduler.pass_once()
    assert Schedule.objects.get(name="every-second").source == "code"
    assert done is not None and MIN_PAUSE_SECS <= pause <= 0.5

    def broken(specs):
        raise StoreError("connection lost")

    monkeypatch.setattr(store, "task_enqueue_many", broken)
    past = timezone.now() - timedelta(seconds=3)
    Schedule.objects.update(since=past, last_tick_at=None, next_tick_at=past)
    assert scheduler.pass_once() == (None, 0.5)  # logged as schedule_pass_failed


def test_a_long_catch_up_is_many_bounded_passes_and_loses_nothing(store, monkeypatch):
    from rivet.schedules import scheduler

    monkeypatch.setattr(scheduler, "MAX_TICKS_PER_PASS", 5)
    for name in ("a", "b", "c"):
        overdue(name, 4, missed="all")
    first = run_due(store, alias="default")
    assert first.full and first.schedules < 3  # the rest stay due, their locks released
    passes = 1
    while run_due(store, alias="default").schedules:
        passes += 1
    assert passes >= 2
    for schedule in Schedule.objects.all():
        got = ticks_of(schedule.name)
        assert len(got) == len(set(got)) >= 4
        assert got[-1] == schedule.last_tick_at.isoformat()
