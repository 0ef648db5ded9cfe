"""The claim floor on a real PostgreSQL (rivet.stores.floor): a draining worker's claim reads
from where its last one began, past the dead index entries of the tasks it settled, and finds
what became runnable ahead of that point at its next read from the front."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction

from rivet.decisions import succeeded
from rivet.stores.floor import FRONT, ClaimFloors
from rivet.stores.postgres import SETTLE_COLUMNS, PostgresStore, settle_claim_text
from tests.integration.pg_kit import spec

pytestmark = pytest.mark.django_db(transaction=True)
BATCH = 16


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store() -> Iterator[PostgresStore]:
    store = PostgresStore(using="default")
    yield store
    store.close()


@pytest.fixture
def queue() -> str:
    return f"floor-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def no_autovacuum() -> Iterator[None]:
    """The dead entries stay while the test looks at them, whatever the server's autovacuum."""
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE rivet_task SET (autovacuum_enabled = off)")
    yield
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE rivet_task RESET (autovacuum_enabled)")


def ids(batch: Any) -> list[int]:
    return [claimed.task_id for claimed in batch.claimed]


def drain(store: PostgresStore, queue: str, count: int) -> None:
    """Lease and ack ``count`` tasks as a worker does: each flush settles the last batch and
    claims the next."""
    held: list[Any] = []
    done = 0
    while done < count:
        decisions = [succeeded(claimed, None) for claimed in held]
        done += len(decisions)
        want = min(BATCH, count - done)
        flushed = store.task_settle_and_claim(
            decisions, queues=[queue], owner="w", limit=want, lease_ttl=30
        )
        held = flushed.batch.claimed
        if not want:
            break


def index_blocks(store: PostgresStore, queue: str, start: dict[str, Any]) -> int:
    """Index and heap pages the claim's scan of rivet_task_rank_idx touches, reading from
    ``start`` (EXPLAIN ANALYZE in a transaction rolled back: nothing is leased)."""
    params = {"queue": queue, "owner": "x", "ttl": 30.0, "seen": [], "channel": "c", **start}
    params |= store._common_params() | {f"{column}s": [] for column in SETTLE_COLUMNS}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + settle_claim_text(BATCH), params
        )
        (plan,) = cursor.fetchone()
        transaction.set_rollback(True)
    plan = json.loads(plan) if isinstance(plan, str) else plan
    scans = [node for node in nodes(plan[0]["Plan"]) if node.get("Index Name")]
    (scan,) = [node for node in scans if node["Index Name"] == "rivet_task_rank_idx"]
    return scan["Shared Hit Blocks"] + scan["Shared Read Blocks"]


def nodes(plan: dict) -> Iterator[dict]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def test_a_draining_worker_claims_past_the_dead_entries_it_left(
    store: PostgresStore, queue: str, no_autovacuum: None
) -> None:
    store.task_enqueue_many([spec(queue) for _ in range(3_000)])
    drain(store, queue, 2_500)
    floor = store.floors.start(queue)
    assert floor is not None, "a worker with a backlog keeps a floor"
    index_blocks(store, queue, FRONT)  # the first walk marks the dead entries it meets
    front = index_blocks(store, queue, FRONT)
    from_floor = index_blocks(store, queue, floor.params())
    # 5 000 dead entries lie at the front (two per settled task): tens of index pages. From
    # the floor the scan reads a leaf or two and the heap pages of the rows it leases.
    print(f"claim index scan: {front} pages from the front, {from_floor} from the floor")
    assert from_floor * 3 < front, (from_floor, front)
    assert from_floor < 40, from_floor


def test_a_read_from_the_floor_leases_in_claim_order(store: PostgresStore, queue: str) -> None:
    tasks = [store.task_enqueue(spec(queue)).task_id for _ in range(5 * BATCH)]
    leased: list[int] = []
    for _ in range(5):
        batch = store.task_claim(queues=[queue], owner="w", limit=BATCH, lease_ttl=30)
        leased += ids(batch)
    assert leased == tasks


def test_a_task_ranked_ahead_of_the_floor_is_leased_at_the_next_read_from_the_front(
    store: PostgresStore, queue: str
) -> None:
    clock = Clock()
    store.floors = ClaimFloors(secs=1.0, clock=clock)
    backlog = [store.task_enqueue(spec(queue)).task_id for _ in range(8)]
    assert ids(store.task_claim(queues=[queue], owner="w", limit=2, lease_ttl=30)) == backlog[:2]
    urgent = store.task_enqueue(spec(queue, priority=100)).task_id
    # Within FLOOR_SECS the claim goes on from its floor: the urgent task waits.
    assert ids(store.task_claim(queues=[queue], owner="w", limit=2, lease_ttl=30)) == backlog[2:4]
    clock.now += 1.0
    assert ids(store.task_claim(queues=[queue], owner="w", limit=2, lease_ttl=30)) == [
        urgent,
        backlog[4],
    ]


def test_a_short_read_from_the_floor_reads_the_front_for_the_rest(
    store: PostgresStore, queue: str
) -> None:
    tasks = [store.task_enqueue(spec(queue)).task_id for _ in range(4)]
    assert ids(store.task_claim(queues=[queue], owner="gone", limit=2, lease_ttl=30)) == tasks[:2]
    assert ids(store.task_claim(queues=[queue], owner="gone", limit=2, lease_ttl=30)) == tasks[2:]
    assert store.floors.start(queue).task_id == tasks[2]
    # The leases lapse: the four are runnable again, two of them ahead of the floor.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE rivet_task SET visible_at = now() - interval '1 second' WHERE queue = %s",
            [queue],
        )
    again = store.task_claim(queues=[queue], owner="w", limit=4, lease_ttl=30)
    assert ids(again) == tasks
    assert [claimed.lease.epoch for claimed in again.claimed] == [2, 2, 2, 2]
    assert store.floors.start(queue).task_id == tasks[0]


def test_reads_from_the_front_and_from_a_floor_share_one_prepared_statement(
    store: PostgresStore, queue: str
) -> None:
    """The floor's parameters keep their types whatever their values (an id of any size):
    psycopg prepares a statement again for each new set of types."""
    store.task_enqueue_many([spec(queue) for _ in range(8)])
    for _ in range(3):  # from the front, then twice from the floor
        store.task_claim(queues=[queue], owner="w", limit=2, lease_ttl=30)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements "
            "WHERE statement LIKE %s AND statement LIKE %s",
            ["%(claim_rank, id) >=%", "%LIMIT 2\n%"],
        )
        (prepared,) = cursor.fetchone()
    assert prepared == 1
