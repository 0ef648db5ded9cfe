"""The chaos run's seeded plan: one seed, one plan, so a failed run can be repeated."""

from __future__ import annotations

import pytest

from chaos_project.chaos.plan import (
    DOOMED,
    FLAKY,
    KINDS,
    ONE_SHOT,
    PAUSE_POINTS,
    PERMANENT,
    WORK_MS,
    ZOMBIE,
    design,
    designed_fields,
    make_plan,
)
from rivet import failpoints

ARGS = {"tasks": 200, "workers": 4, "duration": 15.0}


def test_the_same_seed_gives_the_same_plan() -> None:
    assert make_plan(7, **ARGS) == make_plan(7, **ARGS)


@pytest.mark.parametrize("other", [8, 70, 12345])
def test_another_seed_gives_another_plan(other: int) -> None:
    first, second = make_plan(7, **ARGS), make_plan(other, **ARGS)
    assert first.events != second.events
    assert first.work_ms != second.work_ms


def test_events_fall_inside_the_run_in_order_and_name_real_slots() -> None:
    plan = make_plan(3, **ARGS)
    times = [event.at for event in plan.events]
    assert times == sorted(times)
    assert all(0 <= at < ARGS["duration"] for at in times)
    assert {event.kind for event in plan.events} <= set(KINDS)
    assert all(0 <= event.slot < ARGS["workers"] for event in plan.events)


@pytest.mark.parametrize("seed", range(1, 41))
def test_a_default_length_run_plans_every_kind_of_chaos(seed: int) -> None:
    counts = make_plan(seed, **ARGS).counts()
    assert all(count > 0 for count in counts.values()), counts


def test_the_quick_run_plans_at_least_thirty_events_and_the_default_run_hundreds() -> None:
    assert all(len(make_plan(seed, **ARGS).events) >= 30 for seed in range(1, 31))
    default = {"tasks": 5000, "workers": 4, "duration": 60.0}
    assert all(len(make_plan(seed, **default).events) >= 120 for seed in range(1, 21))


def test_every_task_gets_its_own_work() -> None:
    plan = make_plan(9, **ARGS)
    assert len(plan.work_ms) == ARGS["tasks"]
    assert all(WORK_MS[0] <= ms <= WORK_MS[1] for ms in plan.work_ms)


def test_two_zombies_in_three_pause_in_turn_at_each_pause_point() -> None:
    plan = make_plan(5, tasks=100, workers=4, duration=60.0)
    zombies = [e for e in plan.events if e.kind == ZOMBIE]
    paused = [e.pause_point for e in zombies if e.pause]
    assert [e.pause for e in zombies][:6] == [False, True, True, False, True, True]
    assert paused[: len(PAUSE_POINTS)] == list(PAUSE_POINTS)
    assert set(paused) == set(PAUSE_POINTS)
    assert all(point in failpoints.POINTS for point in paused)


def test_every_twenty_tasks_hold_each_design_and_the_designs_fail_as_they_say() -> None:
    designs = [design(n) for n in range(20)]
    assert designs.count(FLAKY) == 2 and designs.count(ONE_SHOT) == 2
    assert designs.count(PERMANENT) == 3 and designs.count(DOOMED) == 1
    assert designed_fields(1, 10) == ({"fail_attempts": 2}, 10)
    assert designed_fields(3, 10) == ({"permanent_at": 1, "fail_attempts": 3}, 3)
    assert designed_fields(7, 10) == ({"fail_attempts": 2}, 2)  # fails every attempt it has
    assert designed_fields(5, 10) == ({}, 1)
    assert designed_fields(0, 10) == ({}, 10)
    assert design(21) == design(1)
