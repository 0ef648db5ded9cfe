"""rivet.operations on the real stores (PostgreSQL and SQLite): every outcome, every refusal,
the races, and the one wording the admin, ``rivet_dlq`` and the HTTP API all show.

A race is made for real: the task is looked up (``find``, ``find_dead``), then another
operator's call changes it through the same store, then the operation acts on the record it
looked up (``requeue_record``, ``purge_record``, ``cancel_record``), as it would have had the
other call come between its two statements.
"""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.messages import get_messages
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from rivet.models import Task
from rivet.operations import dead_letters
from rivet.operations import outcome as outcomes
from rivet.operations.cancel import CANCEL_SAYS, cancel, cancel_record
from rivet.operations.outcome import Outcome, find, find_dead
from rivet.stores import store_for_alias
from rivet.values import CANCELLED_SUFFIX, CancelOutcome
from tests.factories import UserFactory, task_in

pytestmark = pytest.mark.django_db(databases=["default", "sqlite"])


@pytest.fixture(params=["default", "sqlite"], ids=["postgres", "sqlite"])
def alias(request, settings) -> str:
    """The database rivet's store (and so the admin, the command and the API) uses."""
    settings.RIVET = {**settings.RIVET, "DATABASE_ALIAS": request.param}
    return request.param


@pytest.fixture
def store(alias):
    return store_for_alias(alias)


def state_of(alias: str, task_id: int) -> str | None:
    return Task.objects.using(alias).filter(pk=task_id).values_list("state", flat=True).first()


def running(alias: str, **fields) -> Task:
    """A pending task under a live lease: a worker is running its handler."""
    later = timezone.now() + timedelta(minutes=10)
    return task_in(alias, lease_owner="worker-7", attempts=1, visible_at=later, **fields)


# -- lookups ---------------------------------------------------------------------------------


def test_find_names_a_missing_task_and_one_of_another_queue_alike(alias, store) -> None:
    task = task_in(alias, queue="mail")
    assert find(store, task.id).ok
    assert find(store, task.id, queue="mail").task.id == task.id
    missing = find(store, 10**12)
    assert (missing.code, missing.message) == ("not_found", f"no task with id {10**12}")
    elsewhere = find(store, task.id, queue="sms")
    assert (elsewhere.code, elsewhere.message) == (
        "not_found",
        f"no task with id {task.id} in queue sms",
    )
    assert not missing.ok and not elsewhere.ok


def test_find_dead_refuses_a_task_that_is_not_dead(alias, store) -> None:
    pending, done = task_in(alias), task_in(alias, done=True)
    for task in (pending, done):
        refused = find_dead(store, task.id)
        assert (refused.code, refused.message) == (
            "not_dead",
            f"task {task.id} is {task.state}, not in the dead letters",
        )
    assert find_dead(store, task_in(alias, dead=True).id).ok


def test_an_outcome_knows_only_the_codes_there_are() -> None:
    with pytest.raises(ValueError, match="unknown outcome code 'gone'"):
        Outcome(code="gone", message="?")
    assert outcomes.DONE.isdisjoint(outcomes.REFUSALS)


# -- requeue ---------------------------------------------------------------------------------


def test_requeue_revives_a_dead_task_and_says_it_keeps_its_key(alias, store) -> None:
    task = task_in(alias, dead=True, idem_key="pay-1", queue="mail")
    done = dead_letters.requeue(store, task.id, queue="mail")
    assert (done.ok, done.code, done.task.id) == (True, "requeued", task.id)
    assert done.message == (
        f"requeued task {task.id} with fresh attempts (idempotency key 'pay-1'). "
        + dead_letters.REQUEUE_NOTE
    )
    row = Task.objects.using(alias).get(pk=task.id)
    assert (row.state, row.attempts, row.idem_key) == ("pending", 0, "pay-1")


def test_requeue_of_a_task_with_no_key_says_its_effect_is_not_protected(alias, store) -> None:
    task = task_in(alias, dead=True)
    done = dead_letters.requeue(store, task.id)
    assert done.message.endswith(dead_letters.NO_KEY_NOTE)
    assert dead_letters.REQUEUE_NOTE not in done.message


def test_requeue_refuses_what_is_missing_elsewhere_or_not_dead(alias, store) -> None:
    dead, pending = task_in(alias, dead=True, queue="mail"), task_in(alias, queue="mail")
    assert dead_letters.requeue(store, 10**12).code == "not_found"
    assert dead_letters.requeue(store, dead.id, queue="sms").code == "not_found"
    refused = dead_letters.requeue(store, pending.id)
    assert (refused.code, refused.message) == (
        "not_dead",
        f"task {pending.id} is pending, not in the dead letters",
    )
    assert state_of(alias, dead.id) == "dead"


def test_requeue_refused_while_a_pending_task_holds_its_unique_key(alias, store) -> None:
    dead = task_in(alias, dead=True, kind="report", unique_key="daily")
    task_in(alias, kind="report", unique_key="daily")
    refused = dead_letters.requeue(store, dead.id)
    assert (refused.ok, refused.code) == (False, "not_requeued")
    assert refused.message == (
        f"task {dead.id} was not requeued: a pending task of kind 'report' holds its unique "
        "key 'daily'"
    )
    assert state_of(alias, dead.id) == "dead"


