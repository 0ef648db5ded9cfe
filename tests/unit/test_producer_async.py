"""The awaitable producer API (aenqueue, aenqueue_many, aget_task, acancel) mirrors the sync one.

Each test is the twin of a test of tests/unit/test_producer_enqueue.py or
test_producer_public.py: same call, awaited, same result or error, nothing written on a refusal.
"""

import asyncio
import inspect
import threading
from datetime import UTC, datetime

import pytest

import rivet
import rivet.testing
from rivet import producer as api
from rivet.errors import BatchKeyClash, IdempotencyMismatch, InvalidInput, UnknownKind
from rivet.jobs import registry
from rivet.stores.memory import FakeClock, MemoryStore
from rivet.values import CancelOutcome, EnqueueResult, TaskRecord


@pytest.fixture(autouse=True)
def _kinds(registered_kinds):
    registered_kinds("a", "b", "c", "k", "fresh")


@pytest.fixture
def store():
    return MemoryStore(clock=FakeClock())


@pytest.fixture
def register():
    names = []

    def _register(name, **options):
        names.append(name)
        return rivet.job(name, **options)(lambda context: None)

    yield _register
    for name in names:
        registry.unregister(name)


def run(awaitable):
    return asyncio.run(_awaited(awaitable))


async def _awaited(awaitable):
    return await awaitable


@pytest.mark.parametrize(
    ("twin", "sync"),
    [
        (api.aenqueue, api.enqueue),
        (api.aenqueue_many, api.enqueue_many),
        (api.aget_task, api.get_task),
        (api.acancel, api.cancel),
        (rivet.jobs.JobDefinition.aenqueue, rivet.jobs.JobDefinition.enqueue),
    ],
    ids=lambda f: f.__qualname__,
)
def test_each_twin_takes_the_arguments_of_its_sync_api(twin, sync):
    assert inspect.iscoroutinefunction(twin)
    ours, theirs = inspect.signature(twin), inspect.signature(sync)
    assert list(ours.parameters.values()) == list(theirs.parameters.values())
    assert ours.return_annotation == theirs.return_annotation


def test_the_twins_are_public_names_of_rivet():
    assert {"aenqueue", "aenqueue_many", "aget_task", "acancel"} <= set(rivet.__all__)
    assert rivet.aenqueue is api.aenqueue and rivet.acancel is api.acancel


def test_a_registered_job_supplies_queue_attempts_and_priority(store, register):
    register("mail.send", queue="mail", max_attempts=7, priority=5)
    result = run(rivet.aenqueue("mail.send", {"to": "x"}, using=store))
    task = store.task_get(result.task_id)
    assert (task.queue, task.max_attempts, task.priority) == ("mail", 7, 5)
    assert task.payload == {"to": "x"}


def test_the_job_handle_aenqueues_through_the_api(store, register):
    send = register("mail.handle", queue="mail")
    result = run(send.aenqueue({"n": 1}, priority=2, using=store))
    task = store.task_get(result.task_id)
    assert (task.kind, task.queue, task.priority) == ("mail.handle", "mail", 2)


@pytest.mark.parametrize(
    "options",
    [
        {"queue": "has space"},
        {"priority": 101},
        {"max_attempts": 0},
        {"delay": -1},
        {"run_at": datetime(2030, 1, 1)},
        {"idem_key": ""},
        {"delay": 5, "run_at": datetime(2030, 1, 1, tzinfo=UTC)},
    ],
    ids=lambda options: ",".join(options),
)
def test_bad_input_raises_and_writes_nothing(store, options):
    with pytest.raises(InvalidInput):
        run(rivet.aenqueue("k", {"ok": True}, using=store, **options))
    assert store.task_list() == []


def test_an_unregistered_kind_is_refused_naming_the_kind(store):
    with pytest.raises(UnknownKind, match="'nobody'"):
        run(rivet.aenqueue("nobody", using=store))
    assert store.task_list() == []


def test_a_key_used_before_is_a_duplicate_and_a_key_for_other_work_is_refused(store):
    first = run(rivet.aenqueue("k", {"n": 1}, idem_key="pay-1", using=store))
    again = run(rivet.aenqueue("k", {"n": 1}, idem_key="pay-1", using=store))
    assert again == EnqueueResult(task_id=first.task_id, duplicate=True)
    with pytest.raises(IdempotencyMismatch, match="pay-1"):
        run(rivet.aenqueue("k", {"n": 2}, idem_key="pay-1", using=store))
    assert len(store.task_list()) == 1


def test_using_an_alias_asks_the_store_factory(monkeypatch, store):
    asked = []
    monkeypatch.setattr("rivet.stores.store_for_alias", lambda alias: asked.append(alias) or store)
    run(rivet.aenqueue("k", using="replica"))
    assert asked == ["replica"]
    with pytest.raises(InvalidInput, match="alias or a rivet Store"):
        run(rivet.aenqueue("k", using=42))


def test_aenqueue_many_takes_dicts_and_tuples_in_order(store):
    results = run(
        rivet.aenqueue_many(
            [("a", {"n": 1}), {"kind": "b", "queue": "other", "priority": 3}, ("c",)],
            using=store,
        )
    )
    tasks = [store.task_get(r.task_id) for r in results]
    assert [(t.kind, t.queue, t.priority) for t in tasks] == [
        ("a", "default", 0),
        ("b", "other", 3),
        ("c", "default", 0),
    ]
    assert run(rivet.aenqueue_many([], using=store)) == []


