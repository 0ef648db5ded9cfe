"""bench.cpu: CPU per task from two snapshots, and the rate the cores allow."""

from __future__ import annotations

import os

import pytest

from bench.cpu import (
    Snapshot,
    SteadyWindow,
    per_task_ms,
    process_secs,
    snapshot,
)
from bench.report import cpu_text


def test_per_task_splits_the_machine_into_the_groups_and_the_rest():
    before = Snapshot(machine=100.0, processes={"service": {7: 10.0}, "postgres": {1: 3.0}})
    after = Snapshot(
        machine=106.0,
        processes={"service": {7: 12.0}, "workers": {20: 1.5}, "postgres": {2: 0.5}},
    )
    cpu = per_task_ms(before, after, tasks=2000)
    assert cpu["machine"] == pytest.approx(3.0)
    assert cpu["service"] == pytest.approx(1.0)
    assert cpu["workers"] == pytest.approx(0.75)  # started inside the window: from zero
    # backend 1 ended in between (not counted, never negative); backend 2 started in between
    assert cpu["postgres"] == pytest.approx(0.25)
    assert cpu["rest"] == pytest.approx(1.0)
    assert cpu["bound"] == pytest.approx((os.cpu_count() or 1) * 1000 / 3.0)


def test_no_tasks_is_refused():
    with pytest.raises(ValueError, match="tasks must be above 0"):
        per_task_ms(Snapshot(machine=0.0), Snapshot(machine=1.0), tasks=0)


def test_this_process_burning_cpu_shows_in_its_own_and_the_machine_time():
    before = snapshot({"me": [os.getpid()]})
    start = process_secs(os.getpid()) or 0.0
    while (process_secs(os.getpid()) or 0.0) - start < 0.5:
        sum(range(10_000))
    after = snapshot({"me": [os.getpid()]})
    spent = after.processes["me"][os.getpid()] - before.processes["me"][os.getpid()]
    assert spent >= 0.5
    # /proc/stat counts the machine by sampling each clock tick, while a process's own time is
    # its measured run time cut into user and system: on a busy virtual machine the two drift
    # apart by a few ticks (CI once saw 0.19 s of machine time for 0.21 s of this process's).
    # A tenth and two ticks of slack still catch a machine figure that misses this process.
    assert after.machine - before.machine >= spent * 0.9 - 0.02


def test_a_gone_process_reads_as_none():
    assert process_secs(2**22 + 12345) is None


def test_the_bottleneck_text_names_each_share_and_the_bound():
    cpu = {"machine": 2.5, "service": 1.4, "workers": 0.6, "postgres": 0.4, "rest": 0.1}
    text = cpu_text({**cpu, "bound": 800.0})
    assert text == (
        "the machine's CPU: 2.50 ms a task (effect service 1.40, workers 0.60, PostgreSQL 0.40, "
        "the rest 0.10), so these cores allow at most 800/s"
    )


def test_the_steady_window_spans_a_tenth_to_nine_tenths_of_the_drain():
    clock = iter(range(100))
    window = SteadyWindow(
        1000, lambda: Snapshot(machine=float(next(clock)), processes={"service": {}})
    )
    for done in (0, 50, 120, 400, 880, 930, 1000):
        window.look(done)
    # snapshots at 120 done (machine 0 s) and at 930 done (machine 1 s): 810 tasks between
    assert window.per_task_ms()["machine"] == pytest.approx(1000 / 810)


def test_a_drain_too_quick_to_see_both_marks_has_no_figure():
    window = SteadyWindow(1000, lambda: Snapshot(machine=0.0))
    window.look(0)
    window.look(1000)  # past both marks at one look: only the first snapshot is taken
    assert window.per_task_ms() is None
