"""The scale study's results: the setup, one row per worker count and mode, the commit rate;
written as ``bench/scale.md``, ``bench/scale.json`` and a two-panel PNG (docs/scaling.md).

Each row gives the median of its runs and each run's own figure in brackets, so the range is
there to read; each run's load average at its start is in the JSON and in the runs table.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import django
from django.db import connections

from bench.report import machine

SERVER_SETTINGS = (
    "max_connections",
    "shared_buffers",
    "synchronous_commit",
    "wal_sync_method",
    "fsync",
    "autovacuum",
)
TITLE = "# rivet scale study results"
INTRO = (
    "Written whole by `python manage.py rivet_scale` (`make scale`; see docs/scaling.md). "
    "Throughput and latency come from timestamps PostgreSQL wrote on the task rows; CPU from "
    "/proc (the server's processes, the workers, PgBouncer); WAL from `pg_current_wal_lsn()`; "
    "write transactions from the next transaction id. Each cell: the median of the runs, and "
    "each run in brackets."
)


def setup_lines(options: Any) -> list[tuple[str, str]]:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT version()")
        (server,) = cursor.fetchone()
        cursor.execute(
            "SELECT name, setting || coalesce(' ' || unit, '') FROM pg_settings "
            "WHERE name = ANY(%s) ORDER BY name",
            [list(SERVER_SETTINGS)],
        )
        found = cursor.fetchall()
    load = " / ".join(f"{x:.2f}" for x in _loadavg())
    return [
        ("date", datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")),
        ("machine", machine()),
        ("os", f"{platform.system()} {platform.release()}; load average at start {load}"),
        ("PostgreSQL", server.split(" on ")[0]),
        ("server settings", ", ".join(f"{name} {value}" for name, value in found)),
        (
            "software",
            f"Python {platform.python_version()}, Django {django.get_version()}, "
            f"psycopg {version('psycopg')}, rivet {version('django-rivet')}",
        ),
        (
            "workers",
            f"real `rivet_worker` processes, --concurrency {options.concurrency} --pool-size "
            f"{options.concurrency + 2}, prefetch auto, noop tasks of 100 bytes; PgBouncer in "
            f"transaction pooling with {options.server_pool} server connections, the workers' "
            "LISTEN bypassing it (RIVET['LISTEN_DATABASE_URL']); the producer connects directly",
        ),
        ("command", f"`{options.command()}`"),
    ]


def _loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def point_line(point: dict[str, Any]) -> str:
    drain, latency = point["drain"], point["latency"]
    p50, _, p99 = latency["e2e_ms"]
    return (
        f"{point['mode']:>9} N={point['workers']:<3} run {point['run']}: "
        f"{drain['per_s']:,.0f} tasks/s, e2e at {latency['rate']:g}/s p50 {p50:.1f} ms "
        f"p99 {p99:.1f} ms, {drain['server_connections']} server connections, "
        f"load {point['load'][0]:.2f}"
    )


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def summarise(points: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (mode, workers), in the order measured: medians and each run's figures."""
    keys = list(dict.fromkeys((p["mode"], p["workers"]) for p in points))
    rows = []
    for mode, count in keys:
        runs = [p for p in points if (p["mode"], p["workers"]) == (mode, count)]
        drains = [p["drain"] for p in runs]
        cpu = [d["cpu_ms"] for d in drains if d["cpu_ms"]]
        rate_cpu = [p["latency"]["cpu_ms"] for p in runs if p["latency"].get("cpu_ms")]
        rows.append(
            {
                "mode": mode,
                "workers": count,
                "tasks": [d["tasks"] for d in drains],
                "per_s": [d["per_s"] for d in drains],
                "e2e_p50_ms": [p["latency"]["e2e_ms"][0] for p in runs],
                "e2e_p99_ms": [p["latency"]["e2e_ms"][2] for p in runs],
                "server_connections": [d["server_connections"] for d in drains],
                "cpu_server_ms": [c["server"] for c in cpu],
                "cpu_workers_ms": [c["workers"] for c in cpu],
                "cpu_pgbouncer_ms": [c.get("pgbouncer", 0.0) for c in cpu],
                "cpu_machine_ms": [c["machine"] for c in cpu],
                "cpu_server_enqueue_ms": [
                    d["cpu_ms_enqueue"]["server"] for d in drains if d.get("cpu_ms_enqueue")
                ],
                "wal_bytes_drain": [d["wal_bytes_drain"] for d in drains],
                "wal_bytes_enqueue": [d["wal_bytes_enqueue"] for d in drains],
                "write_xacts_per_task": [d["write_xacts_per_task"] for d in drains],
                "rate_cpu_server_ms": [c["server"] for c in rate_cpu],
                "rate_cpu_workers_ms": [c["workers"] for c in rate_cpu],
                "load": [p["load"][0] for p in runs],
            }
        )
    return rows


