"""The benchmark runs end to end on real workers, a real effect service and PostgreSQL, and
writes the results text, the JSON and the plot (small counts: no timing is asserted)."""

from __future__ import annotations

import json
import re

import pytest
from django.db import connection

from tests.processes import child_environ, postgres_url

pytestmark = [pytest.mark.acceptance, pytest.mark.long, pytest.mark.django_db(transaction=True)]


def test_bench_writes_every_mode_with_ceilings_rss_and_the_plot(
    run_manage, tmp_path, effect_database_url
):
    out = tmp_path / "bench" / "results.md"
    env = child_environ(postgres_url(), EFFECT_DATABASE_URL=effect_database_url)
    done = run_manage(
        "rivet_chaos",
        "bench",
        *("--workers", "1", "--concurrency", "1,2", "--kind", "noop,effect"),
        *("--tasks", "100", "--effect-tasks", "40", "--runs", "1"),
        *("--rate", "200", "--rate-tasks", "100", "--rate-runs", "2", "--soak", "300"),
        *("--enqueue-single", "50", "--enqueue-bulk", "500", "--out", str(out)),
        *("--schedules", "20", "--schedule-workers", "2", "--schedule-secs", "2"),
        *("--big-claim-rows", "20000", "--stale-stats-rows", "2000"),
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    text = out.read_text()
    for heading in ("## Setup", "## Targets", "## Full backlog", "## Offered load", "## Enqueue"):
        assert f"\n{heading}\n" in text
    assert "\n## Scheduler\n" in text
    assert "\n## Claim at 20,000 pending rows\n" in text
    assert "| claim at 20,000 pending rows | index scan in rank order | Index Scan using " in text
    assert "\n## Soak: 300 tasks\n" in text
    # The single enqueues again from 8 producers at once, and one producer's commit ceiling.
    assert "| `rivet.enqueue`, one call at a time, 8 producer processes at once | 50 |" in text
    # Their ceiling: the statement alone from 8 pgbench connections (50 shared: 7 each).
    crowd = re.search(r"8 producer processes at once \| 50 \|.*\| (.*) \|\n", text)
    assert crowd and re.match(
        r"[\d,]+/s \([\d, ]+\) \(pgbench -M prepared, 8 clients, 56 statements\)", crowd[1]
    ), text
    single = re.search(r"\| `rivet.enqueue`, one call at a time \| 50 \|.*\| (.*) \|\n", text)
    assert single and re.match(r"[\d,]+/s \(pg_test_fsync, |not measured: ", single[1]), text
    assert "| enqueue, one call at a time, 8 producers | >= 6,000/s |" in text
    assert "- machine: " in text and " cores, " in text
    assert "- PostgreSQL: PostgreSQL " in text
    with connection.cursor() as cursor:
        cursor.execute("SHOW autovacuum")
        autovacuum = cursor.fetchone()[0]
    # no VACUUM by the bench, whatever the server's autovacuum (which the setup names)
    assert f"- soak vacuum: none by the bench; the server's autovacuum is {autovacuum} " in text
    assert "[####################] 14/14 " in done.stdout  # the progress bar reached its end

    rows = json.loads((tmp_path / "bench" / "results.json").read_text())["rows"]
    backlog = [r for r in rows if r["mode"] == "backlog"]
    assert [(r["kind"], r["workers"], r["concurrency"]) for r in backlog] == [
        ("noop", 1, 1),
        ("noop", 1, 2),
        ("effect", 1, 1),
        ("effect", 1, 2),
    ]
    assert [r["tasks"] for r in backlog] == [100, 100, 40, 40]
    for r in backlog:
        assert r["throughput"] > 0 and r["ceiling"] > 0 and r["rss_mb"] > 0
        assert r["redelivered"] == 0
    (rate,) = [r for r in rows if r["mode"] == "rate"]
    assert rate["tasks"] == 100 and len(rate["e2e_sample_ms"]) == 100
    assert len(rate["e2e_runs_ms"]) == 2  # --rate-runs 2: each run's p50, p95, p99
    assert 0 < rate["e2e_p50_ms"] <= rate["e2e_p99_ms"]
    (soak,) = [r for r in rows if r["mode"] == "soak"]
    assert soak["tasks"] == 300 and soak["concurrency"] == 2
    assert soak["soak"]["first_10pct"]["tasks"] == soak["soak"]["last_10pct"]["tasks"] == 30

    # The scheduler's part: every tick of the 20 schedules once, and its cost measured.
    scheduler = json.loads((tmp_path / "bench" / "results.json").read_text())["scheduler"]
    assert (scheduler["schedules"], scheduler["workers"]) == (20, 2)
    assert scheduler["ticks"] >= 20 * 2 and scheduler["measured_ticks"] > 0
    assert (scheduler["enqueued_twice"], scheduler["missing"]) == (0, 0)
    assert scheduler["lateness_p99_s"] is not None and len(scheduler["cpu_idle_per_worker"]) == 2
    assert "| scheduler: every tick once (20 one-second schedules, 2 workers) |" in text
    with connection.cursor() as cursor:  # it removed what it made
        cursor.execute("SELECT count(*) FROM rivet_schedule WHERE name LIKE 'bench-schedule-%%'")
        assert cursor.fetchone()[0] == 0

    # The stale-statistics part: both drains, the first on the statistics of an empty table.
    stale = json.loads((tmp_path / "bench" / "results.json").read_text())["stale_stats"]
    assert (stale["rows"], stale["concurrency"]) == (2000, 2)
    assert stale["stale"]["reltuples"] < 2000 <= stale["analyzed"]["reltuples"]
    assert stale["stale"]["tasks"] == stale["analyzed"]["tasks"] == 2000
    assert stale["ratio"] > 0
    assert "\n## Backlog on stale statistics: 2,000 tasks\n" in text
    assert "| stale statistics backlog (2,000) | >= 0.8 of the analyzed run | " in text

    assert (tmp_path / "bench" / "throughput.png").read_bytes().startswith(b"\x89PNG")


def test_a_soak_with_a_vacuum_interval_vacuums_while_it_drains(run_manage, tmp_path):
    out = tmp_path / "results.md"
    done = run_manage(
        "rivet_chaos",
        "bench",
        *("--workers", "1", "--concurrency", "4", "--kind", "noop", "--tasks", "50"),
        *("--runs", "1", "--no-ceiling", "--rate", "0", "--enqueue-single", "0"),
        *(
            "--enqueue-bulk",
            "1",
            "--soak",
            "4000",
            "--soak-vacuum-secs",
            "0.05",
            "--schedules",
            "0",
            "--big-claim-rows",
            "0",
            "--stale-stats-rows",
            "0",
        ),
        *("--out", str(out), "--no-plot"),
        env=child_environ(postgres_url()),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    vacuums = re.search(r"of the first, (\d+) VACUUM\(s\) by the bench", done.stdout)
    assert vacuums and int(vacuums[1]) >= 1, done.stdout
    assert "- soak vacuum: `VACUUM rivet_task` every 0.05 s" in out.read_text()
    assert "--soak-vacuum-secs 0.05" in out.read_text()


def test_bench_without_an_effect_database_says_what_it_needs(run_manage, tmp_path):
    env = child_environ(postgres_url(), EFFECT_DATABASE_URL="")
    done = run_manage(
        "rivet_chaos", "bench", "--kind", "effect", "--out", str(tmp_path / "r.md"), env=env
    )
    assert done.returncode != 0
    assert "--kind effect runs the effect service on EFFECT_DATABASE_URL" in done.stderr
    assert not (tmp_path / "r.md").exists()