def test_requeue_of_a_task_another_operator_requeued_meanwhile(alias, store) -> None:
    dead = task_in(alias, dead=True, kind="report", unique_key="daily")
    looked_up = find_dead(store, dead.id).task
    assert store.dead_requeue(dead.queue, dead.id)  # the other operator
    refused = dead_letters.requeue_record(store, looked_up)
    assert (refused.code, refused.message) == (
        "not_dead",
        f"task {dead.id} left the dead letters meanwhile (it is pending now)",
    )


def test_requeue_of_a_task_another_operator_purged_meanwhile(alias, store) -> None:
    dead = task_in(alias, dead=True)
    looked_up = find_dead(store, dead.id).task
    assert store.dead_purge(dead.queue, task_ids=[dead.id]) == 1
    refused = dead_letters.requeue_record(store, looked_up)
    assert (refused.code, refused.message) == (
        "not_dead",
        f"task {dead.id} left the dead letters meanwhile (it was purged)",
    )
    assert state_of(alias, dead.id) is None


def test_requeue_when_a_unique_twin_is_enqueued_after_the_lookup(alias, store) -> None:
    dead = task_in(alias, dead=True, kind="report", unique_key="daily")
    looked_up = find_dead(store, dead.id).task
    task_in(alias, kind="report", unique_key="daily")  # enqueued between lookup and requeue
    assert dead_letters.requeue_record(store, looked_up).code == "not_requeued"


# -- purge -----------------------------------------------------------------------------------


def test_purge_deletes_one_dead_task_and_says_its_key_is_released(alias, store) -> None:
    keyed, bare = task_in(alias, dead=True, idem_key="pay-2"), task_in(alias, dead=True)
    done = dead_letters.purge(store, keyed.id)
    assert (done.code, done.message) == (
        "purged",
        f"purged task {keyed.id}, releasing its idempotency key 'pay-2'",
    )
    assert dead_letters.purge(store, bare.id).message == f"purged task {bare.id}"
    assert state_of(alias, keyed.id) is None and state_of(alias, bare.id) is None


def test_purge_refuses_what_is_missing_elsewhere_or_not_dead(alias, store) -> None:
    dead, done = task_in(alias, dead=True, queue="mail"), task_in(alias, done=True)
    assert dead_letters.purge(store, dead.id, queue="sms").code == "not_found"
    refused = dead_letters.purge(store, done.id)
    assert (refused.code, refused.message) == (
        "not_dead",
        f"task {done.id} is done, not in the dead letters",
    )
    assert (state_of(alias, dead.id), state_of(alias, done.id)) == ("dead", "done")


def test_purge_of_a_task_requeued_meanwhile_leaves_it(alias, store) -> None:
    dead = task_in(alias, dead=True)
    looked_up = find_dead(store, dead.id).task
    assert store.dead_requeue(dead.queue, dead.id)
    refused = dead_letters.purge_record(store, looked_up)
    assert (refused.code, refused.message) == (
        "not_dead",
        f"task {dead.id} left the dead letters meanwhile (it is pending now)",
    )
    assert state_of(alias, dead.id) == "pending"


def test_purge_of_a_queue_counts_and_names_what_it_deleted(alias, store) -> None:
    task_in(alias, dead=True, queue="mail")
    task_in(alias, dead=True, queue="mail")
    task_in(alias, dead=True, queue="sms")
    kept = dead_letters.purge_queue(store, "mail", older_than_secs=3600)
    assert (kept.code, kept.count) == ("purged", 0)
    assert kept.message == "purged 0 dead tasks of queue mail dead for at least 3600s"
    done = dead_letters.purge_queue(store, "mail")
    assert (done.count, done.message) == (2, "purged 2 dead tasks of queue mail")
    assert Task.objects.using(alias).filter(queue="sms").count() == 1


# -- sweep -----------------------------------------------------------------------------------


def test_sweep_buries_the_exhausted_tasks_of_one_queue_and_counts_them(alias, store) -> None:
    lost = task_in(alias, queue="mail", attempts=3, max_attempts=3, lease_owner="lost")
    task_in(alias, queue="mail")
    swept = dead_letters.sweep(store, "mail")
    assert (swept.ok, swept.code, swept.count) == (True, "swept", 1)
    assert swept.message == (
        "swept 1 task(s) of queue mail with no attempts left into the dead letters"
    )
    assert state_of(alias, lost.id) == "dead"
    assert dead_letters.sweep(store, "mail").count == 0


# -- cancel ----------------------------------------------------------------------------------


def test_cancel_buries_a_task_that_is_not_running(alias, store) -> None:
    task = task_in(alias, queue="mail")
    done = cancel(store, task.id, queue="mail")
    assert (done.code, done.cancel) == ("cancelled", CancelOutcome.CANCELLED)
    assert done.message == f"cancelled task {task.id}: {CANCEL_SAYS[CancelOutcome.CANCELLED]}"
    assert CANCELLED_SUFFIX in done.message
    assert state_of(alias, task.id) == "dead"