def result(
    setup: list[tuple[str, str]],
    points: list[dict[str, Any]],
    enqueue: dict[str, Any] | None,
    *,
    end_load: list[float],
) -> dict[str, Any]:
    return {
        "setup": dict(setup),
        "points": points,
        "rows": summarise(points),
        "enqueue": enqueue,
        "end_load": end_load,
    }


def write(result: dict[str, Any], options: Any, *, say: Callable[[str], None]) -> None:
    plot = options.plot_out
    if plot is not None:
        setup = result["setup"]
        title = f"rivet scale study, {setup['date']}: {setup['machine']}"
        write_plot(plot, result["rows"], title=title)
    text = render(result, plot=plot, out=options.out)
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(text)
    options.json_out.parent.mkdir(parents=True, exist_ok=True)
    options.json_out.write_text(json.dumps(result, indent=1) + "\n")
    say("")
    say(text)
    say(
        "written: "
        + ", ".join(map(str, [options.out, options.json_out, *([plot] if plot else [])]))
    )


# -- text ----------------------------------------------------------------------------------------


def _cell(values: Sequence[float], fmt: str = "{:,.0f}") -> str:
    if not values:
        return "-"
    text = fmt.format(_median(values))
    if len(values) > 1:
        text += " (" + ", ".join(fmt.format(v) for v in values) + ")"
    return text


def render(result: dict[str, Any], *, plot: Path | None, out: Path) -> str:
    lines = [TITLE, "", INTRO, "", "## Setup", ""]
    lines += [f"- {label}: {value}" for label, value in result["setup"].items()]
    end = " / ".join(f"{x:.2f}" for x in result["end_load"])
    lines += [f"- load average at the end: {end}", ""]
    lines += _throughput_table(result["rows"])
    lines += _cost_table(result["rows"])
    lines += _runs_table(result["points"])
    if result["enqueue"]:
        lines += _enqueue_table(result["enqueue"])
    if plot is not None:
        where = os.path.relpath(plot.resolve(), out.parent.resolve())
        lines += ["## Plot", "", f"![throughput and latency by worker count]({where})", ""]
    return "\n".join(lines)


def _throughput_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    lines = [
        "## Throughput and latency by worker processes",
        "",
        "Drain: a backlog committed at once, first claim to last ack. Latency: end to end "
        "(enqueue to ack) at the offered rate, the same workers idle-waiting.",
        "",
        "| mode | workers | tasks | drain, tasks/s | e2e p50, ms | e2e p99, ms | server "
        "connections (peak) | load (1 min) at start |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['mode']} | {r['workers']} | {min(r['tasks'])} | {_cell(r['per_s'])} | "
            f"{_cell(r['e2e_p50_ms'], '{:.1f}')} | {_cell(r['e2e_p99_ms'], '{:.1f}')} | "
            f"{_cell(r['server_connections'])} | {_cell(r['load'], '{:.2f}')} |"
        )
    return [*lines, ""]


def _cost_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    lines = [
        "## What each task cost",
        "",
        "CPU milliseconds per task during the drain (the machine: every core's busy time, "
        "whatever ran) and the server's while the backlog was inserted (one enqueue_many), WAL "
        "bytes per task (the enqueue's bulk insert, then the drain: claims and acks), write "
        "transactions per task during the drain; and the CPU each task offered at the rate "
        "cost the server and the workers (idle workers each claim on every notification).",
        "",
        "| mode | workers | CPU server | CPU workers | CPU PgBouncer | CPU machine | WAL "
        "enqueue | WAL drain | write xacts/task | CPU server, bulk enqueue | at the rate: "
        "CPU server | CPU workers |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['mode']} | {r['workers']} | {_cell(r['cpu_server_ms'], '{:.3f}')} | "
            f"{_cell(r['cpu_workers_ms'], '{:.3f}')} | {_cell(r['cpu_pgbouncer_ms'], '{:.3f}')} "
            f"| {_cell(r['cpu_machine_ms'], '{:.3f}')} | {_cell(r['wal_bytes_enqueue'])} | "
            f"{_cell(r['wal_bytes_drain'])} | {_cell(r['write_xacts_per_task'], '{:.3f}')} | "
            f"{_cell(r['cpu_server_enqueue_ms'], '{:.3f}')} | "
            f"{_cell(r['rate_cpu_server_ms'], '{:.3f}')} | "
            f"{_cell(r['rate_cpu_workers_ms'], '{:.3f}')} |"
        )
    return [*lines, ""]


