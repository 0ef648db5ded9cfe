"""The operator commands as a user runs them: `python manage.py rivet_...` in a real process.

The child process is pointed at this test run's database; ``transaction=True`` makes its
committed rows visible here and flushes them afterwards.
"""

import json
import subprocess

import pytest

from rivet.models import Task
from tests.processes import child_environ, postgres_url
from tests.processes import manage as run_manage

pytestmark = pytest.mark.django_db(transaction=True)


def manage(*args: str) -> subprocess.CompletedProcess:
    return run_manage(*args, env=child_environ(postgres_url(), RIVET_QUEUE="default"))


def test_the_same_key_twice_prints_duplicate_and_exits_0():
    args = ("rivet_enqueue", "--queue", "demo", "--kind", "noop", "--idem-key", "job-1")
    first, second = manage(*args), manage(*args)
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    word, task_id = first.stdout.split()
    assert word == "enqueued"
    assert second.stdout.strip() == f"duplicate {task_id}"
    assert list(Task.objects.values_list("id", flat=True)) == [int(task_id)]


def test_the_same_key_with_another_payload_fails_naming_the_key():
    base = ("rivet_enqueue", "--queue", "demo", "--kind", "effect", "--idem-key", "pay-1")
    assert manage(*base, "--payload", '{"amount":100}').returncode == 0
    clash = manage(*base, "--payload", '{"amount":999}')
    assert clash.returncode == 1
    assert "'pay-1'" in clash.stderr
    assert Task.objects.get().payload == {"amount": 100}


def test_malformed_json_exits_2_and_writes_nothing():
    done = manage("rivet_enqueue", "--queue", "demo", "--kind", "noop", "--payload", "{oops")
    assert done.returncode == 2
    assert "payload is not valid JSON" in done.stderr
    assert done.stdout == ""
    assert Task.objects.count() == 0


def test_stats_json_and_a_purge_that_cannot_ask():
    assert manage("rivet_enqueue", "--queue", "demo", "--kind", "noop").returncode == 0
    stats = manage("rivet_stats", "--queue", "demo", "--json")
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["ready"] == 1
    purge = manage("rivet_dlq", "--queue", "demo", "purge")
    assert purge.returncode == 2
    assert "not a terminal" in purge.stderr and "--yes" in purge.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("rivet_stats", "--queue", "demo"),
        ("rivet_stats", "--all"),
        ("rivet_dlq", "--queue", "demo", "list"),
        ("rivet_enqueue", "--queue", "demo", "--kind", "noop"),
        ("rivet_prune", "--older-than", "30d", "--dry-run"),
    ],
)
def test_an_unknown_database_alias_is_one_line_naming_the_aliases_and_exit_2(args):
    done = manage(*args, "--database", "nosuch")
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line == (
        "CommandError: --database 'nosuch' is not a database alias; "
        "the aliases in DATABASES are: default"
    )
    assert Task.objects.count() == 0


@pytest.mark.parametrize("depth", [101, 5000])
def test_a_payload_nested_past_the_limit_is_one_line_exit_2(depth):
    payload = "[" * depth + "]" * depth
    done = manage("rivet_enqueue", "--queue", "demo", "--kind", "noop", "--payload", payload)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"payload nests arrays and objects {depth} levels deep; " in line
    assert "at most 100 levels (rivet.text.MAX_JSON_DEPTH)" in line
    assert Task.objects.count() == 0
