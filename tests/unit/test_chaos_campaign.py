"""The campaign's table and the run summary lines: figures from the runs, failures named."""

from __future__ import annotations

from chaos_project.chaos.campaign import table
from chaos_project.chaos.report import summary_lines


def row(seed: int, *, ok: bool = True, fenced: int = 5, unfenced: int = 0, s1: int = 0) -> dict:
    return {
        "seed": seed,
        "ok": ok,
        "failed": [] if ok else ["S1"],
        "events": {"kill": 3, "failpoint": 4, "zombie": fenced + unfenced},
        "not_carried_out": {"kill": 0, "failpoint": 0, "zombie": 0},
        "zombies": {"fenced": fenced, "unfenced": unfenced, "not bitten": 1},
        "failpoints": {"armed": 4, "reached": 4},
        "S1": s1,
        "S2": 0,
        "L1": 0,
        "F2": 9,
        "wall_secs": 30.4,
    }


def test_one_line_per_seed_then_the_totals() -> None:
    lines = table([row(1), row(2, ok=False, s1=2)])
    assert lines[0].split() == [
        "seed", "kill", "failpoint", "zombie", "fenced", "S1", "S2", "L1", "F2", "wall", "verdict"
    ]  # fmt: skip
    assert lines[2].split() == ["1", "3", "4", "5", "5/5", "0", "0", "0", "9", "30", "s", "held"]
    assert lines[3].split()[-1] == "S1"
    totals = lines[-1].split()
    assert totals[:6] == ["all", "6", "8", "10", "10/10", "2"]
    assert totals[-1] == "S1"  # the invariants some run failed


def test_a_prefetch_cycle_shows_each_seeds_prefetch() -> None:
    lines = table([row(1) | {"prefetch": 0}, row(2) | {"prefetch": "auto"}])
    assert lines[0].split()[:3] == ["seed", "prefetch", "kill"]
    assert lines[2].split()[:2] == ["1", "0"] and lines[3].split()[:2] == ["2", "auto"]


def test_a_run_that_could_not_be_carried_out_is_a_row_too() -> None:
    lines = table([{"seed": 7, "ok": False, "failed": ["error"], "wall_secs": 3.0}])
    assert lines[2].split()[0] == "7"
    assert lines[2].split()[-1] == "error"


def test_summary_lines_say_how_many_zombies_were_fenced_and_failpoints_reached() -> None:
    lines = summary_lines(row(3, fenced=4, unfenced=1))
    assert "5 bit" in lines[0] and "4 fenced, 1 not fenced" in lines[0]
    assert "1 could not be made to bite (tried again)" in lines[0]
    assert lines[1] == "failpoints: 4 workers armed, 4 reached after_effect_before_ack"
    assert len(lines) == 2  # nothing was left undone


def test_summary_lines_put_the_events_carried_out_beside_those_planned() -> None:
    summary = row(3) | {
        "planned": {"kill": 13, "failpoint": 17, "zombie": 13},
        "not_carried_out": {"kill": 1, "failpoint": 0, "zombie": 2},
    }
    lines = summary_lines(summary)
    assert lines[2] == (
        "planned events: 40 of 43 carried out (93 %): kill 12 of 13 / failpoint 17 of 17 / "
        "zombie 11 of 13"
    )
    assert lines[3].endswith("kill 1 / failpoint 0 / zombie 2")
