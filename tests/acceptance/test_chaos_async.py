"""A real chaos run with ``--handlers async``: the effect kind runs as a coroutine on each
worker's event loop, through the asyncio effect client, while the workers are killed, aborted at
failpoints and stopped; every invariant must hold, and the workers must really have run it on
their event loops."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.processes import child_environ, postgres_url

pytestmark = [pytest.mark.acceptance, pytest.mark.long, pytest.mark.django_db(transaction=True)]

RUN = ("--tasks", "150", "--workers", "4", "--duration-secs", "8", "--seed", "7")


def test_chaos_run_with_async_handlers_holds_every_invariant(
    run_manage, effect_database_url, tmp_path
):
    env = child_environ(postgres_url(), EFFECT_DATABASE_URL=effect_database_url)
    summary_path = tmp_path / "run.json"
    done = run_manage(
        "rivet_chaos", *RUN, "--handlers", "async", "--own-effect-service", "--keep-logs",
        "--json", str(summary_path), env=env,
    )  # fmt: skip
    logs = Path(re.search(r"^logs: (\S+)$", done.stdout, flags=re.MULTILINE).group(1))
    try:
        assert done.returncode == 0, done.stdout + done.stderr
        assert "every invariant held: S1, S2, L1, F2, C1" in done.stdout
        summary = json.loads(summary_path.read_text())
        assert summary["ok"]
        assert summary["zombies"]["unfenced"] == 0
        assert summary["zombies"]["fenced"] == summary["events"]["zombie"] > 0
        assert summary["failpoints"]["armed"] == summary["failpoints"]["reached"] > 0
        assert summary["events"]["kill"] > 0
        worker_logs = [p.read_text() for p in logs.glob("chaos-w*.log")]
        assert worker_logs
        started = [log for log in worker_logs if '"event": "event_loop_started"' in log]
        # Every worker that claimed a chaos task ran it on its event loop.
        claimed = [log for log in worker_logs if '"kind": "chaos.effect"' in log]
        assert claimed and all(log in started for log in claimed)
    finally:
        shutil.rmtree(logs, ignore_errors=True)
