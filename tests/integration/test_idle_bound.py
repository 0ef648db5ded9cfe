"""A transaction rivet opens cannot hold its locks for long once its process stalls.

The server ends a session that sits idle inside a transaction rivet opened for longer than
``RIVET['IDLE_IN_TRANSACTION_TIMEOUT_SECS']`` (rivet.stores.idle); the caller's own transactions
are never bounded. A scheduler pass that finds its due schedules held by another pass waits
instead of passing again at once, and the chaos harness never waits for such a pass.
"""

from __future__ import annotations

import time
from datetime import timedelta

import psycopg
import pytest
from django.db import DatabaseError, connections, transaction
from django.test import override_settings
from django.utils import timezone

from rivet.models import Schedule
from rivet.schedules.scheduler import HELD_RETRY_SECS, Scheduler, run_due
from rivet.stores import store_for_alias
from rivet.stores.idle import bounded_atomic, idle_timeout_secs, set_idle_timeout
from tests.processes import postgres_url

pytestmark = pytest.mark.django_db(transaction=True)


def current_bound() -> str:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT current_setting('idle_in_transaction_session_timeout')")
        return cursor.fetchone()[0]


@pytest.fixture
def other():
    """A second session on the test database, as another process would have."""
    url = postgres_url().replace("postgresql://", "postgres://", 1)
    with psycopg.connect(url, autocommit=True) as conn:
        yield conn


def due_schedule(name: str) -> Schedule:
    past = timezone.now() - timedelta(seconds=3)
    return Schedule.objects.create(
        name=name, kind="noop", cron="* * * * * *", queue="ticks", since=past, next_tick_at=past
    )


@override_settings(RIVET={"IDLE_IN_TRANSACTION_TIMEOUT_SECS": 7})
def test_a_transaction_rivet_opens_is_bounded_and_a_callers_is_not():
    assert current_bound() == "0"  # the session itself carries no bound
    with bounded_atomic("default"):
        assert current_bound() == "7s"
        with bounded_atomic("default"):  # nested: the outer block's
            assert current_bound() == "7s"
    assert current_bound() == "0"  # local to that transaction
    with transaction.atomic():  # the caller's transaction: rivet sets nothing in it
        with bounded_atomic("default"):
            assert current_bound() == "0"
    store = store_for_alias("default")
    with store._writing():
        assert current_bound() == "7s"


@override_settings(RIVET={"IDLE_IN_TRANSACTION_TIMEOUT_SECS": 0})
def test_0_turns_the_bound_off_and_the_workers_option_wins_over_the_setting():
    with bounded_atomic("default"):
        assert current_bound() == "0"
    set_idle_timeout(3)
    try:
        assert idle_timeout_secs() == 3
        with bounded_atomic("default"):
            assert current_bound() == "3s"
    finally:
        from rivet.stores import idle

        idle._override.clear()


@override_settings(RIVET={"IDLE_IN_TRANSACTION_TIMEOUT_SECS": 1})
def test_a_stalled_pass_loses_its_locks_to_the_server_within_the_bound(other):
    due_schedule("stalled")
    with pytest.raises(DatabaseError, match="idle-in-transaction timeout"):
        with bounded_atomic("default"):
            held = list(Schedule.objects.select_for_update().filter(name="stalled"))
            assert held
            # Another process's pass skips the locked row, and says it is held elsewhere.
            locked = other.execute(
                "SELECT id FROM rivet_schedule WHERE name = 'stalled' FOR UPDATE SKIP LOCKED"
            ).fetchall()
            assert locked == []
            time.sleep(2.5)  # stalled: idle in the transaction, past the bound
            list(Schedule.objects.filter(name="stalled"))  # the session was ended meanwhile
    connections["default"].close()
    free = other.execute(
        "SELECT id FROM rivet_schedule WHERE name = 'stalled' FOR UPDATE NOWAIT"
    ).fetchall()
    assert len(free) == 1  # the lock went with the session


def test_a_pass_that_finds_its_due_schedules_held_says_so_and_waits(other):
    due_schedule("held")
    store = store_for_alias("default")
    other.execute("BEGIN")
    other.execute("SELECT 1 FROM rivet_schedule WHERE name = 'held' FOR UPDATE")
    try:
        done = run_due(store, alias="default")
        assert (done.schedules, done.held_elsewhere) == (0, True)
        scheduler = Scheduler(store=store, alias="default", definitions=list, every=1.0)
        _, pause = scheduler.pass_once()
        assert pause == HELD_RETRY_SECS  # not MIN_PAUSE_SECS over and over while it is held
    finally:
        other.execute("ROLLBACK")
    done = run_due(store, alias="default")
    assert done.schedules == 1 and not done.held_elsewhere


def test_the_chaos_harness_never_waits_for_a_schedule_a_worker_holds(other):
    from chaos_project.chaos.ticks import TICK_KIND, ChaosSchedules

    Schedule.objects.create(name="chaos-1-tick-000", kind=TICK_KIND, cron="* * * * * *", queue="q")
    events: list[str] = []
    schedules = ChaosSchedules(
        count=1, queue="q", seed=1, catch_up_limit=0, say=print, log=lambda e, **_: events.append(e)
    )
    other.execute("BEGIN")
    other.execute("SELECT 1 FROM rivet_schedule WHERE name = 'chaos-1-tick-000' FOR UPDATE")
    try:  # a wait would last until the holder lets go, which happens only below
        assert schedules._disable() is False  # deferred, not waited for
        assert schedules._disable() is False
        assert not schedules.disabled
    finally:
        other.execute("ROLLBACK")
    assert events == ["schedules_disable_deferred"]  # said once
    schedules.close()
    assert schedules.disabled and events[-1] == "schedules_disabled"
    assert not Schedule.objects.get(name="chaos-1-tick-000").enabled
