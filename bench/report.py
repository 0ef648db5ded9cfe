"""The benchmark's results: rows, the targets, and the text and JSON written.

``bench/results.md`` is rewritten whole by each run: the setup a number needs to be
repeatable, the targets with a verdict each, then one table per mode (full backlog with the
ceiling beside each row, offered load, soak) and the enqueue figures. ``results.json`` holds
the same rows (see ``to_json``).
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import django
from django.db import connections

from bench.schedules import scheduler_table, scheduler_targets
from bench.stale import stale_table, stale_targets
from bench.target import Target
from chaos_project.kit import queries

TITLE = "# rivet benchmark results"
INTRO = (
    "Written by `python manage.py rivet_chaos bench` (`make bench`; see docs/benchmarking.md), "
    "whole, by each run. Throughput and latency come from timestamps PostgreSQL wrote on the "
    "task rows; the enqueue figures from the producer's clock around its calls; peak RSS from "
    "the worker processes' `VmHWM`."
)
BACKLOG, RATE, SOAK = "backlog", "rate", "soak"
MODES = (BACKLOG, RATE, SOAK)


@dataclass(frozen=True, kw_only=True)
class Window:
    """A tenth of a soak, by claim order: its throughput and claim-to-ack latency."""

    tasks: int
    throughput: float
    service: tuple[float, ...]


@dataclass(frozen=True, kw_only=True)
class Row:
    """One configuration measured (the median of its runs). Seconds for every latency."""

    mode: str
    kind: str
    workers: int
    concurrency: int
    tasks: int
    throughput: float
    end_to_end: tuple[float, ...]
    service: tuple[float, ...]
    redelivered: int
    rss_mb: float | None = None
    ceiling: float | None = None
    runs: tuple[float, ...] = ()
    ceiling_runs: tuple[float, ...] = ()
    #: end to end of each run (p50, p95, p99 for offered load), the row's being their medians
    end_to_end_runs: tuple[tuple[float, ...], ...] = ()
    rate: float | None = None
    first: Window | None = None
    last: Window | None = None
    #: end to end of every task of the last run, for the plot (offered load only)
    latencies: tuple[float, ...] = ()
    #: effect rows: CPU milliseconds per task (bench.cpu.per_task_ms) of the last run
    cpu_ms: dict[str, float] | None = None

    @property
    def ratio(self) -> float | None:
        return self.throughput / self.ceiling if self.ceiling else None

    @property
    def soak_ratio(self) -> float | None:
        if self.first is None or self.last is None or not self.first.throughput:
            return None
        return self.last.throughput / self.first.throughput


def median_row(runs: Sequence[Row]) -> Row:
    """The runs of one configuration as one row: medians of every figure, each throughput kept."""
    if not runs:
        raise ValueError("no runs to summarise")

    def med(values: Sequence[float]) -> float:
        return float(statistics.median(values))

    def med_tuple(values: Sequence[tuple[float, ...]]) -> tuple[float, ...]:
        return tuple(med(column) for column in zip(*values, strict=True))

    rss = [r.rss_mb for r in runs if r.rss_mb is not None]
    return replace(
        runs[-1],
        tasks=min(r.tasks for r in runs),
        throughput=med([r.throughput for r in runs]),
        end_to_end=med_tuple([r.end_to_end for r in runs]),
        service=med_tuple([r.service for r in runs]),
        redelivered=max(r.redelivered for r in runs),
        rss_mb=max(rss) if rss else None,
        runs=tuple(r.throughput for r in runs),
        end_to_end_runs=tuple(r.end_to_end for r in runs),
    )


def with_ceiling(row: Row, ceilings: Sequence[float]) -> Row:
    if not ceilings:
        return row
    return replace(row, ceiling=float(statistics.median(ceilings)), ceiling_runs=tuple(ceilings))


# -- targets -----------------------------------------------------------------------------------


def targets(
    rows: Sequence[Row],
    enqueue: dict[str, Any] | None,
    scheduler: dict[str, Any] | None = None,
    big_claim: dict[str, Any] | None = None,
    stale: dict[str, Any] | None = None,
) -> list[Target]:
    """Every target with this run's figure, a verdict, and the likely bottleneck."""
    backlog = [r for r in rows if r.mode == BACKLOG and r.kind == "noop"]
    found: list[Target] = []
    for concurrency, goal in ((1, 1100), (4, 6000), (16, 8000)):
        row = _find(backlog, workers=1, concurrency=concurrency)
        found.append(_throughput_target(f"one worker, c={concurrency}", goal, row))
    best = max(backlog, key=lambda r: r.throughput, default=None)
    target = _throughput_target("best configuration", 15000, best)
    if best is not None:
        target = replace(
            target, measured=f"{target.measured} ({best.workers} x c={best.concurrency})"
        )
    found.append(target)
    found += _rate_targets([r for r in rows if r.mode == RATE and r.rate == 300])
    found += _enqueue_targets(enqueue)
    effect = max(
        (r for r in rows if r.mode == BACKLOG and r.kind == "effect"),
        key=lambda r: r.throughput,
        default=None,
    )
    found.append(_throughput_target("effect tasks through the effect service", 1000, effect))
    c16 = _find(backlog, workers=1, concurrency=16)
    rss = c16.rss_mb if c16 is not None else None
    found.append(
        Target(
            name="worker peak RSS, one worker at c=16",
            goal="<= 150 MB",
            measured="not measured" if rss is None else f"{rss:.0f} MB",
            met=None if rss is None else rss <= 150,
            bottleneck="" if rss is None or rss <= 150 else "the worker's memory: profile it",
        )
    )
    soak = next((r for r in rows if r.mode == SOAK), None)
    ratio = soak.soak_ratio if soak is not None else None
    found.append(
        Target(
            name="soak: last 10 % against the first 10 %",
            goal=">= 80 %",
            measured="not measured" if ratio is None else f"{ratio:.0%}",
            met=None if ratio is None else ratio >= 0.8,
            bottleneck=(
                ""
                if ratio is None or ratio >= 0.8
                else "the queue slows as it grows (claim to ack: see the soak table)"
            ),
        )
    )
    found += scheduler_targets(scheduler) + [_big_claim_target(big_claim)]
    return found + stale_targets(stale)


