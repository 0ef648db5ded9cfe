"""The chaos run's seeded plan: one seed, one plan, so a failed run can be repeated."""

from __future__ import annotations

import pytest

from chaos_project.chaos.plan import KINDS, WORK_MS, ZOMBIE, ZOMBIE_LEASES, make_plan

ARGS = {"tasks": 200, "workers": 4, "duration": 15.0, "lease_ttl": 2.0}


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


def test_a_zombie_is_stopped_for_longer_than_its_lease() -> None:
    plan = make_plan(11, **{**ARGS, "duration": 60.0})
    zombies = [event for event in plan.events if event.kind == ZOMBIE]
    assert zombies
    low, high = (ARGS["lease_ttl"] * factor for factor in ZOMBIE_LEASES)
    assert all(low <= z.stop_secs <= high for z in zombies)
    assert min(z.stop_secs for z in zombies) > ARGS["lease_ttl"]


def test_every_task_gets_its_own_work_and_release_time() -> None:
    plan = make_plan(9, **ARGS)
    assert len(plan.work_ms) == ARGS["tasks"]
    assert all(WORK_MS[0] <= ms <= WORK_MS[1] for ms in plan.work_ms)
    releases = [plan.release_at(n) for n in range(ARGS["tasks"])]
    assert releases == sorted(releases)
    assert releases[0] == 0 and releases[-1] < ARGS["duration"]
