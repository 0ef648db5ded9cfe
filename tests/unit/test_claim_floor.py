"""The claim floor's rules (rivet.stores.floor), on a fake clock and a recording statement."""

from __future__ import annotations

from typing import Any

from rivet.stores.floor import FRONT, ClaimFloors, Floor, claim_through_floor


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def row(task_id: int, rank_us: int | None = None) -> dict[str, Any]:
    return {"id": task_id, "rank_us": task_id * 10 if rank_us is None else rank_us}


class Queue:
    """A statement that answers from a list of rows and records what it was asked."""

    def __init__(self, *answers: list[dict[str, Any]]) -> None:
        self.answers = list(answers)
        self.asked: list[dict[str, Any]] = []

    def __call__(self, pick: dict[str, Any]) -> list[dict[str, Any]]:
        self.asked.append(pick)
        return self.answers.pop(0)


def claim(floors: ClaimFloors, statement: Queue, limit: int, seen=()) -> list[dict[str, Any]]:
    pick = {"queue": "q", "limit": limit, "seen": list(seen)}
    return claim_through_floor(floors, pick, statement, order=lambda r: (r["rank_us"], r["id"]))


def test_first_claim_reads_from_the_front_and_leaves_a_floor_at_its_first_row() -> None:
    floors = ClaimFloors(clock=Clock())
    statement = Queue([row(7), row(5), row(6)])
    claim(floors, statement, 3)
    assert statement.asked[0]["from_rank"] == FRONT["from_rank"]
    assert statement.asked[0]["from_id"] == FRONT["from_id"]
    assert floors.start("q") == Floor(rank_us=50, task_id=5, read_at=100.0)


def test_next_claim_reads_from_the_floor_written_exactly() -> None:
    floors = ClaimFloors(clock=Clock())
    statement = Queue([row(1, 1_700_000_000_123_456)], [row(2, 1_700_000_000_123_457)])
    claim(floors, statement, 1)
    claim(floors, statement, 1)
    assert statement.asked[1]["from_rank"] == "2023-11-14T22:13:20.123456+00:00"
    assert statement.asked[1]["from_id"] == "1"


def test_a_claim_that_meets_fewer_than_asked_drops_the_floor() -> None:
    floors = ClaimFloors(clock=Clock())
    statement = Queue([row(1), row(2)], [row(3)], [])
    claim(floors, statement, 2)
    assert floors.start("q") is not None
    claim(floors, statement, 2)  # from the floor: one row, then the front: none
    assert floors.start("q") is None
    assert [pick["from_rank"] for pick in statement.asked] == [
        "-infinity",
        floors_rank(1),
        "-infinity",
    ]


def floors_rank(task_id: int) -> str:
    return Floor(rank_us=task_id * 10, task_id=task_id, read_at=0).params()["from_rank"]


def test_a_short_read_from_the_floor_asks_the_front_for_the_rest_in_claim_order() -> None:
    clock = Clock()
    floors = ClaimFloors(clock=clock)
    statement = Queue([row(10), row(11)], [row(12)], [row(3)])
    claim(floors, statement, 2)
    clock.now += 0.5
    met = claim(floors, statement, 2, seen=[99])
    front = statement.asked[2]
    assert (front["from_rank"], front["limit"], front["seen"]) == ("-infinity", 1, [99, 12])
    assert [r["id"] for r in met] == [3, 12]
    # That claim read from the front: its floor's age starts again from it.
    assert floors.start("q") == Floor(rank_us=30, task_id=3, read_at=100.5)


def test_a_floor_serves_for_floor_secs_from_the_read_from_the_front_it_descends_from() -> None:
    clock = Clock()
    floors = ClaimFloors(secs=1.0, clock=clock)
    statement = Queue(*([row(n)] for n in range(1, 6)))
    claim(floors, statement, 1)  # front, at 100.0
    clock.now = 100.6
    claim(floors, statement, 1)  # floor
    clock.now = 100.99
    claim(floors, statement, 1)  # floor: its age counts from 100.0, not 100.6
    clock.now = 101.0
    claim(floors, statement, 1)  # a second old: the front
    clock.now = 101.5
    claim(floors, statement, 1)  # floor again
    froms = [pick["from_rank"] == "-infinity" for pick in statement.asked]
    assert froms == [True, False, False, True, False]


def test_floors_are_kept_a_queue_each() -> None:
    floors = ClaimFloors(clock=Clock())
    statement = Queue([row(1)], [row(2)])
    claim_through_floor(floors, {"queue": "a", "limit": 1, "seen": []}, statement, order=id)
    claim_through_floor(floors, {"queue": "b", "limit": 1, "seen": []}, statement, order=id)
    assert statement.asked[1]["from_rank"] == "-infinity"
    assert (floors.start("a").task_id, floors.start("b").task_id) == (1, 2)


def test_elapse_moves_floors_and_their_age_with_the_simulated_clock() -> None:
    clock = Clock()
    floors = ClaimFloors(secs=1.0, clock=clock)
    claim(floors, Queue([row(1, 5_000_000)]), 1)
    floors.elapse(0.25)
    assert floors.start("q") == Floor(rank_us=4_750_000, task_id=1, read_at=99.75)
    floors.elapse(1)
    assert floors.start("q") is None
