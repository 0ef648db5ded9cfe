"""rivet_scale: its flags, their errors, the pooler's URL, and the tables and plot it writes."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management.base import CommandError

from bench.pooler import Pooler
from bench.scale import COUNTS, MODES, ScaleError, ScaleOptions
from bench.scale_report import render, summarise, write_plot
from chaos_project.management.commands.rivet_scale import Command


def parse(*args: str):
    return Command().create_parser("manage.py", "rivet_scale").parse_args(list(args))


def test_the_defaults_are_the_issue_study() -> None:
    options = parse()
    assert options.workers == COUNTS == (1, 2, 4, 8, 16, 32, 64)
    assert options.modes == MODES == ("direct", "pgbouncer")
    assert options.server_pool < max(COUNTS) and options.runs >= 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--workers", "0"), "--workers: must be a comma-separated list of integers >= 1"),
        (("--workers", "1,x"), "--workers: must be a comma-separated list of integers >= 1"),
        (("--modes", "direct,pooled"), "--modes: must be modes from direct,pgbouncer"),
        (("--runs", "0"), "--runs: must be an integer >= 1"),
        (("--rate", "-3"), "--rate: must be a number > 0"),
        (("--enqueue", "-1"), "--enqueue: must be an integer >= 0"),
    ],
)
def test_bad_input_is_refused_with_what_was_expected(args, message) -> None:
    with pytest.raises(CommandError) as caught:
        parse(*args)
    assert message in str(caught.value)


def test_options_built_in_code_are_checked_too() -> None:
    with pytest.raises(ScaleError) as caught:
        ScaleOptions(counts=(0, 4), modes=("direct", "both"), runs=0, out=Path("x.md"))
    text = str(caught.value)
    assert "--workers takes counts of 1 or more" in text
    assert "--modes takes direct, pgbouncer; got direct, both" in text
    assert "--runs must be 1 or more" in text


def test_the_pooler_url_keeps_the_user_and_database_and_names_the_pooler() -> None:
    pooler = Pooler(port=6499, pid=1, server_pool=20)
    url = pooler.url("postgres://app:secret@db1:5432/rivet?target_session_attrs=read-write")
    assert url == (
        "postgres://app:secret@127.0.0.1:6499/rivet"
        "?target_session_attrs=read-write&disable_server_side_cursors=True"
    )


def point(mode: str, workers: int, run: int, per_s: float) -> dict:
    return {
        "mode": mode,
        "workers": workers,
        "run": run,
        "load": [0.5, 0.4, 0.3],
        "load_end": [0.6, 0.4, 0.3],
        "latency": {"rate": 300.0, "tasks": 1200, "e2e_ms": [2.0, 4.0, 9.0 + run]},
        "drain": {
            "tasks": 10000,
            "per_s": per_s,
            "service_ms": [1.0, 2.0, 3.0],
            "redelivered": 0,
            "cpu_ms": {"server": 0.2, "workers": 0.25, "machine": 0.5, "rest": 0.05},
            "wal_bytes_enqueue": 600.0,
            "wal_bytes_drain": 1500.0,
            "write_xacts_per_task": 0.06,
            "server_connections": 4 * workers,
            "listen_connections": workers,
        },
    }


def test_a_row_holds_every_run_and_the_table_their_median_and_range(tmp_path: Path) -> None:
    points = [
        point("direct", 1, 1, 3000.0),
        point("direct", 1, 2, 3400.0),
        point("direct", 1, 3, 3100.0),
        point("pgbouncer", 1, 1, 2500.0),
    ]
    rows = summarise(points)
    assert [(r["mode"], r["workers"], r["per_s"]) for r in rows] == [
        ("direct", 1, [3000.0, 3400.0, 3100.0]),
        ("pgbouncer", 1, [2500.0]),
    ]
    result = {"setup": {"date": "d"}, "points": points, "rows": rows, "enqueue": None}
    text = render({**result, "end_load": [1.0, 1.0, 1.0]}, plot=None, out=tmp_path / "s.md")
    assert "| direct | 1 | 10000 | 3,100 (3,000, 3,400, 3,100) | 2.0 (2.0, 2.0, 2.0) |" in text
    assert "| pgbouncer | 1 | 10000 | 2,500 | 2.0 | 10.0 |" in text


def test_the_plot_is_a_png(tmp_path: Path) -> None:
    rows = summarise([point(m, n, 1, 1000.0 * n) for n in (1, 2, 4) for m in MODES])
    path = write_plot(tmp_path / "scaling.png", rows, title="test")
    assert path.read_bytes().startswith(b"\x89PNG")


def test_the_json_goes_beside_the_text_under_its_name(tmp_path: Path) -> None:
    assert ScaleOptions(out=tmp_path / "scale-b.md").json_out == tmp_path / "scale-b.json"
    named = ScaleOptions(out=tmp_path / "scale.md", json_path=tmp_path / "x.json")
    assert named.json_out == tmp_path / "x.json"