def test_cancel_marks_a_running_task_for_its_worker(alias, store) -> None:
    task = running(alias)
    done = cancel(store, task.id)
    assert (done.code, done.cancel) == ("marked", CancelOutcome.MARKED)
    assert done.message == f"cancelling task {task.id}: {CANCEL_SAYS[CancelOutcome.MARKED]}"
    row = Task.objects.using(alias).get(pk=task.id)
    assert (row.state, row.cancel_requested) == ("pending", True)


@pytest.mark.parametrize("trait", ["done", "dead"])
def test_cancel_of_a_finished_task_has_nothing_to_cancel(alias, store, trait) -> None:
    task = task_in(alias, **{trait: True})
    refused = cancel(store, task.id)
    assert (refused.ok, refused.code, refused.cancel) == (
        False,
        "nothing_to_cancel",
        CancelOutcome.FINISHED,
    )
    assert refused.message == f"task {task.id} is already {trait}: nothing to cancel"
    assert state_of(alias, task.id) == trait


def test_cancel_refuses_a_missing_task_and_one_of_another_queue(alias, store) -> None:
    task = task_in(alias, queue="mail")
    assert cancel(store, 10**12).message == f"no task with id {10**12}"
    assert cancel(store, task.id, queue="sms").code == "not_found"
    assert state_of(alias, task.id) == "pending"


def test_cancel_of_a_task_purged_after_the_lookup_is_not_found(alias, store) -> None:
    task = task_in(alias, dead=True)
    looked_up = find(store, task.id).task
    store.dead_purge(task.queue, task_ids=[task.id])
    refused = cancel_record(store, looked_up)
    assert (refused.code, refused.message) == ("not_found", f"no task with id {task.id}")


def test_cancel_of_a_task_that_finished_after_the_lookup(alias, store) -> None:
    task = task_in(alias)
    looked_up = find(store, task.id).task
    Task.objects.using(alias).filter(pk=task.id).update(state="done")  # its worker acked it
    refused = cancel_record(store, looked_up)
    assert (refused.code, refused.message) == (
        "nothing_to_cancel",
        f"task {task.id} is already done: nothing to cancel",
    )


# -- the same words on every surface ---------------------------------------------------------


def surfaces_say(action: str, task_id: int) -> dict[str, str]:
    """What the admin, rivet_dlq and the HTTP API say when ``action`` refuses the task."""
    perms = ["rivet.view_task", "rivet.requeue_deadletter", "rivet.purge_deadletter"]
    perms.append("rivet.cancel_task")
    user = UserFactory(permissions=perms)
    admin = Client()
    admin.force_login(user)
    page = "task" if action == "cancel" else "deadletter"
    url = reverse(f"admin:rivet_{page}_changelist")
    data = {"action": f"{action}_selected", "_selected_action": [task_id], "confirm": "yes"}
    response = admin.post(url, data)
    said = {"admin": " ".join(str(m) for m in get_messages(response.wsgi_request))}
    with pytest.raises(CommandError) as refused:
        call_command("rivet_dlq", action, str(task_id), stdout=StringIO())
    assert refused.value.returncode == 1
    said["cli"] = str(refused.value)
    api = APIClient()
    api.force_login(user)
    paths = {"requeue": f"/rivet/dead-letters/{task_id}/requeue/"}
    if action in paths:
        answer = api.post(paths[action])
        assert answer.status_code == 409, answer.json()
        said["api"] = answer.json()["detail"]
    return said


def test_a_requeue_of_a_task_that_is_not_dead_is_refused_in_the_same_words(alias, store) -> None:
    pending = task_in(alias)
    words = dead_letters.requeue(store, pending.id).message
    said = surfaces_say("requeue", pending.id)
    assert set(said) == {"admin", "cli", "api"}
    for surface, text in said.items():
        assert words in text, (surface, text)
    assert said["cli"] == said["api"] == words
    assert said["admin"] == f"Not requeued: {words}."
    assert state_of(alias, pending.id) == "pending"


def test_a_requeue_that_clashes_on_its_unique_key_says_so_everywhere(alias, store) -> None:
    dead = task_in(alias, dead=True, kind="report", unique_key="daily")
    task_in(alias, kind="report", unique_key="daily")
    words = dead_letters.requeue(store, dead.id).message
    said = surfaces_say("requeue", dead.id)
    assert said == {"admin": f"Not requeued: {words}.", "cli": words, "api": words}
    assert state_of(alias, dead.id) == "dead"


def test_a_cancel_of_a_done_task_is_refused_in_the_same_words(alias, store) -> None:
    done = task_in(alias, done=True)
    words = cancel(store, done.id).message
    said = surfaces_say("cancel", done.id)
    # The API answers 200 with outcome "finished" (its schema), not a refusal.
    assert said == {"admin": f"Not cancelled: {words}.", "cli": words}