def _big_claim_target(big: dict[str, Any] | None) -> Target:
    name = (
        "claim at 1,000,000 pending rows"
        if big is None
        else f"claim at {big['rows']:,} pending rows"
    )
    if big is None:
        return Target(name=name, goal="index scan in rank order", measured="not measured", met=None)
    problems = big["problems"]
    return Target(
        name=name,
        goal="index scan in rank order",
        measured=f"{big['scan']}, {big['per_flush_ms']:.2f} ms per flush of {big['batch']}",
        met=not problems,
        bottleneck="; ".join(problems),
    )


def _find(rows: Sequence[Row], *, workers: int, concurrency: int) -> Row | None:
    return next((r for r in rows if (r.workers, r.concurrency) == (workers, concurrency)), None)


def _throughput_target(name: str, goal: float, row: Row | None) -> Target:
    if row is None:
        return Target(name=name, goal=f">= {goal:,.0f}/s", measured="not measured", met=None)
    met = row.throughput >= goal
    return Target(
        name=name,
        goal=f">= {goal:,.0f}/s",
        measured=f"{row.throughput:,.0f}/s",
        met=met,
        bottleneck="" if met else _throughput_bottleneck(row, goal),
    )


def _throughput_bottleneck(row: Row, goal: float) -> str:
    """Name what held a row back: the statements themselves, or the worker around them."""
    if row.ceiling is None:
        return "no ceiling measured for this configuration"
    if row.ceiling < goal:
        return (
            f"the claim and ack statements: their bare loop reaches only {row.ceiling:,.0f}/s here"
        )
    if row.kind == "effect":
        text = (
            f"the effect service's round trip: {row.ratio:.0%} of the queue's ceiling "
            f"({row.ceiling:,.0f}/s); claim to ack p50 {duration(row.service[0])}"
        )
        return text + (f"; {cpu_text(row.cpu_ms)}" if row.cpu_ms else "")
    return (
        f"the worker: {row.ratio:.0%} of its ceiling ({row.ceiling:,.0f}/s); the rest is the "
        "worker's own work per task"
    )


