"""The PostgreSQL bulk enqueue keeps the key rules on all of its paths: COPY into a staging
table then one INSERT (chunks of COPY_MIN_ROWS or more), COPY straight into rivet_task (such
chunks of plain tasks: no key, no delay, priority 0), and one INSERT over arrays (smaller).

An identical re-enqueue under a key returns the existing task as a duplicate; different work
under a used idempotency key is refused, and then nothing of the whole call is written, across
chunks too; the staging table never carries rows from one call into the next.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import replace

import pytest
from django.db import connection, transaction

from rivet.errors import IdempotencyMismatch
from rivet.stores import bulk
from rivet.stores.bulk import BulkEnqueue
from rivet.stores.postgres import PostgresStore
from tests.integration.pg_kit import on_other_connection, spec

pytestmark = pytest.mark.django_db(transaction=True)


class Rollback(Exception):
    """Raised inside transaction.atomic() to roll it back."""


@pytest.fixture(autouse=True, params=["copy", "arrays"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs through both bulk paths."""
    monkeypatch.setattr(bulk, "COPY_MIN_ROWS", 1 if request.param == "copy" else 10**9)
    return request.param


@pytest.fixture
def store() -> Iterator[PostgresStore]:
    store = PostgresStore(using="default")
    yield store
    store.close()


@pytest.fixture
def queue() -> str:
    return f"copy-{uuid.uuid4().hex[:12]}"


def test_keyed_duplicates_inside_one_batch_share_the_first_task(store, queue) -> None:
    specs = [
        spec(queue, payload={"n": 1}, idem_key=f"{queue}:a"),
        spec(queue, payload={"n": 2}),
        spec(queue, payload={"n": 1}, idem_key=f"{queue}:a"),
        spec(queue, kind="pg.unique", unique_key="u"),
        spec(queue, kind="pg.unique", payload={"other": True}, unique_key="u"),
    ]
    results = store.task_enqueue_many(specs)
    assert [r.duplicate for r in results] == [False, False, True, False, True]
    assert results[2].task_id == results[0].task_id
    assert results[4].task_id == results[3].task_id
    assert [t.id for t in store.task_list(queue=queue)] == [
        results[0].task_id,
        results[1].task_id,
        results[3].task_id,
    ]


def test_a_mismatch_inside_one_batch_writes_nothing(store, queue) -> None:
    specs = [
        spec(queue, payload={"n": 0}),
        spec(queue, payload={"n": 1}, idem_key=f"{queue}:a"),
        spec(queue, payload={"n": 2}, idem_key=f"{queue}:a"),
    ]
    with pytest.raises(IdempotencyMismatch) as refused:
        store.task_enqueue_many(specs)
    assert refused.value.idem_key == f"{queue}:a"
    assert store.task_list(queue=queue) == []


def test_keys_used_before_the_batch_are_duplicates_or_refused(store, queue) -> None:
    old = store.task_enqueue(spec(queue, payload={"n": "old"}, idem_key=f"{queue}:old"))
    pending = store.task_enqueue(spec(queue, kind="pg.unique", unique_key="nightly"))
    again = store.task_enqueue_many(
        [
            spec(queue, payload={"n": "new"}),
            spec(queue, payload={"n": "old"}, idem_key=f"{queue}:old"),
            spec(queue, kind="pg.unique", payload=3, unique_key="nightly"),
        ]
    )
    assert [(r.task_id, r.duplicate) for r in again[1:]] == [
        (old.task_id, True),
        (pending.task_id, True),
    ]
    assert again[0].duplicate is False
    before = [t.id for t in store.task_list(queue=queue)]
    with pytest.raises(IdempotencyMismatch) as refused:
        store.task_enqueue_many(
            [
                spec(queue, payload={"n": "fresh"}, idem_key=f"{queue}:fresh"),
                spec(queue, payload={"n": "changed"}, idem_key=f"{queue}:old"),
            ]
        )
    assert refused.value.existing_id == old.task_id
    assert [t.id for t in store.task_list(queue=queue)] == before
    fresh = store.task_enqueue(spec(queue, payload={"n": "fresh"}, idem_key=f"{queue}:fresh"))
    assert fresh.duplicate is False, "the key of the refused batch must be free"


