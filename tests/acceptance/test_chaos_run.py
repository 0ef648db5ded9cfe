"""A real chaos run: workers on this run's test database are killed, aborted and stopped while
they make effects through a real effect service; the report must show S1 = S2 = L1 = 0 and
F2 > 0, and every figure must agree with what the two databases hold afterwards.
"""

from __future__ import annotations

import json
import re

import pytest

from chaos_project.chaos.harness import ChaosOptions
from rivet.models import FencedWrite, Task
from tests.effect_service import EffectDB
from tests.processes import child_environ, postgres_url

pytestmark = [pytest.mark.acceptance, pytest.mark.long, pytest.mark.django_db(transaction=True)]

RUN = ("--tasks", "150", "--workers", "4", "--duration-secs", "8", "--seed", "7")


def report(output: str) -> dict[str, int]:
    """The report's figures as {label: value}, e.g. {"duplicate effects": 0, ...}."""
    rows = re.findall(r"^([a-z][a-z -]+?)\s{2,}(\d+)\b", output, flags=re.MULTILINE)
    return {label: int(value) for label, value in rows}


def test_chaos_run_holds_every_invariant_and_the_report_matches_the_databases(
    run_manage,
    effect_database_url,
    tmp_path,
):
    env = child_environ(postgres_url(), EFFECT_DATABASE_URL=effect_database_url)
    summary_path = tmp_path / "run.json"
    done = run_manage(
        "rivet_chaos", *RUN, "--own-effect-service", "--json", str(summary_path), env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr

    summary = json.loads(summary_path.read_text())
    assert summary["ok"] and summary["seed"] == 7
    # The timeline plot beside the JSON (chaos_project.chaos.timeline).
    assert (tmp_path / "run-timeline.png").read_bytes().startswith(b"\x89PNG")
    # Every zombie that bit was fenced; every armed worker reached its failpoint.
    assert summary["zombies"]["unfenced"] == 0
    assert summary["zombies"]["fenced"] == summary["events"]["zombie"] > 0
    assert summary["failpoints"]["armed"] == summary["failpoints"]["reached"] > 0
    assert summary["events"]["kill"] > 0
    assert "effect service writes to" in done.stdout  # checked before anything was emptied
    assert done.stdout.index("effect service writes to") < done.stdout.index("emptied")

    figures = report(done.stdout)
    assert "seed 7" in done.stdout
    assert "emptied both databases" in done.stdout
    assert figures["duplicate effects"] == 0
    assert figures["done without effect"] == 0
    assert figures["tasks still pending"] == 0
    assert figures["fenced acks"] > 0
    assert figures["chaos events"] > 0
    assert "every invariant held: S1, S2, L1, F2, C1, H1, H2, H3, H4, H5, D1" in done.stdout
    # The history was recorded and judged (chaos_project.chaos.history, .leases).
    for line in ("overlapping leases", "claims too early", "claims past bound"):
        assert figures[line] == 0
    assert figures["epochs not growing"] == figures["done no success"] == 0
    assert figures["dead not designed"] == 0
    assert summary["history"]["claims"] >= figures["tasks done"] > 0
    assert summary["history"]["effect_requests"] >= figures["tasks done"]
    assert summary["requeues"]["dead"] > 0  # an operator's requeues during the run
    assert "--prefetch" not in " ".join(ChaosOptions(effect_database_url="x").worker_args())

    tasks = Task.objects.filter(queue="chaos")
    assert tasks.count() == figures["tasks enqueued"] == 152
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
