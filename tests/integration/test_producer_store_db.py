"""rivet.enqueue on the real databases: transactions, bulk atomicity and unique jobs.

Parametrized over the Django aliases of the SQL stores: ``default`` (PostgreSQL) and ``sqlite``.
"""

import threading

import pytest
from django.db import IntegrityError, connections, transaction

import rivet
from rivet.decisions import failed
from rivet.jobs import registry
from rivet.models import Task
from rivet.stores import store_for_alias

pytestmark = pytest.mark.django_db(databases=["default", "sqlite"], transaction=True)

ALIASES = [pytest.param("default", id="postgres"), pytest.param("sqlite", id="sqlite")]


@pytest.fixture(autouse=True)
def _kinds(registered_kinds):
    registered_kinds("a", "b", "fresh", "db.readback")


@pytest.fixture(params=ALIASES)
def alias(request):
    return request.param


@pytest.fixture
def store(alias):
    store = store_for_alias(alias)
    yield store
    store.close()


@pytest.fixture
def rebuild_job():
    rivet.job("db.search.rebuild", unique=lambda payload: "")(lambda context: None)
    rivet.job("db.per_user", unique=lambda payload: f"user:{payload['user']}")(lambda c: None)
    yield
    registry.unregister("db.search.rebuild")
    registry.unregister("db.per_user")


def tasks(alias, **filters):
    return list(Task.objects.using(alias).filter(**filters).order_by("id"))


def claim_one(store):
    (claimed,) = store.task_claim(queues=["default"], owner="w1", limit=1, lease_ttl=600).claimed
    return claimed


def test_the_postgres_store_joins_the_callers_transaction():
    assert store_for_alias("default").joins_django_transaction


def test_an_enqueue_rolls_back_with_the_callers_transaction(alias, store):
    if not store.joins_django_transaction:
        pytest.fail(f"the {store.name} store should join Django's transaction")
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        rivet.enqueue("noop", {"order": 1}, using=alias)
        raise RuntimeError("the business write failed")
    assert tasks(alias) == []
    with transaction.atomic(using=alias):
        result = rivet.enqueue("noop", {"order": 2}, using=alias)
    assert [t.id for t in tasks(alias)] == [result.task_id]


def test_enqueue_many_writes_all_in_one_transaction(alias):
    results = rivet.enqueue_many(
        [("a", 1), {"kind": "b", "payload": 2, "priority": 4}], using=alias
    )
    rows = tasks(alias)
    assert [(t.id, t.kind, t.payload, t.priority) for t in rows] == [
        (results[0].task_id, "a", 1, 0),
        (results[1].task_id, "b", 2, 4),
    ]


def test_enqueue_many_writes_nothing_when_one_key_clashes(alias):
    rivet.enqueue("a", 1, idem_key="taken", using=alias)
    with pytest.raises(rivet.IdempotencyMismatch, match="taken"):
        rivet.enqueue_many(
            [("fresh", 1), {"kind": "a", "payload": 2, "idem_key": "taken"}], using=alias
        )
    assert [t.kind for t in tasks(alias)] == ["a"]