def test_a_mismatch_in_a_later_chunk_undoes_the_earlier_chunks(store, queue, monkeypatch) -> None:
    monkeypatch.setattr(bulk, "BULK_CHUNK", 4)
    store.task_enqueue(spec(queue, payload="first", idem_key=f"{queue}:k"))
    specs = [spec(queue, payload=n, idem_key=f"{queue}:{n}") for n in range(9)]
    specs.append(spec(queue, payload="second", idem_key=f"{queue}:k"))
    with pytest.raises(IdempotencyMismatch):
        store.task_enqueue_many(specs)
    assert [t.payload for t in store.task_list(queue=queue)] == ["first"]


def test_chunks_keep_order_and_keys_across_their_borders(store, queue, monkeypatch) -> None:
    monkeypatch.setattr(bulk, "BULK_CHUNK", 3)
    specs = [spec(queue, payload={"n": n}, idem_key=f"{queue}:{n % 4}") for n in range(10)]
    results = store.task_enqueue_many(specs[:4])
    assert [r.duplicate for r in results] == [False] * 4
    with pytest.raises(IdempotencyMismatch):
        store.task_enqueue_many(specs)  # n=4 reuses key 0 with {"n": 4}
    same = [spec(queue, payload={"n": n}, idem_key=f"{queue}:{n}") for n in range(4)] * 2
    again = store.task_enqueue_many(same)
    assert [r.task_id for r in again] == [r.task_id for r in results] * 2
    assert all(r.duplicate for r in again)


def test_awkward_payloads_survive_the_copy(store, queue) -> None:
    payloads = [
        None,
        "tab\there, newline\nthere, backslash \\ and \\N",
        {"unicode": "ünï ✓ 🚀", "quote": '"', "nested": [1.5, True, None, {"\\": "\\\\"}]},
        12345678901234567890,
        [],
    ]
    results = store.task_enqueue_many([spec(queue, payload=p) for p in payloads])
    assert [store.task_get(r.task_id).payload for r in results] == payloads


def test_two_bulk_calls_in_one_transaction_stage_separately_and_roll_back(store, queue) -> None:
    with pytest.raises(Rollback), transaction.atomic():
        first = store.task_enqueue_many([spec(queue, payload=n) for n in range(3)])
        second = store.task_enqueue_many([spec(queue, payload=n) for n in range(3, 5)])
        assert len({r.task_id for r in first + second}) == 5
        assert [t.payload for t in store.task_list(queue=queue)] == [0, 1, 2, 3, 4]
        raise Rollback
    assert store.task_list(queue=queue) == []
    with transaction.atomic():
        kept = store.task_enqueue_many([spec(queue, payload=n) for n in range(2)])
    assert [t.id for t in store.task_list(queue=queue)] == [r.task_id for r in kept]


def test_a_refused_bulk_leaves_the_callers_transaction_usable(store, queue) -> None:
    with transaction.atomic():
        kept = store.task_enqueue(spec(queue, payload="a", idem_key=f"{queue}:a")).task_id
        with pytest.raises(IdempotencyMismatch):
            store.task_enqueue_many(
                [spec(queue, payload="b"), spec(queue, payload="x", idem_key=f"{queue}:a")]
            )
        after = store.task_enqueue_many([spec(queue, payload="c")])[0].task_id
    assert [t.id for t in store.task_list(queue=queue)] == [kept, after]


def test_a_single_enqueue_outside_a_transaction_commits_at_once(store, queue) -> None:
    """The one-round-trip enqueue: committed when it returns, seen by another connection."""
    task_id = store.task_enqueue(spec(queue, idem_key=f"{queue}:now")).task_id
    seen = on_other_connection(lambda: store.task_get(task_id))
    assert seen is not None and seen.state == "pending"
    again = on_other_connection(lambda: store.task_enqueue(spec(queue, idem_key=f"{queue}:now")))
    assert (again.task_id, again.duplicate) == (task_id, True)


def test_each_row_gets_its_claim_rank(store, queue) -> None:
    """claim_rank = visible_at - priority x PRIORITY_AGING_SECS (60 s), on both paths."""
    from datetime import UTC, datetime

    from django.db import connection

    when = datetime(2030, 1, 1, tzinfo=UTC)
    specs = [
        spec(queue, payload={"n": 1}, priority=3),
        spec(queue, payload={"n": 2}, priority=-100, delay=5),
        spec(queue, payload={"n": 3}, priority=100, run_at=when),
    ]
    ids = [result.task_id for result in store.task_enqueue_many(specs)]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM visible_at - claim_rank)::float8 FROM rivet_task "
            "WHERE id = ANY(%s) ORDER BY id",
            [ids],
        )
        assert [row[0] for row in cursor.fetchall()] == [180.0, -6000.0, 6000.0]
    assert store.task_get(ids[2]).visible_at == when


