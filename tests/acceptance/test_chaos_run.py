"""A real chaos run: workers on this run's test database are killed, aborted and stopped while
they make effects through a real effect service; the report must show S1 = S2 = L1 = 0 and
F2 > 0, and every figure must agree with what the two databases hold afterwards.
"""

from __future__ import annotations

import re

import pytest

from rivet.models import FencedWrite, Task
from tests.effect_service import EffectDB
from tests.processes import child_environ, postgres_url

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

RUN = ("--tasks", "60", "--workers", "3", "--duration-secs", "8", "--seed", "7")


def report(output: str) -> dict[str, int]:
    """The report's figures as {label: value}, e.g. {"duplicate effects": 0, ...}."""
    rows = re.findall(r"^([a-z][a-z -]+?)\s{2,}(\d+)\b", output, flags=re.MULTILINE)
    return {label: int(value) for label, value in rows}


def test_chaos_run_holds_every_invariant_and_the_report_matches_the_databases(
    run_manage,
    effect_database_url,
):
    env = child_environ(postgres_url(), EFFECT_DATABASE_URL=effect_database_url)
    done = run_manage("rivet_chaos", *RUN, "--own-effect-service", env=env)
    assert done.returncode == 0, done.stdout + done.stderr

    figures = report(done.stdout)
    assert "seed 7" in done.stdout
    assert "emptied both databases" in done.stdout
    assert figures["duplicate effects"] == 0
    assert figures["done without effect"] == 0
    assert figures["tasks still pending"] == 0
    assert figures["fenced acks"] > 0
    assert figures["chaos events"] > 0
    assert "every invariant held: S1, S2, L1, F2" in done.stdout

    tasks = Task.objects.filter(queue="chaos")
    assert tasks.count() == figures["tasks enqueued"] == 62
    assert tasks.filter(state="pending").count() == 0
    assert tasks.filter(state="done").count() == figures["tasks done"]
    assert tasks.filter(state="dead").count() == figures["dead-lettered"]
    assert FencedWrite.objects.filter(queue="chaos").count() == figures["fenced acks"]

    effect_db = EffectDB(effect_database_url)
    try:
        effects = effect_db.scalar("SELECT count(*) FROM effects_effect")
        keys = effect_db.scalar("SELECT count(DISTINCT key) FROM effects_effect")
    finally:
        effect_db.close()
    assert effects == keys == figures["effects written"]
    done_keys = set(
        tasks.filter(state="done", kind="chaos.effect").values_list("idem_key", flat=True)
    )
    assert len(done_keys) == figures["tasks done"]
