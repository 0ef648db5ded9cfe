"""manage.py rivet_dlq on the real database: list, show, requeue, sweep, purge."""

import io
import json
from datetime import datetime
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

import rivet
from rivet.decisions import failed
from rivet.models import Task
from rivet.stores import store_for_alias
from rivet.values import CANCELLED_SUFFIX, HANDLER_ERROR_SUFFIX, WORKER_LOST_SUFFIX, Settled

pytestmark = pytest.mark.django_db


def dlq(*args, **options):
    out = StringIO()
    call_command("rivet_dlq", *args, stdout=out, **options)
    return out.getvalue()


@pytest.fixture
def store():
    return store_for_alias("default")


def make_dead(store, queue="demo", idem_key=None, error="ValueError: boom", payload=None):
    result = rivet.enqueue(
        "fail", payload or {"q": queue}, queue=queue, idem_key=idem_key, max_attempts=1, using=store
    )
    (claimed,) = store.task_claim(queues=[queue], owner="w1", limit=1, lease_ttl=600).claimed
    store.task_settle([failed(claimed, error, 0)])
    return result.task_id


def make_exhausted(store, queue="demo"):
    """A pending task whose only attempt was claimed and whose lease has lapsed."""
    result = rivet.enqueue("noop", queue=queue, max_attempts=1, using=store)
    store.task_claim(queues=[queue], owner="lost", limit=1, lease_ttl=0)
    return result.task_id


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


class FakePipe(io.StringIO):
    def isatty(self):
        return False


def test_list_shows_id_kind_attempts_updated_at_and_the_error(store):
    task_id = make_dead(store, error="ValueError: " + "x" * 200)
    make_dead(store, queue="other")
    out = dlq("list", "--queue", "demo")
    header, row = out.splitlines()
    assert header.split() == ["id", "kind", "attempts", "updated_at", "last_error"]
    assert row.split()[:3] == [str(task_id), "fail", "1"]
    assert row.endswith(HANDLER_ERROR_SUFFIX)
    assert len(row) < 160


def test_list_of_an_empty_dead_letter_queue_says_so():
    assert dlq("list", "--queue", "demo").strip() == "no dead tasks in queue demo"


def test_show_prints_every_field_as_json(store):
    task_id = make_dead(store, idem_key="pay-1", payload={"amount": 100, "note": "ünï"})
    shown = json.loads(dlq("show", str(task_id), "--queue", "demo"))
    assert {
        "id",
        "kind",
        "payload",
        "idem_key",
        "state",
        "attempts",
        "max_attempts",
        "lease_epoch",
        "lease_owner",
        "visible_at",
        "created_at",
        "updated_at",
        "last_error",
        "result",
        "queue",
        "priority",
        "unique_key",
    } <= set(shown)
    assert shown["last_error"] == f"ValueError: boom; {HANDLER_ERROR_SUFFIX}"
    [entry] = shown["errors"]
    assert (entry["attempt"], entry["error"]) == (1, shown["last_error"])
    assert datetime.fromisoformat(entry["at"]) == datetime.fromisoformat(shown["updated_at"])
    assert (shown["id"], shown["idem_key"], shown["state"]) == (task_id, "pay-1", "dead")
    assert shown["payload"] == {"amount": 100, "note": "ünï"}
    assert datetime.fromisoformat(shown["updated_at"]).tzinfo is not None


def test_show_of_a_task_that_is_not_dead_exits_1_with_its_state(store):
    live = rivet.enqueue("noop", queue="demo", using=store).task_id
    with pytest.raises(CommandError, match=f"task {live} is pending") as caught:
        dlq("show", str(live), "--queue", "demo")
    assert caught.value.returncode == 1
    with pytest.raises(CommandError, match="^no task with id 999999 in queue demo$") as caught:
        dlq("show", "999999", "--queue", "demo")
    assert caught.value.returncode == 1


def test_show_of_a_dead_task_in_another_queue_is_not_found(store):
    task_id = make_dead(store, queue="other")
    with pytest.raises(CommandError, match=f"^no task with id {task_id} in queue demo$"):
        dlq("show", str(task_id), "--queue", "demo")


def test_requeue_keeps_the_key_and_says_so(store):
    task_id = make_dead(store, idem_key="pay-1")
    out = dlq("requeue", str(task_id), "--queue", "demo")
    assert out.startswith(f"requeued task {task_id} with fresh attempts (idempotency key 'pay-1')")
    assert "keeps its idempotency key" in out and "replay" in out
    task = Task.objects.get(pk=task_id)
    assert (task.state, task.attempts, task.idem_key) == ("pending", 0, "pay-1")
    claimed = store.task_claim(queues=["demo"], owner="w2", limit=1, lease_ttl=600).claimed
    assert [c.task_id for c in claimed] == [task_id]


def test_requeue_of_a_task_that_is_not_dead_exits_1_and_changes_nothing(store):
    live = rivet.enqueue("noop", queue="demo", using=store).task_id
    with pytest.raises(
        CommandError, match=f"^task {live} is pending, not in the dead letters$"
    ) as caught:
        dlq("requeue", str(live), "--queue", "demo")
    assert caught.value.returncode == 1
    with pytest.raises(CommandError, match="no task with id 424242 in queue demo") as caught:
        dlq("requeue", "424242", "--queue", "demo")
    assert caught.value.returncode == 1
    assert Task.objects.get(pk=live).state == "pending"


