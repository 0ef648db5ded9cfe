"""The benchmark runs end to end and records the setup a number needs to be repeatable."""

from __future__ import annotations

import pytest

from tests.processes import child_environ, postgres_url

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def test_bench_smoke_writes_results_with_machine_and_postgres(run_manage, tmp_path):
    out = tmp_path / "results.md"
    env = child_environ(postgres_url())
    done = run_manage(
        "rivet_chaos", "bench", "--workers", "1", "--tasks", "50", "--out", str(out), env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    text = out.read_text()
    assert "## Full backlog" in text
    assert "- machine: " in text and " cores, " in text
    assert "- PostgreSQL: PostgreSQL " in text
    assert "| 1 | 50 | " in text
    assert "- machine: " in done.stdout
