"""T1 and T2 of the chaos verifier: every due tick one task, from the schedules' own history."""

from __future__ import annotations

from datetime import UTC, datetime

from chaos_project.chaos.report import report_lines, run_summary, verdict_lines
from chaos_project.chaos.ticks import EVERY_SECOND, Window, count_ticks, window_end
from chaos_project.chaos.verifier import Figures, judge

SINCE = datetime(2026, 12, 1, 22, 0, 0, 400_000, tzinfo=UTC)  # made at 22:00:00.4
UNTIL = datetime(2026, 12, 1, 22, 0, 5, 700_000, tzinfo=UTC)  # the chaos ended at 22:00:05.7


def window(name: str = "s0", *, timezone: str = "UTC", until: datetime | None = UNTIL) -> Window:
    return Window(name=name, cron=EVERY_SECOND, timezone=timezone, since=SINCE, until=until)


def at(second: int, micro: int = 0) -> datetime:
    return datetime(2026, 12, 1, 22, 0, second, micro, tzinfo=UTC)


def fired(name: str, seconds: list[int], first_id: int = 1) -> list[tuple[str, datetime, int]]:
    return [(name, at(s), first_id + n) for n, s in enumerate(seconds)]


def test_every_due_tick_once_holds_both() -> None:
    figures = count_ticks([window()], fired("s0", [1, 2, 3, 4, 5]))
    assert (figures.due, figures.fired_twice, figures.not_due, figures.missing) == (5, 0, 0, 0)
    assert figures.tick_tasks == 5


def test_the_window_is_after_since_and_up_to_until_inclusive() -> None:
    # Made at 22:00:00.4: 22:00:00 was never owed; the chaos ended at 22:00:05.7: 05 is owed,
    # 06 is not (its task, enqueued before the schedules were disabled, is allowed).
    assert count_ticks([window()], []).due == 5
    exact = window(until=at(5))
    assert count_ticks([exact], fired("s0", [1, 2, 3, 4])).missing == 1
    late = count_ticks([window()], fired("s0", [1, 2, 3, 4, 5, 6]))
    assert (late.missing, late.not_due, late.fired_twice) == (0, 0, 0)


def test_a_tick_with_two_tasks_fails_t1_naming_it() -> None:
    figures = count_ticks([window()], fired("s0", [1, 2, 3, 3, 4, 5]))
    assert figures.fired_twice == 1 and figures.missing == 0
    assert figures.t1_samples == ("s0 tick 22:00:03 fired 2 times (tasks 3, 4)",)


def test_one_instant_in_two_spellings_is_one_tick() -> None:
    # The identity is the instant: 23:00:03+01:00 and 22:00:03Z are the same tick.
    berlin = datetime.fromisoformat("2026-12-01T23:00:03+01:00")
    tasks = [*fired("s0", [1, 2, 3, 4, 5]), ("s0", berlin, 9)]
    assert count_ticks([window(timezone="Europe/Berlin")], tasks).fired_twice == 1


def test_a_missing_due_tick_fails_t2_naming_it() -> None:
    figures = count_ticks(
        [window(), window("s1")], [*fired("s0", [1, 2, 4, 5]), *fired("s1", [1, 2, 3, 4, 5], 10)]
    )
    assert (figures.due, figures.missing, figures.fired_twice) == (10, 1, 0)
    assert figures.t2_samples == ("s0 tick 22:00:03 has no task",)


def test_a_tick_never_due_fails_t1() -> None:
    before = ("s0", at(0), 7)  # at or before since
    between = ("s0", at(3, 500_000), 8)  # not a tick of the expression
    stranger = ("nobody", at(3), 9)  # of no chaos schedule
    tasks = [*fired("s0", [1, 2, 3, 4, 5]), before, between, stranger]
    figures = count_ticks([window()], tasks)
    assert (figures.not_due, figures.fired_twice, figures.missing) == (3, 0, 0)


def test_no_end_owes_nothing_but_still_counts_duplicates() -> None:
    figures = count_ticks([window(until=None)], fired("s0", [1, 1]))
    assert (figures.due, figures.missing, figures.fired_twice) == (0, 0, 1)


def test_the_window_end_comes_from_the_event_log() -> None:
    records = [{"event": "kill"}, {"event": "schedules_window", "until": UNTIL.isoformat()}]
    assert window_end(records) == UNTIL
    assert window_end([{"event": "kill"}]) is None


def figures() -> Figures:
    return Figures(
        tasks_enqueued=10,
        effects_written=5,
        tasks_done=10,
        duplicate_effects=0,
        done_without_effect=0,
        still_pending=0,
        dead_worker_lost=0,
        dead_poison=0,
        dead_other=0,
        fenced_writes=3,
    )


def test_the_verdict_and_report_carry_t1_and_t2_only_with_schedules() -> None:
    plain = judge(figures())
    assert verdict_lines(plain) == ["every invariant held: S1, S2, L1, F2, C1"]
    assert not any("T1" in text for text in report_lines(plain, None))

    held = judge(figures(), ticks=count_ticks([window()], fired("s0", [1, 2, 3, 4, 5])))
    assert verdict_lines(held) == ["every invariant held: S1, S2, L1, F2, C1, T1, T2"]
    lines = report_lines(held, None)
    assert "ticks fired twice        0   <- T1" in lines
    assert "due ticks missing        0   <- T2" in lines

    broken = judge(figures(), ticks=count_ticks([window()], fired("s0", [1, 1, 2, 4, 5])))
    assert broken.failed_codes() == ["T1", "T2"]
    lines = report_lines(broken, None)
    assert "ticks fired twice        1   <- T1   FAILED" in lines
    assert "due ticks missing        1   <- T2   FAILED" in lines
    assert verdict_lines(broken)[0].startswith("T1 FAILED: 1 tick(s) fired more than once")


def test_the_summary_has_t1_and_t2_only_with_schedules() -> None:
    class Outcome:
        not_carried_out: dict[str, int] = {}
        zombies: list = []

        def zombie_counts(self) -> dict[str, int]:
            return {}

    def summary(verdict):
        return run_summary(
            seed=1, verdict=verdict, chaos={}, outcome=Outcome(), armed=(0, 0), wall_secs=1.0
        )

    assert "T1" not in summary(judge(figures()))
    ticks = count_ticks([window()], fired("s0", [1, 2, 2, 4, 5]))
    row = summary(judge(figures(), ticks=ticks))
    assert (row["T1"], row["T2"], row["failed"]) == (1, 1, ["T1", "T2"])
    assert row["schedules"]["due"] == 5
