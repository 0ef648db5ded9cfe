"""The claim floor: where a PostgreSQL worker's next claim starts reading its queue's index.

A claim reads rivet_task_rank_idx (queue, claim_rank, id, visible_at, for pending rows) in
claim order. Each task a worker leases and then settles leaves two dead entries in it, in claim
order, so a draining backlog piles them up at the front of its queue's range, and they stay
until a VACUUM removes them: a claim that reads the queue from its front walks all of them
(index pages whose every entry is marked dead), so a big drain slows as it goes, between
autovacuum's runs too (at PostgreSQL's defaults a table is looked at once a minute). The
measurement: docs/decisions/0009-claim-floor.md.

A floor is the (claim_rank, id) of the first task a worker's last full claim met in a queue:
every entry ranked before it was dead, or a task leased or locked by another claim, when that
claim read it. The worker's next claim in that queue reads from the floor on. What can become
runnable ahead of the floor meanwhile (a task enqueued with a higher priority, a lease that
lapsed, a retry or requeue ranked early) is found by a claim that reads from the front, which
the worker makes:

- when it has no floor for the queue: its first claim, and every claim after one that met
  fewer tasks than it asked for (the queue ran dry; with no backlog, every claim reads from
  the front, exactly as with no floor);
- when its floor is older than ``FLOOR_SECS``: a floor's age counts from the claim from the
  front it descends from, so under a backlog a task ranked ahead of the floor waits at most
  that long more than it would have;
- at once, in the same flush, when a claim from the floor meets fewer tasks than it asked for
  (the rest may lie ahead of the floor).

Only the PostgreSQL store keeps floors: SQLite removes an index entry when its row changes,
and the memory store has no index.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

#: The longest a floor serves: a worker with a backlog reads its queue from the front at least
#: this often (seconds).
FLOOR_SECS = 1.0
#: The claim parameters that read a queue from its front: every (claim_rank, id) is after them.
#: Both are sent as text, whatever the value, so the statement keeps one set of parameter types
#: (a Python int goes as int2, int4 or int8 by its size: psycopg would prepare the statement
#: again for each).
FRONT: dict[str, Any] = {"from_rank": "-infinity", "from_id": "0"}
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Floor:
    """Where a claim starts: ``rank_us`` (claim_rank in microseconds since the epoch) and
    ``task_id``; ``read_at``: the clock's time of the claim from the front it descends from."""

    rank_us: int
    task_id: int
    read_at: float

    def params(self) -> dict[str, Any]:
        """The claim parameters that read from this floor on (the rank written exactly)."""
        rank = EPOCH + timedelta(microseconds=self.rank_us)
        return {"from_rank": rank.isoformat(), "from_id": str(self.task_id)}


class ClaimFloors:
    """One worker's floors, a queue each (see the module's text for when a floor serves)."""

    def __init__(
        self, secs: float = FLOOR_SECS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.secs = secs
        self.clock = clock
        self._floors: dict[str, Floor] = {}

    def start(self, queue: str) -> Floor | None:
        """The floor a claim in ``queue`` reads from, or None: read from the front."""
        floor = self._floors.get(queue)
        if floor is not None and self.clock() - floor.read_at >= self.secs:
            self._floors.pop(queue, None)
            return None
        return floor

    def met(self, queue: str, rows: Iterable[dict[str, Any]], wanted: int, read_at: float) -> None:
        """Record what a claim met (leased or doomed rows, each with ``rank_us`` and ``id``):
        with as many rows as it asked for, its first row is the next floor; with fewer, the
        queue ran dry and the next claim reads from the front. ``read_at``: the time of the
        claim from the front this one read from, or of this one if it read from the front."""
        ranks = [(row["rank_us"], row["id"]) for row in rows]
        if len(ranks) < wanted or not ranks:
            self._floors.pop(queue, None)
            return
        rank_us, task_id = min(ranks)
        self._floors[queue] = Floor(rank_us=rank_us, task_id=task_id, read_at=read_at)

    def elapse(self, secs: float) -> None:
        """Every floor as if it were ``secs`` older, with its rank: what the test suites do to
        simulate time passing (every stored timestamp, claim_rank included, moved back)."""
        shift = round(secs * 1_000_000)
        self._floors = {
            queue: Floor(floor.rank_us - shift, floor.task_id, floor.read_at - secs)
            for queue, floor in self._floors.items()
        }


def claim_through_floor(
    floors: ClaimFloors,
    pick: dict[str, Any],
    statement: Callable[[dict[str, Any]], list[dict[str, Any]]],
    order: Callable[[dict[str, Any]], Any],
) -> list[dict[str, Any]]:
    """Run one claim (``pick``: queue, limit, seen) from the queue's floor, and from the front
    for the rest when the floor's read met fewer rows than asked; the rows in claim order."""
    queue, wanted = pick["queue"], pick["limit"]
    floor = floors.start(queue)
    read_at = floors.clock()
    rows = statement({**pick, **(FRONT if floor is None else floor.params())})
    if floor is not None:
        if len(rows) < wanted:
            read_at = floors.clock()
            seen = [*pick["seen"], *(row["id"] for row in rows)]
            rest = statement({**pick, "limit": wanted - len(rows), "seen": seen, **FRONT})
            rows = sorted([*rows, *rest], key=order)
        else:
            read_at = floor.read_at
    floors.met(queue, rows, wanted, read_at)
    return rows
