"""Unique jobs on the memory store: one pending task per kind + unique key until done or dead."""

import pytest

import rivet
from rivet.decisions import failed
from rivet.jobs import registry
from rivet.stores.memory import FakeClock, MemoryStore


@pytest.fixture
def store():
    return MemoryStore(clock=FakeClock())


@pytest.fixture
def unique_jobs():
    rivet.job("unique.rebuild", unique=lambda payload: "")(lambda context: None)
    rivet.job("unique.per_user", unique=lambda payload: f"user:{payload['user']}")(
        lambda context: None
    )
    rivet.job("unique.sometimes", unique=lambda payload: payload.get("key"))(lambda c: None)
    yield
    for name in ("unique.rebuild", "unique.per_user", "unique.sometimes"):
        registry.unregister(name)


def claim_one(store, queue="default"):
    (claimed,) = store.task_claim(queues=[queue], owner="w1", limit=1, lease_ttl=30).claimed
    return claimed


@pytest.mark.usefixtures("unique_jobs")
class TestUniqueJobs:
    def test_an_empty_key_allows_one_pending_task_per_kind(self, store):
        first = rivet.enqueue("unique.rebuild", {"index": "a"}, using=store)
        second = rivet.enqueue("unique.rebuild", {"index": "b"}, using=store)
        assert second.duplicate and second.task_id == first.task_id
        assert store.task_get(first.task_id).unique_key == ""
        assert len(store.task_list()) == 1

    def test_different_keys_are_different_tasks(self, store):
        a = rivet.enqueue("unique.per_user", {"user": 1}, using=store)
        b = rivet.enqueue("unique.per_user", {"user": 2}, using=store)
        again = rivet.enqueue("unique.per_user", {"user": 1, "extra": True}, using=store)
        assert a.task_id != b.task_id
        assert again.duplicate and again.task_id == a.task_id

    def test_a_key_of_none_means_not_unique(self, store):
        one = rivet.enqueue("unique.sometimes", {}, using=store)
        two = rivet.enqueue("unique.sometimes", {}, using=store)
        assert not one.duplicate and not two.duplicate and one.task_id != two.task_id

    def test_an_explicit_unique_key_overrides_the_job(self, store):
        a = rivet.enqueue("unique.per_user", {"user": 1}, unique_key="shared", using=store)
        b = rivet.enqueue("unique.per_user", {"user": 2}, unique_key="shared", using=store)
        assert b.duplicate and b.task_id == a.task_id

    def test_the_lock_holds_while_a_task_is_leased_and_after_a_retry(self, store):
        first = rivet.enqueue("unique.rebuild", {}, max_attempts=3, using=store)
        claimed = claim_one(store)
        assert rivet.enqueue("unique.rebuild", {}, using=store).duplicate
        store.task_settle([failed(claimed, "boom", 0)])
        again = rivet.enqueue("unique.rebuild", {}, using=store)
        assert again.duplicate and again.task_id == first.task_id

    def test_the_lock_frees_when_the_task_is_done(self, store):
        first = rivet.enqueue("unique.rebuild", {}, using=store)
        store.task_ack(claim_one(store).lease, result=None)
        after = rivet.enqueue("unique.rebuild", {}, using=store)
        assert not after.duplicate and after.task_id != first.task_id

    def test_the_lock_frees_when_the_task_is_dead(self, store):
        first = rivet.enqueue("unique.rebuild", {}, max_attempts=1, using=store)
        store.task_settle([failed(claim_one(store), "boom", 0)])
        assert store.task_get(first.task_id).state == "dead"
        after = rivet.enqueue("unique.rebuild", {}, using=store)
        assert not after.duplicate and after.task_id != first.task_id

    def test_an_idempotency_key_is_checked_before_the_unique_key(self, store):
        rivet.enqueue("unique.rebuild", {}, idem_key="r-1", using=store)
        again = rivet.enqueue("unique.rebuild", {}, idem_key="r-1", using=store)
        assert again.duplicate
        with pytest.raises(rivet.IdempotencyMismatch):
            rivet.enqueue("unique.rebuild", {"other": 1}, idem_key="r-1", using=store)
