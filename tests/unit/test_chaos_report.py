"""The chaos report: the seed's layout, figures from the verdict, and the verdict itself."""

from __future__ import annotations

from chaos_project.chaos.report import report_lines, verdict_lines
from chaos_project.chaos.verifier import Figures, judge

SEED_REPORT = """\
tasks enqueued        5002
chaos events           227   (kill 71 / failpoint 101 / zombie 55)
effects written       5000
tasks done            5000
duplicate effects        0   <- S1
done without effect      0   <- S2
tasks still pending      0   <- L1
dead-lettered            2   (0 worker lost, 2 poison)
fenced acks              7   <- proof F2 fired and was handled"""


def figures(**changes: int) -> Figures:
    values = {
        "tasks_enqueued": 5002,
        "effects_written": 5000,
        "tasks_done": 5000,
        "duplicate_effects": 0,
        "done_without_effect": 0,
        "still_pending": 0,
        "dead_worker_lost": 0,
        "dead_poison": 2,
        "dead_other": 0,
        "fenced_writes": 7,
    }
    return Figures(**{**values, **changes})


CHAOS = {"kill": 71, "failpoint": 101, "zombie": 55}


def test_a_clean_run_prints_exactly_the_seed_report() -> None:
    verdict = judge(figures())
    assert verdict.ok
    assert "\n".join(report_lines(verdict, CHAOS)) == SEED_REPORT
    assert verdict_lines(verdict) == ["every invariant held: S1, S2, L1, F2, C1"]


def test_every_figure_comes_from_the_verdict() -> None:
    verdict = judge(
        figures(
            tasks_enqueued=62,
            effects_written=61,
            tasks_done=59,
            dead_poison=1,
            dead_worker_lost=2,
            fenced_writes=3,
        )
    )
    lines = report_lines(verdict, {"kill": 2, "failpoint": 0, "zombie": 4})
    assert lines[0] == "tasks enqueued          62"
    assert lines[1] == "chaos events             6   (kill 2 / failpoint 0 / zombie 4)"
    assert lines[2] == "effects written         61"
    assert lines[3] == "tasks done              59"
    assert lines[7] == "dead-lettered            3   (2 worker lost, 1 poison)"
    assert lines[8] == "fenced acks              3   <- proof F2 fired and was handled"


def test_zero_fenced_writes_fails_the_run_and_says_the_fence_was_never_tested() -> None:
    verdict = judge(figures(fenced_writes=0))
    assert not verdict.ok
    assert verdict.failed_codes() == ["F2"]
    assert "fencing token was never tested" in verdict.violations[0].message
    assert report_lines(verdict, CHAOS)[8].endswith("<- proof F2 fired and was handled   FAILED")


def test_each_broken_invariant_is_named_and_marked() -> None:
    verdict = judge(figures(duplicate_effects=1, done_without_effect=2, still_pending=3))
    assert verdict.failed_codes() == ["S1", "S2", "L1"]
    lines = report_lines(verdict, CHAOS)
    assert lines[4] == "duplicate effects        1   <- S1   FAILED"
    assert lines[5] == "done without effect      2   <- S2   FAILED"
    assert lines[6] == "tasks still pending      3   <- L1   FAILED"
    assert [line.split(":")[0] for line in verdict_lines(verdict)] == [
        "S1 FAILED",
        "S2 FAILED",
        "L1 FAILED",
    ]


def test_a_stuck_drain_says_so_in_the_l1_message() -> None:
    verdict = judge(figures(still_pending=4), drain_note="the drain gave up after 60 s")
    assert "the drain gave up after 60 s" in verdict.violations[0].message


def test_dead_tasks_of_another_cause_are_not_hidden() -> None:
    lines = report_lines(judge(figures(dead_other=1)), CHAOS)
    assert lines[7] == "dead-lettered            3   (0 worker lost, 2 poison, 1 other)"


def test_without_an_event_log_the_chaos_line_says_so() -> None:
    line = report_lines(judge(figures()), None)[1]
    assert line == "chaos events             -   (no event log: verify only)"