def _runs_table(points: Sequence[dict[str, Any]]) -> list[str]:
    lines = [
        "## Every run",
        "",
        "| run | mode | workers | drain, tasks/s | e2e p99, ms | load at start (1 / 5 / 15 min) |",
        "| ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for p in points:
        load = " / ".join(f"{x:.2f}" for x in p["load"])
        lines.append(
            f"| {p['run']} | {p['mode']} | {p['workers']} | {p['drain']['per_s']:,.0f} | "
            f"{p['latency']['e2e_ms'][2]:.1f} | {load} |"
        )
    return [*lines, ""]


def _enqueue_table(enqueue: dict[str, Any]) -> list[str]:
    fsync = enqueue.get("fsync") or {}
    ceiling = (
        f"{fsync['per_s']:,.0f}/s ({fsync['method']}, {fsync['note']})"
        if fsync.get("per_s")
        else f"not measured: {fsync.get('note', '--no-fsync')}"
    )
    load = " / ".join(f"{x:.2f}" for x in enqueue["load"])
    return [
        "## The commit rate",
        "",
        f"One producer, {enqueue['tasks']} `rivet.enqueue` calls one at a time (each its own "
        f"commit), its session's `synchronous_commit` set each way; pg_test_fsync's flushes per "
        f"second (one 8 kB write each): {ceiling}. Load at the end: {load}.",
        "",
        "| synchronous_commit | enqueues/s | WAL bytes per enqueue | server CPU per enqueue, ms |",
        "| --- | ---: | ---: | ---: |",
        *(
            f"| {setting} | {_cell(enqueue['per_s'][setting])} | "
            f"{_cell(enqueue['wal_bytes'][setting])} | "
            f"{_cell(enqueue['cpu_server_ms'][setting], '{:.3f}')} |"
            for setting in ("on", "off")
        ),
        "",
    ]


# -- plot ----------------------------------------------------------------------------------------


def write_plot(path: Path, rows: Sequence[dict[str, Any]], *, title: str) -> Path:
    from bench.plot import require_matplotlib

    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 5.2), layout="constrained")
    colours = {"direct": "tab:blue", "pgbouncer": "tab:orange"}
    counts = sorted({r["workers"] for r in rows})
    for mode in dict.fromkeys(r["mode"] for r in rows):
        series = sorted((r for r in rows if r["mode"] == mode), key=lambda r: r["workers"])
        xs = [r["workers"] for r in series]
        colour = colours.get(mode, "tab:green")
        _with_range(left, xs, [r["per_s"] for r in series], colour, f"{mode}: drain")
        _with_range(right, xs, [r["e2e_p99_ms"] for r in series], colour, f"{mode}: p99")
        right.plot(
            xs,
            [_median(r["e2e_p50_ms"]) for r in series],
            ":",
            marker=".",
            color=colour,
            label=f"{mode}: p50",
        )
    left.set_title("Backlog drain: tasks per second by worker processes")
    left.set_ylabel("tasks per second (median; bar: the runs' range)")
    left.set_ylim(bottom=0)
    right.set_title("End to end at the offered rate, by worker processes")
    right.set_ylabel("milliseconds, enqueue to ack")
    right.set_ylim(bottom=0)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts, [str(c) for c in counts])
        ax.set_xlabel("worker processes (rivet_worker)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    figure.suptitle(title, fontsize=11)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _with_range(ax, xs: list[int], runs: list[list[float]], colour: str, label: str) -> None:
    medians = [_median(values) for values in runs]
    low = [m - min(values) for m, values in zip(medians, runs, strict=True)]
    high = [max(values) - m for m, values in zip(medians, runs, strict=True)]
    ax.errorbar(xs, medians, yerr=[low, high], fmt="-o", color=colour, capsize=3, label=label)