@pytest.mark.usefixtures("rebuild_job")
class TestUniqueJobsOnTheDatabase:
    def test_one_pending_task_per_kind(self, alias):
        first = rivet.enqueue("db.search.rebuild", {"why": "a"}, using=alias)
        second = rivet.enqueue("db.search.rebuild", {"why": "b"}, using=alias)
        assert second.duplicate and second.task_id == first.task_id
        assert [(t.kind, t.unique_key) for t in tasks(alias)] == [("db.search.rebuild", "")]

    def test_keys_from_the_payload_separate_tasks(self, alias):
        a = rivet.enqueue("db.per_user", {"user": 1}, using=alias)
        b = rivet.enqueue("db.per_user", {"user": 2}, using=alias)
        again = rivet.enqueue("db.per_user", {"user": 1, "more": True}, using=alias)
        assert a.task_id != b.task_id and again.task_id == a.task_id and again.duplicate

    def test_the_lock_holds_through_a_lease_and_a_retry(self, alias, store):
        first = rivet.enqueue("db.search.rebuild", max_attempts=3, using=alias)
        claimed = claim_one(store)
        assert rivet.enqueue("db.search.rebuild", using=alias).task_id == first.task_id
        store.task_settle([failed(claimed, "boom", 0)])
        again = rivet.enqueue("db.search.rebuild", using=alias)
        assert again.duplicate and again.task_id == first.task_id
        assert len(tasks(alias)) == 1

    def test_the_lock_frees_when_done(self, alias, store):
        first = rivet.enqueue("db.search.rebuild", using=alias)
        store.task_ack(claim_one(store).lease, result=None)
        after = rivet.enqueue("db.search.rebuild", using=alias)
        assert not after.duplicate and after.task_id != first.task_id
        assert [t.state for t in tasks(alias)] == ["done", "pending"]

    def test_the_lock_frees_when_dead(self, alias, store):
        first = rivet.enqueue("db.search.rebuild", max_attempts=1, using=alias)
        store.task_settle([failed(claim_one(store), "boom", 0)])
        after = rivet.enqueue("db.search.rebuild", using=alias)
        assert not after.duplicate and after.task_id != first.task_id
        assert [t.state for t in tasks(alias)] == ["dead", "pending"]

    def test_requeue_of_a_dead_task_is_refused_while_another_holds_the_key(self, alias, store):
        dead = rivet.enqueue("db.search.rebuild", max_attempts=1, using=alias).task_id
        store.task_settle([failed(claim_one(store), "boom", 0)])
        rivet.enqueue("db.search.rebuild", using=alias)
        assert store.dead_requeue("default", dead) is False
        assert Task.objects.using(alias).get(pk=dead).state == "dead"

    def test_the_partial_unique_index_refuses_a_second_pending_row(self, alias):
        rivet.enqueue("db.search.rebuild", using=alias)
        with pytest.raises(IntegrityError), transaction.atomic(using=alias):
            Task.objects.using(alias).create(
                queue="default", kind="db.search.rebuild", unique_key="", state="pending"
            )


@pytest.mark.usefixtures("rebuild_job")
def test_concurrent_producers_of_a_unique_kind_make_one_task():
    results, errors = [], []
    barrier = threading.Barrier(6)

    def produce():
        try:
            barrier.wait()
            results.append(rivet.enqueue("db.search.rebuild", using="default"))
        except Exception as exc:  # reported below, with the others
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=produce) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len({r.task_id for r in results}) == 1
    assert sum(not r.duplicate for r in results) == 1
    assert len(tasks("default")) == 1


def test_get_task_reads_back_what_was_enqueued_through_each_ending(alias, store):
    """rivet.get_task on the real databases: pending, retried, done with a result, unknown."""
    made = rivet.enqueue("db.readback", {"n": 1}, max_attempts=3, using=alias)
    record = rivet.get_task(made.task_id, using=alias)
    assert (record.id, record.kind, record.payload) == (made.task_id, "db.readback", {"n": 1})
    assert (record.state, record.attempts, record.max_attempts) == ("pending", 0, 3)
    assert record.result is None and record.last_error == "" and record.errors == []

    store.task_settle([failed(claim_one(store), "boom", 0)])
    record = rivet.get_task(made.task_id, using=alias)
    assert (record.state, record.attempts) == ("pending", 1)
    assert "boom" in record.last_error and len(record.errors) == 1

    store.task_ack(claim_one(store).lease, result={"sent": 2})
    record = rivet.get_task(made.task_id, using=alias)
    assert (record.state, record.attempts, record.result) == ("done", 2, {"sent": 2})

    assert rivet.get_task(made.task_id + 1000, using=alias) is None