def cpu_text(cpu: dict[str, float]) -> str:
    """An effect row's CPU per task, and the rate the machine's cores allow at that cost."""
    return (
        f"the machine's CPU: {cpu['machine']:.2f} ms a task (effect service "
        f"{cpu.get('service', 0.0):.2f}, workers {cpu.get('workers', 0.0):.2f}, PostgreSQL "
        f"{cpu.get('postgres', 0.0):.2f}, the rest {cpu['rest']:.2f}), so these cores allow at "
        f"most {cpu['bound']:,.0f}/s"
    )


def _rate_targets(rows: Sequence[Row]) -> list[Target]:
    row = rows[0] if rows else None
    found = []
    for index, name, goal in ((0, "p50", 0.002), (2, "p99", 0.005)):
        label = f"offered 300/s: end to end {name}"
        if row is None:
            found.append(
                Target(name=label, goal=f"<= {goal * 1000:g} ms", measured="not measured", met=None)
            )
            continue
        value = row.end_to_end[index]
        met = value <= goal
        waiting = value - row.service[index]
        each = [duration(run[index]) for run in row.end_to_end_runs]
        found.append(
            Target(
                name=label,
                goal=f"<= {goal * 1000:g} ms",
                # The median of the runs, each run's in brackets (one run: none).
                measured=duration(value) + (f" ({', '.join(each)})" if len(each) > 1 else ""),
                met=met,
                bottleneck=""
                if met
                else (
                    f"before the claim: {duration(waiting)} of it is enqueue to claim"
                    if waiting > row.service[index]
                    else f"claim to ack: {duration(row.service[index])} of it"
                ),
            )
        )
    return found


#: What the store's own enqueue statements cost, by target, when they alone miss it.
ENQUEUE_STATEMENTS = {
    "single": "a commit per call (its WAL flush; no NOTIFY while no worker waits)",
    "bulk": "COPY into rivet_task and its indexes, through a staging table and INSERT ... "
    "SELECT when a task has a key, a delay or a priority",
}


#: Share of the machine's cores busy with enqueues (producers and their server backends) at
#: which a missed concurrent-producer target names the CPU rather than the commits.
CPU_BOUND_SHARE = 0.75
#: The concurrent-producer target: producers, and tasks per second.
PRODUCERS_GOAL = (8, 6000)


def _enqueue_targets(enqueue: dict[str, Any] | None) -> list[Target]:
    found = []
    for how, name, goal in (
        ("single", "enqueue, one call at a time", 2500),
        ("bulk", "enqueue, bulk", 100000),
    ):
        value = enqueue.get(f"{how}_per_s") if enqueue else None
        store = enqueue.get(f"{how}_store_per_s") if enqueue else None
        found.append(
            Target(
                name=name,
                goal=f">= {goal:,.0f}/s",
                measured="not measured" if not value else f"{value:,.0f}/s",
                met=None if not value else value >= goal,
                bottleneck=""
                if not value or value >= goal
                else _enqueue_bottleneck(how, value, store, goal),
            )
        )
    return found + [_producers_target(enqueue)]


def _producers_target(enqueue: dict[str, Any] | None) -> Target:
    """Single enqueues from several producer processes at once (each call its own commit)."""
    producers = (enqueue or {}).get("producers") or PRODUCERS_GOAL[0]
    name = f"enqueue, one call at a time, {producers} producers"
    goal = PRODUCERS_GOAL[1]
    value = (enqueue or {}).get("producers_per_s")
    if not value:
        return Target(name=name, goal=f">= {goal:,.0f}/s", measured="not measured", met=None)
    met = value >= goal
    return Target(
        name=name,
        goal=f">= {goal:,.0f}/s",
        measured=f"{value:,.0f}/s",
        met=met,
        bottleneck="" if met else _producers_bottleneck(enqueue or {}, value),
    )


