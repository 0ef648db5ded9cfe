"""The scale study runs end to end on real workers, directly and through a real PgBouncer in
transaction pooling, and writes its table, JSON and plot (small counts: no timing is asserted)."""

from __future__ import annotations

import json

import pytest

from tests.processes import child_environ, postgres_url

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def test_every_point_drains_its_backlog_in_both_modes_and_the_tables_list_every_count(
    run_manage, tmp_path
):
    out = tmp_path / "scale.md"
    done = run_manage(
        "rivet_scale",
        *("--workers", "1,2", "--tasks", "150", "--rate", "200", "--rate-tasks", "40"),
        *("--concurrency", "2", "--server-pool", "2", "--runs", "1", "--enqueue", "20"),
        *("--no-fsync", "--out", str(out), "--plot", str(tmp_path / "scaling.png")),
        env=child_environ(postgres_url()),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((tmp_path / "scale.json").read_text())

    points = result["points"]
    assert [(p["mode"], p["workers"]) for p in points] == [
        ("direct", 1),
        ("pgbouncer", 1),
        ("direct", 2),
        ("pgbouncer", 2),
    ]
    for p in points:
        drain = p["drain"]
        assert drain["tasks"] == 150 and drain["redelivered"] == 0 and drain["per_s"] > 0
        assert p["latency"]["tasks"] == 40
        assert 0 < p["latency"]["e2e_ms"][0] <= p["latency"]["e2e_ms"][2]
        assert drain["wal_bytes_enqueue"] > 0 and drain["wal_bytes_drain"] > 0
        assert drain["write_xacts_per_task"] > 0
        assert len(p["load"]) == 3
    # the pooler's point: two workers share its 2 server connections (their LISTENs bypass
    # it), while each direct worker holds its own pool's
    others = {p["mode"]: p["drain"]["other_connections"] for p in points if p["workers"] == 2}
    assert 0 < others["pgbouncer"] < others["direct"]
    assert result["enqueue"]["fsync"] is None
    assert [len(v) for v in result["enqueue"]["per_s"].values()] == [1, 1]

    text = out.read_text()
    for mode in ("direct", "pgbouncer"):
        for count in (1, 2):
            assert f"\n| {mode} | {count} | 150 | " in text
            assert f"| 1 | {mode} | {count} | " in text
    assert "| on | " in text and "| off | " in text
    assert (tmp_path / "scaling.png").read_bytes().startswith(b"\x89PNG")
