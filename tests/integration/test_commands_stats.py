"""manage.py rivet_stats on the real database."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

import rivet
from rivet.decisions import failed
from rivet.stores import store_for_alias
from rivet.values import Lease

pytestmark = pytest.mark.django_db


def stats(*args):
    out = StringIO()
    call_command("rivet_stats", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def store():
    return store_for_alias("default")


def fill(store):
    """demo: 2 ready, 1 leased, 1 delayed, 1 done, 1 dead, 1 fenced write; other: 1 ready."""
    for n in range(5):
        rivet.enqueue("noop", {"n": n}, queue="demo", max_attempts=1, using=store)
    rivet.enqueue("noop", queue="demo", delay=3600, using=store)
    rivet.enqueue("noop", queue="other", using=store)
    batch = store.task_claim(queues=["demo"], owner="w1", limit=3, lease_ttl=600)
    done, dead, leased = batch.claimed
    store.task_ack(done.lease, result={"ok": True})
    store.task_settle([failed(dead, "boom", 0)])
    store.task_ack(Lease(task_id=leased.task_id, epoch=leased.epoch - 1, owner="stale"))


def test_prints_every_count_for_the_queue(store):
    fill(store)
    text = stats("--queue", "demo")
    assert text.splitlines()[0].split() == ["queue", "demo"]
    assert "oldest ready age" in text and "fenced writes" in text
    values = {line[:18].strip(): line[18:].strip() for line in text.splitlines()}
    assert values["ready"] == "2"
    assert values["leased"] == "1"
    assert values["delayed"] == "1"
    assert values["done"] == "1"
    assert values["dead"] == "1"
    assert values["fenced writes"] == "1"
    assert values["oldest ready age"].endswith("s")


def test_json_is_one_object_with_every_field(store):
    fill(store)
    data = json.loads(stats("--queue", "demo", "--json"))
    assert {k: data[k] for k in ("queue", "ready", "leased", "delayed", "done", "dead")} == {
        "queue": "demo",
        "ready": 2,
        "leased": 1,
        "delayed": 1,
        "done": 1,
        "dead": 1,
    }
    assert data["fenced"] == 1
    assert data["oldest_ready_age_secs"] >= 0


def test_an_empty_queue_has_no_oldest_ready_age():
    data = json.loads(stats("--queue", "empty", "--json"))
    assert data["ready"] == 0 and data["oldest_ready_age_secs"] is None
    assert "oldest ready age -" in " ".join(stats("--queue", "empty").split())


def test_a_bad_queue_name_exits_2():
    with pytest.raises(CommandError, match="queue") as caught:
        stats("--queue", "no spaces please")
    assert caught.value.returncode == 2
