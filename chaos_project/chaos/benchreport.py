"""The benchmark's results text: the setup a number needs to be repeatable, then the table.

``bench/results.md`` holds one section per mode (``## Full backlog`` and ``## Offered load``);
a run replaces the section of its own mode and keeps the other, so one file carries both.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import django
from django.db import connections

from chaos_project.chaos import queries

TITLE = "# rivet benchmark results"
INTRO = (
    "Written by `python manage.py rivet_chaos bench` (see docs/benchmarking.md). Each run "
    "replaces the section of its own mode and keeps the other. Every latency comes from "
    "timestamps PostgreSQL wrote on the task rows; nothing a worker measured is used."
)
BACKLOG = "## Full backlog"
OFFERED = "## Offered load"


@dataclass(frozen=True, kw_only=True)
class Row:
    workers: int
    tasks: int
    throughput: float
    end_to_end: tuple[float, ...]
    service: tuple[float, ...]
    redelivered: int


def describe_setup(options: Any) -> list[tuple[str, str]]:
    """(label, value) lines: everything a reader needs to repeat the measurement."""
    with connections["default"].cursor() as cursor:
        cursor.execute(queries.SERVER_VERSION)
        server = cursor.fetchone()[0]
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        ("date", datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")),
        ("machine", f"{_cpu_model()}, {os.cpu_count()} cores, {_memory()} memory"),
        ("os", f"{platform.system()} {platform.release()}; load average at start {load}"),
        ("PostgreSQL", server),
        (
            "software",
            f"Python {platform.python_version()}, Django {django.get_version()}, "
            f"psycopg {version('psycopg')}, rivet {version('django-rivet')}",
        ),
        (
            "workload",
            f"noop tasks, payload {options.payload_bytes} bytes, {options.tasks} tasks "
            "per worker count",
        ),
        (
            "worker",
            f"concurrency {options.concurrency}, pool size {options.pool_size}, "
            f"lease ttl {options.lease_ttl:g} s",
        ),
        ("workers", ", ".join(map(str, options.workers))),
        ("rate", f"{options.rate:g} task/s offered" if options.rate else "none (full backlog)"),
        ("command", f"`{options.command()}`"),
    ]


def _cpu_model() -> str:
    try:
        for text in Path("/proc/cpuinfo").read_text().splitlines():
            if text.startswith("model name"):
                return text.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _memory() -> str:
    try:
        for text in Path("/proc/meminfo").read_text().splitlines():
            if text.startswith("MemTotal:"):
                return f"{int(text.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def duration(secs: float) -> str:
    """Milliseconds below a second, seconds above: ``4.3 ms``, ``2.41 s``."""
    return f"{secs * 1000:.1f} ms" if secs < 1 else f"{secs:.2f} s"


def render_section(options: Any, setup: list[tuple[str, str]], rows: list[Row]) -> str:
    if options.rate:
        heading = f"{OFFERED}: {options.rate:g} task/s"
        lead = (
            f"Workers started first, then {options.tasks} tasks offered at {options.rate:g} "
            "task/s: read the end-to-end columns (latency below capacity). Throughput is the "
            "offered rate for as long as the workers keep up."
        )
    else:
        heading = BACKLOG
        lead = (
            f"{options.tasks} tasks inserted before the workers start: read the throughput "
            "column. End to end is mostly the wait in the backlog here, not latency."
        )
    lines = [heading, "", lead, "", *[f"- {label}: {value}" for label, value in setup], ""]
    lines += [
        "| workers | done | throughput | end to end p50 | p95 | p99 | service p50 | p95 | p99 "
        "| redelivered |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for row in rows:
        cells = [str(row.workers), str(row.tasks), f"{row.throughput:.0f} task/s"]
        cells += [duration(x) for x in (*row.end_to_end, *row.service)]
        lines.append("| " + " | ".join([*cells, str(row.redelivered)]) + " |")
    cores = os.cpu_count() or 1
    crowded = [str(n) for n in options.workers if n > cores]
    if crowded:
        lines += [
            "",
            f"With {' and '.join(crowded)} worker processes on {cores} cores, the workers "
            "compete with PostgreSQL (on the same machine) for CPU: those rows measure that "
            "contention as much as rivet, and they move between runs.",
        ]
    return "\n".join(lines) + "\n"


def write_results(path: Path, section: str) -> None:
    """Write ``section`` into ``path``, replacing the section of the same mode."""
    key = OFFERED if section.startswith(OFFERED) else BACKLOG
    sections = [s for s in _sections(path) if not s.startswith(key)]
    sections.append(section)
    sections.sort(key=lambda s: not s.startswith(BACKLOG))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([TITLE, "", INTRO, "", *sections]).rstrip() + "\n")


def _sections(path: Path) -> list[str]:
    """The ``## `` sections of an existing results file (each with its trailing newline)."""
    if not path.exists():
        return []
    found: list[list[str]] = []
    for text in path.read_text().splitlines():
        if text.startswith("## "):
            found.append([])
        if found:
            found[-1].append(text)
    return ["\n".join(lines).rstrip() + "\n" for lines in found]