def test_sweep_buries_exhausted_tasks_with_lapsed_leases(store):
    exhausted = make_exhausted(store)
    waiting = rivet.enqueue("noop", queue="demo", using=store).task_id
    out = dlq("sweep", "--queue", "demo")
    assert out.startswith("swept 1 task(s) of queue demo with no attempts left")
    task = Task.objects.get(pk=exhausted)
    assert task.state == "dead" and task.last_error.endswith(WORKER_LOST_SUFFIX)
    assert Task.objects.get(pk=waiting).state == "pending"


def test_purge_with_yes_deletes_the_dead_rows_and_prints_the_caveat(store):
    dead = [make_dead(store), make_dead(store)]
    other = make_dead(store, queue="other")
    out = dlq("purge", "--queue", "demo", "--yes")
    assert "releases their idempotency keys" in out and "dedup retention" in out
    assert "purged 2 dead tasks of queue demo" in out
    assert not Task.objects.filter(pk__in=dead).exists()
    assert Task.objects.filter(pk=other).exists()


def test_purge_older_than_keeps_recent_dead_tasks(store):
    recent = make_dead(store)
    out = dlq("purge", "--queue", "demo", "--yes", "--older-than-secs", "3600")
    assert "purged 0 dead tasks of queue demo dead for at least 3600s" in out
    assert Task.objects.filter(pk=recent).exists()


def test_purge_without_yes_and_without_a_terminal_refuses_with_2(store, monkeypatch):
    task_id = make_dead(store)
    monkeypatch.setattr("sys.stdin", FakePipe(""))
    with pytest.raises(CommandError, match="stdin is not a terminal.*--yes") as caught:
        dlq("purge", "--queue", "demo")
    assert caught.value.returncode == 2
    assert Task.objects.filter(pk=task_id).exists()


def test_purge_asks_on_a_terminal_and_a_no_keeps_the_rows(store, monkeypatch):
    task_id = make_dead(store)
    monkeypatch.setattr("sys.stdin", FakeTerminal("n\n"))
    with pytest.raises(CommandError, match="cancelled") as caught:
        dlq("purge", "--queue", "demo")
    assert caught.value.returncode == 1
    assert Task.objects.filter(pk=task_id).exists()


def test_purge_asks_on_a_terminal_and_a_yes_purges(store, monkeypatch):
    task_id = make_dead(store)
    monkeypatch.setattr("sys.stdin", FakeTerminal("y\n"))
    out = dlq("purge", "--queue", "demo")
    assert "Delete the dead tasks of queue demo? [y/N]" in out
    assert not Task.objects.filter(pk=task_id).exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["show"], "show needs a task id"),
        (["requeue"], "requeue needs a task id"),
        (["list", "5"], "list takes no task id"),
        (["sweep", "--yes"], "apply to purge only"),
        (["list", "--older-than-secs", "5"], "apply to purge only"),
        (["purge", "--yes", "--older-than-secs", "-1"], ">= 0"),
        (["list", "--queue", "bad queue"], "queue 'bad queue'"),
    ],
)
def test_bad_usage_exits_2(args, message):
    with pytest.raises(CommandError, match=message) as caught:
        dlq(*args)
    assert caught.value.returncode == 2


def test_an_unknown_action_is_a_usage_error():
    with pytest.raises(CommandError, match="invalid choice"):
        dlq("explode")


def test_cancel_buries_a_pending_task_and_requeue_revives_it(store):
    task_id = rivet.enqueue("noop", queue="demo", using=store).task_id
    out = dlq("cancel", str(task_id), "--queue", "demo")
    said = (
        f"cancelled task {task_id}: not running, so buried now: in the dead letters, the last "
        f"error ending '{CANCELLED_SUFFIX}'"
    )
    assert out.strip() == said
    task = store.task_get(task_id)
    assert (task.state, task.last_error) == ("dead", CANCELLED_SUFFIX)
    assert f"{task_id}" in dlq("list", "--queue", "demo")
    dlq("requeue", str(task_id), "--queue", "demo")
    assert store.task_get(task_id).state == "pending"


def test_cancel_of_a_running_task_marks_it_for_its_worker(store):
    task_id = rivet.enqueue("noop", queue="demo", using=store).task_id
    (claimed,) = store.task_claim(queues=["demo"], owner="w1", limit=1, lease_ttl=600).claimed
    out = dlq("cancel", str(task_id), "--queue", "demo")
    assert out.startswith(f"cancelling task {task_id}: running: the worker stops the handler")
    assert store.task_get(task_id).state == "pending"
    assert store.task_ack(claimed.lease, "too late") is Settled.CANCELLED
    assert store.task_get(task_id).state == "dead"


def test_cancel_refuses_finished_and_unknown_tasks(store):
    dead_id = make_dead(store)
    with pytest.raises(CommandError, match=f"task {dead_id} is already dead: nothing to") as err:
        dlq("cancel", str(dead_id), "--queue", "demo")
    assert err.value.returncode == 1
    with pytest.raises(CommandError, match="no task with id 999999 in queue demo"):
        dlq("cancel", "999999", "--queue", "demo")
    with pytest.raises(CommandError, match="cancel needs a task id") as err:
        dlq("cancel", "--queue", "demo")
    assert err.value.returncode == 2
