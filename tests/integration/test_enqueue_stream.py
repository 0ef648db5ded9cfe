"""enqueue_many on PostgreSQL streams the batch: the COPY takes the first tasks while the producer
validates the rest (rivet.producer.SpecBatch read by rivet.stores.bulk), and an item refused
anywhere in the batch, in any chunk, still writes nothing and leaves the caller's transaction
usable.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from django.db import connection, transaction

import rivet
from rivet.errors import BatchKeyClash, InvalidInput
from rivet.models import Task
from rivet.stores import bulk
from tests.integration.pg_kit import on_other_connection

pytestmark = pytest.mark.django_db(transaction=True)

PAD = "x" * 200


@pytest.fixture
def queue() -> str:
    return f"stream-{uuid.uuid4().hex[:12]}"


def items(queue: str, count: int) -> list[dict[str, Any]]:
    return [{"kind": "noop", "queue": queue, "payload": {"n": n, "pad": PAD}} for n in range(count)]


def copied_rows() -> int:
    """Rows a COPY into rivet_task has taken so far, seen from another connection; waits up to
    10 s for the first (0: no COPY took any)."""

    def look() -> int:
        deadline = time.monotonic() + 10
        while True:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT coalesce(max(tuples_processed), 0) FROM pg_stat_progress_copy "
                    "WHERE relid = 'rivet_task'::regclass"
                )
                (rows,) = cursor.fetchone()
            if rows or time.monotonic() > deadline:
                return rows
            time.sleep(0.01)

    return on_other_connection(look)


class Probe(Mapping):
    """An enqueue_many item that, when the producer first reads it, notes how many rows the
    COPY had already taken."""

    def __init__(self, item: dict[str, Any], seen: list[int]) -> None:
        self._item, self._seen = item, seen

    def __iter__(self) -> Iterator[str]:
        if not self._seen:
            self._seen.append(copied_rows())
        return iter(self._item)

    def __getitem__(self, key: str) -> Any:
        return self._item[key]

    def __len__(self) -> int:
        return len(self._item)


def test_the_server_takes_the_first_rows_while_later_items_are_still_unread(queue):
    batch: list[Any] = items(queue, 5000)
    seen: list[int] = []
    batch[4000] = Probe(batch[4000], seen)
    results = rivet.enqueue_many(batch)
    assert seen and seen[0] > 0, "no row reached rivet_task before item 4000 was validated"
    ids = [r.task_id for r in results]
    assert ids == sorted(ids) and len(set(ids)) == 5000
    stored = Task.objects.filter(queue=queue).order_by("id")
    assert [t.payload["n"] for t in stored] == list(range(5000))


@pytest.mark.parametrize("outer", [False, True], ids=["alone", "in-atomic"])
def test_a_bad_item_late_in_a_later_chunk_writes_nothing(queue, monkeypatch, outer):
    monkeypatch.setattr(bulk, "BULK_CHUNK", 300)  # four chunks; the bad item is in the last
    batch: list[Any] = items(queue, 1000)
    batch[950] = {"kind": "noop", "queue": queue, "priority": 500}
    with transaction.atomic() if outer else _nothing():
        with pytest.raises(InvalidInput, match="item 950: priority"):
            rivet.enqueue_many(batch)
        with connection.cursor() as cursor:  # the caller's transaction is still usable
            cursor.execute("SELECT count(*) FROM rivet_task WHERE queue = %s", [queue])
            assert cursor.fetchone() == (0,)
    assert not Task.objects.filter(queue=queue).exists()
    assert len(rivet.enqueue_many(items(queue, 1000))) == 1000  # the next batch goes in whole


def test_a_key_clash_after_the_copy_turned_to_the_stage_writes_nothing(queue):
    batch: list[Any] = items(queue, 600)
    batch[100] = {**batch[100], "idem_key": f"{queue}-k"}  # from here on: the staging table
    batch[500] = {**batch[500], "idem_key": f"{queue}-k"}  # same key, other payload
    with pytest.raises(BatchKeyClash, match=f"item 500: idem_key '{queue}-k' is also the key of"):
        rivet.enqueue_many(batch)
    assert not Task.objects.filter(queue=queue).exists()


def test_a_plain_prefix_then_keyed_tasks_keep_their_order_and_keys(queue):
    batch: list[Any] = items(queue, 600)
    for n in range(300, 600):
        batch[n] = {**batch[n], "idem_key": f"{queue}-{n}"}
    first = rivet.enqueue_many(batch)
    again = rivet.enqueue_many(batch)  # the keyed half returns the same tasks as duplicates
    assert [r.duplicate for r in again] == [False] * 300 + [True] * 300
    assert [r.task_id for r in again[300:]] == [r.task_id for r in first[300:]]
    stored = Task.objects.filter(queue=queue).order_by("id")
    assert [t.payload["n"] for t in stored] == [*range(600), *range(300)]


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