def _producers_bottleneck(enqueue: dict[str, Any], value: float) -> str:
    """The server when the producers' statement alone (pgbench) runs under the goal: no
    producer can then meet it. Else the machine's CPU when the producers and their backends
    keep most cores busy; else the commits: the WAL flushes the server's disk gives. Producers
    at once share flushes (group commit: one flush covers every commit waiting on it), since an
    enqueue sends a NOTIFY, which would hold PostgreSQL's notification lock through its commit
    and flush the producers' commits one after another, only while a worker waits on its
    queue."""
    client, server = enqueue.get("producers_client_us"), enqueue.get("producers_server_us")
    cores = os.cpu_count() or 1
    commits = enqueue.get("commit_rate") or {}
    fsync = (
        f"pg_test_fsync: {commits['per_s']:,.0f} flushes/s one at a time"
        if commits.get("per_s")
        else "the disk's flush rate was not measured"
    )
    ceiling = enqueue.get("producers_ceiling_per_s")
    if client is None:
        split = f"not split: no CPU figures ({fsync})"
    elif server is None:
        split = (
            f"the producers' CPU: {client:,.0f} µs per enqueue, {client * value / 1e6:.1f} of "
            f"{cores} cores at this rate; the server's share unknown (not on this machine); "
            + fsync
        )
    else:
        busy = (client + server) * value / 1e6
        split = (
            f"{client:,.0f} µs of CPU per enqueue in the producer and {server:,.0f} µs in its "
            f"server backend: {busy:.1f} of {cores} cores at this rate"
        )
    if ceiling and ceiling < PRODUCERS_GOAL[1]:
        return (
            f"the server: the statement alone from {enqueue.get('producers')} pgbench "
            f"connections ran {ceiling:,.0f}/s, under the goal, and the producers "
            f"{value / ceiling:.0%} of it; {split}"
        )
    against = f"; the statement alone (pgbench) {ceiling:,.0f}/s" if ceiling else ""
    if client is None or server is None:
        return split + against
    if busy >= CPU_BOUND_SHARE * cores:
        return f"the machine's CPU: {split}{against}"
    return (
        f"the commits: the WAL flushes the server's disk gives ({fsync}), shared by the "
        f"producers' commits (group commit); {split}{against}"
    )


def _enqueue_bottleneck(how: str, value: float, store: float | None, goal: float) -> str:
    if not store:
        return "the producer's path: profile it"
    if store < goal:
        return (
            f"the store's statements: {store:,.0f}/s through the store's own call, without "
            f"the producer around it ({ENQUEUE_STATEMENTS[how]})"
        )
    return (
        f"the producer's Python around the store: the store's own call ran {store:,.0f}/s, "
        f"rivet.enqueue{'_many' if how == 'bulk' else ''} {value / store:.0%} of it"
    )


# -- setup ---------------------------------------------------------------------------------------


