"""The Django admin through Django's test client: pages, actions, permissions, the admin log.

Every action runs through the real PostgreSQL store (the ``default`` alias); one class repeats
the essentials on the SQLite alias.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.messages import get_messages
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

import rivet
from rivet.admin import actions
from rivet.decisions import failed
from rivet.models import Task
from rivet.stores import store_for_alias
from rivet.values import HANDLER_ERROR_SUFFIX
from tests.factories import FencedWriteFactory, TaskFactory, UserFactory

pytestmark = pytest.mark.django_db

TASKS = reverse("admin:rivet_task_changelist")
DEAD = reverse("admin:rivet_deadletter_changelist")
SWEEP = reverse("admin:rivet_deadletter_sweep")
FENCED = reverse("admin:rivet_fencedwrite_changelist")
VIEW = ["rivet.view_task"]
REQUEUE = [*VIEW, "rivet.requeue_deadletter"]
PURGE = [*VIEW, "rivet.purge_deadletter"]
CANCEL = [*VIEW, "rivet.cancel_task"]


def login(client, permissions=(), **extra):
    user = UserFactory(permissions=list(permissions), **extra)
    client.force_login(user)
    return user


def action(client, name, tasks, url=DEAD, **extra):
    data = {"action": name, "_selected_action": [task.pk for task in tasks], **extra}
    return client.post(url, data)


def cancel(client, tasks, **extra):
    return action(client, "cancel_selected", tasks, url=TASKS, **extra)


def message_texts(response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def later(secs: float):
    return timezone.now() + timedelta(seconds=secs)


def exhausted(queue="default", **kwargs):
    """A pending task whose attempts are used up and whose lease lapsed: what a sweep buries."""
    return TaskFactory(
        queue=queue, attempts=3, max_attempts=3, lease_owner="lost", runnable=True, **kwargs
    )


# -- who gets in ------------------------------------------------------------------------------


@pytest.mark.parametrize("url", [TASKS, DEAD, SWEEP, FENCED, reverse("admin:index")])
def test_anonymous_requests_are_sent_to_the_login_page(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


def test_an_anonymous_post_of_an_action_changes_nothing(client):
    task = TaskFactory(dead=True)
    response = action(client, "requeue_selected", [task], confirm="yes")
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))
    task.refresh_from_db()
    assert task.state == "dead"


def test_staff_without_view_task_cannot_read_the_tasks(client):
    login(client)
    assert client.get(TASKS).status_code == 403
    assert client.get(DEAD).status_code == 403


# -- the task list ----------------------------------------------------------------------------


def test_the_task_list_shows_the_columns_and_offers_no_add_and_no_action(client):
    login(client, VIEW)
    TaskFactory(queue="mail", kind="send", attempts=2, max_attempts=5, lease_epoch=7)
    response = client.get(TASKS)
    assert response.status_code == 200
    html = response.content.decode()
    for column in ("queue", "kind", "state", "attempts", "lease epoch", "lease owner"):
        assert f">{column.capitalize()}<" in html or f">{column}<" in html
    assert "2 / 5" in html
    assert 'name="action"' not in html
    assert reverse("admin:rivet_task_add") not in html


def test_the_task_page_is_read_only_and_shows_payload_result_and_error_in_full(client):
    login(client, is_superuser=True)
    long_error = "ValueError: " + "x" * 3000 + " <b>tail</b>"
    task = TaskFactory(
        payload={"html": "<script>alert(1)</script>", "n": [1, 2]},
        result={"ok": True},
        last_error=long_error,
    )
    url = reverse("admin:rivet_task_change", args=[task.pk])
    html = client.get(url).content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert(1)" not in html
    assert "&quot;n&quot;: [\n    1,\n    2\n  ]" in html  # pretty-printed, indented JSON
    assert "&lt;b&gt;tail&lt;/b&gt;" in html and "x" * 3000 in html
    assert 'name="_save"' not in html
    response = client.post(url, {"state": "done"})
    assert response.status_code == 403
    task.refresh_from_db()
    assert task.state == "pending"
    assert client.get(reverse("admin:rivet_task_add")).status_code == 403
    assert client.post(reverse("admin:rivet_task_delete", args=[task.pk])).status_code == 403


def test_the_task_and_dead_letter_pages_show_every_failed_attempt(client):
    login(client, permissions=VIEW)
    store = store_for_alias("default")
    task_id = rivet.enqueue("noop", queue="hist", max_attempts=2, using=store).task_id
    for error in ("OSError: <first>", "OSError: second"):
        (claimed,) = store.task_claim(queues=["hist"], owner="w", limit=1, lease_ttl=60).claimed
        store.task_settle([failed(claimed, error, 0.0)])
    (first, second) = store.task_get(task_id).errors
    for page in ("admin:rivet_task_change", "admin:rivet_deadletter_change"):
        html = client.get(reverse(page, args=[task_id])).content.decode()
        assert "Failed attempts:" in html
        assert "&quot;error&quot;: &quot;OSError: &lt;first&gt;&quot;" in html  # escaped JSON
        assert f"&quot;at&quot;: &quot;{second['at']}&quot;" in html
        assert "&quot;attempt&quot;: 2" in html and HANDLER_ERROR_SUFFIX in html
    fresh = TaskFactory()
    html = client.get(reverse("admin:rivet_task_change", args=[fresh.pk])).content.decode()
    assert "&quot;attempt&quot;" not in html


def test_the_task_list_counts_each_queue_at_the_top(client):
    login(client, VIEW)
    TaskFactory.create_batch(2, queue="mail", runnable=True)
    TaskFactory(queue="mail", done=True)
    TaskFactory(queue="mail", dead=True)
    TaskFactory(queue="sms", lease_owner="w1", attempts=1, visible_at=later(60))
    response = client.get(TASKS)
    rows = {row.queue: row for row in response.context["queue_overview"]}
    assert (rows["mail"].ready, rows["mail"].done, rows["mail"].dead) == (2, 1, 1)
    assert (rows["sms"].ready, rows["sms"].leased, rows["sms"].delayed) == (0, 1, 0)
    html = response.content.decode()
    assert "Queues now" in html and f"{DEAD}?queue=mail" in html


@pytest.mark.parametrize(
    ("term", "expected"),
    [("pay-42", {"keyed"}), ("send", {"keyed", "other"}), ("{keyed_id}", {"keyed"})],
)
def test_search_matches_an_id_a_kind_or_an_idempotency_key_exactly(client, term, expected):
    login(client, VIEW)
    tasks = {
        "keyed": TaskFactory(kind="send", idem_key="pay-42"),
        "other": TaskFactory(kind="send"),
        "third": TaskFactory(kind="sendmore", idem_key="pay-420"),
    }
    term = term.format(keyed_id=tasks["keyed"].pk)
    response = client.get(TASKS, {"q": term})
    found = {task.pk for task in response.context["cl"].result_list}
    assert found == {tasks[name].pk for name in expected}


def test_the_filters_offer_the_queues_and_kinds_present(client):
    login(client, VIEW)
    TaskFactory(queue="mail", kind="send")
    TaskFactory(queue="sms", kind="text", dead=True)
    response = client.get(TASKS, {"kind": "text"})
    assert [task.kind for task in response.context["cl"].result_list] == ["text"]
    specs = {spec.title: spec for spec in response.context["cl"].filter_specs}
    assert [value for value, _ in specs["queue"].lookup_choices] == ["mail", "sms"]
    assert [value for value, _ in specs["kind"].lookup_choices] == ["send", "text"]


def test_fenced_writes_link_to_their_task(client):
    login(client, ["rivet.view_fencedwrite", *VIEW])
    fenced = FencedWriteFactory(owner="worker-a", epoch=2)
    html = client.get(FENCED).content.decode()
    assert reverse("admin:rivet_task_change", args=[fenced.task_id]) in html
    assert "worker-a" in html
    assert client.get(reverse("admin:rivet_task_change", args=[fenced.task_id])).status_code == 200


# -- dead letters: reading without acting -----------------------------------------------------


def test_a_view_only_user_reads_dead_letters_but_is_offered_no_action(client):
    login(client, VIEW)
    TaskFactory(dead=True, last_error="KeyError: 'x'; max attempts exceeded (handler error)")
    html = client.get(DEAD).content.decode()
    assert "max attempts exceeded (handler error)" in html
    assert 'name="action"' not in html
    assert SWEEP not in html


@pytest.mark.parametrize("name", ["requeue_selected", "purge_selected", "delete_selected"])
def test_a_view_only_user_posting_an_action_gets_403(client, name):
    login(client, VIEW)
    task = TaskFactory(dead=True)
    for extra in ({}, {"confirm": "yes"}):
        assert action(client, name, [task], **extra).status_code == 403
    assert Task.objects.get(pk=task.pk).state == "dead"
    assert not LogEntry.objects.exists()


def test_an_action_posted_to_the_read_only_task_list_gets_403(client):
    login(client, is_superuser=True)
    task = TaskFactory(dead=True)
    data = {"action": "delete_selected", "_selected_action": [task.pk], "post": "yes"}
    assert client.post(TASKS, data).status_code == 403
    assert Task.objects.filter(pk=task.pk).exists()


def test_a_view_only_user_cannot_sweep(client):
    login(client, VIEW)
    task = exhausted()
    assert client.get(SWEEP).status_code == 403
    assert client.post(SWEEP, {"queue": "default"}).status_code == 403
    assert Task.objects.get(pk=task.pk).state == "pending"


def test_each_action_is_offered_only_with_its_permission(client):
    TaskFactory(dead=True)
    login(client, REQUEUE)
    choices = [
        value for value, _ in client.get(DEAD).context["action_form"].fields["action"].choices
    ]
    assert choices == ["", "requeue_selected"]
    login(client, PURGE)
    choices = [
        value for value, _ in client.get(DEAD).context["action_form"].fields["action"].choices
    ]
    assert choices == ["", "purge_selected"]


def test_a_requeuer_posting_purge_gets_403(client):
    login(client, REQUEUE)
    task = TaskFactory(dead=True)
    assert action(client, "purge_selected", [task], confirm="yes").status_code == 403
    assert Task.objects.filter(pk=task.pk).exists()


# -- requeue ----------------------------------------------------------------------------------


def test_requeue_asks_first_and_says_a_replay_follows(client):
    login(client, REQUEUE)
    task = TaskFactory(dead=True, idem_key="pay-7")
    response = action(client, "requeue_selected", [task])
    assert response.status_code == 200
    html = response.content.decode()
    assert "A replay follows, not a second effect." in html
    assert "pay-7" in html and 'name="confirm" value="yes"' in html
    assert Task.objects.get(pk=task.pk).state == "dead"


def test_requeue_confirmed_revives_the_task_with_its_key_logs_and_reports(client):
    user = login(client, REQUEUE)
    task = TaskFactory(dead=True, idem_key="pay-7", lease_epoch=4)
    response = action(client, "requeue_selected", [task], confirm="yes")
    assert response.status_code == 302
    task.refresh_from_db()
    # A requeue starts a new life under a new epoch: a late write of the old life is fenced.
    assert (task.state, task.attempts, task.idem_key, task.lease_epoch) == (
        "pending",
        0,
        "pay-7",
        5,
    )
    (entry,) = LogEntry.objects.all()
    assert (entry.user, entry.action_flag, entry.object_id) == (user, CHANGE, str(task.pk))
    assert entry.change_message == "Requeued from the dead letters."
    (text,) = message_texts(response)
    assert text.startswith(f"Requeued 1 dead letter: {task.pk}.")
    assert "replay" in text


def test_requeue_names_the_ids_it_left_alone_and_why(client):
    login(client, REQUEUE)
    revived, elsewhere, clash = TaskFactory.create_batch(3, dead=True)
    Task.objects.filter(pk=clash.pk).update(kind="mail", unique_key="order-1")
    TaskFactory(kind="mail", unique_key="order-1")  # the same unique job, pending again
    # The first was requeued (and the second purged) after the confirmation page was shown.
    Task.objects.filter(pk=elsewhere.pk).update(state="pending")
    response = action(client, "requeue_selected", [revived, elsewhere, clash], confirm="yes")
    info, warning = message_texts(response)
    assert info.startswith(f"Requeued 1 dead letter: {revived.pk}.")
    assert warning == (
        f"Not requeued: task {elsewhere.pk} is pending, not in the dead letters; task "
        f"{clash.pk} was not requeued: a pending task of kind 'mail' holds its unique key "
        "'order-1'."
    )
    assert LogEntry.objects.count() == 1


def test_an_action_over_too_many_rows_changes_nothing(client, monkeypatch):
    monkeypatch.setattr(actions, "MAX_ACTION_ROWS", 2)
    login(client, REQUEUE)
    tasks = TaskFactory.create_batch(3, dead=True)
    response = action(client, "requeue_selected", tasks, confirm="yes")
    assert response.status_code == 302
    (text,) = message_texts(response)
    assert text.startswith("Select at most 2 dead letters for one requeue")
    assert set(Task.objects.values_list("state", flat=True)) == {"dead"}


# -- purge ------------------------------------------------------------------------------------


def test_purge_asks_first_and_warns_that_keys_are_released(client):
    login(client, PURGE)
    task = TaskFactory(dead=True, idem_key="pay-9")
    html = action(client, "purge_selected", [task]).content.decode()
    assert "Purging releases the idempotency keys." in html
    assert "dedup retention of the effect service" in html
    assert Task.objects.filter(pk=task.pk).exists()


def test_purge_confirmed_deletes_logs_and_reports(client):
    user = login(client, PURGE)
    first = TaskFactory(dead=True, queue="mail")
    second = TaskFactory(dead=True, queue="sms")
    requeued = TaskFactory(dead=True)
    Task.objects.filter(pk=requeued.pk).update(state="pending")
    response = action(client, "purge_selected", [first, second, requeued], confirm="yes")
    assert not Task.objects.filter(pk__in=[first.pk, second.pk]).exists()
    assert Task.objects.filter(pk=requeued.pk).exists()
    entries = LogEntry.objects.order_by("object_id")
    assert [(e.user, e.action_flag, e.object_id) for e in entries] == [
        (user, DELETION, str(first.pk)),
        (user, DELETION, str(second.pk)),
    ]
    info, warning = message_texts(response)
    assert info.startswith(f"Purged 2 dead letters: {first.pk}, {second.pk}")
    assert warning == f"Not purged: task {requeued.pk} is pending, not in the dead letters."


# -- sweep ------------------------------------------------------------------------------------


def test_sweep_buries_the_exhausted_tasks_of_one_queue_logs_and_reports(client):
    user = login(client, REQUEUE)
    lost = exhausted(queue="mail")
    other = exhausted(queue="sms")
    running = TaskFactory(queue="mail", attempts=1)
    page = client.get(SWEEP)
    assert page.status_code == 200
    assert "needed only when no worker polls the queue" in page.content.decode()
    assert page.context["form"].queues == ["mail", "sms"]
    response = client.post(SWEEP, {"queue": "mail"})
    assert response.status_code == 302
    assert response["Location"] == f"{DEAD}?queue=mail"
    states = dict(Task.objects.values_list("pk", "state"))
    assert (states[lost.pk], states[other.pk], states[running.pk]) == ("dead", "pending", "pending")
    (entry,) = LogEntry.objects.all()
    assert (entry.user, entry.action_flag, entry.object_repr) == (user, CHANGE, "queue mail")
    assert message_texts(response) == [
        "Swept 1 task(s) of queue mail with no attempts left into the dead letters."
    ]


def test_sweep_refuses_a_queue_it_does_not_offer(client):
    login(client, REQUEUE)
    exhausted(queue="mail")
    response = client.post(SWEEP, {"queue": "nope"})
    assert response.status_code == 200
    assert "choose one of the list" in str(response.context["form"].errors)
    assert not LogEntry.objects.exists()


def test_the_sweep_link_shows_with_the_requeue_permission(client):
    login(client, REQUEUE)
    assert SWEEP in client.get(DEAD).content.decode()


# -- cancel -----------------------------------------------------------------------------------


def running(**kwargs):
    """A pending task under a live lease: a worker is running its handler."""
    return TaskFactory(lease_owner="worker-7", attempts=1, visible_at=later(60), **kwargs)


def test_cancel_is_offered_only_with_its_permission(client):
    TaskFactory()
    login(client, [*REQUEUE, "rivet.purge_deadletter"])
    assert 'name="action"' not in client.get(TASKS).content.decode()
    login(client, CANCEL)
    choices = [
        value for value, _ in client.get(TASKS).context["action_form"].fields["action"].choices
    ]
    assert choices == ["", "cancel_selected"]


def test_cancel_posted_without_its_permission_gets_403(client):
    login(client, [*REQUEUE, "rivet.purge_deadletter"])
    task = TaskFactory(runnable=True)
    for extra in ({}, {"confirm": "yes"}):
        assert cancel(client, [task], **extra).status_code == 403
    task.refresh_from_db()
    assert (task.state, task.cancel_requested) == ("pending", False)
    assert not LogEntry.objects.exists()


def test_cancel_asks_first_and_says_what_happens_to_each_task(client):
    login(client, CANCEL)
    idle, busy, done = TaskFactory(runnable=True), running(), TaskFactory(done=True)
    response = cancel(client, [idle, busy, done])
    assert response.status_code == 200
    html = response.content.decode()
    assert "Cancel 3 tasks?" in html and "A cancelled task is never acked." in html
    assert "Requeue revives it" in html and 'name="confirm" value="yes"' in html
    previews = {task.pk: preview for task, preview in response.context["rows"]}
    assert previews == {
        idle.pk: "buried now: it moves to the dead letters",
        busy.pk: "running on worker-7: stopped at its next heartbeat, then buried",
        done.pk: "left as it is: already done",
    }
    assert f'action="{TASKS}"' in html
    states = dict(Task.objects.values_list("pk", "state"))
    assert set(states.values()) == {"pending", "done"}
    assert not Task.objects.filter(cancel_requested=True).exists()


def test_cancel_confirmed_buries_a_pending_task_logs_and_reports(client):
    user = login(client, CANCEL)
    task = TaskFactory(runnable=True, last_error="TimeoutError: slow")
    response = cancel(client, [task], confirm="yes")
    assert response.status_code == 302
    task.refresh_from_db()
    assert task.state == "dead"
    assert task.last_error == "TimeoutError: slow; cancelled by an operator"
    (entry,) = LogEntry.objects.all()
    assert (entry.user, entry.action_flag, entry.object_id) == (user, CHANGE, str(task.pk))
    assert entry.change_message == "Cancelled: buried now (it was not running)."
    (text,) = message_texts(response)
    assert text.startswith(f"Cancelled 1 task: {task.pk}. Not running, so buried now")
    assert "'cancelled by an operator'" in text


def test_cancel_confirmed_marks_a_running_task_for_its_worker(client):
    user = login(client, CANCEL)
    task = running()
    response = cancel(client, [task], confirm="yes")
    task.refresh_from_db()
    assert (task.state, task.cancel_requested, task.lease_owner) == ("pending", True, "worker-7")
    (entry,) = LogEntry.objects.all()
    assert (entry.user, entry.object_id) == (user, str(task.pk))
    assert entry.change_message.startswith("Cancel requested")
    (text,) = message_texts(response)
    assert text.startswith(f"Cancelling 1 task: {task.pk}. Running: the worker stops")
    assert "never acked" in text


def test_cancel_counts_each_outcome_and_names_what_it_left_alone(client):
    login(client, CANCEL)
    idle = TaskFactory.create_batch(2, runnable=True)
    busy = running()
    done, dead = TaskFactory(done=True), TaskFactory(dead=True, last_error="boom")
    purged = TaskFactory(runnable=True)
    Task.objects.filter(pk=purged.pk).delete()  # after the confirmation page was shown
    response = cancel(client, [*idle, busy, done, dead, purged], confirm="yes")
    cancelled, marked, warning = message_texts(response)
    assert cancelled.startswith(f"Cancelled 2 tasks: {idle[0].pk}, {idle[1].pk}.")
    assert marked.startswith(f"Cancelling 1 task: {busy.pk}.")
    assert warning == (
        f"Not cancelled: task {done.pk} is already done: nothing to cancel; task {dead.pk} is "
        f"already dead: nothing to cancel; no task with id {purged.pk}."
    )
    assert LogEntry.objects.count() == 3
    assert Task.objects.get(pk=dead.pk).last_error == "boom"
    assert Task.objects.get(pk=done.pk).state == "done"


def test_a_cancelled_task_is_revived_by_the_requeue_action(client):
    login(client, [*CANCEL, "rivet.requeue_deadletter"])
    task = TaskFactory(runnable=True, idem_key="pay-3")
    cancel(client, [task], confirm="yes")
    dead = client.get(DEAD)
    assert [row.pk for row in dead.context["cl"].result_list] == [task.pk]
    assert "cancelled by an operator" in dead.content.decode()
    action(client, "requeue_selected", [task], confirm="yes")
    task.refresh_from_db()
    assert (task.state, task.attempts, task.idem_key) == ("pending", 0, "pay-3")


# -- the embedded store -----------------------------------------------------------------------


@pytest.mark.django_db(databases=["default", "sqlite"], transaction=True)
@override_settings(RIVET={"DATABASE_ALIAS": "sqlite"})
def test_on_sqlite_the_admin_lists_counts_and_requeues(client):
    login(client, REQUEUE)
    dead = TaskFactory._meta.model.objects.using("sqlite").create(
        queue="lite", kind="noop", state="dead", attempts=3, last_error="boom"
    )
    response = client.get(DEAD)
    assert [task.pk for task in response.context["cl"].result_list] == [dead.pk]
    (row,) = response.context["queue_overview"]
    assert (row.queue, row.dead) == ("lite", 1)
    response = action(client, "requeue_selected", [dead], confirm="yes")
    assert Task.objects.using("sqlite").get(pk=dead.pk).state == "pending"
    assert message_texts(response)[0].startswith(f"Requeued 1 dead letter: {dead.pk}.")
    assert not Task.objects.using("default").exists()


@pytest.mark.django_db(databases=["default", "sqlite"], transaction=True)
@override_settings(RIVET={"DATABASE_ALIAS": "sqlite"})
def test_on_sqlite_the_admin_cancels(client):
    login(client, CANCEL)
    lite = Task.objects.using("sqlite")
    idle = lite.create(queue="lite", kind="noop", visible_at=later(-60))
    busy = lite.create(queue="lite", kind="noop", lease_owner="w1", visible_at=later(60))
    assert cancel(client, [idle, busy]).status_code == 200
    response = cancel(client, [idle, busy], confirm="yes")
    idle, busy = lite.get(pk=idle.pk), lite.get(pk=busy.pk)
    assert (idle.state, idle.last_error) == ("dead", "cancelled by an operator")
    assert (busy.state, busy.cancel_requested) == ("pending", True)
    assert [text.split(".")[0] for text in message_texts(response)] == [
        f"Cancelled 1 task: {idle.pk}",
        f"Cancelling 1 task: {busy.pk}",
    ]
    assert not Task.objects.using("default").exists()
