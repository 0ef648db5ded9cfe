"""manage.py rivet_enqueue through call_command, on the real databases."""

import json

import pytest
from django.core.management import CommandError, call_command

from rivet.models import Task

pytestmark = pytest.mark.django_db(databases=["default", "sqlite"])


def enqueue(*args, **options):
    from io import StringIO

    out = StringIO()
    call_command("rivet_enqueue", *args, stdout=out, **options)
    return out.getvalue().strip()


def test_prints_the_new_id_and_writes_the_row():
    out = enqueue(
        "--queue",
        "demo",
        "--kind",
        "noop",
        "--payload",
        '{"amount": 100}',
        "--idem-key",
        "job-1",
        "--priority",
        "7",
        "--max-attempts",
        "5",
    )
    word, task_id = out.split()
    task = Task.objects.get(pk=int(task_id))
    assert word == "enqueued"
    assert (task.queue, task.kind, task.payload, task.idem_key) == (
        "demo",
        "noop",
        {"amount": 100},
        "job-1",
    )
    assert (task.priority, task.max_attempts, task.state, task.attempts) == (7, 5, "pending", 0)


def test_the_same_key_and_work_prints_duplicate_with_the_first_id():
    first = enqueue("--queue", "demo", "--kind", "noop", "--idem-key", "job-1")
    again = enqueue("--queue", "demo", "--kind", "noop", "--idem-key", "job-1")
    assert again == f"duplicate {first.split()[1]}"
    assert Task.objects.count() == 1


def test_the_same_key_with_other_work_exits_1_naming_the_key():
    enqueue("--queue", "demo", "--kind", "noop", "--idem-key", "pay-1", "--payload", "1")
    with pytest.raises(CommandError, match="'pay-1'") as caught:
        enqueue("--queue", "demo", "--kind", "noop", "--idem-key", "pay-1", "--payload", "2")
    assert caught.value.returncode == 1
    assert Task.objects.count() == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--payload", "{not json"], "not valid JSON"),
        (["--queue", "bad queue"], "queue 'bad queue'"),
        (["--priority", "1000"], "priority"),
        (["--max-attempts", "0"], "max_attempts"),
        (["--delay-secs", "-5"], "delay"),
    ],
    ids=["malformed-json", "bad-queue", "priority", "max-attempts", "negative-delay"],
)
def test_bad_input_exits_2_and_writes_nothing(args, message):
    with pytest.raises(CommandError, match=message) as caught:
        enqueue("--kind", "noop", *args)
    assert caught.value.returncode == 2
    assert str(caught.value).startswith("nothing enqueued")
    assert Task.objects.count() == 0


def test_an_oversized_payload_exits_2_and_writes_nothing(settings):
    settings.RIVET = {"MAX_PAYLOAD_BYTES": 100}
    with pytest.raises(CommandError, match="100 bytes") as caught:
        enqueue("--kind", "noop", "--payload", json.dumps({"blob": "x" * 200}))
    assert caught.value.returncode == 2
    assert Task.objects.count() == 0


def test_a_missing_kind_is_a_usage_error():
    with pytest.raises(CommandError, match="--kind"):
        enqueue("--queue", "demo")


def test_delay_makes_the_task_visible_later():
    out = enqueue("--kind", "noop", "--delay-secs", "3600")
    task = Task.objects.get(pk=int(out.split()[1]))
    assert (task.visible_at - task.created_at).total_seconds() == pytest.approx(3600, abs=1)


def test_the_queue_defaults_to_the_setting(settings):
    settings.RIVET = {"QUEUE": "from-settings"}
    out = enqueue("--kind", "noop")
    assert Task.objects.get(pk=int(out.split()[1])).queue == "from-settings"


def test_database_picks_the_sqlite_store():
    out = enqueue("--kind", "noop", "--queue", "lite", "--database", "sqlite")
    task_id = int(out.split()[1])
    assert Task.objects.using("sqlite").get(pk=task_id).queue == "lite"
    assert not Task.objects.using("default").filter(queue="lite").exists()
