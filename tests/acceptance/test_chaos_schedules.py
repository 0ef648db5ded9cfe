"""Schedules in a chaos run (``--schedules N``): one-second schedules fire while workers are
killed, aborted and stopped; every due tick must be one task (T1, T2), and a scheduler broken
on purpose (tests/broken_chaos.py: no tick key, no lock) must fail T1 with a non-zero exit.
"""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from rivet.models import Task
from rivet.schedules.models import Schedule
from tests.processes import broken_chaos, child_environ, postgres_url

pytestmark = [pytest.mark.acceptance, pytest.mark.long, pytest.mark.django_db(transaction=True)]

RUN = ("--tasks", "60", "--workers", "3", "--duration-secs", "6", "--schedules", "8")
RUN += ("--drain-timeout-secs", "30", "--own-effect-service")


def test_a_run_with_schedules_fires_every_due_tick_once(run_manage, effect_database_url, tmp_path):
    env = child_environ(postgres_url(), EFFECT_DATABASE_URL=effect_database_url)
    summary_path = tmp_path / "run.json"
    done = run_manage(
        "rivet_chaos", "run", *RUN, "--seed", "3", "--json", str(summary_path), env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every invariant held: S1, S2, L1, F2, C1, H1, H2, H3, H4, H5, D1, T1, T2" in done.stdout
    assert "ticks fired twice        0   <- T1" in done.stdout
    assert "due ticks missing        0   <- T2" in done.stdout

    summary = json.loads(summary_path.read_text())
    assert (summary["T1"], summary["T2"]) == (0, 0)
    ticks = summary["schedules"]
    assert ticks["schedules"] == 8 and ticks["due"] >= 8 * 5  # about six seconds of ticks
    assert summary["events"]["kill"] + summary["events"]["zombie"] > 0  # under the usual chaos

    # From the databases: one task per (schedule, tick), each done or dead; schedules disabled.
    tasks = Task.objects.filter(queue="chaos", kind="chaos.tick")
    identities = Counter(
        (t.payload["chaos_schedule"], t.payload["scheduled_at"]) for t in tasks.only("payload")
    )
    assert len(identities) == tasks.count() == ticks["tick_tasks"] >= ticks["due"]
    assert set(identities.values()) == {1}
    assert not tasks.filter(state="pending").exists()
    schedules = Schedule.objects.filter(kind="chaos.tick")
    assert schedules.count() == 8 and not schedules.filter(enabled=True).exists()


def test_a_scheduler_that_ignores_the_tick_key_fails_t1(effect_database_url):
    done = broken_chaos(
        "tickless-unlocked", "run", *RUN, "--seed", "4", effect_database_url=effect_database_url
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "T1 FAILED" in output
    assert re.search(r"chaos-4-tick-\d+ tick \S+ fired [2-9] times", output)
    assert "invariants failed: T1" in output  # T1 alone: no tick is lost, some fire twice
    assert "ticks fired twice        0" not in output