def describe_setup(options: Any) -> list[tuple[str, str]]:
    """(label, value) lines: everything a reader needs to repeat the measurement."""
    with connections["default"].cursor() as cursor:
        cursor.execute(queries.SERVER_VERSION)
        server = cursor.fetchone()[0]
    return [
        ("date", datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")),
        ("machine", machine()),
        ("cpu check", cpu_check()),
        ("os", f"{platform.system()} {platform.release()}; load average at start {load()}"),
        ("PostgreSQL", server),
        (
            "software",
            f"Python {platform.python_version()}, Django {django.get_version()}, "
            f"psycopg {version('psycopg')}, rivet {version('django-rivet')}",
        ),
        ("settings", options.describe()),
        ("command", f"`{options.command()}`"),
    ]


def machine(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    return f"{_cpu_model(cpuinfo)}{_cpu_clock(cpuinfo)}, {os.cpu_count()} cores, {_memory()} memory"


#: The CPU check's loop: long enough to time one core to a hundredth of a second, short
#: enough to cost a run little (what it takes on the host of the committed results:
#: docs/decisions/0018-bench-setup-names-the-host.md).
CPU_CHECK_ADDITIONS = 10_000_000


def cpu_check(additions: int = CPU_CHECK_ADDITIONS) -> str:
    """One core's speed, timed: ``additions`` additions in a Python loop.

    Hosts whose CPUs have the same model name differ, and every figure of the bench moves with
    the host's speed (docs/decisions/0018-bench-setup-names-the-host.md). A reader compares two
    results.md by this line before comparing their rows."""
    started = time.perf_counter()
    total = 0
    for n in range(additions):
        total += n
    secs = time.perf_counter() - started
    return f"{additions:,} additions in a Python loop took {secs:.2f} s (one core, at the start)"


def load() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def busy_load() -> float | None:
    """The 1-minute load average when it exceeds the cores (the machine is shared), else None."""
    now = os.getloadavg()[0]
    return now if now > (os.cpu_count() or 1) else None


def _cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    return _cpuinfo_field(cpuinfo, "model name") or platform.processor() or "unknown CPU"


def _cpu_clock(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """`` at 2.6 GHz``: the first CPU's clock as the kernel reports it (``cpu MHz``), or ''
    where it reports none."""
    try:
        return f" at {float(_cpuinfo_field(cpuinfo, 'cpu MHz') or '') / 1000:.1f} GHz"
    except ValueError:
        return ""


def _cpuinfo_field(cpuinfo: Path, name: str) -> str | None:
    """The first CPU's ``name`` line in /proc/cpuinfo, or None."""
    try:
        for text in cpuinfo.read_text().splitlines():
            if text.startswith(name):
                return text.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _memory() -> str:
    try:
        for text in Path("/proc/meminfo").read_text().splitlines():
            if text.startswith("MemTotal:"):
                return f"{int(text.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


# -- text ----------------------------------------------------------------------------------------


def duration(secs: float) -> str:
    """Milliseconds below a second, seconds above: ``4.3 ms``, ``2.41 s``."""
    return f"{secs * 1000:.1f} ms" if secs < 1 else f"{secs:.2f} s"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}/s"


def _runs(values: Sequence[float]) -> str:
    return " (" + ", ".join(f"{v:,.0f}" for v in values) + ")" if len(values) > 1 else ""


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} MB"


#: The async rows' section of results.md (``rivet_chaos bench --async-rows``,
#: bench/asyncbench.py): measured apart from the rest, so each writer keeps the other's part.
ASYNC_BEGIN = "<!-- async rows: written by rivet_chaos bench --async-rows -->"
ASYNC_END = "<!-- end of the async rows -->"


def async_section(text: str) -> str | None:
    """The async rows' section of a results file, markers included; None when it has none."""
    begin, end = text.find(ASYNC_BEGIN), text.find(ASYNC_END)
    if begin < 0 or end < begin:
        return None
    return text[begin : end + len(ASYNC_END)]


def with_async_section(text: str, section: str | None) -> str:
    """``text`` with its async rows' section replaced by ``section`` (added before the plot,
    or at the end, when it has none); ``section`` None leaves ``text`` as it is."""
    if section is None:
        return text
    old = async_section(text)
    if old is not None:
        return text.replace(old, section)
    plot = text.find("\n## Plot\n")
    if plot < 0:
        return text.rstrip("\n") + "\n\n" + section + "\n"
    return text[: plot + 1] + section + "\n\n" + text[plot + 1 :]


def write_results(out: Path, text: str) -> None:
    """Write the full bench's results file, keeping the async rows' section that the file
    already holds (``--async-rows`` measures it in a run of its own)."""
    kept = async_section(out.read_text()) if out.exists() else None
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(with_async_section(text, kept))


def render(
    *,
    setup: Sequence[tuple[str, str]],
    rows: Sequence[Row],
    enqueue: dict[str, Any] | None,
    plot: Path | None,
    out: Path,
    end_load: str = "",
    busy: float | None = None,
    scheduler: dict[str, Any] | None = None,
    big_claim: dict[str, Any] | None = None,
    stale: dict[str, Any] | None = None,
) -> str:
    """The whole results file; ``busy`` is the load average at the start when it was too high."""
    lines = [TITLE, "", INTRO, ""]
    if busy is not None:
        lines += [
            f"**Not a result: the load average at the start ({busy:.2f}) exceeded the "
            f"{os.cpu_count()} cores, so another workload shared the machine.** Run it again "
            "on a quiet machine.",
            "",
        ]
    lines += ["## Setup", ""]
    lines += [f"- {label}: {value}" for label, value in setup]
    if end_load:
        lines.append(f"- load average at the end: {end_load}")
    lines += ["", *_targets_table(targets(rows, enqueue, scheduler, big_claim, stale))]
    backlog = [r for r in rows if r.mode == BACKLOG]
    if backlog:
        lines += ["", *_backlog_table(backlog)]
    rated = [r for r in rows if r.mode == RATE]
    if rated:
        lines += ["", *_rate_table(rated)]
    for soak in (r for r in rows if r.mode == SOAK):
        lines += ["", *_soak_table(soak)]
    if enqueue:
        lines += ["", *_enqueue_table(enqueue)]
    if scheduler:
        lines += ["", *scheduler_table(scheduler)]
    if big_claim:
        lines += ["", *_big_claim_table(big_claim)]
    if stale:
        lines += ["", *stale_table(stale)]
    if plot is not None:
        relative = os.path.relpath(plot, out.parent)
        lines += ["", "## Plot", "", f"![throughput by concurrency and latency]({relative})"]
    crowded = sorted({r.workers for r in rows if r.workers > (os.cpu_count() or 1)})
    if crowded:
        lines += [
            "",
            f"With {', '.join(map(str, crowded))} worker processes on {os.cpu_count()} cores, "
            "the workers compete with PostgreSQL (on the same machine) for CPU: those rows "
            "measure that contention as much as rivet, and they move between runs.",
        ]
    return "\n".join(lines) + "\n"


def _big_claim_table(big: dict[str, Any]) -> list[str]:
    return [
        f"## Claim at {big['rows']:,} pending rows",
        "",
        f"One queue of {big['rows']:,} pending tasks (priorities -5..5, 2 % leased, 1 % delayed), "
        "loaded in one transaction and rolled back after: the worker's settle-and-claim "
        f"statement explained, then timed as a worker sends it ({big['flushes']} flushes, each "
        f"acking the previous {big['batch']} and claiming the next {big['batch']}). Loaded in "
        f"{big['load_s']:.1f} s, indexed and analyzed in {big['index_s']:.1f} s.",
        "",
        "| scan | index condition | per flush | plan |",
        "|---|---|--:|---|",
        f"| {big['scan']} | `{big['index_cond']}` | {big['per_flush_ms']:.2f} ms "
        f"| {'; '.join(big['problems']) or 'no sort, no sequential scan'} |",
        "",
        "```",
        *big["explain"],
        "```",
    ]


def _targets_table(found: Sequence[Target]) -> list[str]:
    lines = [
        "## Targets",
        "",
        "A missed target names its likely bottleneck: from the ceiling for "
        "throughput (the statements themselves, or the worker around them), from the split "
        "of end to end for latency.",
        "",
        "| target | goal | measured | verdict | bottleneck (when missed) |",
        "|---|---|---|---|---|",
    ]
    for t in found:
        verdict = "not measured" if t.met is None else ("met" if t.met else "**missed**")
        lines.append(f"| {t.name} | {t.goal} | {t.measured} | {verdict} | {t.bottleneck or '-'} |")
    return lines


def _backlog_table(rows: Sequence[Row]) -> list[str]:
    lines = [
        "## Full backlog",
        "",
        "The workers started, warmed up and idle, then all tasks inserted in one commit: read "
        "throughput. The ceiling is the same "
        "claim and ack statements in a bare loop (no worker) at the same batch size "
        "(= concurrency + prefetch: the most one worker claims at once) and connections "
        "(= workers). Throughput is the median of the runs "
        "(each run in brackets). End to end is mostly the wait in the backlog here.",
        "",
        "| kind | workers | concurrency | done | throughput (runs) | ceiling (runs) | worker / "
        "ceiling | end to end p50 | p99 | service p50 | p99 | peak RSS | redelivered |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in rows:
        cells = [
            r.kind,
            str(r.workers),
            str(r.concurrency),
            str(r.tasks),
            _rate(r.throughput) + _runs(r.runs),
            _rate(r.ceiling) + _runs(r.ceiling_runs),
            "-" if r.ratio is None else f"{r.ratio:.0%}",
            duration(r.end_to_end[0]),
            duration(r.end_to_end[2]),
            duration(r.service[0]),
            duration(r.service[2]),
            _mb(r.rss_mb),
            str(r.redelivered),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _rate_table(rows: Sequence[Row]) -> list[str]:
    lines = [
        "## Offered load",
        "",
        "Workers started first, then the tasks offered on a schedule: read end to end (latency "
        "below capacity). Throughput is the offered rate for as long as the workers keep up.",
        "",
        "| kind | offered | workers | concurrency | done | throughput | end to end p50 | p95 "
        "| p99 | service p50 | p95 | p99 | peak RSS |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in rows:
        cells = [r.kind, _rate(r.rate), str(r.workers), str(r.concurrency), str(r.tasks)]
        cells += [_rate(r.throughput) + _runs(r.runs)]
        cells += [duration(x) for x in (*r.end_to_end, *r.service)]
        cells += [_mb(r.rss_mb)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _soak_table(row: Row) -> list[str]:
    lines = [
        f"## Soak: {row.tasks:,} tasks",
        "",
        f"One backlog of {row.tasks:,} tasks, {row.workers} worker(s) at concurrency "
        f"{row.concurrency}. The first and last tenth are taken by claim order; claim to ack "
        "is the service time of their tasks. Peak RSS of the worker over the whole soak: "
        f"{_mb(row.rss_mb)}.",
        "",
        "| part | tasks | throughput | claim to ack p50 | p95 | p99 |",
        "|---|--:|--:|--:|--:|--:|",
        f"| all | {row.tasks} | {_rate(row.throughput)} | "
        + " | ".join(duration(x) for x in row.service)
        + " |",
    ]
    for name, window in (("first 10 %", row.first), ("last 10 %", row.last)):
        if window is not None:
            lines.append(
                f"| {name} | {window.tasks} | {_rate(window.throughput)} | "
                + " | ".join(duration(x) for x in window.service)
                + " |"
            )
    if row.soak_ratio is not None:
        lines += ["", f"Last tenth against the first: {row.soak_ratio:.0%} of its throughput."]
    return lines


def _enqueue_table(enqueue: dict[str, Any]) -> list[str]:
    return [
        "## Enqueue",
        "",
        "Noop tasks, 100-byte payload, timed by the producer around its calls. The store's own "
        "calls take the same tasks validated beforehand: what the statements allow without the "
        "producer API around them. One producer's one-call-at-a-time enqueues wait for one WAL "
        "flush each: their ceiling is the flushes per second the server's disk sustains "
        "(`pg_test_fsync`, one 8 kB write synced by the server's `wal_sync_method`). Producers "
        "at once share flushes (group commit: one flush covers every commit waiting on it; an "
        "enqueue notifies only while a worker waits on its queue, and none runs here), so the "
        "machine's CPU bounds them first; their ceiling is the same statement with the same "
        "values from as many pgbench connections (C, prepared, each execution its own "
        "commit): what the server and this machine give it without the producers' Python. "
        "Each figure is the median of its rounds, every round's in brackets.",
        "",
        "| how | tasks | seconds | throughput | ceiling |",
        "|---|--:|--:|--:|--:|",
        f"| `rivet.enqueue`, one call at a time | {enqueue['single']} | "
        f"{enqueue['single_secs']:.2f} | {_rate(enqueue['single_per_s'])}"
        f"{_runs(enqueue.get('single_runs') or ())} | {_commit_ceiling(enqueue)} |",
        *_producers_row(enqueue),
        f"| `rivet.enqueue_many`, batches of {enqueue['batch']} | {enqueue['bulk']} | "
        f"{enqueue['bulk_secs']:.2f} | {_rate(enqueue['bulk_per_s'])}"
        f"{_runs(enqueue.get('bulk_runs') or ())} | - |",
        *_store_rows(enqueue),
    ]


def _commit_ceiling(enqueue: dict[str, Any]) -> str:
    """The one-producer row's ceiling: the disk's flushes per second, or why it is missing."""
    commits = enqueue.get("commit_rate")
    if not commits:
        return "-"
    if commits.get("per_s") is None:
        return f"not measured: {commits['note']}"
    return f"{commits['per_s']:,.0f}/s (pg_test_fsync, {commits['method']}, {commits['note']})"


def _producers_row(enqueue: dict[str, Any]) -> list[str]:
    """Single enqueues from several processes at once (older runs and 0 producers: none)."""
    rate, producers = enqueue.get("producers_per_s"), enqueue.get("producers")
    if not rate or not producers:
        return []
    count = enqueue["single"]
    runs = _runs(enqueue.get("producers_runs") or ())
    return [
        f"| `rivet.enqueue`, one call at a time, {producers} producer processes at once "
        f"| {count} | {count / rate:.2f} | {_rate(rate)}{runs} | {_statement_ceiling(enqueue)} |"
    ]


def _statement_ceiling(enqueue: dict[str, Any]) -> str:
    """The producers row's ceiling: their statement alone from pgbench, or why it is missing
    (runs before it was measured: a dash)."""
    rate, note = enqueue.get("producers_ceiling_per_s"), enqueue.get("producers_ceiling_note")
    if not note:
        return "-"
    if not rate:
        return f"not measured: {note}"
    return f"{_rate(rate)}{_runs(enqueue.get('producers_ceiling_runs') or ())} ({note})"


def _store_rows(enqueue: dict[str, Any]) -> list[str]:
    """The same tasks through the store's own call, validated beforehand (older runs: none)."""
    rows = []
    for how, label, count in (
        ("single", "the store's `task_enqueue`, one task a call", enqueue["single"]),
        ("bulk", f"the store's `task_enqueue_many`, {enqueue['batch']} a call", enqueue["bulk"]),
    ):
        rate = enqueue.get(f"{how}_store_per_s")
        if rate:
            rows.append(f"| {label} | {count} | {count / rate:.2f} | {_rate(rate)} | - |")
    return rows


# -- JSON ----------------------------------------------------------------------------------------


def _ms(value: float) -> float:
    return round(value * 1000, 3)


def row_json(row: Row) -> dict[str, Any]:
    data: dict[str, Any] = {
        "mode": row.mode,
        "kind": row.kind,
        "workers": row.workers,
        "concurrency": row.concurrency,
        "tasks": row.tasks,
        "throughput": round(row.throughput, 1),
        "throughput_runs": [round(x, 1) for x in row.runs],
        "ceiling": None if row.ceiling is None else round(row.ceiling, 1),
        "ceiling_runs": [round(x, 1) for x in row.ceiling_runs],
        "e2e_runs_ms": [[_ms(x) for x in run] for run in row.end_to_end_runs],
        "ratio": None if row.ratio is None else round(row.ratio, 3),
        "e2e_p50_ms": _ms(row.end_to_end[0]),
        "e2e_p95_ms": _ms(row.end_to_end[1]),
        "e2e_p99_ms": _ms(row.end_to_end[2]),
        "service_p50_ms": _ms(row.service[0]),
        "service_p95_ms": _ms(row.service[1]),
        "service_p99_ms": _ms(row.service[2]),
        "rss_mb": None if row.rss_mb is None else round(row.rss_mb, 1),
        "redelivered": row.redelivered,
        "rate": row.rate,
    }
    if row.cpu_ms is not None:
        data["cpu_ms_per_task"] = {name: round(value, 3) for name, value in row.cpu_ms.items()}
    if row.first is not None and row.last is not None:
        data["soak"] = {
            name: {
                "tasks": w.tasks,
                "throughput": round(w.throughput, 1),
                "claim_to_ack_p50_ms": _ms(w.service[0]),
                "claim_to_ack_p99_ms": _ms(w.service[2]),
            }
            for name, w in (("first_10pct", row.first), ("last_10pct", row.last))
        }
        data["soak"]["last_over_first"] = round(row.soak_ratio or 0.0, 3)
    if row.latencies:
        data["e2e_sample_ms"] = [_ms(x) for x in row.latencies]
    return data


def to_json(
    *,
    setup: Sequence[tuple[str, str]],
    rows: Sequence[Row],
    enqueue: dict[str, Any] | None,
    busy: float | None = None,
    scheduler: dict[str, Any] | None = None,
    big_claim: dict[str, Any] | None = None,
    stale: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``{"rows": [...], "enqueue": {...}, "scheduler": {...}, "big_claim": {...},
    "stale_stats": {...}, "targets": [...], "setup": {...}, "busy_load": ..}``.

    ``busy_load`` is the load average at the start when it exceeded the cores (else null).
    """
    return {
        "busy_load": busy,
        "rows": [row_json(r) for r in rows],
        "enqueue": enqueue,
        "scheduler": scheduler,
        "big_claim": big_claim,
        "stale_stats": stale,
        "targets": [
            {
                "name": t.name,
                "goal": t.goal,
                "measured": t.measured,
                "met": t.met,
                "bottleneck": t.bottleneck,
            }
            for t in targets(rows, enqueue, scheduler, big_claim, stale)
        ],
        "setup": dict(setup),
    }
