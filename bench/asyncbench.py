"""The async rows (``rivet_chaos bench --async-rows``): ``async def`` jobs beside sync ones.

One worker process per measurement, started and idle before its backlog is inserted in one
commit (as the full-backlog rows of ``bench.runner``), throughput and latency from the task
rows (``Bench._figures``). The rows:

- 5 000 ``async_sleep`` tasks (``await asyncio.sleep(0.1)``) at ``--async-concurrency 500``:
  the target is 4 000/s, where 5 000/s is what 500 in flight for 0.1 s each allow;
- the same 5 000 as the sync ``sleep`` kind (``context.wait(0.1)``) at ``--concurrency 16``,
  for the ratio (its limit is 160/s);
- a noop ``async def`` (``async_noop``) beside the sync ``noop``, 5 000 each, at
  ``--concurrency 16`` (and ``--async-concurrency 500``);
- the worker's peak RSS with 500 and with 2 000 coroutines in flight (``async_sleep`` of 1 s,
  twice as many tasks as slots);
- effect tasks through a real effect service: ``async_effect`` (the asyncio client,
  ``effect_project.aclient``) at ``--async-concurrency 64`` beside the sync ``effect`` at
  ``--concurrency 16``, ``--effect-tasks`` each (when EFFECT_DATABASE_URL is a PostgreSQL URL).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from django.db import connections

from bench import fleet
from bench.report import (
    ASYNC_BEGIN,
    ASYNC_END,
    BACKLOG,
    TITLE,
    busy_load,
    cpu_check,
    load,
    machine,
    with_async_section,
)
from bench.runner import STOP_TIMEOUT_SECS, Bench, BenchOptions, peak_rss_mb
from chaos_project.kit import queries
from chaos_project.kit.services import database_url, worker_env

#: Async handlers in flight for the sleep and noop rows.
ASYNC_SLOTS = 500
#: Thread slots of the sync rows (and of the async rows' worker, which runs no sync task).
SYNC_SLOTS = 16
SLEEP_MS = 100
#: The sleep row's target, and the limit its in-flight bound allows.
ASYNC_SLEEP_TARGET = 4000.0
ASYNC_SLEEP_LIMIT = ASYNC_SLOTS / (SLEEP_MS / 1000)
#: Async effects in flight for the effect row (the effect service answers on 16 threads).
EFFECT_ASYNC_SLOTS = 64
#: In-flight counts whose peak RSS is measured, and how long each of those tasks sleeps.
RSS_IN_FLIGHT = (500, 2000)
RSS_SLEEP_MS = 1000


@dataclass(frozen=True)
class AsyncRow:
    name: str
    kind: str
    tasks: int
    args: tuple[str, ...]
    throughputs: tuple[float, ...]
    end_to_end: tuple[float, float, float]
    rss_mb: float | None

    @property
    def throughput(self) -> float:
        return statistics.median(self.throughputs)


class AsyncBench:
    """Measures the async rows and writes them as a section of ``out`` (results.md)."""

    def __init__(self, options: BenchOptions, out: Path, say=print) -> None:
        effects = options.effect_database_url.startswith(("postgres://", "postgresql://"))
        self.options = replace(options, kinds=("noop", "effect") if effects else ("noop",))
        self.out = out
        self.say = say
        self.bench = Bench(self.options, say=say)

    def run(self) -> str:
        import tempfile

        started = datetime.now(UTC)
        start_load = load()
        busy = busy_load()
        self.bench._migrate()
        self.bench.log_dir = Path(tempfile.mkdtemp(prefix="rivet-bench-async-"))
        tasks, runs = self.options.tasks, self.options.runs
        async_args = ("--concurrency", str(SYNC_SLOTS), "--async-concurrency", str(ASYNC_SLOTS))
        sync_args = ("--concurrency", str(SYNC_SLOTS))
        sleep = {"ms": SLEEP_MS}
        rows = [
            self._row("async sleep 0.1 s", "async_sleep", sleep, tasks, async_args, runs),
            self._row("sync sleep 0.1 s", "sleep", sleep, tasks, sync_args, runs),
            self._row("async noop", "async_noop", {}, tasks, async_args, runs),
            self._row("sync noop", "noop", {}, tasks, sync_args, runs),
        ]
        for slots in RSS_IN_FLIGHT:
            args = ("--concurrency", str(SYNC_SLOTS), "--async-concurrency", str(slots))
            rows.append(
                self._row(
                    f"peak RSS, {slots} in flight",
                    "async_sleep",
                    {"ms": RSS_SLEEP_MS},
                    2 * slots,
                    args,
                    1,
                )
            )
        if "effect" in self.options.kinds:
            effect_tasks = self.options.effect_tasks
            slots = ("--concurrency", str(SYNC_SLOTS), "--async-concurrency")
            with self.bench._effect_service():
                rows.append(
                    self._row(
                        "async effect",
                        "async_effect",
                        {"amount": 1},
                        effect_tasks,
                        (*slots, str(EFFECT_ASYNC_SLOTS)),
                        runs,
                    )
                )
                rows.append(
                    self._row("sync effect", "effect", {"amount": 1}, effect_tasks, sync_args, runs)
                )
        section = self._render(rows, started, busy, start_load)
        # Into the results file beside the thread-pool rows, whose part is kept as it is.
        text = self.out.read_text() if self.out.exists() else f"{TITLE}\n"
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(with_async_section(text, section))
        self.say(f"wrote the async rows into {self.out}")
        return section

    def _row(
        self,
        name: str,
        kind: str,
        payload: dict,
        tasks: int,
        args: tuple[str, ...],
        runs: int,
    ) -> AsyncRow:
        throughputs: list[float] = []
        end_to_end = (0.0, 0.0, 0.0)
        rss: float | None = None
        for n in range(runs):
            figures, rss_now = self._measure(kind, payload, tasks, args)
            throughputs.append(figures.throughput)
            end_to_end = figures.end_to_end  # type: ignore[assignment]
            rss = max(rss or 0.0, rss_now or 0.0) or None
            self.say(f"{name}, run {n + 1}: {figures.throughput:,.0f}/s ({figures.tasks} done)")
        return AsyncRow(name, kind, tasks, args, tuple(throughputs), end_to_end, rss)

    def _measure(self, kind: str, payload: dict, tasks: int, args: tuple[str, ...]):
        bench, o = self.bench, self.options
        bench._empty(vacuum=True)
        if "effect" in kind:
            bench._empty_effects()
        with connections["default"].cursor() as cursor:
            cursor.execute(queries.SERVER_NOW)
            (since,) = cursor.fetchone()
        worker_args = [
            *("--queue", o.queue, *args, "--pool-size", str(SYNC_SLOTS + 2)),
            *("--lease-ttl-secs", f"{o.lease_ttl:g}", "--log-format", "json"),
            *("--task-log-level", o.task_log_level),
        ]
        extra = {"EFFECT_SERVICE_URL": bench.effect_url} if "effect" in kind else {}
        workers = fleet.start_workers(
            f"bench-{kind}", 1, worker_args, worker_env(database_url(), **extra), bench.log_dir
        )
        try:
            bench._wait_ready(workers)
            bench._wait_listening(workers, since)
            items = [{"kind": kind, "payload": payload, "queue": o.queue}] * tasks
            bench._insert(items, analyze=False, at_once=True)
            bench._wait_drained(workers, tasks, f"{kind} x{tasks}")
            rss = peak_rss_mb(workers[0].pid)
        finally:
            for worker in workers:
                worker.stop(STOP_TIMEOUT_SECS)
        time.sleep(0.1)
        return bench._figures(BACKLOG, kind, 1, SYNC_SLOTS, rss, None), rss

    def _render(
        self, rows: list[AsyncRow], started: datetime, busy: float | None, start_load: str
    ) -> str:
        o = self.options
        command = (
            "python manage.py rivet_chaos bench --async-rows "
            f"--tasks {o.tasks} --effect-tasks {o.effect_tasks} --runs {o.runs}"
        )
        lines = [
            ASYNC_BEGIN,
            "## Async jobs",
            "",
            "Written by `python manage.py rivet_chaos bench --async-rows` (bench/asyncbench.py), "
            "a run of its own: the rest of this file is the full bench's, kept as it was. One "
            "worker process per row, started and idle, then the backlog inserted in one commit; "
            "throughput and latency from the task rows, the median of the runs, each run in "
            "brackets and the spread (the largest over the smallest, less one) beside them.",
            "",
            f"- date: {started:%Y-%m-%d %H:%M} UTC",
            f"- machine: {machine()}",
            f"- cpu check: {cpu_check()}",
            f"- load average at the start: {start_load}",
            f"- load average at the end: {load()}",
            f"- command: `{command}`",
        ]
        if busy is not None:
            lines.append(
                f"- NOT A RESULT: load average {busy:.2f} at the start, above the cores: "
                "other work shared the machine"
            )
        lines += [
            "",
            "| row | kind | tasks | worker options | throughput (runs) | spread "
            "| end to end p50 | p99 | peak RSS |",
            "|---|---|--:|---|--:|--:|--:|--:|--:|",
        ]
        for row in rows:
            runs = ", ".join(f"{t:,.0f}" for t in row.throughputs)
            p50, _, p99 = row.end_to_end
            rss = f"{row.rss_mb:.0f} MB" if row.rss_mb else "-"
            lines.append(
                f"| {row.name} | {row.kind} | {row.tasks} | `{' '.join(row.args)}` | "
                f"{row.throughput:,.0f}/s ({runs}) | {spread(row.throughputs)} "
                f"| {p50 * 1000:.0f} ms | {p99 * 1000:.0f} ms | {rss} |"
            )
        sleep, sync_sleep = rows[0], rows[1]
        verdict = "met" if sleep.throughput >= ASYNC_SLEEP_TARGET else "missed"
        lines += [
            "",
            f"Target: async sleep >= {ASYNC_SLEEP_TARGET:,.0f}/s (the limit at "
            f"{ASYNC_SLOTS} in flight is {ASYNC_SLEEP_LIMIT:,.0f}/s): "
            f"{sleep.throughput:,.0f}/s, {verdict}; "
            f"{sleep.throughput / sync_sleep.throughput:.1f} x the sync sleep row "
            f"({SYNC_SLOTS} threads); every run of it "
            f"{'met' if min(sleep.throughputs) >= ASYNC_SLEEP_TARGET else 'did not meet'} "
            "the target.",
            ASYNC_END,
        ]
        return "\n".join(lines)


def spread(values: tuple[float, ...]) -> str:
    """How far apart the runs are: the largest over the smallest, less one ("-" for one run)."""
    if len(values) < 2 or min(values) <= 0:
        return "-"
    return f"{max(values) / min(values) - 1:.0%}"