#: The row as the table holds it, every column an enqueue decides or defaults.
ROW = """
SELECT id, state, attempts, lease_epoch, lease_owner, priority, max_attempts, last_error,
    errors = '[]' AS no_errors, cancel_requested, result IS NULL AS no_result,
    trace_context IS NULL AS untraced, (payload->>'n')::integer AS n,
    visible_at = created_at AND claim_rank = created_at AND updated_at = created_at AS one_time,
    created_at <= now() + interval '1 second' AS from_the_server
FROM rivet_task WHERE queue = %s ORDER BY id
"""


def rows(queue: str) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(ROW, [queue])
        return cursor.fetchall()


@pytest.fixture
def direct(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many tasks each chunk copied straight into rivet_task, in order."""
    sizes: list[int] = []
    copy_direct = BulkEnqueue._copy_direct

    def counted(self, cursor, ids, stream):
        written, rest = copy_direct(self, cursor, ids, stream)
        sizes.append(written)
        return written, rest

    monkeypatch.setattr(BulkEnqueue, "_copy_direct", counted)
    return sizes


def test_plain_tasks_are_written_as_the_single_enqueue_writes_them(
    store, queue, path, direct
) -> None:
    single = store.task_enqueue(spec(queue, payload={"n": -1}, max_attempts=5))
    results = store.task_enqueue_many(
        [spec(queue, payload={"n": n}, max_attempts=5) for n in range(3)]
    )
    assert direct == ([3] if path == "copy" else [])
    ids = [r.task_id for r in results]
    assert ids == sorted(ids) and min(ids) > single.task_id
    assert not any(r.duplicate for r in results)
    written = rows(queue)
    assert [row[0] for row in written] == [single.task_id, *ids]
    assert [row[-3] for row in written] == list(range(-1, 3))
    expected = ("pending", 0, 0, None, 0, 5, "", True, False, True, True)
    assert {row[1:12] for row in written} == {expected}
    assert all(row[-2] and row[-1] for row in written), written


def test_from_the_first_task_that_is_not_plain_the_chunk_goes_through_the_stage(
    store, queue, path, direct
) -> None:
    plain = [spec(queue, payload=n) for n in range(3)]
    for odd in (
        spec(queue, payload="later", delay=60),
        spec(queue, payload="urgent", priority=5),
        spec(queue, payload="keyed", idem_key=f"{queue}:k"),
        spec(queue, kind="pg.unique", payload="one", unique_key="u"),
    ):
        results = store.task_enqueue_many([*plain, odd, *plain])
        assert [r.task_id for r in results] == sorted(r.task_id for r in results)
    assert direct == ([3, 3, 3, 3] if path == "copy" else [])
    assert len(store.task_list(queue=queue)) == 4 * 7
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT payload #>> '{}', visible_at - created_at, created_at - claim_rank, "
            "idem_key, unique_key FROM rivet_task "
            "WHERE queue = %s AND jsonb_typeof(payload) = 'string'",
            [queue],
        )
        odd_rows = {row[0]: row[1:] for row in cursor.fetchall()}
    later, urgent = odd_rows["later"], odd_rows["urgent"]
    assert later[0].total_seconds() == pytest.approx(60) and later[1].total_seconds() < -59
    assert urgent[0].total_seconds() == 0 and urgent[1].total_seconds() > 0
    assert odd_rows["keyed"][2] == f"{queue}:k" and odd_rows["one"][3] == "u"


@pytest.mark.parametrize("commit", [True, False])
def test_a_copied_chunk_wakes_listeners_when_it_commits(store, queue, direct, commit) -> None:
    assert store.wait_for_work([queue], 0) is False  # starts listening
    with nullcontext() if commit else pytest.raises(Rollback), transaction.atomic():
        store.task_enqueue_many([spec(queue, payload=n) for n in range(3)])
        store.task_enqueue_many([spec(f"{queue}-b", payload=n) for n in range(3)])
        assert store.wait_for_work([queue], 0.3) is False, "woken before the commit"
        if not commit:
            raise Rollback
    assert store.wait_for_work([queue], 60.0 if commit else 0.3) is commit
    assert len(store.task_list(queue=queue)) == (3 if commit else 0)


def test_a_trace_context_survives_every_path(store, queue, path, direct) -> None:
    context = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    traced = [replace(spec(queue, payload=n), trace_context=context) for n in range(3)]
    results = store.task_enqueue_many(traced)
    assert direct == ([3] if path == "copy" else [])
    assert [store.task_get(r.task_id).trace_context for r in results] == [context] * 3
