"""The chaos run's history trigger on the real PostgreSQL store: every change of a task row is
recorded with its row before and after, classified as the store's statements meant it, and a
change the store should never make (a claim before visible_at) is seen by the history
invariants."""

from __future__ import annotations

import pytest
from django.db import connection

from chaos_project.chaos import history
from chaos_project.chaos.history import ACK, CLAIM, ENQUEUE, HEARTBEAT, REQUEUE, RETRY
from chaos_project.chaos.leases import TaskEnd, judge_history
from rivet.producer import cancel, enqueue
from rivet.stores import resolve_store
from tests.mutation import applied

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "history-check"


@pytest.fixture
def recorded():
    history.install(QUEUE)
    try:
        yield
    finally:
        history.remove()
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE {history.HISTORY_TABLE}, {history.EFFECT_TABLE}")


def claim(store, owner: str):
    (claimed,) = store.task_claim(queues=[QUEUE], owner=owner, limit=1, lease_ttl=30).claimed
    return claimed


def ends(store, *task_ids: int) -> dict[int, TaskEnd]:
    out = {}
    for task_id in task_ids:
        row = store.task_get(task_id)
        out[task_id] = TaskEnd(state=row.state, kind=row.kind, key=row.idem_key or "")
    return out


def test_every_change_of_a_task_is_recorded_and_classified(recorded):
    store = resolve_store("default")
    task_id = enqueue("chaos.effect", {"work_ms": 1}, queue=QUEUE, max_attempts=2).task_id
    enqueue("chaos.effect", {"work_ms": 1}, queue="another-queue")  # not recorded
    first = claim(store, "w1")
    store.lease_extend([first.lease], 30)
    store.task_bury(first.lease, "lost")
    assert store.dead_requeue(QUEUE, task_id)
    second = claim(store, "w2")
    store.task_retry(second.lease, "again", 0.0)
    third = claim(store, "w3")
    store.task_ack(third.lease, {"ok": True})

    changes = history.read_changes(queue=QUEUE)
    assert {c.task for c in changes} == {task_id}
    whats = [c.what for c in changes]
    assert whats == [ENQUEUE, CLAIM, HEARTBEAT, "bury", REQUEUE, CLAIM, RETRY, CLAIM, ACK]
    assert [c.new.epoch for c in changes if c.what == CLAIM] == [1, 3, 4]
    assert changes[-1].result == {"ok": True}
    figures = judge_history(changes, ends(store, task_id))
    assert (figures.claims, figures.heartbeats, figures.requeues) == (3, 1, 1)
    assert figures.overlapping.n == figures.early.n == figures.over_attempts.n == 0
    assert figures.epochs_back.n == 0


def test_a_claim_before_visible_at_is_seen(recorded):
    store = resolve_store("default")
    task_id = enqueue("chaos.effect", {"work_ms": 1}, queue=QUEUE, delay=60).task_id
    with connection.cursor() as cursor:  # what a claim ignoring visible_at would write
        cursor.execute(
            "UPDATE rivet_task SET attempts = 1, lease_epoch = 1, lease_owner = 'early', "
            "visible_at = now() + interval '30 seconds' WHERE id = %s",
            [task_id],
        )
    figures = judge_history(history.read_changes(queue=QUEUE), ends(store, task_id))
    assert figures.early.n == 1 and "claimed by early" in figures.early.samples[0]


def operator_actions_on_a_live_lease(store) -> tuple[int, int]:
    """A leased task on its last attempt and a leased task an operator cancel-marked; an
    operator's requeue of each and a sweep of the queue, named in the history (``acting``)."""
    last = enqueue("chaos.effect", {"work_ms": 1}, queue=QUEUE, max_attempts=1).task_id
    claim(store, "w1")
    marked = enqueue("chaos.effect", {"work_ms": 1}, queue=QUEUE).task_id
    claim(store, "w2")
    with history.acting("cancel"):
        cancel(marked)
    for task_id in (last, marked):
        with history.acting("requeue"):
            store.dead_requeue(QUEUE, task_id)
    with history.acting("sweep"):
        store.dead_sweep(QUEUE)
    return last, marked


def test_operator_actions_that_leave_live_leases_alone_hold(recorded):
    store = resolve_store("default")
    last, marked = operator_actions_on_a_live_lease(store)
    changes = history.read_changes(queue=QUEUE)
    assert [(c.task, c.actor) for c in changes if c.actor] == [(marked, "cancel")]
    figures = judge_history(changes, ends(store, last, marked), lease_ttl=30)
    assert figures.overlapping.n == figures.over_attempts.n == figures.requeued_not_dead.n == 0
    assert (figures.operator_requeues, figures.operator_sweeps) == (0, 0)


def test_a_requeue_of_a_live_task_is_seen(recorded):
    """The store's requeue without its state guard (the mutant postgres-requeue-state) revives
    leased tasks: the history names the requeue and the state it met."""
    store = resolve_store("default")
    with applied("postgres-requeue-state"):
        last, marked = operator_actions_on_a_live_lease(store)
    changes = history.read_changes(queue=QUEUE)
    requeues = [c for c in changes if c.actor == "requeue"]
    assert [(c.task, c.what, c.old.state) for c in requeues] == [
        (last, REQUEUE, "pending"),
        (marked, REQUEUE, "pending"),
    ]
    figures = judge_history(changes, ends(store, last, marked), lease_ttl=30)
    assert figures.requeued_not_dead.n == 2 and figures.operator_requeues == 2
    assert "leased by w1" in figures.requeued_not_dead.samples[0]
    assert figures.overlapping.n == 2  # each requeue also took a live lease from its holder


def test_a_sweep_of_a_live_lease_is_seen(recorded):
    """The sweep without its lapsed-lease guard (the mutant postgres-sweep-visible) buries the
    task on its last attempt and the cancel-marked one, both leased: H1 sees both."""
    store = resolve_store("default")
    with applied("postgres-sweep-visible"):
        last, marked = operator_actions_on_a_live_lease(store)
    changes = history.read_changes(queue=QUEUE)
    swept = [(c.task, c.what) for c in changes if c.actor == "sweep"]
    assert swept == [(last, "bury"), (marked, "bury")]
    figures = judge_history(changes, ends(store, last, marked), lease_ttl=30)
    assert figures.overlapping.n == 2 and figures.operator_sweeps == 2
    assert "an operator's sweep" in figures.overlapping.samples[0]


def test_the_trigger_is_gone_after_remove(recorded):
    history.remove()
    enqueue("chaos.effect", {"work_ms": 1}, queue=QUEUE)
    assert history.read_changes(queue=QUEUE) == []