def test_aenqueue_many_validates_every_item_and_is_all_or_nothing(store):
    with pytest.raises(InvalidInput, match="item 1"):
        run(rivet.aenqueue_many([("a", 1), {"kind": "b", "colour": "red"}], using=store))
    with pytest.raises(UnknownKind, match="^item 2: unknown job kind 'nobody'"):
        run(rivet.aenqueue_many([("a", 1), ("b", 2), ("nobody", 3)], using=store))
    with pytest.raises(BatchKeyClash, match="item 1: idem_key 'k' is also the key of item 0"):
        run(
            rivet.aenqueue_many(
                [
                    {"kind": "a", "payload": 1, "idem_key": "k"},
                    {"kind": "a", "payload": 2, "idem_key": "k"},
                ],
                using=store,
            )
        )
    assert store.task_list() == []
    run(rivet.aenqueue("a", 1, idem_key="taken", using=store))
    with pytest.raises(IdempotencyMismatch):
        run(
            rivet.aenqueue_many(
                [("fresh", 1), {"kind": "a", "payload": 2, "idem_key": "taken"}], using=store
            )
        )
    assert [t.kind for t in store.task_list()] == ["a"]


def test_aget_task_reads_back_a_task_and_none_for_an_unknown_id(store):
    made = run(rivet.aenqueue("k", {"n": 1}, max_attempts=1, using=store))
    record = run(rivet.aget_task(made.task_id, using=store))
    assert isinstance(record, TaskRecord)
    assert (record.state, record.attempts, record.payload) == ("pending", 0, {"n": 1})
    assert run(rivet.aget_task(made.task_id + 1, using=store)) is None


@pytest.mark.parametrize("bad", ["1", 1.0, True, None])
def test_aget_task_and_acancel_refuse_an_id_that_is_not_an_integer(store, bad):
    with pytest.raises(InvalidInput, match="task_id must be an integer"):
        run(rivet.aget_task(bad, using=store))
    with pytest.raises(InvalidInput, match="task_id must be an integer"):
        run(rivet.acancel(bad, using=store))


def test_acancel_buries_a_pending_task_marks_a_leased_one_and_knows_the_rest(store):
    pending = run(rivet.aenqueue("k", 1, using=store)).task_id
    leased = run(rivet.aenqueue("k", 2, using=store)).task_id
    store.task_claim(queues=["default"], owner="w", limit=1, lease_ttl=60)
    first, second = sorted([pending, leased])
    assert run(rivet.acancel(second, using=store)) is CancelOutcome.CANCELLED
    assert run(rivet.acancel(first, using=store)) is CancelOutcome.MARKED
    assert run(rivet.acancel(second, using=store)) is CancelOutcome.FINISHED
    assert run(rivet.acancel(10_000, using=store)) is CancelOutcome.NOT_FOUND
    assert store.task_get(second).state == "dead"


def test_aenqueue_is_recorded_by_the_testing_fake():
    with rivet.testing.fake() as queue:
        run(rivet.aenqueue("k", {"n": 1}))
    queue.assert_enqueued("k", times=1, payload={"n": 1})


def test_many_aenqueues_from_one_loop_never_block_it(store):
    ticks = 0
    calls = threading.Event()

    async def ticker():
        nonlocal ticks
        while not calls.is_set():
            ticks += 1
            await asyncio.sleep(0)

    async def main():
        beat = asyncio.ensure_future(ticker())
        results = await asyncio.gather(*(rivet.aenqueue("k", n, using=store) for n in range(50)))
        calls.set()
        await beat
        return results

    results = run(main())
    assert len({r.task_id for r in results}) == 50
    assert ticks > 0  # the loop went on while the enqueues ran on the sync thread


def test_aget_task_and_acancel_with_the_key_act_only_on_the_task_enqueued_with_it(store):
    keyed = run(rivet.aenqueue("k", {"n": 1}, idem_key="order-7", using=store))
    plain = run(rivet.aenqueue("k", {"n": 2}, using=store))
    assert run(rivet.aget_task(keyed.task_id, idem_key="order-7", using=store)).payload == {"n": 1}
    assert run(rivet.aget_task(keyed.task_id, idem_key="order-8", using=store)) is None
    assert run(rivet.aget_task(plain.task_id, idem_key="order-7", using=store)) is None
    assert run(rivet.acancel(keyed.task_id, idem_key="order-8", using=store)) is (
        CancelOutcome.NOT_FOUND
    )
    assert store.task_get(keyed.task_id).state == "pending"
    assert run(rivet.acancel(keyed.task_id, idem_key="order-7", using=store)) is (
        CancelOutcome.CANCELLED
    )
    assert store.task_get(keyed.task_id).state == "dead"


def test_an_async_jobs_unique_key_and_defaults_apply_to_its_enqueues(store):
    @rivet.job("search.areindex", queue="search", priority=4, unique=lambda p: str(p["id"]))
    async def areindex(context):
        return None

    try:
        first = run(areindex.aenqueue({"id": 42}, using=store))
        again = run(rivet.aenqueue("search.areindex", {"id": 42}, using=store))
        other = areindex.enqueue({"id": 43}, using=store)
        assert again == EnqueueResult(task_id=first.task_id, duplicate=True)
        assert not other.duplicate
        task = store.task_get(first.task_id)
        assert (task.queue, task.priority) == ("search", 4)
    finally:
        registry.unregister("search.areindex")
