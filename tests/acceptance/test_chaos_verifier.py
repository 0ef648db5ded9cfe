"""The verifier on its own (``rivet_chaos verify``): it fails on a broken state, naming each
broken invariant, and passes once the same state is repaired."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from rivet.models import FencedWrite, Task
from rivet.producer import enqueue
from tests.effect_service import EffectDB

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

QUEUE = "verify-check"


@pytest.fixture
def effect_db(effect_command, effect_database_url):
    migrated = effect_command("migrate")
    assert migrated.returncode == 0, migrated.stderr
    db = EffectDB(effect_database_url)
    db.truncate()
    yield db
    db.close()


def effect_task(key: str, state: str) -> int:
    task_id = enqueue("chaos.effect", {"work_ms": 1}, queue=QUEUE, idem_key=key).task_id
    Task.objects.filter(pk=task_id).update(state=state)
    return task_id


def add_effect(db: EffectDB, key: str) -> None:
    db.conn.execute(
        "INSERT INTO effects_effect (key, body, created_at) VALUES (%s, '{}'::jsonb, now())",
        (key,),
    )


def verify(url: str) -> str:
    out = StringIO()
    call_command(
        "rivet_chaos",
        "verify",
        "--queue",
        QUEUE,
        "--effect-database-url",
        url,
        stdout=out,
    )
    return out.getvalue()


def test_verifier_names_every_broken_invariant_then_passes_once_repaired(
    effect_db,
    effect_database_url,
):
    effect_task("twice", "done")
    add_effect(effect_db, "twice")
    add_effect(effect_db, "twice")  # S1: a duplicate effect
    effect_task("never", "done")  # S2: done, no effect
    stuck = effect_task("stuck", "pending")  # L1: still pending; and no fenced write: F2

    with pytest.raises(CommandError, match=r"invariants failed: S1, S2, L1, F2"):
        verify(effect_database_url)

    effect_db.conn.execute(
        "DELETE FROM effects_effect WHERE id = (SELECT max(id) FROM effects_effect)"
    )
    add_effect(effect_db, "never")
    add_effect(effect_db, "stuck")
    Task.objects.filter(pk=stuck).update(state="done")
    FencedWrite.objects.create(task_id=stuck, queue=QUEUE, op="ack", owner="old", epoch=1)

    output = verify(effect_database_url)
    assert "every invariant held: S1, S2, L1, F2, C1" in output
    assert "fenced acks              1   <- proof F2 fired and was handled" in output


def test_verifier_fails_when_the_fence_never_fired(effect_db, effect_database_url):
    effect_task("once", "done")
    add_effect(effect_db, "once")
    with pytest.raises(CommandError, match=r"invariants failed: F2$"):
        verify(effect_database_url)


def test_a_stale_write_applied_fails_f2_even_when_writes_were_fenced(
    effect_db, effect_database_url
):
    """The finishing write's epoch and owner (settled_epoch, settled_by) must be the lease's."""
    stale = effect_task("stale", "done")
    add_effect(effect_db, "stale")
    Task.objects.filter(pk=stale).update(
        lease_epoch=2, lease_owner="new", settled_epoch=1, settled_by="zombie"
    )
    FencedWrite.objects.create(task_id=stale, queue=QUEUE, op="ack", owner="new", epoch=2)
    with pytest.raises(CommandError, match=r"invariants failed: F2$"):
        verify(effect_database_url)

    Task.objects.filter(pk=stale).update(settled_epoch=2, settled_by="zombie")  # owner only
    with pytest.raises(CommandError, match=r"invariants failed: F2$"):
        verify(effect_database_url)

    Task.objects.filter(pk=stale).update(settled_by="new")
    assert "every invariant held" in verify(effect_database_url)
    Task.objects.filter(pk=stale).update(state="dead", settled_by="")  # a claim's burial
    assert "every invariant held" in verify(effect_database_url)
    # a retry the cancel mark turned into a burial: the retry cleared the owner, same epoch
    Task.objects.filter(pk=stale).update(
        state="dead", settled_by="new", lease_owner=None, cancel_requested=True
    )
    assert "every invariant held" in verify(effect_database_url)
    Task.objects.filter(pk=stale).update(cancel_requested=False)  # no cancel: owner cleared
    with pytest.raises(CommandError, match=r"invariants failed: F2$"):
        verify(effect_database_url)


def test_a_cancelled_task_that_ended_done_fails_c1(effect_db, effect_database_url):
    """An operator's cancel marked the task; its worker's ack must not make it done."""
    marked = effect_task("marked", "done")
    add_effect(effect_db, "marked")
    FencedWrite.objects.create(task_id=marked, queue=QUEUE, op="ack", owner="old", epoch=1)
    Task.objects.filter(pk=marked).update(cancel_requested=True)
    with pytest.raises(CommandError, match=r"invariants failed: C1$"):
        verify(effect_database_url)
    Task.objects.filter(pk=marked).update(state="dead", last_error="cancelled by an operator")
    assert "every invariant held" in verify(effect_database_url)
